"""Validate the simulator against the torch backend on this machine: one script, under 8 minutes
on one H200 (`--device cpu --quick`: CPU sizes, under 3 minutes on a laptop). Prints, and
writes to OUT/gpu_validate.json (radixsim/outputs.py; OUT: --out, default runs/gpu_validate):

(a) copy bandwidth: batched, scattered KV-page copies device<->host as the data plane makes
    them (gpu_backend/staging.py: one copy per run of pages; Qwen3-32B-like pages on a GPU: 64 layers x 8 KV
    heads x 128, bf16, 64 tokens = 16 MiB) against one plain copy of as many bytes; target
    >= 85% of the plain copy;
(b) prefill time against the cached fraction of one prompt (8K tokens, hidden 4096, bf16 on a
    GPU), and the speed-up at 90% cached;
(c) operator calibration (`radixsim calibrate`'s table for a dense preset: GEMMs by shape,
    attention by length, copies by size) -> OUT/operators_<model>.json, the table a fleet
    simulation uses (`cost: {kind: table, table: FILE}`);
(d) two small multi-turn scenarios, one dense (Llama-3.1-8B's layer mix) and one hybrid
    (Qwen3-Next-80B: full attention + gated delta-rule layers), each on the torch backend
    (`torch.clock: measured`) and on the simulator with its own cost model and with a step
    table of the torch model measured here first (`radixsim calibrate --kind steps`): the
    batched step time against each model's prediction for the same steps (median and p90
    relative error) and the mean TTFT per round (radixsim/validate_torch.py).

The GPU machine may lack simpy and a network: on a connected machine run
`pip download simpy -d wheels/` in the repository root (wheels/ is git-ignored; ~20 KB), carry
wheels/ along, then `pip install --no-index wheels/*.whl` there (or let this script import the
wheel from wheels/ directly). Run from the repository root:

    python benchmarks/gpu_validate.py [--device cuda|cpu] [--quick] [--out DIR]
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIMPY_HELP = ("gpu_validate: simpy is missing (the engine's clock needs it). On a machine with a network, in the "
              "repository root: pip download simpy -d wheels/ ; carry wheels/ to this machine, then: "
              "pip install --no-index wheels/*.whl")

# per device: (a) pool geometry, (b) prompt, (c) operator grid, (d) torch model and workload sizes
SIZES = {
    "cuda": {"copy": {"layers": 64, "heads": 8, "head_dim": 128, "pages": 96, "dtype": "bfloat16"},
             "prefill": {"layers": 4, "hidden": 4096, "heads": 32, "head_dim": 128, "tokens": 8192,
                         "dtype": "bfloat16"},
             "operators": {"rows": (1, 16, 64, 256, 1024, 4096), "prefixes": (0, 1024, 4096), "new": (64, 512, 2048),
                           "kv": (512, 4096, 16384), "copy_bytes": (1 << 20, 16 << 20, 64 << 20), "repeats": 3},
             "torch": {"layers": 4, "hidden": 1024, "num_heads": 8, "head_dim": 128, "vocab": 32000,
                       "dtype": "bfloat16"},
             "workload": {"num_clients": 8, "num_rounds": 5, "request_length": 1024, "output_length": 16,
                          "max_parallel": 4},
             "steps": {"prefill_tokens": (16, 128, 512, 2048), "cached": (0, 1024, 4096, 8192), "batches": (1, 4, 8),
                       "contexts": (512, 2048, 8192), "repeats": 3}},
    "cpu": {"copy": {"layers": 8, "heads": 2, "head_dim": 64, "pages": 64, "dtype": "float32"},
            "prefill": {"layers": 2, "hidden": 256, "heads": 4, "head_dim": 64, "tokens": 2048, "dtype": "float32"},
            "operators": {"rows": (1, 16, 64), "prefixes": (0, 512), "new": (16, 128), "kv": (128, 1024),
                          "copy_bytes": (1 << 20, 8 << 20), "repeats": 1},
            "torch": {"layers": 2, "hidden": 64, "num_heads": 4, "head_dim": 16, "vocab": 1000, "dtype": "float32"},
            "workload": {"num_clients": 4, "num_rounds": 3, "request_length": 256, "output_length": 4,
                         "max_parallel": 2},
            "steps": {"prefill_tokens": (16, 128, 512), "cached": (0, 256, 1024), "batches": (1, 2, 4),
                      "contexts": (256, 1024), "repeats": 5}},
}
SCENARIOS = {"dense": "llama-3.1-8b", "hybrid": "qwen3-next-80b"}


def log(msg: str) -> None:
    print(msg, flush=True)


def need_simpy() -> bool:
    """True when simpy imports (from site-packages or a wheel in wheels/); else prints how to get it."""
    try:
        import simpy  # noqa: F401
        return True
    except ImportError:
        for whl in sorted(glob.glob(str(ROOT / "wheels" / "simpy-*.whl"))):
            sys.path.insert(0, whl)  # a pure-Python wheel is importable straight from the zip
        try:
            import simpy  # noqa: F401,F811
            return True
        except ImportError:
            print(SIMPY_HELP, file=sys.stderr)
            return False


def part_copy(device: str, size: dict) -> dict:
    import torch

    from gpu_backend.calibrate import copy_bandwidth
    from gpu_backend.pools import KVPools
    from gpu_backend.spec import HybridSpec

    c = size["copy"]
    spec = HybridSpec(kinds=("full",) * c["layers"], hidden=c["heads"] * c["head_dim"], num_heads=c["heads"],
                      head_dim=c["head_dim"], window=None, state_dim=8, vocab=32, page_size=64)
    pools = KVPools(spec, full_pages={"L1": c["pages"], "L2": c["pages"]}, device=device,
                    dtype=getattr(torch, c["dtype"]))
    r = copy_bandwidth(pools, "full", pages=c["pages"] // 2)
    r["target_pct"] = 85.0
    r["meets_target"] = min(r["d2h_pct_of_baseline"], r["h2d_pct_of_baseline"]) >= 85.0
    log(f"(a) copy bandwidth, {r['pages']} pages of {r['page_bytes'] / 2**20:.2f} MiB: D2H {r['d2h_GBps']:.2f} GB/s = "
        f"{r['d2h_pct_of_baseline']:.0f}% of a plain copy ({r['baseline_d2h_GBps']:.2f} GB/s), H2D {r['h2d_GBps']:.2f} "
        f"GB/s = {r['h2d_pct_of_baseline']:.0f}% ({r['baseline_h2d_GBps']:.2f}); target >= 85%: "
        f"{'met' if r['meets_target'] else 'NOT met'}")
    return r


def part_prefill(device: str, size: dict) -> dict:
    import torch

    from gpu_backend.calibrate import prefill_seconds
    from gpu_backend.model import SyntheticHybridModel
    from gpu_backend.spec import HybridSpec

    p = size["prefill"]
    spec = HybridSpec(kinds=("full",) * p["layers"], hidden=p["hidden"], num_heads=p["heads"], head_dim=p["head_dim"],
                      window=None, state_dim=8, vocab=1000, page_size=64)
    model = SyntheticHybridModel(spec, seed=0, device=device, dtype=getattr(torch, p["dtype"]))
    total, rows = p["tokens"], []
    for frac in (0.0, 0.25, 0.5, 0.75, 0.9):
        cached = int(total * frac) // 64 * 64
        rows.append({"cached_fraction": cached / total, "new_tokens": total - cached,
                     "seconds": prefill_seconds(model, total - cached, cached, repeats=3)})
    speedup = rows[0]["seconds"] / rows[-1]["seconds"]
    log(f"(b) prefill of a {total}-token prompt ({p['layers']} layers, hidden {p['hidden']}): "
        + ", ".join(f"{r['cached_fraction']:.0%} cached {r['seconds'] * 1e3:.1f} ms" for r in rows)
        + f"; x{speedup:.2f} faster at 90% cached")
    return {"prompt_tokens": total, "rows": rows, "speedup_at_90pct": speedup}


def scenario(model: str, device: str, size: dict) -> dict:
    return {"name": f"gpu-validate-{model}", "seed": 11, "model": model, "hardware": "h200x1",
            "cache": {"page_size": 64, "l1_tokens": 16384, "mamba_slots": 64},
            "engine": {"max_running_requests": size["workload"]["max_parallel"], "chunked_prefill_tokens": 512},
            "workload": {"kind": "multiturn", "request_rate": "inf", **size["workload"]},
            "torch": {**size["torch"], "device": device}}


def part_operators(device: str, size: dict, out_dir: Path) -> dict:
    import torch

    from gpu_backend.calibrate import measure_operators
    from sim.operators import OperatorCostModel

    cost = OperatorCostModel(SCENARIOS["dense"], "h200x1", 1)
    t0 = time.perf_counter()
    table = measure_operators(cost, device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32,
                              **size["operators"])
    path = out_dir / f"operators_{SCENARIOS['dense']}.json"
    from radixsim.outputs import write

    write(path, table)
    g = table["gemm"][0]
    log(f"(c) operator table of {table['model']} in {time.perf_counter() - t0:.1f} s -> {path}: GEMM {g['n']}x{g['k']} "
        + ", ".join(f"M={m}: {s * 1e3:.2f} ms" for m, s in g["points"])
        + f"; decode attention at {table['decode_attention'][-1][0]} keys {table['decode_attention'][-1][1] * 1e6:.0f} us")
    return {"file": str(path), "seconds": time.perf_counter() - t0}


def part_scenarios(device: str, size: dict, out_dir: Path) -> dict:
    import yaml

    from gpu_backend.backend import TorchOptions
    from gpu_backend.calibrate import measure_table, scenario_model
    from radixsim.outputs import write
    from radixsim.validate_torch import compare, table_text
    from scenarios.scenario import from_file

    results = {}
    for kind, model in SCENARIOS.items():
        path = out_dir / f"scenario_{kind}.yaml"
        path.write_text(yaml.safe_dump(scenario(model, device, size)))
        sc = from_file(str(path))
        t0 = time.perf_counter()
        table = out_dir / f"steps_{kind}.json"
        torch_model, scale = scenario_model(sc, TorchOptions(**sc.doc["torch"]))
        write(table, measure_table(torch_model, scale=scale, **size["steps"]))
        log(f"(d) {kind} ({model}): step table of the torch model in {time.perf_counter() - t0:.1f} s")
        results[kind] = compare(str(path), table=str(table))
    res = list(results.values())
    log(table_text(res))
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "runs/gpu_validate")
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available")
    ap.add_argument("--quick", action="store_true", help="CPU sizes (the default on --device cpu)")
    args = ap.parse_args()
    if not need_simpy():
        return 2
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_validate: --device cuda: CUDA is not available here; expected --device cpu", file=sys.stderr)
        return 2
    size = SIZES["cpu" if args.quick or device == "cpu" else "cuda"]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = {"device": device, "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
           "torch": str(torch.__version__), "quick": args.quick}
    log(f"gpu_validate on {out['gpu'] or 'cpu'} (torch {torch.__version__}){', quick sizes' if args.quick else ''}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory():
        out["a_copy_bandwidth"] = part_copy(device, size)
        out["b_prefill_vs_cached"] = part_prefill(device, size)
        out["c_operator_table"] = part_operators(device, size, out_dir)
        out["d_sim_vs_torch"] = part_scenarios(device, size, out_dir)
    out["wall_s"] = time.perf_counter() - t0
    from radixsim.outputs import write

    write(out_dir / "gpu_validate.json", out)
    log(f"done in {out['wall_s']:.0f} s -> {out_dir / 'gpu_validate.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
