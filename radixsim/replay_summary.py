"""`radixsim replay`'s result documents: summary.json and config.yaml's `cache` section, from the
cache after the replay and its per-request rows (radixsim/replay.py runs the replay)."""
from __future__ import annotations

import dataclasses

from scenarios.units import floor_pages
from sim.recorder import evictions

from . import results


def replay_summary(cache, rows: list, req_rows: list, rounds, shadow, lost: dict, closes: int) -> dict:
    """summary.json of a replay."""
    summary = {"mode": "replay", **results.totals(req_rows, rounds), "rejected": sum(r.rejected for _, r in rows)}
    if shadow is not None:
        summary["cold_miss_tokens"] = sum(it.split[0] for it, _ in rows)
        summary["evicted_miss_tokens"] = sum(it.split[1] for it, _ in rows)
    if cache.sessions is not None:
        summary["sessions"] = {"closed_events": closes, "stale_finishes": cache.sessions.stale_finishes,
                               "open_with_references": cache.sessions.referenced_sessions()}
    summary.update({
        "evicted_tokens": sum(r.evicted_tokens for _, r in rows),
        "evictions": evictions(cache),
        "bytes_per_link": {},
        "cache": cache.stats(),
    })
    if cache.hier is not None:
        summary["tokens_per_link"] = dict(cache.hier.tokens_moved)
        summary["bytes_per_link"] = dict(cache.hier.bytes_moved)
    if cache.voters:
        traversed = sum(r.traversed_tokens for _, r in rows)
        summary["total_traversed_tokens"] = traversed
        summary["lost_reuse_tokens"] = dict(lost, total=traversed - summary["total_cached_tokens"])
    return summary


def replay_cache_doc(opts, config) -> dict:
    """config.yaml's `cache` section of a replay."""
    cache_doc = {"page_size": config.page_size, "capacity_tokens": config.capacity_tokens,
                 "usable_tokens": config.usable_tokens, "policy": config.policy,
                 "components": list(config.components)}
    if config.swa:
        cache_doc["swa_tokens"] = config.swa_tokens
    if config.mamba:
        cache_doc["mamba_slots"] = config.mamba.slots
    if opts.model:
        cache_doc["model"] = opts.model
    if config.tiers is not None:
        cache_doc["tiers"] = {**{k: v for k, v in dataclasses.asdict(config.tiers).items() if k != "l3_options"},
                              "l2_resolved_tokens": floor_pages(config.tiers.l2_size(config.usable_tokens),
                                                                config.page_size)}
    return cache_doc
