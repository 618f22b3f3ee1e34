"""The `radixsim` command line.

Bad input (a missing or malformed file, an impossible option) ends with exit status 2 and
one line on stderr that names the file, line or option and what was expected; never a
traceback.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time

from .args import DeviceError, check_device  # noqa: F401  (re-exported)
from .args import EXIT_BAD_INPUT, Parser as _Parser, nonneg_int as _nonneg_int, policy as _policy, pos_int as _pos_int
from .args import POLICIES, REPLAY_WORKLOADS, size as _size, sizes as _sizes, workload_sets as _workload_sets
from .args import nonneg_float as _nonneg_float, page_size as _page_size, pos_float as _pos_float


def _torch_device(args, sc) -> str:
    """The device a torch command uses (--device, else the scenario's torch.device), checked."""
    device = args.device or sc.doc.get("torch", {}).get("device") or "cpu"
    check_device(device, "--device" if args.device else "torch.device")
    return device


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="radixsim", description=(
        "Radix-tree KV-cache core for LLM serving: simulate a scenario (run), replay a trace exactly "
        "(replay); one cache core and one engine loop for every mode."))
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

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
    r.add_argument("--page-size", type=_page_size, default=1, help="tokens per KV page (default 1)")
    r.add_argument("--capacity-tokens", "--l1-tokens", dest="capacity_tokens", type=_sizes, default=None,
                   help="L1 KV capacity: tokens, or bytes with a unit (500GiB; needs --kv-bytes-per-token); "
                        "usable = floor(N / page) * page (default: unbounded)")
    r.add_argument("--l2-tokens", type=_size, default=None,
                   help="host L2 capacity (tokens or bytes with a unit); default: --hicache-ratio x L1 if given")
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
    r.add_argument("--policy", type=_policy, default="lru", choices=POLICIES, metavar="POLICY",
                   help="eviction policy, one of the registered %(choices)s (belady-node: an offline heuristic; "
                        "docs/policy_lab.md); a comma-separated list with several --capacity-tokens values runs every "
                        "combination and prints one table (default lru)")
    r.add_argument("--jobs", type=_pos_int, default=1, help="parallel processes for a comparison run (default 1)")
    r.add_argument("--no-miss-split", action="store_true",
                   help="skip the cold vs evicted miss split (saves the shadow replay)")
    r.add_argument("--block-size", type=_pos_int, default=None,
                   help="tokens per hash_ids block (default: the line's block_size, else 512)")
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
    r.add_argument("--out", required=True, help="result directory (created if missing)")
    r.add_argument("--check-invariants", action="store_true",
                   help="recount every invariant after each request (slow; for debugging)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")

    u = sub.add_parser("run", help="simulate a scenario under the SimPy clock (the main job)",
                       description=(
                           "Simulate a scenario (YAML: model and hardware presets, cache, engine, workload, "
                           "seed) with the shared engine loop on modelled links and an operator-level cost model. "
                           "Writes config.yaml (fully resolved, with provenance), requests.csv (with the "
                           "queue/load/compute split of each TTFT), rounds.csv, timeline.csv, summary.json "
                           "and per-round TTFT and hit-rate plots to --out. Without a scenario it runs the "
                           "small 'quickstart' one. Catalog names (radixsim scenarios) work without a path."))
    u.add_argument("scenario", nargs="?", default=None,
                   help="scenario file, or a catalog name such as fig4-dsv4-flash-l3 (default: quickstart)")
    u.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key, e.g. --set cache.l2_tokens=4000000 or --set "
                        "workload.num_rounds=20 (a dotted key of the scenario file: README.md 'Simulate "
                        "a scenario', SCHEMA in scenarios/schema.py; repeatable)")
    u.add_argument("--out", default=None, help="result directory (default: runs/NAME)")
    u.add_argument("--backend", choices=["sim", "torch"], default="sim",
                   help="sim: the SimPy clock with modelled links and cost (default); torch: the same engine "
                        "with real pools, copies, L3 page store and the synthetic model (sizes: the "
                        "scenario's torch.* keys; torch.clock: modelled (default, the simulator's "
                        "timing), measured or realtime)")
    u.add_argument("--device", default=None, help="torch backend: cpu or cuda (default: torch.device)")
    u.add_argument("--smoke", action="store_true",
                   help="run the scenario at a tiny size (about a second; what CI does with every catalog scenario)")
    u.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    u.add_argument("--no-progress", action="store_true", help="no progress bar")

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

    from . import lab_cli, report_cli, sensitivity, validate, workload_cli

    report_cli.add_parsers(sub)
    lab_cli.add_parsers(sub)
    workload_cli.add_parsers(sub)
    validate.add_parser(sub)
    sensitivity.add_parser(sub)

    k = sub.add_parser("calibrate", help="time the operators the simulator prices into a cost table",
                       description=(
                           "Time, on this device, the operators the simulator's step-time model prices for the "
                           "scenario's model and TP: GEMMs by shape (rows x N x K), one attention layer per "
                           "(prefix, new) prefill and per decode KV length, and host->device copies by size; write "
                           "them as an operator table (JSON) for `cost: {kind: table, table: FILE}` "
                           "(sim/optable.py interpolates it). --kind steps instead times whole prefill and decode "
                           "forwards of the scenario's reduced torch model (a step-time table)."))
    k.add_argument("scenario", help="scenario file or catalog name")
    k.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    k.add_argument("--device", default=None, help="cpu or cuda (default: the scenario's torch.device)")
    k.add_argument("--kind", choices=["operators", "steps"], default="operators",
                   help="operators (default): per-operator table; steps: step-time table of the torch model")
    k.add_argument("--quick", action="store_true", help="fewer points (a rough table in seconds)")
    k.add_argument("--out", required=True, help="the cost table to write (.json)")

    c = sub.add_parser("scenarios", help="list the scenario catalog",
                       description="List the bundled scenarios (scenarios/catalog/*.yaml), one line each.")
    c.set_defaults()

    t = sub.add_parser("trace", help="write a generated workload as a JSONL trace",
                       description=("Write a generated workload as a JSONL trace (the format replay reads): "
                                    "agentic = SWE-bench-like sessions with tool loops, sub-agents and "
                                    "close_session events. Knobs: --set workload.KEY=VALUE."))
    t.add_argument("workload", choices=["agentic"], help="which generator")
    t.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a workload knob, e.g. --set workload.num_sessions=32 (repeatable)")
    t.add_argument("--out", required=True, help="trace file to write")
    return p


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
    from cache_core.tiers import TierConfig
    from scenarios.traces import TraceError

    from scenarios.units import floor_pages

    from .replay import ReplayOptions, check_sizes, run_replay

    t0 = time.perf_counter()
    try:
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
            progress=not args.no_progress, miss_split=not args.no_miss_split)
        _warn("radixsim replay", check_sizes(opts, caps))
        policies = args.policy.split(",")
        if len(policies) > 1 or len(caps) > 1:
            from .compare import run_comparison

            table = run_comparison(opts, policies, caps, args.out, args.jobs, command=args.command_line)
            print(table)
            return 0
        summary = run_replay(opts, args.out, command=args.command_line)
    except BrokenPipeError:  # stdout closed (`| head`): main's quiet exit, not bad input
        raise
    except TraceError as e:
        sys.stderr.write(f"radixsim replay: {e}\n")
        return EXIT_BAD_INPUT
    except (ValueError, OSError) as e:
        sys.stderr.write(f"radixsim replay: {e}\n")
        return EXIT_BAD_INPUT
    secs = time.perf_counter() - t0
    # run_replay refuses a trace with no requests (exit 2), and every request has a token: a hit rate
    print(f"{summary['requests']} requests, {summary['total_prompt_tokens']:,} prompt tokens, "
          f"{summary['total_cached_tokens']:,} cached (hit rate {summary['hit_rate']:.6f}), "
          f"{summary['evicted_tokens']:,} evicted, {summary['rejected']} rejected "
          f"in {secs:.2f} s -> {args.out}")
    if "tokens_per_link" in summary:
        from .outputs import fmt_or_dash
        print(f"hit rate by tier: device {summary['hit_rate_device']:.4f}, host {summary['hit_rate_host']:.4f}, "
              f"storage {summary['hit_rate_storage']:.4f}; "
              f"last 10 rounds {fmt_or_dash(summary['hit_rate_last10'], '.4f')}")
    return 0


def _warn(prog: str, warnings) -> None:
    for w in warnings:
        sys.stderr.write(f"{prog}: warning: {w}\n")


def _cmd_run(args) -> int:
    from scenarios.scenario import ScenarioError, from_file

    from .run import DEFAULT_SCENARIO, run_scenario

    name = args.scenario or DEFAULT_SCENARIO
    try:
        sc = from_file(name, args.sets, smoke_run=args.smoke)
    except ScenarioError as e:
        sys.stderr.write(f"radixsim run: {e}\n")
        return EXIT_BAD_INPUT
    out = args.out or f"runs/{sc.doc['name']}"
    _warn("radixsim run", sc.warnings)
    if args.backend == "torch":
        _torch_device(args, sc)
    try:
        s = run_scenario(sc, out, command=args.command_line, progress=not args.no_progress,
                         plots=not args.no_plots, backend=args.backend, device=args.device)
    except (ValueError, OSError) as e:
        sys.stderr.write(f"radixsim run: {name}: {e}\n")
        return EXIT_BAD_INPUT
    from .outputs import fmt_or_dash, plural
    c = sc.cache
    tiers = "L1" if c.tiers is None else ("L1+L2+L3" if c.tiers.l3 else "L1+L2")
    print(f"{sc.doc['name']}: {sc.model.name} TP{sc.tp}, {tiers}, L1 {c.capacity_tokens:,} tokens"
          + ("" if c.tiers is None else f", L2 {sc.doc['cache']['l2_tokens']:,}")
          + ("" if c.tiers is None or not c.tiers.l3 else f", L3 {sc.doc['cache']['l3_tokens']}"))
    print(f"{s['requests']} requests, {s['total_prompt_tokens']:,} prompt tokens: hit rate {s['hit_rate']:.4f} "
          f"(device {s['hit_rate_device']:.4f}, host {s['hit_rate_host']:.4f}, storage "
          f"{s['hit_rate_storage']:.4f}), last 10 rounds {fmt_or_dash(s['hit_rate_last10'], '.4f')}")
    print(f"simulated {s['duration_s']:,.1f} s: mean TTFT {s['ttft_mean_s']:.3f} s (p90 {s['ttft_p90_s']:.3f}), "
          f"effective input throughput {s['effective_input_tps']:,.0f} tok/s; wall {s['_wall_s']:.2f} s -> {out}")
    f = s.get("fleet")
    if f:
        print(f"fleet: {plural(f['engines'], 'engine')}, router {f['router']['kind']}: SLO attainment {f['slo_attainment']:.3f}, "
              f"goodput {f['goodput_rps']:.2f} req/s, requests per engine max/mean "
              f"{f['load_balance']['requests']['max_over_mean']:.2f} (engines.csv, fleet.json)")
    return 0


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


def _cmd_calibrate(args) -> int:
    import dataclasses

    from scenarios.scenario import ScenarioError, from_file

    from .outputs import OutputError, check_out_file

    try:
        check_out_file(args.out, "--out")  # before the work, not after it
        sc = from_file(args.scenario, args.sets)
        from gpu_backend.backend import DTYPES, TorchOptions
    except (ScenarioError, OutputError) as e:
        sys.stderr.write(f"radixsim calibrate: {e}\n")
        return EXIT_BAD_INPUT
    except ImportError as e:
        sys.stderr.write(f"radixsim calibrate: needs torch (pip install torch==2.13.0): {e}\n")
        return EXIT_BAD_INPUT
    opts = dataclasses.replace(TorchOptions(**sc.doc.get("torch", {})), device=_torch_device(args, sc))
    t0 = time.perf_counter()
    table = (_operator_table if args.kind == "operators" else _step_table)(sc, opts, DTYPES[opts.dtype], args.quick)
    from .outputs import write

    write(args.out, table)
    points = (f"{sum(len(g['points']) for g in table['gemm'])} GEMM, {len(table['prefill_attention'])} prefill "
              f"attention, {len(table['decode_attention'])} decode attention and {len(table['copy'])} copy"
              if args.kind == "operators" else f"{len(table['prefill'])} prefill and {len(table['decode'])} decode")
    print(f"{points} points on {opts.device} in {time.perf_counter() - t0:.1f} s -> {args.out} "
          f"(use: --set cost.kind=table --set cost.table={args.out})")
    return 0


def _operator_table(sc, opts, dtype, quick: bool) -> dict:
    from gpu_backend.calibrate import QUICK, measure_operators
    from sim.cost_models import operator_cost_model
    from sim.optable import calibration_plan

    cost = operator_cost_model(sc)
    say = (lambda m: sys.stderr.write(f"radixsim calibrate: {m}\n")) if sys.stderr.isatty() else None
    return measure_operators(calibration_plan(cost), device=opts.device, dtype=dtype, progress=say,
                             **(QUICK if quick else {}))


def _step_table(sc, opts, dtype, quick: bool) -> dict:
    from gpu_backend.calibrate import measure_table, scenario_model

    kw = dict(prefill_tokens=(16, 256), cached=(0, 1024), batches=(1, 8), contexts=(64, 1024), repeats=1) \
        if quick else {}
    model, scale = scenario_model(sc, opts)
    return measure_table(model, scale=scale, **kw)


def _cmd_scenarios(args) -> int:
    from scenarios.scenario import catalog

    rows = catalog()
    width = max(len(n) for n, _ in rows)
    for name, desc in rows:
        print(f"{name:<{width}}  {desc}")
    return 0


COMMANDS = {"replay": _cmd_replay, "trace": _cmd_trace, "run": _cmd_run, "scenarios": _cmd_scenarios,
            "sweep": _cmd_sweep, "calibrate": _cmd_calibrate, "plan": _cmd_plan}
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `... | head`
EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is: it leaves as on Ctrl-C (workers stopped,
    temporary directories removed), then main says "terminated"."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def main(argv=None) -> int:
    """Parse and run one command. Every command shares one error path: Ctrl-C -> one line
    "interrupted", exit 130; SIGTERM -> the same way out, "terminated", exit 143; an OS error,
    out of memory, a torch device error or a failed sweep point -> one line naming what failed,
    exit 2; a closed output pipe -> quiet, exit 141 (a command's own handler lets
    BrokenPipeError through)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["radixsim"] + argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    prog = f"radixsim {args.command}"
    oom = None
    try:
        old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: SIGTERM keeps its handler
        old_term = None
    try:
        rc = _dispatch(parser, args)
        sys.stdout.flush()  # a closed pipe shows here, inside the error path, not at interpreter exit
        return rc
    except Terminated:
        sys.stderr.write(f"{prog}: terminated\n")
        return EXIT_TERMINATED
    except MemoryError as e:  # reported below, once this block has let go of the traceback (and its memory)
        oom = e.args  # not e: its traceback holds what filled the memory
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`radixsim ... | head`): stop quietly; stdout goes to devnull so
        # that the interpreter's final flush cannot fail again (Python docs, "Note on SIGPIPE")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as e:  # noqa: BLE001 -- the one place that turns any failure into one line
        try:
            line = failure_line(e)
        except MemoryError:  # the error path's own imports may fail for want of memory too
            line = "out of memory: an allocation failed"
        if line is None:
            raise
        sys.stderr.write(f"{prog}: {line}\n")
        return EXIT_BAD_INPUT
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    text = str(oom[0]).strip() if oom else ""
    sys.stderr.write(f"{prog}: out of memory: {text.splitlines()[0] if text else 'an allocation failed'}\n")
    return EXIT_BAD_INPUT


def failure_line(e: BaseException) -> str | None:
    """One line naming what failed, for the failures every command may meet (None: a bug,
    whose traceback is kept)."""
    from cache_core.engine_types import EngineStalled

    from .sweep import PointError

    if isinstance(e, EngineStalled):  # a run that cannot finish: which requests are stuck, where
        return f"the engine stalled: {_first_line(e)}"
    if isinstance(e, MemoryError):
        return f"out of memory: {_first_line(e) or 'an allocation failed'}"
    if isinstance(e, OSError):
        reason = e.strerror or _first_line(e) or type(e).__name__
        return f"{e.filename}: {reason}" if e.filename is not None else reason
    if isinstance(e, (PointError, DeviceError)):
        return _first_line(e)
    torch = sys.modules.get("torch")  # only a run that imported torch can meet its device errors
    if torch is not None and isinstance(e, (torch.OutOfMemoryError, getattr(torch, "AcceleratorError", ()))):
        return f"torch device error: {_first_line(e)}"
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _dispatch(parser, args) -> int:
    cmd = COMMANDS.get(args.command)
    if cmd is not None:
        return cmd(args)
    from . import lab_cli, report_cli, sensitivity, validate, workload_cli

    for mod in (report_cli, workload_cli, validate, sensitivity, lab_cli):
        rc = mod.dispatch(args)
        if rc is not None:
            return rc
    parser.error(f"unknown command {args.command}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
