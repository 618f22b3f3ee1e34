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
    with open(validated / "validate_torch_requests.csv") as f:
        requests = list(csv.DictReader(f))
    assert len(requests) == 6
    assert all(r["torch_cached"] == r["sim_cached"] == r["table_cached"] for r in requests)
    doc = json.loads((validated / "validate_torch.json").read_text())
    summary = doc["scenarios"][0]["summary"]
    assert sorted(summary) == ["sim", "table"]
    assert summary["table"]["cost"] == f"TableCostModel({str(validated.parent / 't.json')!r})"
    steps = {k: s["step"]["steps"] for k, s in summary.items()}
    assert steps["sim"] == steps["table"] > 0
    assert all(s["same_hits"] for s in summary.values())
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
