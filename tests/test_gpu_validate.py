"""benchmarks/gpu_validate.py: the preflight, the guarded parts under a time budget, the JSON
written as each part ends, and the exit status (issue 28 item 5). `--quick` runs whole on CPU."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_validate.py"


@pytest.fixture(scope="module")
def gv():
    spec = importlib.util.spec_from_file_location("gpu_validate_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quick_runs_every_part_and_its_exit_status_is_its_failures(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                                                     "PATH": ""})
    doc = json.loads((tmp_path / "gpu_validate.json").read_text())
    assert p.returncode == (1 if doc["failures"] else 0), p.stderr
    assert [f"FAILED {f}" for f in doc["failures"]] == [ln for ln in p.stdout.splitlines() if ln.startswith("FAILED")]
    for key, name in (("a", "a_copy_bandwidth"), ("b", "b_prefill_vs_cached"), ("c", "c_operator_table"),
                      ("d", "d_sim_vs_torch")):
        part = json.loads((tmp_path / f"part_{key}.json").read_text())
        assert "error" not in part and part["failures"] == doc[name]["failures"]
    pre = doc["preflight"]
    assert pre["cuda"] is None and pre["host_free_gib"] > 0 and pre["torch"]
    a = doc["a_copy_bandwidth"]["rows"]
    assert [(r["layout"], r["page_size"]) for r in a] == [("page_first", 16), ("page_first", 64),
                                                         ("layer_first", 16), ("layer_first", 64)]
    assert all(r["bytes"] == a[0]["bytes"] and r["modelled_GBps"] > 0 for r in a)  # same bytes, smaller pages
    ops = {r["operator"] for r in doc["c_operator_table"]["rows"]}
    assert ops == {"gemm", "prefill_attention", "decode_attention", "copy_h2d"}
    assert all(r["predicted_s"] > 0 and r["ratio"] == r["measured_s"] / r["predicted_s"]
               for r in doc["c_operator_table"]["rows"])
    d = doc["d_sim_vs_torch"]
    for kind in ("dense", "hybrid"):
        assert d[kind]["loads"]["l2_to_l1_bytes"] > 0  # the scenarios load from L2
        assert all(s["same_hits"] for s in d[kind]["summary"].values())
        assert sorted(d[kind]["summary"]) == ["sim", "table"]


def test_a_failing_part_is_recorded_and_the_next_one_runs(gv):
    def boom():
        raise RuntimeError("no kernel")

    res = gv.run_part("b", boom, time.monotonic() + 60)
    assert res["failures"] == ["(b) failed: RuntimeError: no kernel"]
    assert res["error"] == "RuntimeError: no kernel" and "raise RuntimeError" in res["traceback"]
    assert gv.run_part("c", lambda: {"x": 1, "failures": []}, time.monotonic() + 60)["x"] == 1


def test_a_part_past_the_budget_is_skipped_or_stopped(gv):
    assert gv.run_part("d", lambda: {"failures": []}, time.monotonic() - 1) == {
        "skipped": "time budget spent", "failures": ["(d) skipped: the time budget was spent"]}
    res = gv.run_part("a", lambda: time.sleep(30), time.monotonic() + 2)  # SIGALRM stops it after 2 s
    assert res["failures"] == ["(a) failed: BudgetSpent: time budget spent after 2 s"]
    assert res["part_s"] < 30


def test_preflight_short_of_host_memory_is_one_line_and_exit_2(gv, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gv, "host_available_bytes", lambda: 512 << 20)
    monkeypatch.setattr(sys, "argv", ["gpu_validate.py", "--device", "cpu", "--quick", "--out", str(tmp_path)])
    assert gv.main() == 2
    assert capsys.readouterr().err == ("gpu_validate: preflight: host memory: 0.5 GiB available; expected >= 1 GiB\n")
    doc = json.loads((tmp_path / "gpu_validate.json").read_text())
    assert doc["failures"] == ["preflight: host memory: 0.5 GiB available; expected >= 1 GiB"]
    assert not (tmp_path / "part_a.json").exists()  # nothing ran


def test_a_missed_loop_target_or_differing_hits_are_failures(gv):
    res = {"summary": {"sim": {"same_hits": True, "differing_rids": []},
                       "table": {"same_hits": False, "differing_rids": [4, 7],
                                 "step": {"median_rel_err": 0.08, "p90_rel_err": 0.3}}},
           "loads": {"l2_to_l1_bytes": 0},
           "rounds": [{"round": 1, "table_ratio": 1.1}, {"round": 2, "table_ratio": 0.8}]}
    assert gv.loop_failures("hybrid", res) == [
        "(d) hybrid: cached tokens differ between the simulator (table) and the torch backend on the same clock: "
        "requests 4, 7",
        "(d) hybrid: no L2 -> L1 load ran (the copy path is not exercised)",
        "(d) hybrid: step time error (table) median 8%, p90 30%; targets <= 10%, <= 25%",
        "(d) hybrid: per-round TTFT (table / torch) outside +-15%: round 2 x0.80"]
    noisy = {**res, "step_noise": {"steps": 20, "median_rel_err": 0.09, "p90_rel_err": 0.31, "max_spread": 2.0}}
    assert gv.loop_failures("hybrid", noisy)[2] == (
        "(d) hybrid: step time error (table) median 8%, p90 30%; targets <= 10%, <= 25% (the torch steps against "
        "their own shape's median: median 9%, p90 31%)")
