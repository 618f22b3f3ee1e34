"""`radixsim replay`: drive the cache core with a trace, one request at a time, no clock.

Ties the trace reader (scenarios) to the core (cache_core) and writes the result schema.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cache_core import CacheConfig, RadixCache, ReplayStepper
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
    config = CacheConfig(page_size=opts.page_size, capacity_tokens=opts.capacity_tokens, policy=opts.policy)
    trace = JsonlTrace(opts.trace, opts.block_size)
    cache = RadixCache(config)
    stepper = ReplayStepper(cache)
    fresh = FreshTokens()
    rows = []
    tot_prompt = tot_cached = tot_evicted = rejected = 0
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
        "evictions": {"full": {"L1": cache.full.evicted_tokens}},
        "bytes_per_link": {},
        "cache": cache.stats(),
    }
    results.write_summary(out, summary)
    results.write_config(out, {
        "mode": "replay",
        "trace": str(opts.trace),
        "cache": {"page_size": config.page_size, "capacity_tokens": config.capacity_tokens,
                  "usable_tokens": config.usable_tokens, "policy": config.policy,
                  "components": ["full"]},
        "trace_block_size": trace.block_size_used,
    }, command=command)
    return summary
