"""The L3 probe's work (issue 16): a queued request is matched again and again; each match
probes the L3 run after the tree (`store.leading`) and the deepest boundary of it that SWA and
MAMBA accept (`tiers.votes.storage_boundary`). The probe costs what can change its answer: the
boundary is searched bottom-up from the run's end, and a run found before is not walked again
while no key has left the store. Counted here: store lookups (`key in` the store's index)."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from cache_core import TokenSeq
from helpers import hybrid_l3_cache

P, W, PAGES = 4, 8, 1000  # the window is 2 pages; a 1000-page run in L3 only


class CountingIndex(OrderedDict):
    """The store's key index, counting membership tests."""

    lookups = 0

    def __contains__(self, key) -> bool:
        self.lookups += 1
        return super().__contains__(key)


def l3_only_run():
    c = hybrid_l3_cache(P, W)
    c.matcher.memo = None  # the probe itself: every match queries (a kept plan probes nothing)
    seq = TokenSeq(np.arange(PAGES * P, dtype=np.int64))
    keys = seq.page_keys(P).tolist()
    store = c.hier.storage
    store._keys = index = CountingIndex()  # the test's window on the store's lookups
    store.put_many(keys + [(name, k) for name in ("swa", "mamba") for k in keys])
    return c, seq, index


def test_a_long_l3_run_probed_twice_costs_one_walk_of_it_then_nothing():
    c, seq, index = l3_only_run()
    counts = []
    for _ in range(2):
        before = index.lookups
        m = c.match(seq)
        assert (m.storage_tokens, m.cached_tokens) == (PAGES * P, PAGES * P)
        counts.append(index.lookups - before)
    # first: the run (1000) + the tail holding SWA's window (2 pages), for SWA and MAMBA (4);
    # again: nothing left the store, so the run is known; the boundary probe as before (4)
    assert counts == [PAGES + 4, 4]


def test_a_key_leaving_the_store_makes_the_next_probe_walk_the_run_again():
    c, seq, index = l3_only_run()
    c.match(seq)
    store = c.hier.storage
    store.capacity_pages = len(store) - 1
    store.put_many([])  # evicts the least recently used key (the first page's)
    store._keys = index = CountingIndex(store._keys)  # the first eviction ordered the index anew
    before = index.lookups
    m = c.match(seq)
    assert m.storage_tokens == 0 and index.lookups - before == 1
