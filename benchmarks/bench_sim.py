"""Speed and memory of the simulator on the seed's figure-4 scenarios (a benchmark, not a test).

Runs each scenario as `radixsim run` in a fresh process, one after the other, and prints the
wall time, the simulator's own time (without interpreter start and imports), and the peak
resident memory of each process (from wait4's rusage), then the total.

    python benchmarks/bench_sim.py [SCENARIO ...] [--out DIR]

Default: the six figure-4 scenarios (fig4-dsv4-flash-{l1,l2,l3}, fig4-inkling-small-{l1,l2,l3}).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIX = [f"fig4-{m}-{t}" for m in ("dsv4-flash", "inkling-small") for t in ("l1", "l2", "l3")]


def run_one(name: str, out: Path) -> dict:
    cmd = [sys.executable, "-m", "radixsim", "run", name, "--out", str(out / name), "--no-progress", "--no-plots"]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    stdout, stderr = p.stdout.read(), p.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{name} failed:\n{stderr}")
    sim_s = float(stdout.rsplit("wall ", 1)[1].split(" s")[0])
    with open(out / name / "summary.json") as f:
        s = json.load(f)
    return {"name": name, "wall_s": wall, "sim_s": sim_s, "peak_mib": usage.ru_maxrss / 1024,
            "hit_rate": s["hit_rate"], "hit_rate_last10": s["hit_rate_last10"], "ttft_mean_s": s["ttft_mean_s"],
            "effective_input_tps": s["effective_input_tps"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", default=SIX)
    ap.add_argument("--out", default=None, help="keep the result directories here (default: a temp dir)")
    args = ap.parse_args()
    tmp = None
    if args.out is None:
        tmp = tempfile.TemporaryDirectory()
        out = Path(tmp.name)
    else:
        out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{'scenario':<24} {'wall s':>7} {'sim s':>7} {'peak MiB':>9} {'hit':>7} {'last10':>7} "
          f"{'TTFT s':>8} {'eff tok/s':>11}")
    rows = []
    for name in args.scenarios:
        r = run_one(name, out)
        rows.append(r)
        print(f"{r['name']:<24} {r['wall_s']:7.2f} {r['sim_s']:7.2f} {r['peak_mib']:9.0f} {r['hit_rate']:7.4f} "
              f"{r['hit_rate_last10']:7.4f} {r['ttft_mean_s']:8.3f} {r['effective_input_tps']:11,.0f}", flush=True)
    print(f"{'total':<24} {sum(r['wall_s'] for r in rows):7.2f} {sum(r['sim_s'] for r in rows):7.2f} "
          f"{max(r['peak_mib'] for r in rows):9.0f} (max)")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
