"""What the commands say to the user (issue 27 item 3): no literal "%%", no "1 engines" or "1 runs",
"an azure file", and a directory given where a file is expected is called a directory (not "no
such file"), each one line, exit status 2 where it is an error."""
from __future__ import annotations

import pytest

from analysis.external import read_log
from helpers import run_main as run

TINY = ["--set", "workload.num_rounds=2", "--set", "workload.num_clients=2", "--no-progress"]


def test_sweep_help_shows_one_percent_sign(capsys):
    rc, out, _ = run(capsys, ["sweep", "--help"])
    text = " ".join(out.split())
    assert rc == 0 and "a 95% confidence half-width per figure" in text and "%%" not in out


def test_run_help_cites_files_in_the_repository(capsys):
    rc, out, _ = run(capsys, ["run", "--help"])
    text = " ".join(out.split())
    assert rc == 0 and "DESIGN.md" not in out
    assert "(a dotted key of the scenario file: README.md 'Simulate a scenario', SCHEMA in scenarios/schema.py;" in text


def test_fleet_of_one_engine_says_engine(tmp_path, capsys):
    rc, out, _ = run(capsys, ["run", "fleet16-multiturn", "--smoke", "--set", "fleet.engines=1", "--no-plots",
                              "--no-progress", "--out", str(tmp_path / "f1")])
    assert rc == 0
    assert out.splitlines()[-1].startswith("fleet: 1 engine, router least_load: SLO attainment ")


def test_sweep_of_one_point_says_run(tmp_path, capsys):
    rc, out, _ = run(capsys, ["sweep", "quickstart", *TINY, "--jobs", "1", "--out", str(tmp_path / "sw")])
    lines = out.splitlines()
    assert rc == 0 and lines[0].startswith("1 run (1 run now, 0 already done) in ")
    # the last-10 hit rate is printed like the others (4 decimals), not as a raw float
    assert lines[1].startswith("  base: hit rate 0.3299, last 10 0.3299, TTFT mean ")


@pytest.mark.parametrize("kind,article", [("azure", "an azure"), ("trace", "a trace")])
@pytest.mark.parametrize("where", ["missing", "directory"])
def test_workload_path_that_is_no_file_says_so_with_its_article(tmp_path, capsys, kind, article, where):
    """A missing file is "no such file", a directory "is a directory" (not "no such file")."""
    path, problem = ("nowhere.csv", "no such file") if where == "missing" else (tmp_path, "is a directory")
    sc = tmp_path / "s.yaml"
    sc.write_text(f"workload: {{kind: {kind}, path: {path}}}\n")
    rc, out, err = run(capsys, ["run", str(sc), "--no-plots", "--no-progress", "--out", str(tmp_path / "o")])
    assert (rc, out) == (2, "")
    assert err == f"radixsim run: {sc}: workload.path: {path}: {problem}; expected {article} file\n"


def test_cost_table_that_is_a_directory(tmp_path, capsys):
    sc = tmp_path / "s.yaml"
    sc.write_text(f"cost: {{kind: table, table: {tmp_path}}}\n")
    rc, out, err = run(capsys, ["run", str(sc), "--no-plots", "--no-progress", "--out", str(tmp_path / "o")])
    assert (rc, out) == (2, "")
    assert err.startswith(f"radixsim run: {sc}: cost.table: {tmp_path}: is a directory; expected a file "
                          "of measured step times")


def test_run_of_a_directory_says_directory(tmp_path, capsys):
    rc, out, err = run(capsys, ["run", str(tmp_path), "--no-plots", "--no-progress", "--out", str(tmp_path / "o")])
    assert (rc, out) == (2, "")
    assert err.endswith(f"{tmp_path}: is a directory; expected a scenario file (YAML), a catalog name or a result directory (with config.yaml)\n")
    assert len(err.splitlines()) == 1


def test_bench_log_that_is_a_directory(tmp_path):
    with pytest.raises(ValueError, match=r": is a directory; expected a bench_multiturn JSONL log \(--log-file\)$"):
        read_log(tmp_path)
