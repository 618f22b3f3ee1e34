"""One error path for every command (radixsim/cli.py `main`): Ctrl-C -> one line "interrupted",
exit 130, a sweep's pending points cancelled and its workers stopped; an OS error, out of memory,
a torch device error or a failed sweep point -> one line naming what failed, exit 2; a closed
output pipe -> quiet, exit 141, no "Exception ignored" at interpreter exit.

In-process where the failure can be injected (monkeypatch), subprocess where the exit status,
a real signal or the interpreter's shutdown matters.
"""
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

import radixsim.run
from radixsim.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent
SMALL = ["--set", "workload.num_clients=2", "--set", "workload.num_rounds=2", "--no-plots", "--no-progress"]


def run_inproc(capsys, args):
    try:
        rc = main(args)
    except SystemExit as e:
        rc = e.code
    except KeyboardInterrupt:  # escaping main would stop pytest itself: a plain failure instead
        rc = "KeyboardInterrupt escaped main"
    out, err = capsys.readouterr()
    return rc, out, err


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def fail_with(monkeypatch, exc):
    def boom(*a, **k):
        raise exc
    monkeypatch.setattr(radixsim.run, "run_scenario", boom)


# -- in-process: every failure kind through `radixsim run` ------------------------------------------
@pytest.mark.parametrize("exc,line", [
    (KeyboardInterrupt(), "radixsim run: interrupted\n"),
    (MemoryError("Unable to allocate 111. PiB for an array with shape (15624999999992096,) and data type int64"),
     "radixsim run: out of memory: Unable to allocate 111. PiB for an array with shape (15624999999992096,) "
     "and data type int64\n"),
    (MemoryError(), "radixsim run: out of memory: an allocation failed\n"),
])
def test_run_failure_is_one_line(tmp_path, capsys, monkeypatch, exc, line):
    fail_with(monkeypatch, exc)
    rc, out, err = run_inproc(capsys, ["run", "quickstart", "--out", str(tmp_path / "o"), *SMALL])
    assert (rc, out, err) == (130 if isinstance(exc, KeyboardInterrupt) else 2, "", line)


def test_interrupted_run_leaves_nothing_presented_as_complete(tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(radixsim.run, "simulate", interrupted)  # Ctrl-C in the middle of the simulation
    rc, out, err = run_inproc(capsys, ["run", "quickstart", "--out", str(tmp_path / "o"), *SMALL])
    assert (rc, out, err) == (130, "", "radixsim run: interrupted\n")
    assert list(tmp_path.iterdir()) == []  # no result directory, not even a temporary one


def test_oserror_outside_a_command_handler_is_one_line(tmp_path, capsys, monkeypatch):
    # `sweep` had no OSError handler: a disk error while writing became a traceback
    import radixsim.sweep

    def boom(*a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "o" / "sweep.csv"))
    monkeypatch.setattr(radixsim.sweep, "run_sweep", boom)
    rc, out, err = run_inproc(capsys, ["sweep", "quickstart", "--out", str(tmp_path / "o"), "--no-progress"])
    assert (rc, out, err) == (2, "", f"radixsim sweep: {tmp_path / 'o' / 'sweep.csv'}: No space left on device\n")


def test_a_bug_keeps_its_traceback(tmp_path, capsys, monkeypatch):
    fail_with(monkeypatch, ZeroDivisionError("a bug"))
    with pytest.raises(ZeroDivisionError):
        main(["run", "quickstart", "--out", str(tmp_path / "o"), *SMALL])


def test_a_stalled_engine_is_one_line_naming_the_stuck_requests(tmp_path, capsys, monkeypatch):
    from cache_core.engine_types import EngineStalled

    fail_with(monkeypatch, EngineStalled("the run stopped with 3 of 5 requests finished; waiting 2 (rids 3, 4)\nmore"))
    rc, out, err = run_inproc(capsys, ["run", "quickstart", "--out", str(tmp_path / "o"), *SMALL])
    assert (rc, out, err) == (2, "", "radixsim run: the engine stalled: the run stopped with 3 of 5 requests "
                                     "finished; waiting 2 (rids 3, 4)\n")
    assert not (tmp_path / "o").exists()


def test_torch_device_error_during_a_run_is_one_line(tmp_path, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    fail_with(monkeypatch, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore text"))
    rc, out, err = run_inproc(capsys, ["run", "quickstart", "--out", str(tmp_path / "o"), *SMALL])
    assert (rc, out, err) == (2, "", "radixsim run: torch device error: CUDA out of memory. Tried to allocate 2.00 GiB\n")


@pytest.mark.parametrize("cmd", [["run", "quickstart", "--smoke", "--backend", "torch", "--no-plots", "--no-progress"],
                                 ["calibrate", "quickstart", "--quick"]])
def test_device_cuda_without_cuda_is_one_line(tmp_path, capsys, cmd):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    # o.json: calibrate's --out is a table file, checked first
    rc, out, err = run_inproc(capsys, [*cmd, "--device", "cuda", "--out", str(tmp_path / "o.json")])
    assert (rc, out) == (2, "")
    assert err == (f"radixsim {cmd[0]}: --device cuda: CUDA is not available on this machine "
                   f"(torch {torch.__version__}); expected cpu\n")
    assert not (tmp_path / "o.json").exists()


def test_device_name_that_is_not_a_device(tmp_path, capsys):
    pytest.importorskip("torch")
    rc, out, err = run_inproc(capsys, ["run", "quickstart", "--smoke", "--backend", "torch", "--device", "gpu0",
                                       "--out", str(tmp_path / "o"), "--no-plots", "--no-progress"])
    assert (rc, out, err) == (2, "", "radixsim run: --device 'gpu0': not a torch device; expected cpu or cuda[:N]\n")


# -- a failing sweep point -------------------------------------------------------------------------
BAD_TRACE = '{"tokens": [1, 2, 3], "timestamp": 0}\n{"tokens": [1, 2, 3, 4], "timestamp": 10}\n{"tokens": "x"}\n'
TRACE_SCENARIO = """model: qwen3-32b
hardware: h200x1
cache: {page_size: 16, l1_tokens: 100000}
workload: {kind: trace, path: bad.jsonl}
"""


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_failed_sweep_point_is_one_line_naming_it(tmp_path, jobs):
    # line 3 of the trace is bad: resolving reads only up to the first request, so the points
    # fail while they run (in the worker processes with --jobs 2)
    (tmp_path / "bad.jsonl").write_text(BAD_TRACE)
    (tmp_path / "s.yaml").write_text(TRACE_SCENARIO)
    r = subprocess.run([sys.executable, "-m", "radixsim", "sweep", "s.yaml", "--grid", "workload.speedup=1,2",
                        "--jobs", jobs, "--out", "o", "--no-progress"],
                       cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout) == (2, "")
    point = r"0000-[0-9a-f]+: workload\.speedup=1" if jobs == "1" else r"000[01]-[0-9a-f]+: workload\.speedup=[12]"
    assert re.fullmatch(r"radixsim sweep: s\.yaml \[" + point + r"\]: failed: "
                        r"TraceError: bad\.jsonl:3: 'tokens' must be a list of non-negative integers, got str\n",
                        r.stderr), r.stderr
    assert not (tmp_path / "o" / "sweep.csv").exists()


def test_failed_plan_point_is_one_line_naming_it(tmp_path):
    (tmp_path / "bad.jsonl").write_text(BAD_TRACE)
    (tmp_path / "s.yaml").write_text(TRACE_SCENARIO)
    r = subprocess.run([sys.executable, "-m", "radixsim", "plan", "s.yaml", "--vary", "cache.l1_tokens",
                        "--range", "1000:2000", "--target", "hit_rate >= 0.5", "--jobs", "1", "--out", "o"],
                       cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("radixsim plan: s.yaml [cache.l1_tokens=1000]: failed: TraceError: bad.jsonl:3: "
                        "'tokens' must be a list of non-negative integers, got str\n"), r.stderr


# -- a real Ctrl-C on a sweep with worker processes ---------------------------------------------------
def _children(pid: int) -> set[int]:
    out = set()
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(x) for x in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def signal_when(p, ready, sig) -> tuple:
    """Poll (no time limit but the test's) until ready() or until p ends; then, p still running,
    send it `sig`: its (stdout, stderr). p is killed if anything fails on the way."""
    try:
        while p.poll() is None and not ready():
            time.sleep(0.01)  # polling, not a timed assertion
        assert p.poll() is None, p.communicate()
        p.send_signal(sig)
        return p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()


def _workers_started(pid: int, workers: set, more=lambda: True):
    """ready() for signal_when: refreshes `workers` (pid's children); both started and more()."""
    def ready() -> bool:
        workers.clear()
        workers.update(_children(pid))
        return len(workers) >= 2 and more()
    return ready


CTRL_C_COMMANDS = {
    "sweep": ["sweep", "quickstart", "--grid", "workload.num_clients=1000,900,800,700", "--jobs", "2", "--no-progress"],
    "plan": ["plan", "quickstart", "--vary", "cache.l2_tokens", "--range", "0:2000000", "--target",
             "hit_rate >= 0.5", "--jobs", "2"],
    "replay-comparison": ["replay", "--workload", "multiturn", "--policy", "lru,fifo", "--capacity-tokens",
                          "4096,8192", "--jobs", "2", "--no-progress"],
}


@pytest.mark.skipif(not pathlib.Path("/proc/self/task").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("name", list(CTRL_C_COMMANDS))
def test_ctrl_c_stops_the_command_and_its_workers(tmp_path, name):
    args = CTRL_C_COMMANDS[name]
    # SIGINT back to its default in the child: a test runner started in the background by a shell
    # without job control inherits SIGINT ignored, and Python then installs no Ctrl-C handler
    p = subprocess.Popen([sys.executable, "-m", "radixsim", *args, "--out", str(tmp_path / "o")], cwd=ROOT, env=env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    workers: set[int] = set()
    out, err = signal_when(p, _workers_started(p.pid, workers), signal.SIGINT)  # once both workers run
    assert (p.returncode, out, err) == (130, "", f"radixsim {args[0]}: interrupted\n")
    assert [w for w in workers if _alive(w)] == []
    for done in ("sweep.csv", "plan.json", "comparison.csv"):  # nothing presented as complete
        assert not (tmp_path / "o" / done).exists()
    # a point that finished before the interrupt is complete (resumable); none is half-written
    for done in (tmp_path / "o").glob("points/*/.done"):
        assert (done.parent / "summary.json").is_file()


# -- a closed output pipe ------------------------------------------------------------------------------
def test_closed_stdout_pipe_is_quiet(tmp_path):
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written, as after `| head -1`
    try:
        p = subprocess.run([sys.executable, "-m", "radixsim", "scenarios"], stdout=w, stderr=subprocess.PIPE,
                           cwd=ROOT, env=env(), text=True, timeout=120)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (141, "")
