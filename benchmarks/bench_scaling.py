"""Simulation cost against conversation length (a benchmark, not a test).

Runs one scenario (default: the Inkling figure-4 L3 one) as `radixsim run` in a fresh process
at 1x, 2x and 4x its rounds (`--set workload.num_rounds=...`) and prints, per run, the wall
time of the simulator, the prompt tokens simulated, simulated tokens per wall second, and the
cost relative to the 1x run. Flat tokens/s = cost linear in the work. Then, per run, the
simulated work that is not prompt tokens, relative to the 1x run: requests, engine steps
(each a scheduling pass), transfers between tiers and pages read from L3 (each prefetch
reads its whole storage run); and the wall milliseconds per 1,000 simulated events (engine
steps + transfers: what the event loop processes). Flat ms per 1,000 events = cost linear in
the simulated work, even where that work grows faster than the rounds (a longer conversation
leaves less memory per decode batch, so more steps; and more of its prefix is read from L3).

    python benchmarks/bench_scaling.py [SCENARIO] [--factors 1,2,4] [--repeat 3]

With --repeat N every factor is run N times, the factors interleaved, and each one's fastest
run is kept (on a shared machine one run's wall time varies by 10-20%; the fastest of a few
is the least disturbed, and interleaving lets a slow spell hit every factor alike).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def rounds_of(scenario: str) -> int:
    from scenarios.scenario import load

    return int(load(scenario)["workload"]["num_rounds"])


def run(scenario: str, rounds: int, out: Path) -> tuple[float, int, dict]:
    cmd = [sys.executable, "-m", "radixsim", "run", scenario, "--set", f"workload.num_rounds={rounds}",
           "--out", str(out), "--no-progress", "--no-plots"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    sim_s = float(p.stdout.rsplit("wall ", 1)[1].split(" s")[0])
    with open(out / "summary.json") as f:
        s = json.load(f)
    return sim_s, int(s["total_prompt_tokens"]), work_of(s)


def work_of(summary: dict) -> dict:
    """Requests, engine steps, transfers and L3 pages read of a run's summary.json."""
    c = summary.get("cache") or {}
    moved = (c.get("tiers") or {}).get("tokens_moved", {})
    eng = summary.get("engine") or {}
    return {"requests": summary["requests"], "steps": eng.get("steps", 0), "transfers": eng.get("transfers", 0),
            "L3 pages read": moved.get("L3->L2", 0) // max(c.get("page_size", 1), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", nargs="?", default="fig4-inkling-small-l3")
    ap.add_argument("--factors", default="1,2,4", help="multiples of the scenario's rounds (default 1,2,4)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per factor, interleaved, the fastest kept (default 1)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    base = rounds_of(args.scenario)
    print(f"{'rounds':>7} {'sim s':>8} {'prompt tokens':>14} {'tokens/s':>12} {'cost vs 1x':>11} {'tokens vs 1x':>13}")
    factors = [int(x) for x in args.factors.split(",")]
    runs: dict = {f: [] for f in factors}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):  # interleaved, so that a slow spell of the machine hits every factor
            for f in factors:
                runs[f].append(run(args.scenario, base * f, Path(tmp) / f"x{f}-{i}"))
    first, works, per_event = None, [], []
    for f in factors:
        sim_s, tokens, work = min(runs[f], key=lambda x: x[0])
        first = first or (sim_s, tokens)
        works.append((base * f, work))
        per_event.append((base * f, 1e6 * sim_s / max(work["steps"] + work["transfers"], 1)))
        print(f"{base * f:7d} {sim_s:8.2f} {tokens:14,d} {tokens / sim_s:12,.0f} {sim_s / first[0]:10.2f}x "
              f"{tokens / first[1]:12.1f}x", flush=True)
    print(f"\n{'rounds':>7}" + "".join(f" {k:>20}" for k in works[0][1]))
    for rounds, work in works:
        print(f"{rounds:7d}" + "".join(f" {v:>12,d} {v / max(works[0][1][k], 1):6.1f}x" for k, v in work.items()))
    print(f"\n{'rounds':>7} {'ms per 1,000 events':>20} {'vs 1x':>7}")
    for rounds, ms in per_event:
        print(f"{rounds:7d} {ms:20.1f} {ms / per_event[0][1]:6.2f}x")


if __name__ == "__main__":
    main()
