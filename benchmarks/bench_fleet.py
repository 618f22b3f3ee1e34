"""Speed of fleet runs (a benchmark, not a test): N engines behind a router on a timed trace
in one SimPy process; wall time, simulated seconds per wall second, and how they grow with N.

    python benchmarks/bench_fleet.py [--engines 1 4 16 64] [--router least_load] [--copies 3]
                                     [--max-requests N] [--out DIR]

The trace: the bundled Mooncake FAST'25 synthetic trace (3,993 requests over 1,022 s) repeated
`--copies` times back to back (copy k: timestamps + k x 1,022 s, hash ids shifted past every id
of the copies before, so each copy is fresh content): 3 copies = 11,979 requests over ~51
minutes, standing in for the Mooncake conversation trace (not bundled). Each engine: Qwen3-32B
on one H200 (TP1), L1 + host L2 (hicache_ratio 2), page 64, 64 running requests.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRACE = ROOT / "scenarios" / "data" / "mooncake_synthetic_trace.jsonl"


def repeated_trace(copies: int, path: Path) -> int:
    """Write `copies` back-to-back copies of the Mooncake trace to `path`; the request count."""
    lines = [json.loads(x) for x in TRACE.read_text().splitlines() if x.strip()]
    span = max(x["timestamp"] for x in lines) + 1
    top = max(max(x["hash_ids"]) for x in lines) + 1
    with open(path, "w") as f:
        for k in range(copies):
            for x in lines:
                f.write(json.dumps({**x, "timestamp": x["timestamp"] + k * span,
                                    "hash_ids": [h + k * top for h in x["hash_ids"]]}) + "\n")
    return copies * len(lines)


def scenario(trace: str, engines: int, router: str, max_requests):
    from scenarios.scenario import resolve

    raw = {"name": f"bench-fleet-{engines}", "seed": 0, "model": "qwen3-32b", "hardware": "h200x1",
           "cache": {"page_size": 64, "l1_tokens": "auto", "hicache_ratio": 2},
           "engine": {"max_running_requests": 64},
           "workload": {"kind": "trace", "path": trace, "block_size": 512, "max_requests": max_requests},
           "fleet": {"engines": engines, "router": router}}
    return resolve(raw, "bench_fleet")


def run(trace: str, engines: int, router: str, max_requests) -> dict:
    from radixsim.fleet_run import fleet_rows, simulate_fleet

    t0 = time.perf_counter()
    f, env, costs, store, wall = simulate_fleet(scenario(trace, engines, router, max_requests))
    total = time.perf_counter() - t0
    rows = fleet_rows(f)
    prompt = sum(r["prompt_tokens"] for r in rows)
    return {"engines": engines, "router": router, "requests": len(rows), "wall_s": round(total, 2),
            "simulated_s": round(env.now, 1), "sim_s_per_wall_s": round(env.now / total, 1),
            "steps": sum(e.steps for e in f.engines),
            "hit_rate": round(sum(r["cached_tokens"] for r in rows) / prompt, 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--router", default="least_load")
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--max-requests", type=int, default=None)
    ap.add_argument("--out", default=None, help="write the table as JSON here")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        n = repeated_trace(a.copies, trace)
        print(f"trace: {n} requests ({a.copies} x Mooncake synthetic)")
        table = []
        for e in a.engines:
            r = run(str(trace), e, a.router, a.max_requests)
            table.append(r)
            print(json.dumps(r))
    if a.out:
        Path(a.out).write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
