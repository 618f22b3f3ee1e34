"""`radixsim replay`: drive the cache core with a trace, one request at a time, no clock.

Ties the trace reader (scenarios) to the core (cache_core) and writes the result schema.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cache_core import CacheConfig, RadixCache, ReplayStepper
from cache_core.config import MambaConfig, SidecarConfig, SwaConfig
from cache_core import invariants
from scenarios.traces import JsonlTrace, TraceEvent

from . import results


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    trace: str
    page_size: int
    capacity_tokens: int | None = None
    policy: str = "lru"
    block_size: int | None = None
    check_invariants: bool = False
    progress: bool = True
    components: str = "full"
    swa_tokens: int | None = None
    swa_full_tokens_ratio: float = 0.1
    mamba_slots: int | None = None


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


def build_config(opts: ReplayOptions) -> CacheConfig:
    comps = parse_components(opts.components)
    swa = mamba = None
    if comps["swa"] is not None:
        swa = SwaConfig(window_tokens=comps["swa"]["window_tokens"], capacity_tokens=opts.swa_tokens,
                        full_tokens_ratio=opts.swa_full_tokens_ratio)
    if comps["mamba"] is not None:
        mamba = MambaConfig(slots=opts.mamba_slots, every_tokens=comps["mamba"]["every_tokens"])
    sidecars = tuple(SidecarConfig(**sc) for sc in comps["sidecars"])
    return CacheConfig(page_size=opts.page_size, capacity_tokens=opts.capacity_tokens, policy=opts.policy,
                       swa=swa, mamba=mamba, sidecars=sidecars)


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


def run_replay(opts: ReplayOptions, out_dir, command: str | None = None) -> dict:
    """Replay `opts.trace` and write requests.csv, summary.json and config.yaml to out_dir.
    Returns the summary. Raises TraceError / ValueError on bad input."""
    config = build_config(opts)
    trace = JsonlTrace(opts.trace, opts.block_size)
    cache = RadixCache(config)
    stepper = ReplayStepper(cache)
    fresh = FreshTokens()
    rows = []
    tot_prompt = tot_cached = tot_evicted = rejected = tot_traversed = 0
    lost: dict[str, int] = {c.name: 0 for c in cache.voters}
    bar = _progress(trace.count_lines() if opts.progress and sys.stderr.isatty() else None, opts.progress)
    for rec in trace:
        if isinstance(rec, TraceEvent):
            continue  # session events are used by session-aware policies (not in replay yet)
        out = rec.output_tokens if rec.output_tokens is not None else (
            fresh.take(rec.output_length) if rec.output_length else None)
        r = stepper.step(rec.prompt, out)
        if opts.check_invariants:
            invariants.check(cache)
        tot_prompt += r.prompt_tokens
        tot_cached += r.cached_tokens
        tot_evicted += r.evicted_tokens
        rejected += r.rejected
        tot_traversed += r.traversed_tokens
        for name, k, _ in r.lost:
            lost[name] += k
        rows.append((rec.rid, rec.session_id, r))
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    invariants.check(cache)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results.write_requests(out, (
        {"rid": rid, "session_id": sid, "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
         "cached_tokens": r.cached_tokens, "cached_device": r.cached_tokens, "cached_host": 0,
         "cached_storage": 0, "evicted_tokens": r.evicted_tokens, "rejected": r.rejected}
        for rid, sid, r in rows))
    hit = results.rate(tot_cached, tot_prompt)
    summary = {
        "mode": "replay",
        "requests": len(rows),
        "total_prompt_tokens": tot_prompt,
        "total_cached_tokens": tot_cached,
        "hit_rate": hit,
        "hit_rate_device": hit,
        "hit_rate_host": 0.0 if hit is not None else None,
        "hit_rate_storage": 0.0 if hit is not None else None,
        "rejected": rejected,
        "evicted_tokens": tot_evicted,
        "evictions": {c.name: {"L1": c.stats()["evicted_" + ("slots" if c.name == "mamba" else "tokens")]}
                      for c in cache.components},
        "bytes_per_link": {},
        "cache": cache.stats(),
    }
    if cache.voters:
        summary["total_traversed_tokens"] = tot_traversed
        summary["lost_reuse_tokens"] = dict(lost, total=tot_traversed - tot_cached)
    results.write_summary(out, summary)
    results.write_config(out, {
        "mode": "replay",
        "trace": str(opts.trace),
        "cache": {"page_size": config.page_size, "capacity_tokens": config.capacity_tokens,
                  "usable_tokens": config.usable_tokens, "policy": config.policy,
                  "components": list(config.components),
                  **({"swa_tokens": config.swa_tokens} if config.swa else {}),
                  **({"mamba_slots": config.mamba.slots} if config.mamba else {})},
        "trace_block_size": trace.block_size_used,
    }, command=command)
    return summary
