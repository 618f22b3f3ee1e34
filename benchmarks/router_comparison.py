"""The router comparison of docs/fleet.md on fleet4-shared-prefix: every router of its table
(benchmarks/regen_entries_fleet.py ``SCORER_TABLE``: llm_d's profiles, then the other routers) run once
with `radixsim run`, the table printed as regen_docs renders it, each run's wall seconds, and
the figure of TTFT p90 (log scale) and hit rate per load stage written.

    python benchmarks/router_comparison.py --out runs/router-comparison [--jobs 2] \\
        [--figure docs/figures/fleet/routers-shared-prefix-stages.png]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import regen_docs  # noqa: E402  (benchmarks/, beside this file)
from regen_entries_fleet import SCORER_SCENARIO, SCORER_TABLE  # noqa: E402


def run_one(out: Path, label: str, router: str) -> float:
    """`radixsim run` of the comparison's scenario with fleet.router = `router` into out/label;
    its wall seconds."""
    cmd = [sys.executable, "-m", "radixsim", "run", SCORER_SCENARIO, "--set", f"fleet.router={router}",
           "--out", str(out / label.replace(" ", "_")), "--no-plots", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"router_comparison: {label}: {(p.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
        raise SystemExit(2)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the runs (one per router)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    ap.add_argument("--figure", help="PNG path of the per-stage figure (default: OUT/stages.png)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        walls = list(ex.map(lambda lr: run_one(out, *lr), SCORER_TABLE))
    total = time.perf_counter() - t0
    summaries = {router: json.loads((out / label.replace(" ", "_") / "summary.json").read_text())
                 for label, router in SCORER_TABLE}

    class Ctx:
        @staticmethod
        def runs(scenario, *sets):
            return summaries[sets[0].split("=", 1)[1]]

    print(regen_docs.REGISTRY["fleet-router-comparison"].render(Ctx()))
    for (label, _), w in zip(SCORER_TABLE, walls):
        print(f"{label}: {w:.1f} s wall")
    print(f"all {len(walls)} runs: {total:.1f} s wall ({a.jobs} at a time)")

    from analysis.fleet_figures import stages_figure

    labels = [label for label, _ in SCORER_TABLE]
    fig = stages_figure([out / label.replace(" ", "_") for label in labels], labels=labels)
    fig.axes[0].set_yscale("log")
    fig.axes[0].set_title("TTFT p90 per load stage (log scale)")
    path = Path(a.figure) if a.figure else out / "stages.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    print(f"figure: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
