"""`radixsim plot` and `radixsim report`: figures and reports from result directories.

radixsim/cli.py adds these subcommands (`add_parsers`) and hands them their arguments
(`dispatch`); ``python -m radixsim.report_cli plot ...`` runs the same commands.

Bad input (a missing or malformed file, an option a kind needs) ends with exit status 2 and
one line on stderr naming the file or option and what was expected; never a traceback.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from .args import EXIT_BAD_INPUT, Parser

KINDS = ("rounds", "fig6", "policy", "capacity", "timeline", "tree", "simhw", "all")
INPUT_HELP = ("result directories (radixsim run/replay), bench_multiturn JSONL logs (a real SGLang run), "
              "comparison directories or comparison.csv (radixsim replay --policy a,b), or a sweep.csv")


def add_parsers(subparsers) -> None:
    """Add the `plot` and `report` subcommands to the radixsim subparsers."""
    p = subparsers.add_parser(
        "plot", help="figures from result directories (PNG and SVG)",
        description=("Draw figures from result directories into --out: rounds (per-round TTFT and hit rate, "
                     "runs overlaid), fig6 (hit rate by tier + TTFT per configuration), policy (hit rate vs "
                     "capacity per policy, OPT dashed), capacity (a metric vs a swept key; heatmap with --y), "
                     "timeline (running/waiting, link use, tier occupancy), tree (from tree.json), simhw "
                     "(simulated vs measured TTFT: first input = simulation, second = hardware), or all "
                     "that apply."))
    p.add_argument("runs", nargs="+", metavar="DIR", help=INPUT_HELP)
    p.add_argument("--kind", choices=KINDS, default="all", help="which figure (default: all that apply)")
    p.add_argument("--labels", nargs="+", default=None, metavar="LABEL",
                   help="one label per input run (space- or comma-separated; default: run names)")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    p.add_argument("--x", default=None, help="capacity: the swept key (a dotted config key such as "
                                            "cache.l1_tokens, or a sweep.csv column)")
    p.add_argument("--y", default=None, help="capacity: a second swept key (draws a heatmap)")
    p.add_argument("--metric", default="hit_rate", help="capacity/policy: the summary field to plot (default hit_rate)")
    p.add_argument("--group", type=int, default=None, metavar="K",
                   help="fig6: each consecutive group of K runs has its own baseline, its first run "
                        "(e.g. 2 for LRU/session pairs; default: the first run is the baseline of all)")
    p.add_argument("--by", choices=["rid", "round"], default=None,
                   help="simhw: match requests by rid or rounds by number (default: rid when both runs have "
                        "per-request rows, else round)")
    r = subparsers.add_parser(
        "report", help="one HTML or Markdown report of several runs",
        description=("Write one report of the given runs: key figures (hit rate by tier, TTFT mean/p50/p90, "
                     "effective input throughput, duration), TTFT split, evictions, bytes per link, each run's "
                     "configuration, and every figure that applies. --out report.html is self-contained "
                     "(images embedded); report.md writes its PNGs next to it."))
    r.add_argument("runs", nargs="+", metavar="DIR", help=INPUT_HELP)
    r.add_argument("--labels", nargs="+", default=None, metavar="LABEL", help="one label per input run")
    r.add_argument("--out", required=True, help="report path ending in .html or .md")
    r.add_argument("--title", default="radixsim report", help="report title")


def _labels(values):
    if values is None:
        return None
    if len(values) == 1 and "," in values[0]:
        return [v.strip() for v in values[0].split(",")]
    return list(values)


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", label).strip("_") or "run"


def _classify(paths):
    """(run sources, comparison sources, sweep CSVs)."""
    runs, comps, sweeps = [], [], []
    for s in paths:
        p = Path(s)
        if p.is_dir() and (p / "comparison.csv").is_file() and not (p / "summary.json").exists():
            comps.append(p)
        elif p.is_dir() and (p / "sweep.csv").is_file() and not (p / "summary.json").exists():
            sweeps.append(p)
        elif p.is_file() and p.suffix == ".csv":
            head = p.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0].split(",")
            (comps if "policy" in head and "capacity_tokens" in head else sweeps).append(p)
        else:
            runs.append(s)
    return runs, comps, sweeps


def _plot(args) -> list:
    from analysis import figures
    from analysis.load import load_runs
    from analysis.metrics import per_round
    from analysis.report import swept_key
    from analysis.style import save as save_figure

    kind, out = args.kind, Path(args.out)
    run_srcs, comps, sweeps = _classify(args.runs)
    runs = load_runs(run_srcs, _labels(args.labels)) if run_srcs else []
    written = []

    def need(ok: bool, msg: str):
        if not ok and kind != "all":
            raise ValueError(msg)
        return ok

    def save(fig, name):
        written.extend(save_figure(fig, out / name))

    if kind in ("rounds", "all") and need(bool(runs), "--kind rounds: expected at least one result directory"):
        if need(any(len(per_round(r)) for r in runs), "--kind rounds: no input run has rounds (rounds.csv)"):
            save(figures.rounds_figure(runs), "rounds")
    if kind in ("fig6", "all") and need(bool(runs), "--kind fig6: expected at least one result directory"):
        save(figures.fig6_figure(runs, group=getattr(args, "group", None)), "fig6")
        for line in figures.fig6_changes(runs, group=getattr(args, "group", None)):
            print(f"fig6 {line}")
    if kind in ("policy", "all"):
        for i, c in enumerate(comps):
            save(figures.policy_figure(c, metric=args.metric), f"policy-{i + 1}" if len(comps) > 1 else "policy")
        if kind == "policy" and not comps:
            need(bool(runs), "--kind policy: expected a comparison directory, comparison.csv or runs")
            save(figures.policy_figure(runs, metric=args.metric), "policy")
    if kind in ("capacity", "all"):
        x, y = args.x, args.y
        if x is None and sweeps and sweeps[0].is_dir():
            keys = figures.sweep_keys(sweeps[0])
            x, y = (keys[0] if keys else None), (y or (keys[1] if len(keys) > 1 else None))
        x = x or (swept_key(runs) if kind == "all" else None)
        if need(x is not None, "--x: required with --kind capacity (a swept key such as cache.l1_tokens)"):
            need(bool(sweeps) or len(runs) > 1,
                 "--kind capacity: expected a sweep directory, sweep.csv or several runs")
            if sweeps or len(runs) > 1:
                save(figures.capacity_figure(sweeps[0] if sweeps else runs, x, args.metric, y=y), "capacity")
    _per_run(kind, runs, need, save, figures)
    if kind == "simhw" or (kind == "all" and len(runs) == 2 and runs[1].mode in ("sglang", "torch")):
        need(len(runs) == 2, f"--kind simhw: expected exactly two runs (simulation, hardware), got {len(runs)}")
        sim, hw = runs
        by = args.by or ("rid" if sim.requests is not None and hw.requests is not None else "round")
        fig, errors = figures.simhw_figure(sim, hw, by=by)
        save(fig, "simhw")
        print(f"simhw ({by}): n={errors['n']}, mean abs error {errors['mean_abs_error_s']} s, "
              f"mean rel error {errors['mean_rel_error']}, p90 rel error {errors['p90_rel_error']}")
    return written


def _per_run(kind, runs, need, save, figures) -> None:
    if kind in ("timeline", "all"):
        timed = [r for r in runs if r.timeline is not None and len(r.timeline)]
        need(bool(timed), "--kind timeline: no input run has timeline.csv rows (expected a radixsim run directory)")
        for r in timed:
            save(figures.timeline_figure(r), f"timeline-{_safe(r.label)}" if len(timed) > 1 else "timeline")
    if kind in ("tree", "all"):
        trees = [r for r in runs if r.tree is not None]
        first = runs[0].path if runs else "DIR"
        need(bool(trees), f"--kind tree: {first}/tree.json missing; expected a tree snapshot "
                          "(cache_core.snapshot.write_snapshot)")
        for r in trees:
            save(figures.tree_figure(r), f"tree-{_safe(r.label)}" if len(trees) > 1 else "tree")


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def dispatch(args) -> int | None:
    """Run `plot` or `report` from parsed arguments; None when args.command is another command."""
    cmd = getattr(args, "command", None)
    if cmd not in ("plot", "report"):
        return None
    try:
        if cmd == "plot":
            paths = _plot(args)
            if not paths:
                raise ValueError("nothing to plot: no figure applies to these inputs")
            for p in paths:
                print(p)
        else:
            from analysis.report import write_report

            print(write_report(args.runs, args.out, labels=_labels(args.labels), title=args.title))
    except (ValueError, OSError) as e:
        sys.stderr.write(f"radixsim {cmd}: {_one_line(e)}\n")
        return EXIT_BAD_INPUT
    return 0


def build_parser():
    """A stand-alone parser with just these two commands (radixsim's own parser class)."""
    parser = Parser(prog="radixsim", description="Figures and reports from radixsim result directories.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    add_parsers(sub)
    return parser


def main(argv=None) -> int:
    """`python -m radixsim.report_cli plot|report ...`."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    rc = dispatch(args)
    if rc is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    return rc


__all__ = ["add_parsers", "dispatch", "build_parser", "main", "KINDS"]

if __name__ == "__main__":
    sys.exit(main())
