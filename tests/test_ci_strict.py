"""With CI=true a skipped test fails the pytest run (tests/ci_strict.py); outside CI it does not."""
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SAMPLE = """
import pytest
def test_runs():
    pass
def test_needs_something_absent():
    pytest.importorskip("radixsim_no_such_module")
"""


def _pytest(tmp_path, ci: str | None):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "ci_strict", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


@pytest.mark.parametrize("ci,rc", [(None, 0), ("false", 0), ("true", 1)])
def test_a_skip_fails_only_under_ci(tmp_path, ci, rc):
    r = _pytest(tmp_path, ci)
    assert r.returncode == rc, r.stdout + r.stderr
    assert "1 passed, 1 skipped" in r.stdout
    assert ("SKIPPED test_sample.py::test_needs_something_absent" in r.stdout) == (rc == 1), r.stdout
