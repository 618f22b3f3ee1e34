"""Session-aware eviction with HiCache tiers: device leaves can be internal tree nodes, so a
change of session references must re-offer every node on the path (regression: a session
replay with L1+L2 once lost device leaves from the eviction queue)."""
import pytest

from cache_core import CacheConfig, RadixCache, ReplayStepper, invariants
from cache_core.tiers import TierConfig
from scenarios.agentic import AgenticClose, AgenticConfig, AgenticWorkload

SMALL = AgenticConfig(num_sessions=8, concurrency=4, turns=(6, 12))  # default sizes per turn


@pytest.mark.parametrize("policy", ["lru", "session", "belady-node"])
@pytest.mark.parametrize("l3", [False, True])
def test_session_policy_with_tiers_keeps_every_candidate_queued(policy, l3):
    cache = RadixCache(CacheConfig(page_size=16, capacity_tokens=30_000, policy=policy,
                                   tiers=TierConfig(hicache_ratio=2, l3=l3, min_prefetch_tokens=0)))
    wl = AgenticWorkload(SMALL)
    if policy == "belady-node":
        from cache_core.belady import NextUseOracle
        from cache_core.keys import page_keys

        cache.policy.oracle = NextUseOracle([page_keys(r.prompt, 16)[0] for r in wl
                                             if not isinstance(r, AgenticClose)])
    st = ReplayStepper(cache)
    host = storage = i = 0
    for rec in wl:
        if isinstance(rec, AgenticClose):
            cache.close_session(rec.session_id)
            invariants.check(cache)
            continue
        if policy == "belady-node":
            cache.policy.now = i
        i += 1
        r = st.step(rec.prompt, rec.output, session_id=rec.session_id)
        host += r.cached_host
        storage += r.cached_storage
        if i % 4 == 0:
            invariants.check(cache)
    invariants.check(cache)
    assert host > 0
    tiers = cache.stats()["tiers"]
    assert tiers["l2_evicted_tokens"] > 0 and tiers["l1_demoted_tokens"] > 0
    assert (tiers.get("l3_pages", 0) > 0) == l3


@pytest.mark.parametrize("policy", ["priority", "session"])
@pytest.mark.parametrize("hybrid", [False, True])
def test_priority_and_session_keys_with_tiers_stress(policy, hybrid):
    """Seeded: priorities and session references change keys of internal nodes (ranked with
    tiers and SWA/MAMBA); every step keeps every candidate queued (invariants.check)."""
    import random

    from cache_core import MambaConfig, SwaConfig

    kw = {"swa": SwaConfig(window_tokens=8, capacity_tokens=40),
          "mamba": MambaConfig(slots=10, every_tokens=8)} if hybrid else {}
    rng = random.Random(7)
    c = RadixCache(CacheConfig(page_size=4, capacity_tokens=200, policy=policy,
                               tiers=TierConfig(hicache_ratio=2, l3=True, min_prefetch_tokens=0), **kw))
    st = ReplayStepper(c)
    hist: dict = {}
    hits = 0
    for _ in range(800):
        sid = rng.randrange(6)
        p = hist.get(sid, []) + [rng.randrange(50) for _ in range(rng.randrange(1, 20))]
        out = [rng.randrange(50) for _ in range(3)]
        r = st.step(p, out, session_id=sid, priority=rng.randrange(3))
        hits += r.cached_host + r.cached_storage
        hist[sid] = p + out
        if len(hist[sid]) > 100:
            hist[sid] = []
            c.close_session(sid)
        invariants.check(c)
    assert hits > 0
