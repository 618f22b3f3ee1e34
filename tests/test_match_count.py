"""How often the engine matches each request on its way in (issue 16 item 3): a match result
is reused while the cache's state is unchanged (`RadixCache.version`), so a request is matched
once per state change, not once per caller (arrival, ordering, probe, resolve)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cache_core import CacheConfig
from cache_core.config import SwaConfig
from cache_core.tree import RadixTree
from test_engine import make, req, run


def _count_walks(monkeypatch) -> Counter:
    """Count the tree walks over each request's tokens (matches and inserts), by its TokenSeq's bytes."""
    walks: Counter = Counter()
    orig = RadixTree.walk

    def counted(self, qb, *a, **kw):
        walks[id(qb)] += 1
        return orig(self, qb, *a, **kw)

    monkeypatch.setattr(RadixTree, "walk", counted)
    return walks


def _shared_prefix(policy, swa=False):
    cfg = CacheConfig(page_size=16, capacity_tokens=4_000,
                      swa=SwaConfig(window_tokens=64, capacity_tokens=2_048) if swa else None)
    env, cache, e, _ = make(cfg, max_running_requests=3, chunked_prefill_tokens=None, schedule_policy=policy, seed=7)
    shared = np.arange(256)
    timed = [(0.01 * i, req(i, np.concatenate([shared, np.arange(40) + 1000 * (i + 1)]), 3)) for i in range(12)]
    return env, e, timed


@pytest.mark.parametrize("policy,swa,walks_per_request", [
    ("lpm", False, [5, 5, 5, 8, 8, 7, 10, 9, 9, 12, 11, 11]),
    ("fcfs", False, [4] * 12),
    ("lpm", True, [4, 4, 4, 7, 7, 6, 9, 9, 9, 12, 11, 11]),
])
def test_engine_matches_each_request_once_per_state_change(monkeypatch, policy, swa, walks_per_request):
    """12 requests sharing a 256-token prefix, at most 3 running: the tree walks over each
    request's tokens (its matches plus its commit's insert), exactly."""
    walks = _count_walks(monkeypatch)
    env, e, timed = _shared_prefix(policy, swa)
    keys = [id(r.seq.data) for _, r in timed]
    got = run(env, e, timed)
    assert len(got) == 12
    seen = [walks[k] for k in keys]
    print(policy, swa, "walks", seen, sum(seen))
    assert seen == walks_per_request
