"""SWA/MAMBA on tiers with manual acknowledgements: ReplayStepper over a cache with
auto_ack=False, pending transfers acknowledged in random order at random points with ~10%
failures, `invariants.check` after every step, then a final drain."""
import random

import pytest

from cache_core import CacheConfig, MambaConfig, RadixCache, ReplayStepper, SwaConfig, invariants
from cache_core.tiers import TierConfig

COMPS = {
    "swa": dict(swa=SwaConfig(window_tokens=8, capacity_tokens=48)),
    "mamba": dict(mamba=MambaConfig(slots=10, every_tokens=8)),
    "swa+mamba": dict(swa=SwaConfig(window_tokens=8, capacity_tokens=48), mamba=MambaConfig(slots=10, every_tokens=8)),
}
TIERS = {
    "l2": TierConfig(hicache_ratio=2),
    "l3": TierConfig(hicache_ratio=2, l3=True, min_prefetch_tokens=0),
    "l3-write_back-on_l2_evict": TierConfig(hicache_ratio=1, l3=True, l3_tokens=600, write_policy="write_back",
                                            min_prefetch_tokens=0, l3_write="on_l2_evict"),
}


def _run(comps, tiers, P, seed=3, steps=600):
    rng = random.Random(seed)
    c = RadixCache(CacheConfig(page_size=P, capacity_tokens=160, tiers=TIERS[tiers], **COMPS[comps]), auto_ack=False)
    st = ReplayStepper(c)
    hist: dict = {}
    acked = failed = 0
    for _ in range(steps):
        sid = rng.randrange(6)
        p = hist.get(sid, []) + [rng.randrange(50) for _ in range(rng.randrange(1, 24))]
        out = [rng.randrange(50) for _ in range(3)]
        st.step(p, out)
        hist[sid] = p + out
        if len(hist[sid]) > 120:
            hist[sid] = []
        ids = list(c.hier.pending)
        rng.shuffle(ids)
        for t in ids[: rng.randrange(0, len(ids) + 1)]:
            if t in c.hier.pending:
                ok = rng.random() > 0.1
                c.ack(t, ok)
                acked += 1
                failed += not ok
        invariants.check(c)
    while c.hier.pending:
        for t in list(c.hier.pending):
            if t in c.hier.pending:
                c.ack(t, True)
    invariants.check(c)
    return acked, failed


@pytest.mark.parametrize("P", [1, 4])
@pytest.mark.parametrize("tiers", ["l2", "l3"])
@pytest.mark.parametrize("comps", list(COMPS))
def test_random_acks_with_components(comps, tiers, P):
    acked, failed = _run(comps, tiers, P)
    assert acked > 500 and failed > 30


@pytest.mark.parametrize("comps", list(COMPS))
@pytest.mark.parametrize("P", [1, 4])
def test_random_acks_write_back_on_l2_evict(P, comps):
    """(Regression: a transfer acknowledged after its node left the tree leaked its slots.)"""
    acked, failed = _run(comps, "l3-write_back-on_l2_evict", P)
    assert acked > 500 and failed > 30
