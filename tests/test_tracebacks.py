"""Tracebacks (issue 27): bad input found before the work, not after it; an empty trace is bad
input for every command that reads one; a closed output pipe is a quiet stop for every command
(cli.main's shared error path, exit 141), not "[Errno 32] Broken pipe" with exit 2.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import radixsim.calibrate_cli
import radixsim.sweep
from radixsim.sweep import FIGURES
from scenarios.scenario import apply_sets, load

from test_error_path import env, run_inproc

ROOT = pathlib.Path(__file__).resolve().parent.parent


def no_work(*a, **k):
    raise AssertionError("the work started before the options were checked")


def test_sweep_plot_of_an_unknown_metric_is_refused_before_any_point(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(radixsim.sweep, "run_point", no_work)
    out = tmp_path / "sw"
    rc, stdout, err = run_inproc(capsys, ["sweep", "quickstart", "--grid", "workload.num_rounds=2,3", "--plot",
                                          "nonsense_metric", "--out", str(out), "--jobs", "1", "--no-progress"])
    cols = ", ".join(["workload.num_rounds", *FIGURES])
    assert (rc, stdout, err) == (2, "", f"radixsim sweep: --plot 'nonsense_metric': not a column of sweep.csv; "
                                        f"expected one of {cols}\n")
    assert not out.exists()


def test_the_plot_check_knows_the_columns_sweep_csv_gets(tmp_path, capsys):
    out = tmp_path / "sw"
    rc, _, err = run_inproc(capsys, ["sweep", "quickstart", "--grid", "workload.num_rounds=2", "--repeat", "2",
                                     "--set", "workload.num_clients=2", "--plot", "ttft_mean_s_ci95", "--out",
                                     str(out), "--jobs", "1", "--no-progress"])
    assert (rc, err) == (0, "")
    header = (out / "sweep.csv").read_text().splitlines()[0].split(",")
    raw = apply_sets(load("quickstart"), ["workload.num_clients=2"])
    grid = [("workload.num_rounds", [2])]
    assert header == radixsim.sweep.table_columns(radixsim.sweep.make_points(raw, grid, 2), grid, 2)


@pytest.mark.parametrize("cmd", ["curve", "leaderboard"])
def test_curve_and_leaderboard_of_an_empty_trace_are_one_line(tmp_path, capsys, cmd):
    trace = tmp_path / "empty.jsonl"
    trace.write_text('{"event": "close_session", "session_id": 1}\n')
    rc, stdout, err = run_inproc(capsys, [cmd, str(trace), "--out", str(tmp_path / "o"), "--jobs", "1"])
    assert (rc, stdout, err) == (2, "", f"radixsim {cmd}: {trace}: no requests in the trace; expected at least one\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl"]


def test_replay_and_run_of_an_empty_trace_both_exit_2(tmp_path, capsys):
    trace = tmp_path / "empty.jsonl"
    trace.write_text("\n")
    replay = run_inproc(capsys, ["replay", str(trace), "--out", str(tmp_path / "r"), "--no-progress"])
    run = run_inproc(capsys, ["run", "mooncake-trace", "--set", f"workload.path={trace}", "--out",
                              str(tmp_path / "s"), "--no-plots", "--no-progress"])
    assert replay == (2, "", f"radixsim replay: {trace}: no requests in the trace; expected at least one\n")
    assert run[:2] == (2, "")
    assert run[2].endswith(f"workload.path: {trace}: no requests in the trace; expected at least one\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl"]


@pytest.mark.parametrize("name,line", [
    ("ops.txt", "--out {p}: expected a .json, .yaml or .yml file"),
    ("dir", "--out {p}: is a directory; expected a .json, .yaml or .yml file"),
    ("missing/ops.json", "--out {p}: {parent} is not a directory; expected an existing directory"),
])
def test_calibrate_checks_out_before_the_work(tmp_path, capsys, monkeypatch, name, line):
    monkeypatch.setattr(radixsim.calibrate_cli, "_operator_table", no_work)
    (tmp_path / "dir").mkdir()
    p = tmp_path / name
    rc, stdout, err = run_inproc(capsys, ["calibrate", "quickstart", "--quick", "--out", str(p)])
    assert (rc, stdout, err) == (2, "", "radixsim calibrate: " + line.format(p=p, parent=p.parent) + "\n")


CLOSED_PIPE = {
    "validate": ["validate", "A3-ssdbench-mooncake80g", "--smoke", "--no-progress"],
    "curve": ["curve", "--workload", "multiturn", "--set", "workload.num_clients=2", "--set", "workload.num_rounds=2",
              "--points", "2", "--jobs", "1"],
    "replay-comparison": ["replay", "--workload", "multiturn", "--set", "workload.num_clients=2", "--set",
                          "workload.num_rounds=2", "--policy", "lru,fifo", "--capacity-tokens", "4096",
                          "--no-progress"],
}


@pytest.mark.parametrize("name", list(CLOSED_PIPE))
def test_a_closed_stdout_pipe_is_a_quiet_stop_for_every_command(tmp_path, name):
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written, as after `| head -1`
    try:
        p = subprocess.run([sys.executable, "-m", "radixsim", *CLOSED_PIPE[name], "--out", str(tmp_path / "o")],
                           stdout=w, stderr=subprocess.PIPE, cwd=ROOT, env=env(), text=True, timeout=300)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (141, "")
