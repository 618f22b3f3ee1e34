"""Sweep and plan directories (issue 14, item 7): points keyed by their fully resolved scenario,
a directory tied to one sweep/plan, a lock against a second command on the same directory,
and plan's progress bar on a terminal."""
from __future__ import annotations

import fcntl
import io
import os

import pytest

from radixsim.cli import main
from radixsim.plan import plan
from radixsim.sweep import LocalExecutor, make_points, parse_grid, run_sweep
from test_sweep import SMALL, small_raw

GRID = ["cache.l2_tokens=0,8192"]


def sweep_args(out, *sets):
    return (["sweep", "quickstart", "--grid", *GRID, "--out", str(out), "--jobs", "1", "--no-progress"]
            + sum((["--set", s] for s in SMALL + ["cache.l1_tokens=4096", *sets]), []))


def plan_args(out, *sets):
    return (["plan", "quickstart", "--vary", "cache.l2_tokens", "--target", "hit_rate >= 0", "--range", "0:8192",
             "--out", str(out), "--jobs", "1", "--no-progress"]
            + sum((["--set", s] for s in SMALL + ["cache.l1_tokens=4096", *sets]), []))


def test_points_are_named_by_their_resolved_scenario():
    grid = parse_grid(GRID)
    a = [p.name for p in make_points(small_raw(), grid)]
    assert a == [p.name for p in make_points(small_raw(), grid)]
    b = [p.name for p in make_points(small_raw(**{"workload.num_rounds": 2}), grid)]
    assert [n[:4] for n in b] == ["0000", "0001"] and set(a).isdisjoint(b)


def test_a_point_whose_done_marker_names_another_scenario_runs_again(tmp_path):
    grid = parse_grid(GRID)
    assert run_sweep(small_raw(), grid, tmp_path / "s", executor=LocalExecutor(1), progress=False)["ran"] == 2
    first = make_points(small_raw(), grid)[0]
    (tmp_path / "s" / "points" / first.name / ".done").write_text("ok\n")  # e.g. an older sweep's marker
    r = run_sweep(small_raw(), grid, tmp_path / "s", executor=LocalExecutor(1), progress=False)
    assert (r["ran"], r["skipped"]) == (1, 1)
    assert (tmp_path / "s" / "points" / first.name / ".done").read_text() == first.key + "\n"


def test_a_sweep_with_another_set_is_refused_in_the_same_directory(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(sweep_args(out)) == 0
    before = (out / "sweep.csv").read_bytes()
    capsys.readouterr()
    assert main(sweep_args(out, "workload.num_rounds=2")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"radixsim sweep: {out}: holds a different sweep (sweep.yaml records another scenario, "
                   "--set or sweep options); expected a new directory or the same command"]
    assert (out / "sweep.csv").read_bytes() == before
    assert main(sweep_args(out)) == 0
    assert "(0 run now, 2 already done)" in capsys.readouterr().out


def test_a_second_sweep_on_a_locked_directory_refuses(tmp_path, capsys):
    out = tmp_path / "s"
    out.mkdir()
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running sweep holds it
        assert main(sweep_args(out)) == 2
        assert main(plan_args(out)) == 2
    finally:
        os.close(fd)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"radixsim sweep: {out}: another sweep is running in this directory; expected one at a time",
                   f"radixsim plan: {out}: another plan is running in this directory; expected one at a time"]
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    assert main(sweep_args(out)) == 0  # free again


def test_a_directory_of_something_else_is_refused(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(sweep_args(out)) == 0
    capsys.readouterr()
    assert main(plan_args(out)) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"radixsim plan: {out}: holds files but no plan.yaml (")


def test_a_plan_with_another_set_is_refused_and_its_points_are_keyed(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(plan_args(out)) == 0
    names = sorted(p.name for p in (out / "points").iterdir())
    assert [n.rsplit("-", 1)[0] for n in names] == ["cache.l2_tokens=0", "cache.l2_tokens=8192"]
    assert all(len(n.rsplit("-", 1)[1]) == 12 for n in names)
    capsys.readouterr()
    assert main(plan_args(out, "workload.num_rounds=2")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"radixsim plan: {out}: holds a different plan (plan.yaml records another scenario, "
                   "--set or plan options); expected a new directory or the same command"]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_plan_shows_a_progress_bar_on_a_terminal_only(tmp_path, monkeypatch):
    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    res = plan(small_raw(), "cache.l2_tokens", "hit_rate >= 0", tmp_path / "p", range_text="0:8192",
               executor=LocalExecutor(1), progress=True)
    assert len(res.evidence) == 2
    text = err.getvalue()
    assert "plan cache.l2_tokens: 2point" in text and "cache.l2_tokens=8,192: hit_rate" in text
    quiet = io.StringIO()
    monkeypatch.setattr("sys.stderr", quiet)
    plan(small_raw(), "cache.l2_tokens", "hit_rate >= 0", tmp_path / "q", range_text="0:8192",
         executor=LocalExecutor(1), progress=True)
    assert quiet.getvalue() == ""


def test_sweep_and_plan_directories_that_cannot_be_written_are_one_line_errors(tmp_path):
    from radixsim.outputs import OutputError

    (tmp_path / "afile").write_text("x\n")
    with pytest.raises(OutputError, match="cannot write the sweep there"):
        run_sweep(small_raw(), parse_grid(GRID), tmp_path / "afile" / "s", progress=False)
