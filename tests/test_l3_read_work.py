"""The L3 prefix store's reads (issue 16 item 6): a prefetch reads (`touch`) its whole storage
run, and a conversation's prefix is read again every round, so the pages read grow with the
square of the rounds (Inkling figure-4 L3: 0.35 M pages at 30 rounds, 12 M at 120). Before the
store first evicts, the LRU order is unobservable: a read is logged (cache_core/tiers/read_log.py),
not applied page by page to the index; the first eviction orders the index once. Pinned here:
no index update per page read while the store does not fill, and the eviction order of an
ordinary LRU by put or read (reads of keys not present, repeated keys, component keys,
eviction starting midway)."""
from __future__ import annotations

import random
from collections import OrderedDict

import numpy as np

from cache_core.tiers.store import StorageIndex

PAGES, ROUNDS = 1000, 50


class CountingIndex(OrderedDict):
    """The store's key index, counting the moves to its end (a recency update per page)."""

    moves = 0

    def move_to_end(self, key, last: bool = True) -> None:
        self.moves += 1
        super().move_to_end(key, last)


class Lru:
    """The reference: an LRU by put or read, page by page."""

    def __init__(self, cap):
        self.d, self.cap, self.evicted = OrderedDict(), cap, 0

    def put_many(self, keys) -> None:
        for k in keys:
            self.d[k] = None
            self.d.move_to_end(k)
        while self.cap is not None and len(self.d) > self.cap:
            self.d.popitem(last=False)
            self.evicted += 1

    def touch(self, keys) -> None:
        for k in keys.tolist():
            if k in self.d:
                self.d.move_to_end(k)


def eviction_order(store, universe) -> list:
    """Drain `store` one eviction at a time: the keys in the order they leave."""
    out = []
    while len(store):
        before = [k for k in universe if k in store]
        store.capacity_pages = len(store) - 1
        store.put_many([])
        out += [k for k in before if k not in store]
    return out


def test_reads_of_a_store_that_does_not_fill_update_no_index_entry():
    s = StorageIndex(2 * PAGES)
    s._keys = index = CountingIndex()  # the test's window on the index's recency updates
    run = np.arange(PAGES, dtype=np.uint64) * 7 + 1
    s.put_many(run.tolist())
    moves = index.moves
    for r in range(ROUNDS):  # a prefix read again every round, a page longer each time
        s.touch(run[: PAGES - ROUNDS + r])
    assert index.moves - moves == 0  # page by page (before): 48,725 moves
    assert s.reads.logged == PAGES - 1  # each read superseded the one before (all its keys read again)
    s.touch(run[5:9])  # another first key: kept beside it
    s.touch(run[: PAGES - 2])  # shorter than the latest read of its first key: kept too
    assert s.reads.logged == PAGES - 1 + 4 + PAGES - 2
    s.put(run[10:20])  # stored again: a put before the first eviction moves nothing either
    assert index.moves - moves == 0
    s.put_many([5, 3])  # 1,002 keys: still no eviction, still no ordering
    assert index.moves - moves == 0 and len(s) == PAGES + 2
    ref = Lru(None)
    ref.put_many(run.tolist())
    for r in range(ROUNDS):
        ref.touch(run[: PAGES - ROUNDS + r])
    ref.touch(run[5:9])
    ref.touch(run[: PAGES - 2])
    ref.put_many(run[10:20].tolist())
    ref.put_many([5, 3])
    universe = run.tolist() + [5, 3]
    assert eviction_order(s, universe) == list(ref.d)  # ordered once, at the first eviction


def test_eviction_order_is_the_lru_by_put_or_read():
    rng = random.Random(7)
    for cap, kept, slack in ((60, 2, 0), (60, 1, 5), (None, 2, 0), (200, 2, 1 << 16)):
        s, ref = StorageIndex(cap), Lru(cap)
        s.reads.kept, s.reads.slack = kept, slack  # deduplicate the logged reads often
        universe = list(range(150)) + [("swa", k) for k in range(40)]
        runs = [list(range(10, 40)), list(range(10, 20)) + list(range(100, 120)), list(range(60, 90))]
        superseded = 0
        for _ in range(400):
            before = s.reads.logged if s.reads is not None else 0
            if rng.random() < 0.4:
                keys = [rng.choice(universe) for _ in range(rng.randint(0, 12))]
                if rng.random() < 0.5:  # page keys as an array (`put`)
                    keys = [k for k in keys if not isinstance(k, tuple)]
                    s.put(np.array(keys, dtype=np.uint64))
                else:
                    s.put_many(keys)
                ref.put_many(keys)
            elif rng.random() < 0.5:  # a prefix of one of a few runs (or a run diverging from it)
                run = runs[rng.randrange(len(runs))]
                keys = np.array(run[: rng.randint(1, len(run))], dtype=np.uint64)
                s.touch(keys)
                ref.touch(keys)
            else:
                a = rng.randrange(150)
                keys = np.array([rng.randrange(150) for _ in range(rng.randint(0, 6))] + list(range(a, min(a + 20, 150))),
                                dtype=np.uint64)
                s.touch(keys)
                ref.touch(keys)
            assert len(s) == len(ref.d) and s.evicted_pages == ref.evicted
            if s.reads is not None and before < s.reads.logged < before + len(keys):
                superseded += 1  # the log grew by less than this read: an earlier one was dropped
        assert superseded > 0 or cap == 60  # (capacity 60 evicts early: reads are applied from then on)
        assert [k for k in universe if k in s] == [k for k in universe if k in ref.d]
        assert eviction_order(s, universe) == list(ref.d), cap
