"""The `radixsim` command line.

Bad input (a missing or malformed file, an impossible option) ends with exit status 2 and
one line on stderr that names the file, line or option and what was expected; never a
traceback.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints usage too; keep it short)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


def _nonneg_int(text: str) -> int:
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {v}")
    return v


def _pos_int(text: str) -> int:
    v = _nonneg_int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def _policy(text: str) -> str:
    from cache_core.eviction import policy_names

    if text not in policy_names():
        raise argparse.ArgumentTypeError(f"unknown policy {text!r}; expected one of {', '.join(policy_names())}")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="radixsim", description=(
        "Radix-tree KV-cache core for LLM serving: exact trace replay now; the SimPy simulator "
        "and the torch backend share the same core."))
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    r = sub.add_parser("replay", help="replay a JSONL trace through the cache, one request at a time",
                       description=(
                           "Replay a JSONL trace (requests with 'tokens' or Mooncake-style 'hash_ids') "
                           "through the radix cache one request at a time, in file order, with SGLang's "
                           "match/lock/allocate/insert/unlock rules. Writes requests.csv, summary.json "
                           "and config.yaml to --out."))
    r.add_argument("trace", help="JSONL trace file (see docs/ARCHITECTURE.md, Trace format)")
    r.add_argument("--page-size", type=_pos_int, default=1, help="tokens per KV page (default 1)")
    r.add_argument("--capacity-tokens", type=_nonneg_int, default=None,
                   help="L1 KV capacity in tokens; usable = floor(N / page) * page (default: unbounded)")
    r.add_argument("--policy", type=_policy, default="lru", help="eviction policy: lru, lfu or fifo (default lru)")
    r.add_argument("--block-size", type=_pos_int, default=None,
                   help="tokens per hash_ids block (default: the line's block_size, else 512)")
    r.add_argument("--components", default="full",
                   help="comma-separated components: full, swa:WINDOW, mamba[:every=K], sidecar:NAME@full|swa "
                        "(default: full)")
    r.add_argument("--swa-tokens", type=_nonneg_int, default=None,
                   help="SWA pool in tokens (default: --swa-full-tokens-ratio x the FULL pool)")
    r.add_argument("--swa-full-tokens-ratio", type=float, default=0.1,
                   help="SWA pool as a fraction of the FULL pool (default 0.1, as SGLang)")
    r.add_argument("--mamba-slots", type=_nonneg_int, default=None,
                   help="MAMBA checkpoint state slots (required with a bounded FULL pool)")
    r.add_argument("--out", required=True, help="result directory (created if missing)")
    r.add_argument("--check-invariants", action="store_true",
                   help="recount every invariant after each request (slow; for debugging)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _cmd_replay(args) -> int:
    from scenarios.traces import TraceError

    from .replay import ReplayOptions, run_replay

    t0 = time.perf_counter()
    try:
        summary = run_replay(ReplayOptions(
            trace=args.trace, page_size=args.page_size, capacity_tokens=args.capacity_tokens,
            policy=args.policy, block_size=args.block_size, check_invariants=args.check_invariants,
            components=args.components, swa_tokens=args.swa_tokens,
            swa_full_tokens_ratio=args.swa_full_tokens_ratio, mamba_slots=args.mamba_slots,
            progress=not args.no_progress), args.out, command=args.command_line)
    except TraceError as e:
        sys.stderr.write(f"radixsim replay: {e}\n")
        return EXIT_BAD_INPUT
    except (ValueError, OSError) as e:
        sys.stderr.write(f"radixsim replay: {e}\n")
        return EXIT_BAD_INPUT
    secs = time.perf_counter() - t0
    hit = summary["hit_rate"]
    print(f"{summary['requests']} requests, {summary['total_prompt_tokens']:,} prompt tokens, "
          f"{summary['total_cached_tokens']:,} cached (hit rate {hit:.6f}), "
          f"{summary['evicted_tokens']:,} evicted, {summary['rejected']} rejected "
          f"in {secs:.2f} s -> {args.out}" if hit is not None else "no requests in trace")
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["radixsim"] + argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    if args.command == "replay":
        return _cmd_replay(args)
    parser.error(f"unknown command {args.command}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
