"""Output directories (issue 27): one writer per result directory at a time, comparisons written
whole, no temporary directory left behind (Ctrl-C, SIGTERM, a killed run), a plan directory tied
to its target and costs, no lock file left by a refused command, validate's default directories.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

import radixsim.run
import radixsim.validate
from radixsim.cli import main
from radixsim import outputs
from radixsim.outputs import OutputError, result_dir

from test_error_path import SMALL, _alive, _workers_started, env, run_inproc, signal_when

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMPARE = ["replay", "--workload", "multiturn", "--set", "workload.num_clients=2", "--set", "workload.num_rounds=2",
           "--capacity-tokens", "4096", "--no-progress"]
PLAN = ["plan", "quickstart", "--vary", "cache.l2_tokens", "--range", "0:2000000", "--set", "workload.num_clients=2",
        "--set", "workload.num_rounds=3", "--jobs", "1", "--no-progress"]
SWEEP = ["sweep", "quickstart", "--grid", "workload.num_rounds=2", "--set", "workload.num_clients=2", "--jobs", "1",
         "--no-progress"]


def trace(tmp_path) -> pathlib.Path:
    p = tmp_path / "t.jsonl"
    p.write_text('{"tokens": [1, 2, 3]}\n{"tokens": [1, 2, 4]}\n')
    return p


# -- one writer per result directory ------------------------------------------------------------
def test_a_second_run_or_replay_into_a_directory_being_written_is_refused(tmp_path, capsys):
    target = tmp_path / "o"
    line = f"{target}: another run is writing to this directory; expected one at a time"
    with result_dir(target) as tmp:  # the first command, still writing
        (tmp / "summary.json").write_text("{}\n")
        rc_replay = run_inproc(capsys, ["replay", str(trace(tmp_path)), "--out", str(target), "--no-progress"])
        rc_run = run_inproc(capsys, ["run", "quickstart", "--out", str(target), *SMALL])
        assert sorted(p.name for p in tmp_path.iterdir()) == [".o.lock", tmp.name, "t.jsonl"]
    assert rc_replay == (2, "", f"radixsim replay: {line}\n")
    assert rc_run == (2, "", f"radixsim run: quickstart: {line}\n")
    # the first one's result, complete; its lock file gone with it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "t.jsonl"]
    assert sorted(p.name for p in target.iterdir()) == ["summary.json"]


def test_the_lock_is_released_on_a_failure_and_the_next_run_proceeds(tmp_path, capsys):
    target = tmp_path / "o"
    with pytest.raises(RuntimeError), result_dir(target):
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    rc, out, err = run_inproc(capsys, ["replay", str(trace(tmp_path)), "--out", str(target), "--no-progress"])
    assert (rc, err) == (0, "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "t.jsonl"]


def test_a_lock_file_removed_by_its_holder_is_not_taken_as_held(tmp_path):
    lock = tmp_path / ".lock"
    with outputs.hold(lock, "busy"):
        with pytest.raises(OutputError, match="^busy$"):
            with outputs.hold(lock, "busy"):
                pass
        assert lock.exists()  # a refused taker leaves the holder's file alone
    assert not lock.exists()
    with outputs.hold(lock, "busy"):
        assert lock.exists()


# -- a replay comparison is written whole ------------------------------------------------------------
def test_a_comparison_refuses_a_directory_holding_foreign_files(tmp_path, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    rc, stdout, err = run_inproc(capsys, [*COMPARE, "--policy", "lru,fifo", "--out", str(out)])
    assert (rc, stdout) == (2, "")
    assert err == (f"radixsim replay: {out}: holds files that are not radixsim results (notes.txt); "
                   "expected a new or empty directory or an earlier comparison's\n")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp"]


def test_a_comparison_replaces_an_earlier_one_whole(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert run_inproc(capsys, [*COMPARE, "--policy", "lru,fifo", "--out", str(out)])[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["comparison.csv", "fifo-cap=4096", "lru-cap=4096"]
    assert run_inproc(capsys, [*COMPARE, "--policy", "lru,mru", "--out", str(out)])[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["comparison.csv", "lru-cap=4096", "mru-cap=4096"]
    assert [line.split(",")[0] for line in (out / "comparison.csv").read_text().splitlines()] == \
        ["policy", "lru", "mru"]
    assert sorted(p.name for p in (out / "mru-cap=4096").iterdir()) == ["config.yaml", "requests.csv", "rounds.csv",
                                                                         "summary.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp"]


# -- temporary directories ----------------------------------------------------------------------------
def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_run_removes_the_stale_temporary_directories_of_its_target_only(tmp_path, capsys):
    dead, mine = _dead_pid(), os.getpid()
    names = [f".o.tmp-{dead}-0123abcd", f".o.old-{dead}-89abcdef",  # a killed run's: removed
             f".o.tmp-{mine}-0123abcd",  # a live process's: kept
             ".o.tmp-0123abcd", f".o.tmp-{dead}-xyz", f".other.tmp-{dead}-0123abcd"]  # not ours: kept
    for n in names:
        (tmp_path / n).mkdir()
        (tmp_path / n / "requests.csv").write_text("rid\n")
    rc, out, err = run_inproc(capsys, ["replay", str(trace(tmp_path)), "--out", str(tmp_path / "o"), "--no-progress"])
    assert (rc, err) == (0, "")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["o", "t.jsonl", *names[2:]])
    assert outputs.clean_stale(tmp_path / "o") == []


def _tmp_dirs(root: pathlib.Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp-" in p.name or ".old-" in p.name)


@pytest.mark.skipif(not pathlib.Path("/proc/self/task").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("sig,rc,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_stops_a_sweep_its_workers_and_leaves_no_temporary_directory(tmp_path, sig, rc, word):
    out = tmp_path / "o"
    args = ["sweep", "quickstart", "--grid", "workload.num_clients=1000,900,800,700", "--jobs", "2", "--no-progress",
            "--out", str(out)]
    p = subprocess.Popen([sys.executable, "-m", "radixsim", *args], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    workers: set[int] = set()  # both workers started, each writing its point
    writing = _workers_started(p.pid, workers, lambda: len(list(out.glob("points/.*.tmp-*"))) >= 2)
    stdout, stderr = signal_when(p, writing, sig)
    assert (p.returncode, stdout, stderr) == (rc, "", f"radixsim sweep: {word}\n")
    assert [w for w in workers if _alive(w)] == []
    assert _tmp_dirs(tmp_path) == []
    assert not list(out.glob("points/*/.done"))


@pytest.mark.skipif(not pathlib.Path("/proc/self/task").exists(), reason="needs /proc (Linux)")
def test_sigterm_on_a_run_removes_its_temporary_directory(tmp_path):
    out = tmp_path / "o"
    # 1,000 clients: a run of seconds, so it cannot finish before the signal (quickstart alone took 0.23 s)
    p = subprocess.Popen([sys.executable, "-m", "radixsim", "run", "quickstart", "--no-plots", "--no-progress",
                          "--set", "workload.num_clients=1000", "--out", str(out)], cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    stdout, stderr = signal_when(p, lambda: bool(list(tmp_path.glob(".o.tmp-*"))), signal.SIGTERM)
    assert (p.returncode, stdout, stderr) == (143, "", "radixsim run: terminated\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("exc, rc, line", [("Terminated", 143, "terminated"), ("KeyboardInterrupt", 130, "interrupted")])
def test_an_interrupt_lost_in_a_callback_is_sent_again(tmp_path, capsys, monkeypatch, exc, rc, line):
    """A signal that lands in a weakref callback (as one did in an import lock's: CI once saw a
    SIGTERM printed as "Exception ignored" and the run finish with exit 0) reaches the command."""
    import time
    import weakref

    import radixsim.cli as cli

    interrupt = getattr(cli, exc) if exc == "Terminated" else KeyboardInterrupt

    def simulate(sc, **kw):
        def cb(_):
            raise interrupt()

        class Obj:
            pass

        o = Obj()
        ref = weakref.ref(o, cb)
        del o  # the callback runs here; its exception cannot leave it
        for _ in range(100):  # the interrupt is sent again and raised here, where the command is
            time.sleep(0.01)
        return 0 if ref is not None else 1

    monkeypatch.setattr(radixsim.run, "simulate", simulate)
    # Python's own SIGINT handler (a job started in the background with `&` inherits SIGINT ignored)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        got, _, err = run_inproc(capsys, ["run", "quickstart", "--smoke", "--no-plots", "--out", str(tmp_path / "o")])
    finally:
        signal.signal(signal.SIGINT, old)
    assert (got, err) == (rc, f"radixsim run: {line}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


# -- sweep and plan directories -------------------------------------------------------------------------
def test_a_plan_rerun_with_another_target_or_costs_is_refused(tmp_path, capsys):
    out = tmp_path / "pl"
    first = [*PLAN, "--target", "hit_rate >= 0.5", "--out", str(out)]
    assert run_inproc(capsys, first)[0] == 0
    assert run_inproc(capsys, first)[0] == 0  # the same plan again: resumed
    refused = (f"radixsim plan: {out}: holds a different plan (plan.yaml records another scenario, --set or plan "
               "options); expected a new directory or the same command\n")
    for extra in (["--target", "hit_rate >= 0.2"], ["--target", "hit_rate >= 0.5", "--cost-gpu-hour", "2"],
                  ["--target", "hit_rate >= 0.5", "--largest"]):
        assert run_inproc(capsys, [*PLAN, *extra, "--out", str(out)]) == (2, "", refused)
    assert json.loads((out / "plan.json").read_text())["target"] == "hit_rate >= 0.5"
    assert sorted(p.name for p in out.iterdir()) == ["plan.csv", "plan.json", "plan.png", "plan.yaml", "points"]


@pytest.mark.parametrize("cmd", [SWEEP, [*PLAN, "--target", "hit_rate >= 0.5"]], ids=["sweep", "plan"])
def test_a_refused_sweep_or_plan_leaves_no_lock_file(tmp_path, capsys, cmd):
    out = tmp_path / "o"
    out.mkdir()
    (out / "a.txt").write_text("mine\n")
    rc, stdout, err = run_inproc(capsys, [*cmd, "--out", str(out)])
    assert (rc, stdout) == (2, "")
    assert "holds files but no" in err
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]
    # refused because another one holds the lock: that one's lock file stays until it leaves
    with outputs.hold(out / ".lock", "held"):
        rc, stdout, err = run_inproc(capsys, [*cmd, "--out", str(out)])
        assert (out / ".lock").exists()
    assert (rc, stdout) == (2, "")
    assert err == f"radixsim {cmd[0]}: {out}: another {cmd[0]} is running in this directory; expected one at a time\n"
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]


# -- validate's default directories ---------------------------------------------------------------------
def test_readme_validate_commands_in_order_keep_both_tables(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(radixsim.validate, "validate", lambda names=(), **kw: [])  # the cases: not the point here
    readme = (ROOT / "README.md").read_text()
    cmds = [line.split("#")[0].split()[1:] for line in readme.splitlines() if line.startswith("radixsim validate ")
            and "--backend" not in line]
    assert cmds == [["validate", "--out", "validation-out"], ["validate", "A3-ssdbench-mooncake80g", "--smoke"]]
    for c in cmds:
        assert run_inproc(capsys, [*c, "--no-progress"])[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["validation-out", "validation-smoke"]
    assert json.loads((tmp_path / "validation-out" / "validation.json").read_text())["smoke"] is False
    assert json.loads((tmp_path / "validation-smoke" / "validation.json").read_text())["smoke"] is True
    assert run_inproc(capsys, ["validate", "A3-ssdbench-mooncake80g", "--no-progress"])[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["validation-out", "validation-selected", "validation-smoke"]
