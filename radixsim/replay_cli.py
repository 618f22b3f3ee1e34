"""`radixsim replay` and `radixsim trace`: a JSONL trace (or a generated workload) through the
cache one request at a time (radixsim/replay.py), and a generated workload written as a trace."""
from __future__ import annotations

import sys
import time

from .args import EXIT_BAD_INPUT, POLICIES, REPLAY_WORKLOADS, nonneg_int as _nonneg_int, page_size as _page_size
from .args import policy as _policy, pos_float as _pos_float, pos_int as _pos_int, size as _size, sizes as _sizes
from .args import warn, workload_sets as _workload_sets


def add_replay(sub) -> None:
    r = sub.add_parser("replay", help="replay a JSONL trace through the cache, one request at a time",
                       description=(
                           "Replay a JSONL trace (requests with 'tokens' or Mooncake-style 'hash_ids') "
                           "through the radix cache one request at a time, in file order, with SGLang's "
                           "match/lock/allocate/insert/unlock rules. Writes requests.csv, summary.json "
                           "and config.yaml to --out."))
    r.add_argument("trace", nargs="?", help="JSONL trace file (see docs/ARCHITECTURE.md, Trace format)")
    r.add_argument("--workload", choices=REPLAY_WORKLOADS, metavar="KIND",
                   help="generate requests instead of reading a trace: %(choices)s (knobs: --set workload.KEY=VALUE)")
    r.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a workload knob, e.g. --set workload.num_clients=48 (repeatable)")
    r.add_argument("--page-size", type=_page_size, default=None,
                   help="tokens per KV page (default 1; with --engine vllm its block size, default 16)")
    r.add_argument("--engine", choices=["sglang", "vllm"], default="sglang",
                   help="whose prefix cache: sglang (the radix tree, default) or vllm (vLLM v1's hash blocks, "
                        "cache_core/vllm_blocks.py)")
    r.add_argument("--capacity-tokens", "--l1-tokens", dest="capacity_tokens", type=_sizes, default=None,
                   help="L1 KV capacity: tokens, or bytes with a unit (500GiB; needs --kv-bytes-per-token); "
                        "usable = floor(N / page) * page (default: unbounded)")
    _tier_args(r)
    r.add_argument("--policy", type=_policy, default="lru", choices=POLICIES, metavar="POLICY",
                   help="eviction policy, one of the registered %(choices)s (belady-node: an offline heuristic; "
                        "docs/policy_lab.md); a comma-separated list with several --capacity-tokens values runs every "
                        "combination and prints one table (default lru)")
    r.add_argument("--jobs", type=_pos_int, default=1, help="parallel processes for a comparison run (default 1)")
    r.add_argument("--no-miss-split", action="store_true",
                   help="skip the cold vs evicted miss split (saves the shadow replay)")
    r.add_argument("--block-size", type=_pos_int, default=None,
                   help="tokens per hash_ids block (default: the line's block_size, else 512)")
    _component_args(r)
    r.add_argument("--out", required=True, help="result directory (created if missing)")
    r.add_argument("--check-invariants", action="store_true",
                   help="recount every invariant after each request (slow; for debugging)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")


def _tier_args(r) -> None:
    """replay's L2/L3 options (SGLang HiCache's, and the KV bytes that read sizes in bytes)."""
    r.add_argument("--l2-tokens", type=_size, default=None,
                   help="host L2 capacity (tokens or bytes with a unit); default: --hicache-ratio x L1 if given")
    r.add_argument("--offload-block-size", type=_pos_int, default=None,
                   help="--engine vllm with --l2-tokens: tokens per CPU offload block (vLLM's offloading "
                        "connector block_size; a multiple of --page-size; default: --page-size)")
    r.add_argument("--hicache-ratio", type=_pos_float, default=None,
                   help="host L2 = RATIO x L1, like SGLang's --hicache-ratio (default: no L2)")
    r.add_argument("--l3-tokens", type=_size, default=None,
                   help="external L3 store capacity (tokens, bytes with a unit, or 'unbounded'); needs L2")
    r.add_argument("--write-policy", choices=["write_through", "write_through_selective", "write_back"],
                   default="write_through", help="when L1 content is backed up to L2 (default write_through)")
    r.add_argument("--write-through-threshold", type=_pos_int, default=2,
                   help="hits before write_through_selective backs a node up (default 2)")
    r.add_argument("--l3-write", choices=["on_insert", "on_l2_evict"], default="on_insert",
                   help="when L2 content is copied to L3 (default on_insert)")
    r.add_argument("--min-prefetch-tokens", type=_nonneg_int, default=256,
                   help="ignore L3 hits shorter than this (default 256, as SGLang)")
    r.add_argument("--kv-bytes-per-token", type=_nonneg_int, default=0,
                   help="KV bytes per token, to read sizes given in bytes and to report bytes per link")


def _component_args(r) -> None:
    """replay's component options (SWA, MAMBA, sidecars; or a model preset's)."""
    r.add_argument("--components", default=None,
                   help="comma-separated components: full, swa:WINDOW, mamba[:every=K], sidecar:NAME@full|swa "
                        "(default: full, or the --model preset's)")
    r.add_argument("--model", default=None,
                   help="a model preset (scenarios/presets.py, e.g. dsv4-flash, inkling-small, qwen3-next-80b): "
                        "its components, SWA window, sidecars, KV bytes per token and MAMBA state size")
    r.add_argument("--mamba-every", type=_pos_int, default=None,
                   help="also checkpoint MAMBA state every K tokens (K a multiple of the page size)")
    r.add_argument("--mamba-full-memory-ratio", type=_pos_float, default=0.1,
                   help="with --model: MAMBA slots = RATIO x FULL KV memory / state size (default 0.1)")
    r.add_argument("--swa-tokens", type=_nonneg_int, default=None,
                   help="SWA pool in tokens (default: --swa-full-tokens-ratio x the FULL pool)")
    r.add_argument("--swa-full-tokens-ratio", type=_pos_float, default=0.1,
                   help="SWA pool as a fraction of the FULL pool (default 0.1, as SGLang)")
    r.add_argument("--mamba-slots", type=_nonneg_int, default=None,
                   help="MAMBA checkpoint state slots (required with a bounded FULL pool)")


def add_trace(sub) -> None:
    t = sub.add_parser("trace", help="write a generated workload as a JSONL trace",
                       description=("Write a generated workload as a JSONL trace (the format replay reads): "
                                    "agentic = SWE-bench-like sessions with tool loops, sub-agents and "
                                    "close_session events. Knobs: --set workload.KEY=VALUE."))
    t.add_argument("workload", choices=["agentic"], help="which generator")
    t.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a workload knob, e.g. --set workload.num_sessions=32 (repeatable)")
    t.add_argument("--out", required=True, help="trace file to write")


def _cmd_trace(args) -> int:
    from .replay import make_workload

    try:
        wl, _ = make_workload(args.workload, _workload_sets(args.sets), 1)
        n = wl.write_trace(args.out)
    except (ValueError, OSError) as e:
        sys.stderr.write(f"radixsim trace: {e}\n")
        return EXIT_BAD_INPUT
    s = wl.summary()
    print(f"{args.out}: {n:,} bytes, {s['requests']} requests, {s['sessions']} sessions "
          f"(+{s['sub_agents']} sub-agents), {s['total_prompt_tokens']:,} prompt tokens")
    return 0


def parse_size(text: str | None, option: str, bytes_per_token: int, allow_unbounded: bool = False):
    """Tokens ('2000000', '2_000_000'), or bytes with a unit ('500GiB') converted through the
    KV bytes per token; 'unbounded' -> None where allowed."""
    from scenarios.units import parse_size as _parse

    return _parse(text, option, bytes_per_token, allow_unbounded,
                  hint="give --kv-bytes-per-token to convert it to tokens")


def _cmd_replay(args) -> int:
    from scenarios.traces import TraceError

    from .replay import check_sizes, run_replay

    t0 = time.perf_counter()
    try:
        opts, caps = _replay_options(args)
        warn("radixsim replay", check_sizes(opts, caps))
        policies = args.policy.split(",")
        if len(policies) > 1 or len(caps) > 1:
            from .compare import run_comparison

            table = run_comparison(opts, policies, caps, args.out, args.jobs, command=args.command_line)
            print(table)
            return 0
        if opts.engine == "vllm":
            from .replay_vllm import run_replay_vllm as run_replay
        summary = run_replay(opts, args.out, command=args.command_line)
    except BrokenPipeError:  # stdout closed (`| head`): main's quiet exit, not bad input
        raise
    except TraceError as e:
        sys.stderr.write(f"radixsim replay: {e}\n")
        return EXIT_BAD_INPUT
    except (ValueError, OSError) as e:
        sys.stderr.write(f"radixsim replay: {e}\n")
        return EXIT_BAD_INPUT
    _print_replay(summary, time.perf_counter() - t0, args.out)
    return 0


def _replay_options(args):
    """(ReplayOptions, L1 capacities) of replay's arguments (ValueError: a bad one)."""
    from cache_core.tiers import TierConfig
    from scenarios.units import floor_pages

    from .replay import ReplayOptions

    if args.page_size is None:
        args.page_size = 16 if args.engine == "vllm" else 1  # vllm 0.33.0 CacheConfig.DEFAULT_BLOCK_SIZE
    if (args.trace is None) == (args.workload is None):
        raise ValueError("give a trace file or --workload (exactly one)")
    if args.sets and args.workload is None:
        raise ValueError("--set workload.KEY=VALUE needs --workload")
    bpt = args.kv_bytes_per_token
    swa_bpt = state_bytes = 0
    if args.model is not None:
        from scenarios.presets import bytes_per_token, get_model

        model = get_model(args.model)  # ValueError lists the known presets
        bpt = bpt or int(bytes_per_token(model, "full"))
        swa_bpt = int(bytes_per_token(model, "swa")) if model.swa_layers else 0
        state_bytes = int(model.state_bytes)
    caps = [parse_size(c, "--capacity-tokens", bpt) for c in (args.capacity_tokens or "").split(",") if c] or [None]
    l1 = caps[0]
    l2 = floor_pages(parse_size(args.l2_tokens, "--l2-tokens", bpt), args.page_size)
    l3_given = args.l3_tokens is not None
    l3 = floor_pages(parse_size(args.l3_tokens, "--l3-tokens", bpt, allow_unbounded=True), args.page_size)
    tiers = None
    if l2 is not None or args.hicache_ratio is not None or l3_given:
        if l2 is None and args.hicache_ratio is None:
            raise ValueError("an L3 tier needs an L2 tier (--l2-tokens or --hicache-ratio): "
                             "HiCache stages L3 pages through host memory")
        tiers = TierConfig(l2_tokens=l2, hicache_ratio=args.hicache_ratio, l3=l3_given, l3_tokens=l3,
                           write_policy=args.write_policy,
                           write_through_threshold=args.write_through_threshold, l3_write=args.l3_write,
                           min_prefetch_tokens=args.min_prefetch_tokens, kv_bytes_per_token=bpt,
                           swa_bytes_per_token=swa_bpt, state_bytes=state_bytes)
    opts = ReplayOptions(
        trace=args.trace, workload=args.workload, workload_set=_workload_sets(args.sets), tiers=tiers,
        page_size=args.page_size, capacity_tokens=l1,
        policy=args.policy.split(",")[0], block_size=args.block_size, check_invariants=args.check_invariants,
        components=args.components, model=args.model, swa_tokens=args.swa_tokens,
        swa_full_tokens_ratio=args.swa_full_tokens_ratio, mamba_slots=args.mamba_slots,
        mamba_every=args.mamba_every, mamba_full_memory_ratio=args.mamba_full_memory_ratio,
        progress=not args.no_progress, miss_split=not args.no_miss_split, engine=args.engine,
        offload_block_size=args.offload_block_size)
    if args.engine == "vllm" or args.offload_block_size is not None:
        from .replay_vllm import vllm_option_errors

        err = vllm_option_errors(args.policy, tiers, args.components, args.model, caps, args.engine,
                                 args.offload_block_size, args.page_size)
        if err:
            raise ValueError(err)
    return opts, caps


def _print_replay(summary: dict, secs: float, out) -> None:
    # run_replay refuses a trace with no requests (exit 2), and every request has a token: a hit rate
    print(f"{summary['requests']} requests, {summary['total_prompt_tokens']:,} prompt tokens, "
          f"{summary['total_cached_tokens']:,} cached (hit rate {summary['hit_rate']:.6f}), "
          f"{summary['evicted_tokens']:,} evicted, {summary['rejected']} rejected "
          f"in {secs:.2f} s -> {out}")
    if "tokens_per_link" in summary:
        from .outputs import fmt_or_dash
        print(f"hit rate by tier: device {summary['hit_rate_device']:.4f}, host {summary['hit_rate_host']:.4f}, "
              f"storage {summary['hit_rate_storage']:.4f}; "
              f"last 10 rounds {fmt_or_dash(summary['hit_rate_last10'], '.4f')}")


COMMANDS = {"replay": _cmd_replay, "trace": _cmd_trace}
