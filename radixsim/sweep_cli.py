"""`radixsim sweep` (a scenario over a grid of values) and `radixsim plan` (the smallest value of
a key that meets a target): many runs on local cores or Ray."""
from __future__ import annotations

import sys
import time

from .args import EXIT_BAD_INPUT, nonneg_float as _nonneg_float, pos_int as _pos_int


def add_sweep(sub) -> None:
    w = sub.add_parser("sweep", help="run a scenario over a grid of values (resumable; local cores or Ray)",
                       description=(
                           "Run SCENARIO at every point of the cartesian product of the --grid values, each "
                           "point a normal result directory under OUT/points/, plus OUT/sweep.csv (one row per "
                           "point: grid values and summary figures; with --repeat N the mean over N seeds and "
                           "a 95% confidence half-width per figure) and OUT/sweep_points.csv (every run). "
                           "Points already done are skipped, so rerunning an interrupted sweep finishes it."))
    w.add_argument("scenario", help="scenario file or catalog name")
    w.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a dotted scenario key and its values, e.g. cache.l2_tokens=4000000,8000000 (repeatable)")
    w.add_argument("--repeat", type=_pos_int, default=1, help="runs per point with seeds seed, seed+1, ... (default 1)")
    w.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key for every point (repeatable)")
    w.add_argument("--out", required=True, help="sweep directory (created; reused to resume)")
    w.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local process pool (default) or Ray tasks (optional extra 'ray')")
    w.add_argument("--address", default=None, help="Ray cluster address (default: start a local instance)")
    w.add_argument("--jobs", type=_pos_int, default=None, help="parallel runs (default: all cores)")
    w.add_argument("--plot", default="hit_rate", metavar="METRIC",
                   help="figure plotted over one or two grid keys into OUT/sweep.png (default hit_rate)")
    w.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_plan(sub) -> None:
    pl = sub.add_parser("plan", help="smallest (or largest) value of a key that meets a target",
                        description=(
                            "Find the smallest value of --vary (a dotted scenario key, e.g. cache.l2_tokens) "
                            "for which the summary figure meets --target (\"METRIC OP VALUE\", e.g. "
                            "\"hit_rate_last10 >= 0.95\"), by bracketing over --range with parallel runs. Prints "
                            "the evidence (every point evaluated), checks monotonicity at those points, and "
                            "writes plan.json, plan.csv and the capacity curve plan.png to --out."))
    pl.add_argument("scenario", help="scenario file or catalog name")
    pl.add_argument("--vary", required=True, metavar="KEY", help="the dotted key to vary (a token size or number)")
    pl.add_argument("--target", required=True, metavar="\"METRIC OP VALUE\"",
                    help="e.g. \"hit_rate_last10 >= 0.95\" or \"ttft_p90_s <= 2.0\" (a summary.json field)")
    pl.add_argument("--range", dest="range_text", default=None, metavar="LO:HI",
                    help="search range: tokens or sizes, e.g. 10GiB:2TiB")
    pl.add_argument("--largest", action="store_true", help="when both ends meet the target, answer the high end")
    pl.add_argument("--tol", type=_pos_int, default=None, help="stop when the bracket is this narrow (default 1%% of the range)")
    pl.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    pl.add_argument("--out", default=None, help="directory for the points and plan files (default runs/plan-NAME)")
    pl.add_argument("--executor", choices=["local", "ray"], default="local")
    pl.add_argument("--address", default=None, help="Ray cluster address (default: a local instance)")
    pl.add_argument("--jobs", type=_pos_int, default=None, help="parallel runs per round (default: all cores)")
    pl.add_argument("--cost-gpu-hour", type=_nonneg_float, default=None, help="price of one GPU-hour")
    pl.add_argument("--cost-host-gib", type=_nonneg_float, default=None, help="price of one GiB of host (L2) memory")
    pl.add_argument("--cost-l3-gib", type=_nonneg_float, default=None, help="price of one GiB of L3 store")
    pl.add_argument("--no-progress", action="store_true", help="no progress bar")


def _scenario_and_executor(args):
    """The scenario mapping (after --set) and the executor of a sweep or plan command."""
    from scenarios.scenario import apply_sets, load

    from .sweep import make_executor

    return apply_sets(load(args.scenario), args.sets), make_executor(args.executor, args.jobs, args.address)


def _cmd_sweep(args) -> int:
    from scenarios.scenario import ScenarioError

    from .outputs import OutputError, fmt_or_dash, plural
    from .sweep import parse_grid, run_sweep

    try:
        raw, ex = _scenario_and_executor(args)
        grid = parse_grid(args.grid)
        t0 = time.perf_counter()
        r = run_sweep(raw, grid, args.out, repeat=args.repeat, executor=ex, where=args.scenario,
                      progress=not args.no_progress, plot=args.plot if 1 <= len(grid) <= 2 else None)
    except (ScenarioError, OutputError) as e:
        sys.stderr.write(f"radixsim sweep: {e}\n")
        return EXIT_BAD_INPUT
    keys = [k for k, _ in grid]
    if 1 <= len(keys) <= 2:
        from analysis.figures import capacity_figure

        capacity_figure(args.out, keys[0], args.plot, y=keys[1] if len(keys) == 2 else None,
                        out=f"{args.out}/sweep")
    print(f"{plural(r['points'], 'run')} ({r['ran']} run now, {r['skipped']} already done) in "
          f"{time.perf_counter() - t0:.1f} s -> {args.out}/sweep.csv")
    for row in r["rows"]:
        vals = ", ".join(f"{k}={row[k]}" for k in keys) or "base"
        print(f"  {vals}: hit rate {row['hit_rate']:.4f}, last 10 {fmt_or_dash(row['hit_rate_last10'], '.4f')}, "
              f"TTFT mean {row['ttft_mean_s']:.3f} s, {row['effective_input_tps']:,.0f} tok/s")
    return 0


def _cmd_plan(args) -> int:
    from scenarios.scenario import ScenarioError

    from .outputs import OutputError
    from .plan import format_result, plan, write_outputs

    try:
        raw, ex = _scenario_and_executor(args)
        costs = {k: v for k, v in (("gpu_hour", args.cost_gpu_hour), ("host_gib", args.cost_host_gib),
                                   ("l3_gib", args.cost_l3_gib)) if v is not None}
        out = args.out or f"runs/plan-{raw.get('name', 'scenario')}"
        t0 = time.perf_counter()
        res = plan(raw, args.vary, args.target, out, range_text=args.range_text, largest=args.largest,
                   tol=args.tol, executor=ex, costs=costs, where=args.scenario, progress=not args.no_progress)
    except (ScenarioError, OutputError) as e:
        sys.stderr.write(f"radixsim plan: {e}\n")
        return EXIT_BAD_INPUT
    write_outputs(res, out)
    print(format_result(res))
    print(f"{len(res.evidence)} points, {time.perf_counter() - t0:.1f} s ({args.executor}) -> {out}/plan.json")
    return 0


COMMANDS = {"sweep": _cmd_sweep, "plan": _cmd_plan}
