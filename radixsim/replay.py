"""`radixsim replay`: drive the cache core with a trace, one request at a time, no clock.

Ties the trace reader (scenarios) to the core (cache_core) and writes the result schema.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sized
from pathlib import Path

import numpy as np

from cache_core import CacheConfig, RadixCache, ReplayStepper
from cache_core.belady import Belady, NextUseOracle
from cache_core.keys import page_keys
from cache_core.miss_split import MissSplit
from cache_core.config import MambaConfig, SidecarConfig, SwaConfig
from cache_core.tiers import TierConfig
from cache_core import invariants
from scenarios.traces import JsonlTrace, TraceEvent
from scenarios.units import check_pool, floor_pages, tier_warnings
from scenarios.workload_kinds import ReplayRequest, SessionClose, replay_kind_names, workload_kind

from . import results
from .outputs import result_dir
from .replay_summary import replay_cache_doc, replay_summary


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    trace: str | None = None
    workload: str | None = None  # a workload kind with a replay hook ("multiturn", "agentic"): generate requests
    workload_set: tuple = ()  # (("num_clients", 48), ...) overrides of the workload config
    page_size: int
    capacity_tokens: int | None = None
    policy: str = "lru"
    block_size: int | None = None
    check_invariants: bool = False
    progress: bool = True
    components: str | None = None  # None: "full", or the model preset's components
    model: str | None = None  # a model preset: components, windows, sidecars, MAMBA slot size
    swa_tokens: int | None = None
    swa_full_tokens_ratio: float = 0.1
    mamba_slots: int | None = None
    mamba_every: int | None = None
    mamba_full_memory_ratio: float = 0.1
    tiers: TierConfig | None = None
    miss_split: bool = True  # cold vs evicted misses (an unbounded shadow cache replays alongside)
    close_delay: int | None = 0  # session closes: after this many more requests (None: dropped)
    engine: str = "sglang"  # "vllm": vLLM v1's hash-block prefix cache (cache_core/vllm_blocks.py)
    offload_block_size: int | None = None  # vllm + L2: tokens per CPU offload chunk (None: the block size)


def parse_components(spec: str) -> dict:
    """'full,swa:4096,mamba:every=4096,sidecar:c4@full' -> {'swa': {...}, 'mamba': {...},
    'sidecars': [...]}. FULL is always present; ValueError names the bad item."""
    out: dict = {"swa": None, "mamba": None, "sidecars": []}
    for item in (x.strip() for x in spec.split(",")):
        name, _, arg = item.partition(":")
        if name == "full" and not arg:
            continue
        if name == "swa":
            w = arg[len("window="):] if arg.startswith("window=") else arg
            if not w.isdigit() or int(w) < 1:
                raise ValueError(f"component {item!r}: expected swa:WINDOW_TOKENS (an integer >= 1)")
            out["swa"] = {"window_tokens": int(w)}
        elif name == "mamba":
            every = None
            if arg:
                if not (arg.startswith("every=") and arg[6:].isdigit() and int(arg[6:]) >= 1):
                    raise ValueError(f"component {item!r}: expected mamba or mamba:every=K_TOKENS")
                every = int(arg[6:])
            out["mamba"] = {"every_tokens": every}
        elif name == "sidecar":
            sc, _, follows = arg.partition("@")
            if not sc or follows not in ("full", "swa"):
                raise ValueError(f"component {item!r}: expected sidecar:NAME@full or sidecar:NAME@swa")
            out["sidecars"].append({"name": sc, "follows": follows})
        else:
            raise ValueError(f"unknown component {item!r}; expected full, swa:W, mamba[:every=K] "
                             "or sidecar:NAME@full|swa")
    return out


def model_components(name: str, every: int | None = None) -> str:
    """The --components spec a model preset implies (its sidecars included)."""
    from scenarios.presets import get_model

    m = get_model(name)
    parts = ["full"]
    if m.swa_layers:
        parts.append(f"swa:{m.swa_window_tokens}")
    if m.state_bytes:
        parts.append("mamba" + (f":every={every}" if every else ""))
    parts += [f"sidecar:{sc.name}@{sc.follows}" for sc in m.sidecars]
    return ",".join(parts)


def _mamba_slots_from_model(name: str, l1_tokens: int | None, ratio: float) -> int | None:
    """SGLang's --mamba-full-memory-ratio: slots = ratio x FULL KV bytes / state bytes."""
    from scenarios.presets import bytes_per_token, get_model

    if l1_tokens is None:
        return None
    m = get_model(name)
    return max(1, int(ratio * l1_tokens * bytes_per_token(m, "full") // m.state_bytes))


def build_config(opts: ReplayOptions) -> CacheConfig:
    spec = opts.components or (model_components(opts.model, opts.mamba_every) if opts.model else "full")
    comps = parse_components(spec)
    swa = mamba = None
    if comps["swa"] is not None:
        swa = SwaConfig(window_tokens=comps["swa"]["window_tokens"], capacity_tokens=opts.swa_tokens,
                        full_tokens_ratio=opts.swa_full_tokens_ratio)
    if comps["mamba"] is not None:
        slots = opts.mamba_slots
        if slots is None and opts.model is not None:
            slots = _mamba_slots_from_model(opts.model, opts.capacity_tokens, opts.mamba_full_memory_ratio)
        every = comps["mamba"]["every_tokens"] or opts.mamba_every
        mamba = MambaConfig(slots=slots, every_tokens=every)
    sidecars = tuple(SidecarConfig(**sc) for sc in comps["sidecars"])
    if opts.model is not None and not opts.components:  # the preset's sidecars carry their bytes
        from scenarios.presets import get_model

        sidecars = tuple(get_model(opts.model).sidecars)
    return CacheConfig(page_size=opts.page_size, capacity_tokens=opts.capacity_tokens, policy=opts.policy,
                       swa=swa, mamba=mamba, sidecars=sidecars, tiers=opts.tiers)


def check_sizes(opts: ReplayOptions, capacities) -> list[str]:
    """Refuse, before any replay, a capacity below one page or beyond what a pool can index
    (ValueError naming the option), as `radixsim run` does; return the legal but odd tier sizes
    (L2 below L1, L2 = 0, L3 below L2) as warnings, each once."""
    P = opts.page_size
    warnings: list[str] = []
    for cap in capacities:
        check_pool(cap, P, "--capacity-tokens")
        config = build_config(dataclasses.replace(opts, capacity_tokens=cap))
        if config.swa is not None:
            check_pool(config.swa_tokens, P, "--swa-tokens", at_least_one_page=False)
        if config.mamba is not None:
            check_pool(config.mamba.slots, None, "--mamba-slots", at_least_one_page=False)
        t = config.tiers
        if t is not None:
            l2 = floor_pages(t.l2_size(config.usable_tokens), P)
            check_pool(l2, P, "--l2-tokens" if t.l2_tokens is not None else "--hicache-ratio", at_least_one_page=False)
            warnings += [w for w in tier_warnings(config.usable_tokens, l2, t.l3_tokens, t.l3) if w not in warnings]
    return warnings


class FreshTokens:
    """Output tokens that match nothing: unique negative ids (prompt tokens are >= 0)."""

    def __init__(self):
        self._next = -1

    def take(self, n: int) -> np.ndarray:
        out = np.arange(self._next, self._next - n, -1, dtype=np.int64)
        self._next -= n
        return out


def _progress(total: int | None, enabled: bool):
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="req", desc="replay", file=sys.stderr, mininterval=0.5)


class _NoEvictionSplit:
    """The miss split of a cache that never evicts or rejects: all misses are cold."""

    @staticmethod
    def observe(prompt, output, seq, cached: int) -> tuple[int, int]:
        return len(prompt) - cached, 0


class _Row:
    __slots__ = ("rid", "session_id", "round", "split")

    def __init__(self, rid, session_id, rnd, split=None):
        self.rid, self.session_id, self.round, self.split = rid, session_id, rnd, split


def _seq(prompt, output):
    from cache_core import TokenSeq

    if output is not None and len(output) > 1:
        return TokenSeq.join(prompt, output[:-1])
    return TokenSeq(prompt)


def _trace_items(opts: ReplayOptions):
    trace = JsonlTrace(opts.trace, opts.block_size)
    fresh = FreshTokens()

    def gen():
        for rec in trace:
            if isinstance(rec, TraceEvent):
                yield SessionClose(rec.session_id)
                continue
            out = rec.output_tokens if rec.output_tokens is not None else (
                fresh.take(rec.output_length) if rec.output_length else None)
            times = None if rec.timestamp_ms is None or rec.session_id is None else (rec.timestamp_ms, rec.tool_ms)
            yield ReplayRequest(rec.rid, rec.session_id, None, rec.prompt, out, priority=rec.priority, times=times)

    total = trace.count_lines() if opts.progress and sys.stderr.isatty() else None
    return (gen(), total, {"trace": str(opts.trace), "trace_block_size": lambda: trace.block_size_used},
            lambda: _prompt_keys(gen(), opts.page_size))


def delay_closes(items, delay: int | None):
    """The items with every session close moved `delay` requests later (still in order; those
    due after the last request come at the end), or dropped (None): the policy lab's corpus
    variants that do not tell the cache when a session ends (docs/policy_lab.md)."""
    if delay == 0:
        yield from items
        return
    pending: list = []  # (due request count, close), in order
    served = 0
    for it in items:
        if isinstance(it, SessionClose):
            if delay is not None:
                pending.append((served + delay, it))
            continue
        while pending and pending[0][0] <= served:
            yield pending.pop(0)[1]
        yield it
        served += 1
    yield from (c for _, c in pending)


def _prompt_keys(items, page_size: int) -> list:
    """Every request's prompt page keys, in order (the `belady` oracle's future)."""
    return [page_keys(it.prompt, page_size)[0] for it in items if isinstance(it, ReplayRequest)]


def replay_workload_names() -> list[str]:
    """The workload kinds `--workload` accepts: every registered kind with a replay hook."""
    import scenarios.scenario  # noqa: F401 (registers the built-in kinds)

    return replay_kind_names()


def _replay_hook(name: str):
    if name not in replay_workload_names():
        raise ValueError(f"unknown workload {name!r}; expected one of {', '.join(replay_workload_names())}")
    return workload_kind(name).replay


def make_workload(name: str, overrides, page_size: int):
    """A workload generator by kind name (scenarios/workload_kinds.py, its replay hook), with
    `overrides` ((key, value), ...) of its config. Returns (generator, config)."""
    hook = _replay_hook(name)
    fields = {f.name for f in dataclasses.fields(hook.config)}
    kw = {"page_size": page_size} if "page_size" in fields else {}
    for key, value in overrides:
        if key not in fields:
            raise ValueError(f"unknown workload key 'workload.{key}'; expected one of "
                             f"{', '.join('workload.' + f for f in sorted(fields))}")
        kw[key] = tuple(value) if isinstance(value, list) else value
    try:
        cfg = hook.config(**kw)
    except TypeError as e:
        raise ValueError(f"workload {name}: {e}") from None
    return hook.generator(cfg), cfg


def _workload_items(opts: ReplayOptions):
    wl, cfg = make_workload(opts.workload, opts.workload_set, opts.page_size)
    hook, P = workload_kind(opts.workload).replay, opts.page_size
    keyed = bool(opts.tiers and opts.tiers.l3)

    def future():
        return hook.future(wl) if hook.future is not None else _prompt_keys(hook.items(wl, P, keyed), P)

    total = len(wl) if isinstance(wl, Sized) else None
    return hook.items(wl, P, keyed), total, {"workload": {"kind": opts.workload, **dataclasses.asdict(cfg)}}, future


def run_replay(opts: ReplayOptions, out_dir, command: str | None = None) -> dict:
    """Replay a trace (or a generated workload) and write requests.csv, summary.json,
    config.yaml (and rounds.csv when requests have rounds) to out_dir, which then holds
    exactly this run (`outputs.result_dir`). Returns the summary.
    Raises TraceError / ValueError on bad input (a trace without requests included). The vLLM
    flavour (`opts.engine` vllm) runs through `radixsim.replay_vllm.run_replay_vllm`."""
    with result_dir(out_dir) as out:
        return _replay_into(opts, out, command)


def _replay_into(opts: ReplayOptions, out: Path, command: str | None) -> dict:
    config = build_config(opts)
    cache, rows, shadow, lost, closes, source = _replay_steps(opts, config)
    if not rows:  # as `run`: nothing to measure is bad input (exit 2), and nothing is written
        raise no_requests(opts)
    invariants.check(cache)

    req_rows = [{"rid": it.rid, "session_id": it.session_id, "round": it.round,
                 "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                 "cached_tokens": r.cached_tokens, "cached_device": r.cached_device,
                 "cached_host": r.cached_host, "cached_storage": r.cached_storage,
                 "evicted_tokens": r.evicted_tokens, "rejected": r.rejected,
                 "cold_tokens": None if it.split is None else it.split[0],
                 "evicted_miss_tokens": None if it.split is None else it.split[1]} for it, r in rows]
    results.write_requests(out, req_rows)
    rounds = results.round_table(req_rows)
    if rounds:
        results.write_rounds(out, rounds)
    summary = replay_summary(cache, rows, req_rows, rounds, shadow, lost, closes)
    results.write_summary(out, summary)
    src = {k: (v() if callable(v) else v) for k, v in source.items()}
    results.write_config(out, {"mode": "replay", **src, "cache": replay_cache_doc(opts, config)}, command=command)
    return summary


def _replay_steps(opts: ReplayOptions, config) -> tuple:
    """Every item of the trace or workload through a fresh cache, one request at a time:
    (cache, rows of (_Row, step result), miss splitter, lost reuse per component, closes, source)."""
    items, total, source, future = _workload_items(opts) if opts.workload else _trace_items(opts)
    items = delay_closes(items, opts.close_delay)
    cache = RadixCache(config)
    belady = isinstance(cache.policy, Belady)
    if belady:
        cache.policy.oracle = NextUseOracle(future())
    stepper = ReplayStepper(cache)
    shadow = MissSplit(config.page_size) if opts.miss_split else None
    if shadow is not None and config.capacity_tokens is None and not cache.voters and cache.hier is None:
        shadow = _NoEvictionSplit()  # unbounded FULL: nothing is ever evicted, every miss is cold
    rows = []
    timed = getattr(cache.policy, "request_times", None)  # a policy that reads trace times (session-next)
    lost: dict[str, int] = {c.name: 0 for c in cache.voters}
    bar = _progress(total, opts.progress)
    closes = 0
    for it in items:
        if isinstance(it, SessionClose):
            cache.close_session(it.session_id)
            closes += 1
            continue
        if belady:
            cache.policy.now = len(rows)
        seq = it.seq if it.seq is not None else _seq(it.prompt, it.output)
        r = stepper.step(it.prompt, it.output, seq=seq, session_id=it.session_id, priority=it.priority or 0)
        if timed is not None and it.times is not None:
            timed(it.session_id, *it.times)
        split = shadow.observe(it.prompt, it.output, seq, r.cached_tokens) if shadow is not None else None
        if opts.check_invariants:
            invariants.check(cache)
        for name, k, _ in r.lost:
            lost[name] += k
        rows.append((_Row(it.rid, it.session_id, it.round, split), r))  # not `it`: it holds the tokens
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return cache, rows, shadow, lost, closes, source


def no_requests(opts: ReplayOptions) -> ValueError:
    """The bad-input error of a trace or workload without requests (replay, curve, leaderboard)."""
    return ValueError(f"{opts.trace or opts.workload}: no requests in the trace; expected at least one")


def replay_requests(opts: ReplayOptions):
    """The `ReplayRequest`s of the trace or workload `opts` names, in order (session events left out)."""
    items = (_workload_items(opts) if opts.workload else _trace_items(opts))[0]
    return (it for it in items if isinstance(it, ReplayRequest))


def request_stream(opts: ReplayOptions):
    """(prompt, output or None) token arrays of every request `run_replay(opts)` would serve, in
    order (session events left out): the input of one-pass curves (radixsim/curve.py)."""
    return ((it.prompt, it.output) for it in replay_requests(opts))
