"""`radixsim validate --backend torch`: the simulator (own cost model, and a calibrated table)
against the torch backend on the measured clock, per round and per request."""
from __future__ import annotations

import csv
import json

import pytest

pytest.importorskip("torch")

from radixsim.cli import main  # noqa: E402

SCENARIO = {"seed": 5, "model": "qwen3-32b", "hardware": "h200x1",
            "cache": {"page_size": 16, "l1_tokens": 4096},
            "engine": {"max_running_requests": 2, "chunked_prefill_tokens": 64},
            "workload": {"num_clients": 2, "num_rounds": 3, "request_length": 48, "output_length": 3,
                         "max_parallel": 1, "request_rate": "inf"},
            "torch": {"layers": 2, "hidden": 32, "num_heads": 2, "head_dim": 8, "vocab": 97}}


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    import yaml

    d = tmp_path_factory.mktemp("vt")
    (d / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    assert main(["calibrate", str(d / "s.yaml"), "--kind", "steps", "--quick", "--out", str(d / "t.json")]) == 0
    assert main(["validate", "--backend", "torch", str(d / "s.yaml"), "--table", str(d / "t.json"),
                 "--device", "cpu", "--out", str(d / "out")]) == 0
    return d / "out"


def test_rounds_and_requests_of_every_backend_are_written(validated, capsys):
    with open(validated / "validate_torch_rounds.csv") as f:
        rounds = list(csv.DictReader(f))
    assert [(r["scenario"], r["round"], r["requests"]) for r in rounds] == [("s", "1", "2"), ("s", "2", "2"),
                                                                            ("s", "3", "2")]
    assert all(r["torch_ttft_s"] and r["sim_ttft_s"] and r["table_ttft_s"] for r in rounds)
    for r in rounds:  # the per-round TTFT ratio is simulator / torch
        for k in ("sim", "table"):
            assert float(r[f"{k}_ratio"]) == pytest.approx(float(r[f"{k}_ttft_s"]) / float(r["torch_ttft_s"]))
    with open(validated / "validate_torch_requests.csv") as f:
        requests = list(csv.DictReader(f))
    assert len(requests) == 6
    assert all(r["torch_cached"] == r["sim_cached"] == r["table_cached"] == r["sim_paced_cached"]
               == r["table_paced_cached"] for r in requests)
    assert [r["sim_cached"] for r in requests] == ["0", "0", "48", "48", "96", "96"]  # round r reuses r - 1 turns
    doc = json.loads((validated / "validate_torch.json").read_text())
    summary = doc["scenarios"][0]["summary"]
    assert sorted(summary) == ["sim", "table"]
    assert summary["table"]["cost"] == f"TableCostModel({str(validated.parent / 't.json')!r})"
    steps = {k: s["step"]["steps"] for k, s in summary.items()}
    assert steps["sim"] == steps["table"] > 0
    assert all(s["same_hits"] and s["differing_rids"] == [] for s in summary.values())
    sdpa = doc["scenarios"][0]["sdpa_backends"]  # which SDPA kernel the torch run's attention ran on
    assert sdpa and set(sdpa) <= {"FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION",
                                  "FLASH_ATTENTION (mask materialised)", "MATH (mask materialised)"}
    assert all(isinstance(v, int) and v > 0 and v % 2 == 0 for v in sdpa.values())  # 2 layers: per step, per call


def test_validate_torch_without_scenarios_is_one_line(capsys):
    assert main(["validate", "--backend", "torch"]) == 2
    err = capsys.readouterr().err
    assert err == ("radixsim validate: --backend torch: expected one or more scenarios (a file or a catalog "
                   "name)\n")


def test_gpu_validate_without_simpy_says_how_to_get_it(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = root / "benchmarks" / "gpu_validate.py"
    code = ("import runpy, sys; sys.modules['simpy'] = None; "  # simpy absent, as on the GPU machine
            f"sys.argv = ['gpu_validate.py', '--out', {str(tmp_path)!r}]; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={"PATH": "", "PYTHONPATH": str(root)})
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        "gpu_validate: simpy is missing (the engine's clock needs it). On a machine with a network, in the "
        "repository root: pip download simpy -d wheels/ ; carry wheels/ to this machine, then: "
        "pip install --no-index wheels/*.whl"]


def test_validate_torch_on_cuda_without_cuda_is_one_line(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["validate", "--backend", "torch", "quickstart", "--device", "cuda", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (f"radixsim validate: --device cuda: CUDA is not available on this machine "
                                       f"(torch {torch.__version__}); expected cpu\n")
    assert not (tmp_path / "o").exists()


def _small(tmp_path):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


def test_cached_tokens_differing_on_the_same_clock_fail_the_command(tmp_path, capsys, monkeypatch):
    """The simulator against the torch backend paced by the same cost model: a request that
    reused a different prefix (here: the torch run's request 3 made to recompute) exits 1, names
    the scenario, the cost model and the request, and still writes every output."""
    import radixsim.validate_torch as vt

    paced = vt._paced_rows

    def fewer_hits(*a, **k):
        rows = paced(*a, **k)
        for r in rows:
            if r["rid"] == 3:
                r["cached_tokens"] = 0
        return rows

    monkeypatch.setattr(vt, "_paced_rows", fewer_hits)
    assert main(["validate", "--backend", "torch", str(_small(tmp_path)), "--device", "cpu",
                 "--out", str(tmp_path / "out")]) == 1
    cap = capsys.readouterr()
    assert cap.err == ("radixsim validate: --backend torch: cached tokens differ between the simulator and the "
                       "torch backend on the same clock: s (sim: requests 3)\n")
    assert "cached tokens identical to the torch backend on this clock: NO, requests 3 " in cap.out
    doc = json.loads((tmp_path / "out" / "validate_torch.json").read_text())
    s = doc["scenarios"][0]["summary"]["sim"]
    assert (s["same_hits"], s["differing_rids"], s["measured_differing"]) == (False, [3], 0)
    with open(tmp_path / "out" / "validate_torch_requests.csv") as f:
        requests = list(csv.DictReader(f))
    assert [(r["rid"], r["sim_paced_cached"]) for r in requests if r["sim_paced_cached"] != r["sim_cached"]] == [
        ("3", "0")]


def test_measured_clock_hits_are_reported_not_failed(tmp_path, capsys, monkeypatch):
    """Hits on the measured clock follow this machine's timing (a host hit meeting a full L1
    recomputes), so they are counted beside the same-clock comparison and never fail it."""
    import radixsim.validate_torch as vt

    run = vt._torch_run

    def other_timing(*a, **k):
        sc, rows, *rest = run(*a, **k)
        rows[4]["cached_tokens"] += 16
        return (sc, rows, *rest)

    monkeypatch.setattr(vt, "_torch_run", other_timing)
    assert main(["validate", "--backend", "torch", str(_small(tmp_path)), "--device", "cpu",
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert ("cached tokens identical to the torch backend on this clock: yes (on the measured clock 1 of 6 "
            "requests differ)") in out
    assert "torch L2 -> L1 loads: 0.00 MiB (the preset's KV bytes), 0 overlapped with compute" in out
