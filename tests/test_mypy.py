"""`python -m mypy cache_core` stays clean under the settings in pyproject.toml ([tool.mypy]:
Python 3.10, the oldest version requires-python allows). mypy comes with the `dev` extra; outside
CI the test skips when mypy is not installed, under CI=true it runs and fails (tests/ci_strict.py)."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

from ci_strict import IN_CI

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_mypy_cache_core_is_clean(tmp_path):
    if importlib.util.find_spec("mypy") is None and not IN_CI:
        pytest.skip("mypy is not installed (pip install -e '.[dev]')")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy_cache"), "cache_core"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, f"mypy cache_core exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
