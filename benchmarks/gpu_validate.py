"""Validate the simulator against the torch backend on this machine (one command, < 5 min on one
H200). Writes every figure to OUT (default: $OUT, else runs/gpu_validate):

(a) device<->host copy bandwidth of KV pages of realistic size (Qwen3-32B-like: 64 layers x
    8 KV heads x 128, bf16, 64-token pages = 16 MiB), batched and scattered over pinned host
    memory, against one plain copy of the same bytes;
(b) prefill time against the cached fraction of an 8K-token prompt for a realistic layer shape
    (hidden 4096, 32 heads x 128, bf16), and the speed-up at 90% cached;
(c) a small multi-turn scenario on the torch backend (`torch.clock: measured`) and on the
    simulator priced by a cost table fitted on this machine (what `radixsim calibrate` writes);
(d) the simulated vs measured TTFT per round and overall (median absolute error).

Without a GPU it says so, runs the same steps at CPU sizes, and exits 0.

The GPU machine has torch, numpy, networkx, matplotlib, pyyaml and pytest but not simpy and
cannot download: put the wheel beside the repo first (`pip download simpy -d wheels/`, a
git-ignored folder, ~20 KB; with the device tool, carry it: carry=["wheels"]); this script
imports it from there. Run from the repository root:

    python benchmarks/gpu_validate.py [--out DIR]

Checked in a bare venv (torch, numpy, pyyaml, networkx, matplotlib, pytest + the simpy wheel):
the CPU part runs in ~10 s.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
try:
    import simpy  # noqa: F401
except ImportError:  # pure-Python wheel carried along: importable straight from the zip
    for whl in sorted(glob.glob(str(ROOT / "wheels" / "simpy-*.whl"))):
        sys.path.insert(0, whl)

import torch  # noqa: E402

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"


def log(msg: str) -> None:
    print(msg, flush=True)


def part_a(out: dict) -> None:
    from gpu_backend.calibrate import copy_bandwidth
    from gpu_backend.pools import KVPools
    from gpu_backend.spec import HybridSpec

    if GPU:
        spec = HybridSpec(kinds=("full",) * 64, hidden=1024, num_heads=8, head_dim=128, window=None, state_dim=8,
                          vocab=32, page_size=64)
        pages, dtype = 96, torch.bfloat16
    else:
        spec = HybridSpec(kinds=("full",) * 8, hidden=256, num_heads=2, head_dim=64, window=None, state_dim=8,
                          vocab=32, page_size=64)
        pages, dtype = 64, torch.float32
    pools = KVPools(spec, full_pages={"L1": pages, "L2": pages}, device=DEVICE, dtype=dtype)
    r = copy_bandwidth(pools, "full", pages=pages // 2)
    out["a_copy_bandwidth"] = r
    log(f"(a) {r['pages']} pages of {r['page_bytes'] / 2**20:.1f} MiB: D2H {r['d2h_GBps']:.1f} GB/s "
        f"({r['d2h_pct_of_baseline']:.0f}% of a plain copy's {r['baseline_d2h_GBps']:.1f}), H2D {r['h2d_GBps']:.1f} GB/s "
        f"({r['h2d_pct_of_baseline']:.0f}% of {r['baseline_h2d_GBps']:.1f})")


def part_b(out: dict) -> None:
    from gpu_backend.calibrate import prefill_seconds
    from gpu_backend.model import SyntheticHybridModel
    from gpu_backend.spec import HybridSpec

    if GPU:
        spec = HybridSpec(kinds=("full",) * 4, hidden=4096, num_heads=32, head_dim=128, window=None, state_dim=8,
                          vocab=32000, page_size=64)
        total, dtype = 8192, torch.bfloat16
    else:
        spec = HybridSpec(kinds=("full",) * 2, hidden=256, num_heads=4, head_dim=64, window=None, state_dim=8,
                          vocab=1000, page_size=64)
        total, dtype = 2048, torch.float32
    model = SyntheticHybridModel(spec, seed=0, device=DEVICE, dtype=dtype)
    rows = []
    for frac in (0.0, 0.25, 0.5, 0.75, 0.9):
        cached = int(total * frac) // 64 * 64
        t = prefill_seconds(model, total - cached, cached, repeats=3)
        rows.append({"cached_fraction": cached / total, "new_tokens": total - cached, "seconds": t})
    speedup = rows[0]["seconds"] / rows[-1]["seconds"]
    out["b_prefill_vs_cached"] = {"prompt_tokens": total, "rows": rows, "speedup_at_90pct": speedup}
    log(f"(b) {total}-token prompt: " + ", ".join(f"{r['cached_fraction']:.0%} cached {r['seconds'] * 1e3:.1f} ms"
                                                   for r in rows) + f"; speed-up at 90% cached x{speedup:.2f}")


SCENARIO = {
    "seed": 11, "model": "qwen3-32b", "hardware": "h200x1",
    "cache": {"page_size": 64, "l1_tokens": 16384, "hicache_ratio": 2},
    "engine": {"max_running_requests": 4, "chunked_prefill_tokens": 512},
    "workload": {"kind": "multiturn", "num_clients": 8, "num_rounds": 6, "request_length": 512, "output_length": 8,
                 "max_parallel": 4, "request_rate": "inf"},
}


def part_cd(out: dict, out_dir: Path) -> None:
    from gpu_backend.backend import DTYPES, TorchOptions
    from gpu_backend.calibrate import measure_table
    from gpu_backend.model import SyntheticHybridModel
    from gpu_backend.spec import HybridSpec
    from radixsim.run import request_rows, simulate
    from scenarios.scenario import resolve

    torch_opts = ({"layers": 4, "hidden": 1024, "num_heads": 8, "head_dim": 128, "vocab": 32000, "dtype": "bfloat16"}
                  if GPU else {"layers": 2, "hidden": 64, "num_heads": 4, "head_dim": 16, "vocab": 1000})
    raw = json.loads(json.dumps(SCENARIO))
    raw["torch"] = {**torch_opts, "device": DEVICE, "clock": "measured"}  # the hardware's step and copy times
    sc = resolve(raw, "gpu_validate")
    opts = TorchOptions(**sc.doc["torch"])
    spec = HybridSpec.from_preset(sc.model, max_layers=opts.layers, hidden=opts.hidden, num_heads=opts.num_heads,
                                  head_dim=opts.head_dim, state_dim=opts.state_dim, vocab=opts.vocab,
                                  page_size=sc.cache.page_size)
    model = SyntheticHybridModel(spec, seed=opts.seed, device=opts.device, dtype=DTYPES[opts.dtype])
    t0 = time.perf_counter()
    table = measure_table(model, prefill_tokens=(8, 64, 512), cached=(0, 512, 2048, 4096), batches=(1, 4),
                          contexts=(512, 2048, 4096), repeats=3)
    (out_dir / "cost_table.json").write_text(json.dumps(table, indent=1))
    log(f"(c) cost table fitted in {time.perf_counter() - t0:.1f} s -> {out_dir / 'cost_table.json'}")
    real, *_ = simulate(sc, backend="torch")
    raw_sim = json.loads(json.dumps(raw))
    raw_sim["cost"] = {"kind": "table", "table": str(out_dir / "cost_table.json")}
    sim, *_ = simulate(resolve(raw_sim, "gpu_validate-sim"))
    by_round = {}
    for name, eng in (("measured", real), ("simulated", sim)):
        for r in request_rows(eng):
            by_round.setdefault(r["round"], {}).setdefault(name, []).append(r["ttft_s"])
    rows = []
    for rnd in sorted(by_round):
        m = statistics.mean(by_round[rnd]["measured"])
        s = statistics.mean(by_round[rnd]["simulated"])
        rows.append({"round": rnd, "measured_ttft_s": m, "simulated_ttft_s": s, "abs_err_s": abs(s - m),
                     "rel_err": abs(s - m) / m if m > 0 else None})
    pairs = [(a, b) for a, b in zip(sorted(request_rows(real), key=lambda r: r["rid"]),
                                    sorted(request_rows(sim), key=lambda r: r["rid"]))]
    abs_err = [abs(b["ttft_s"] - a["ttft_s"]) for a, b in pairs]
    hits_equal = [a["cached_tokens"] for a, _ in pairs] == [b["cached_tokens"] for _, b in pairs]
    out["d_sim_vs_measured"] = {"rounds": rows, "median_abs_err_s": statistics.median(abs_err),
                                "mean_measured_ttft_s": statistics.mean(a["ttft_s"] for a, _ in pairs),
                                "same_hits_per_request": hits_equal}
    log("(d) round  measured TTFT  simulated TTFT  |error|")
    for r in rows:
        log(f"    {r['round']:>5}  {r['measured_ttft_s'] * 1e3:10.1f} ms  {r['simulated_ttft_s'] * 1e3:10.1f} ms"
            f"  {r['abs_err_s'] * 1e3:7.1f} ms")
    log(f"    per request: median |error| {out['d_sim_vs_measured']['median_abs_err_s'] * 1e3:.1f} ms; "
        f"same hits per request: {hits_equal}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([r["round"] for r in rows], [r["measured_ttft_s"] for r in rows], marker="o", label="measured (torch)")
        ax.plot([r["round"] for r in rows], [r["simulated_ttft_s"] for r in rows], marker="s", ls="--",
                label="simulated (fitted table)")
        ax.set_xlabel("round")
        ax.set_ylabel("mean TTFT (s)")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out_dir / "ttft_sim_vs_measured.png", dpi=110)
    except ImportError:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "runs/gpu_validate")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = {"device": DEVICE, "gpu": torch.cuda.get_device_name(0) if GPU else None, "torch": str(torch.__version__)}
    if not GPU:
        log("No GPU found: running the CPU part only (CPU sizes; the GPU figures need a CUDA device).")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory():
        part_a(out)
        part_b(out)
        part_cd(out, out_dir)
    out["wall_s"] = time.perf_counter() - t0
    (out_dir / "results.json").write_text(json.dumps(out, indent=1))
    log(f"done in {out['wall_s']:.0f} s -> {out_dir / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
