"""`radixsim sensitivity`: its parser and handler (radixsim/sensitivity.py, imported when the
command runs, plans and runs the perturbed copies)."""
from __future__ import annotations

import os
import sys


def add_parser(subparsers) -> None:
    s = subparsers.add_parser(
        "sensitivity", help="the band of a run's headline figures when its uncertain inputs move +-PCT%%",
        description=("Rerun SCENARIO with each uncertain input (tier capacities, link and HBM bandwidths, cost-model "
                     "efficiencies, KV bytes per token) at 1 -+ PCT%% one at a time, and at the all-low and "
                     "all-high corners; print the band of the hit rate by tier, mean/p90 TTFT and throughput, and "
                     "flag a run near a capacity cliff (+-10%% capacity moves the hit rate > 10 points). Writes "
                     "sensitivity.json and sensitivity.csv (one row per run with its --set keys) to --out."))
    s.add_argument("scenario", help="scenario file or catalog name")
    s.add_argument("--pct", type=float, default=None, help="perturbation in percent (default 20)")
    s.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key before perturbing (repeatable)")
    s.add_argument("--smoke", action="store_true", help="the scenario at a tiny size (as run --smoke)")
    s.add_argument("--jobs", type=int, default=None, help="parallel runs (default: all cores)")
    s.add_argument("--out", default=None, help="output directory (default runs/sensitivity-NAME)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")


def dispatch(args) -> int | None:
    """Run `radixsim sensitivity`; None when `args` belong to another command."""
    if getattr(args, "command", None) != "sensitivity":
        return None
    from scenarios.scenario import ScenarioError, apply_sets, load, scenario_path, smoke

    from .sensitivity import DEFAULT_PCT, format_table, sensitivity, write_outputs

    try:
        raw = load(args.scenario)
        raw = apply_sets(smoke(raw) if args.smoke else raw, args.sets)
        if args.jobs is not None and args.jobs < 1:
            raise ScenarioError(f"--jobs {args.jobs}: expected an integer >= 1")
        p = scenario_path(args.scenario)
        res = sensitivity(raw, DEFAULT_PCT if args.pct is None else args.pct, where=str(p if p.exists() else args.scenario),
                          jobs=args.jobs or os.cpu_count() or 1, progress=not args.no_progress)
    except ScenarioError as e:
        sys.stderr.write(f"radixsim sensitivity: {e}\n")
        return 2
    out = args.out or f"runs/sensitivity-{res['scenario']}"
    write_outputs(res, out)
    print(format_table(res))
    print(f"-> {out}/sensitivity.json, sensitivity.csv")
    return 0
