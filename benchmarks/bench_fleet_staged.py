"""Speed of a staged fleet run (a benchmark, not a test; issue 32): 8 engines behind a router
through a 10-minute inference-perf-style staged shared-prefix run, simulated end to end; wall
time, requests and simulated seconds per wall second, and the per-stage table.

    python benchmarks/bench_fleet_staged.py [--engines 8] [--router cache_aware] [--minutes 10]
                                            [--stages 4] [--peak-rate 40] [--repeat 1]

The workload: `workload.kind: shared_prefix` (scenarios/shared_prefix.py) with 32 system prompts
of 2,000 tokens x 16 questions of 200 tokens, 100 output tokens, Poisson load raised in
`--stages` equal stages over `--minutes` (rates peak/stages, 2 x peak/stages, ... peak), 1 s
between stages. Each engine: Qwen3-32B on one H200 (TP1), L1 auto + host L2 (hicache_ratio 2),
page 16, 64 running requests. Target (issue 32): 8 engines, 10 minutes, wall <= 60 s.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def scenario(engines: int, router: str, minutes: float, stages: int, peak: float):
    from scenarios.scenario import resolve

    each = 60.0 * minutes / stages
    raw = {"name": f"bench-fleet-staged-{engines}", "seed": 0, "model": "qwen3-32b", "hardware": "h200x1",
           "cache": {"page_size": 16, "l1_tokens": "auto", "hicache_ratio": 2},
           "engine": {"max_running_requests": 64},
           "workload": {"kind": "shared_prefix", "num_groups": 32, "num_prompts_per_group": 16,
                        "system_prompt_len": 2000, "question_len": 200, "output_len": 100,
                        "stages": [{"rate": peak * (k + 1) / stages, "duration": each} for k in range(stages)],
                        "stage_interval_s": 1},
           "fleet": {"engines": engines, "router": router}}
    return resolve(raw, "bench_fleet_staged")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", type=int, default=8)
    ap.add_argument("--router", default="cache_aware")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--peak-rate", type=float, default=40.0, help="the last stage's requests/s (default 40)")
    ap.add_argument("--repeat", type=int, default=1, help="runs (the best wall time is reported)")
    a = ap.parse_args(argv)
    from radixsim.fleet_run import fleet_rows, simulate_fleet
    from sim.staged import stage_table

    sc = scenario(a.engines, a.router, a.minutes, a.stages, a.peak_rate)
    walls = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        fleet, env, _, _, _ = simulate_fleet(sc)
        rows = fleet_rows(fleet)
        walls.append(time.perf_counter() - t0)
    best = min(walls)
    print(f"{a.engines} engines, router {a.router}, {a.minutes:g} simulated minutes in {a.stages} stages: "
          f"{len(rows):,} requests, simulated {env.now:.1f} s; wall {best:.2f} s (runs: "
          f"{', '.join(f'{w:.2f}' for w in walls)}), {len(rows) / best:,.0f} requests and "
          f"{env.now / best:.1f} simulated s per wall s")
    print("stage  rate  requests  output tok/s  TTFT mean  TTFT p90  ITL mean  hit rate")
    for s in stage_table(sc.workload, rows):
        print(f"{s['stage']:>5}  {s['rate']:>4g}  {s['requests']:>8,}  {s['output_tok_s']:>12,.0f}  "
              f"{s['ttft_mean_s']:>9.3f}  {s['ttft_p90_s']:>8.3f}  {s['itl_mean_s']:>8.4f}  {s['hit_rate']:>8.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
