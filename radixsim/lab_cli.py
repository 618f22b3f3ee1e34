"""`radixsim curve` and `radixsim leaderboard`: the policy lab (docs/policy_lab.md).

radixsim/cli.py adds these subcommands (`add_parsers`) and hands them their arguments
(`dispatch`). Bad input ends with exit status 2 and one line on stderr.
"""
from __future__ import annotations

import os
import sys

from .args import EXIT_BAD_INPUT, POLICIES, REPLAY_WORKLOADS, policy, pos_int, workload_sets


def add_parsers(subparsers) -> None:
    c = subparsers.add_parser(
        "curve", help="hit rate vs capacity for one or more policies (LRU in one stack-distance pass)",
        description=("Hit rate at every capacity: LRU from one Mattson stack-distance pass over the trace "
                     "(approximate where SGLang's rules interfere; docs/policy_lab.md), other policies and the "
                     "belady-node heuristic from one exact replay per capacity in parallel. Writes curve.csv, curve.json "
                     "and curve.png/.svg to --out."))
    c.add_argument("trace", nargs="?", help="JSONL trace file (or --workload)")
    c.add_argument("--workload", choices=REPLAY_WORKLOADS, metavar="KIND",
                   help="generate the requests instead: %(choices)s")
    c.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a workload knob, e.g. --set workload.num_clients=16 (repeatable)")
    c.add_argument("--policy", type=policy, default="lru", choices=POLICIES, metavar="POLICY",
                   help="comma-separated policies among %(choices)s (default lru)")
    c.add_argument("--page-size", type=pos_int, default=1, help="tokens per KV page (default 1)")
    c.add_argument("--points", type=pos_int, default=20,
                   help="capacities, geometric from 1%% of the working set to all of it (default 20)")
    c.add_argument("--capacities", type=_int_list, default=None, help="comma-separated capacities in tokens")
    c.add_argument("--check", type=int, default=0, metavar="K",
                   help="also replay LRU exactly at K capacities and record the largest difference")
    c.add_argument("--jobs", type=pos_int, default=os.cpu_count() or 1, help="parallel replays (default: all cores)")
    c.add_argument("--out", default="runs/curve", help="output directory (default runs/curve)")
    b = subparsers.add_parser(
        "leaderboard", help="every registered policy on every trace at several capacities",
        description=("Replay every registered policy on each trace (default: the built-in corpus, generated at "
                     "run time) at several capacities; print the hit rates, the share of the LRU -> bound gap "
                     "each policy closes and the time per replay; write leaderboard.csv/.json/.txt/.png to --out."))
    b.add_argument("traces", nargs="*", help="JSONL trace files (default: the built-in corpus)")
    b.add_argument("--capacities", type=_int_list, default=None,
                   help="capacities in tokens (default: 10%%, 25%%, 50%% of each trace's working set)")
    b.add_argument("--policy", type=policy, default=None, choices=POLICIES, metavar="POLICY",
                   help="comma-separated policies among %(choices)s (default: all)")
    b.add_argument("--page-size", type=pos_int, default=16, help="tokens per KV page (default 16)")
    b.add_argument("--jobs", type=pos_int, default=os.cpu_count() or 1, help="parallel replays (default: all cores)")
    b.add_argument("--out", default="runs/leaderboard", help="output directory (default runs/leaderboard)")


def _int_list(text: str) -> list[int]:
    import argparse

    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers (tokens)") from None
    if any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: capacities must be >= 1 token")
    return vals


def dispatch(args) -> int | None:
    """Run `curve` or `leaderboard`; None when args.command is another command."""
    cmd = getattr(args, "command", None)
    if cmd not in ("curve", "leaderboard"):
        return None
    from scenarios.traces import TraceError

    try:
        _curve(args) if cmd == "curve" else _leaderboard(args)
    except BrokenPipeError:  # stdout closed (`| head`): cli.main's quiet exit
        raise
    except (ValueError, OSError, TraceError) as e:
        text = str(e).strip()
        sys.stderr.write(f"radixsim {cmd}: {text.splitlines()[0] if text else type(e).__name__}\n")
        return EXIT_BAD_INPUT
    return 0


def _curve(args) -> None:
    from .curve import run_curve
    from .replay import ReplayOptions

    if (args.trace is None) == (args.workload is None):
        raise ValueError("give a TRACE file or --workload (one of them)")
    opts = ReplayOptions(trace=args.trace, workload=args.workload, workload_set=workload_sets(args.sets),
                         page_size=args.page_size, progress=False)
    doc = run_curve(opts, args.policy.split(","), args.capacities, args.points, args.out, args.jobs, args.check,
                    progress=True)
    for r in doc["rows"]:
        print(f"{r['policy']:<10} {r['capacity_tokens']:>14,} {100 * r['hit_rate']:7.2f} %  ({r['method']})")
    low = [r["capacity_tokens"] for r in doc["rows"] if r["method"] == "stack"
           and r["capacity_tokens"] < 2 * doc["longest_tokens"]]
    if low:
        print(f"note: the LRU curve is approximate below 2 x the longest sequence ({doc['longest_tokens']:,} "
              f"tokens): {len(low)} capacities (docs/policy_lab.md)")
    if "check" in doc:
        print(f"LRU stack curve vs exact replay: largest difference {doc['check']['max_diff_points']:.3f} points")
    print(f"-> {args.out}")


def _leaderboard(args) -> None:
    from .leaderboard import corpus, format_table, run_leaderboard, variant_table

    policies = args.policy.split(",") if args.policy else None
    if policies and "lru" not in policies:
        raise ValueError(f"--policy {args.policy}: no lru; expected lru among the policies (gap % is measured from "
                         "LRU)")
    sources = corpus(args.traces, args.page_size)
    rows = run_leaderboard(sources, policies, args.capacities, jobs=args.jobs, out_dir=args.out, progress=True)
    print(format_table(rows))
    variants = variant_table(rows)
    if variants:
        print(f"\nhit % (gap %) beside each variant (docs/policy_lab.md):\n{variants}")
    print(f"-> {args.out}")
