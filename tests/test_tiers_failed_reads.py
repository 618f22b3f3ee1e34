"""Failed L3 reads (cache_core/tiers/hierarchy.py prefetch): a prefetch whose transfer fails (the data
plane acknowledges it ``ok=False``: on the torch backend a page missing or corrupt in the page
store) drops its page keys from the L3 index, so later requests do not probe and prefetch the
same unreadable run again; and a node whose prefetch fails while a request holds it locked is
never left in the tree on no tier."""
from __future__ import annotations

import numpy as np
import pytest

from cache_core import CacheConfig, RadixCache, ReplayStepper, SwaConfig, TokenSeq
from cache_core.lifecycle import request_slots
from cache_core.records import MatchResult
from cache_core.tiers.store import MooncakeStore, StorageIndex
from cache_core.tiers import TierConfig
from tests.test_tiers import A, AB, ack_all, check, in_l3, l2_free, make, node_at, request, transfers


def _a_in_l3_only():
    """A cache with manual acks whose L3 holds A's 2 pages, and neither L1 nor L2 anything."""
    c = make(l1=16, l2_tokens=16, l3=True, min_prefetch_tokens=0, auto_ack=False)
    request(c, A)
    ack_all(c)  # backup, then the store it emits
    c.evict(8)
    c.hier.evict_l2(8)
    assert c.num_nodes == 1 and in_l3(c, A) == [True, True]
    return c


def test_a_failed_prefetch_is_not_retried_by_later_requests():
    c = _a_in_l3_only()
    n0 = len(c.actions)
    seq = TokenSeq(A)
    storage = []
    for _ in range(5):
        m = c.match(seq)
        storage.append(m.storage_tokens)
        c.lock(m)
        c.prefetch(m, seq)
        c.unlock(m)
        ack_all(c, ok=False)
        check(c)
    kinds = [str(t.kind) for t in transfers(c, n0)]
    assert (len(kinds), set(kinds), storage) == (1, {"prefetch"}, [8, 0, 0, 0, 0])  # one read of the bad run
    assert in_l3(c, A) == [False, False] and c.hier.failed == 1
    assert c.num_nodes == 1 and l2_free(c) == 4


@pytest.mark.parametrize("unlock_first", [True, False])
def test_a_prefetch_that_fails_while_its_node_is_locked_leaves_no_node_on_no_tier(unlock_first):
    """With SWA (components vote: a node in flight is not healed with the request's pages), a
    request inserts up to the prefetch's node still in flight and keeps the insert's node
    locked, as an engine keeps an unfinished request's insert; the FULL prefetch then fails,
    and the request unlocks before or after the SWA prefetch's ack."""
    c = RadixCache(CacheConfig(page_size=4, capacity_tokens=32, swa=SwaConfig(window_tokens=8, capacity_tokens=48),
                               tiers=TierConfig(l2_tokens=32, l3=True, min_prefetch_tokens=0)), auto_ack=False)
    ReplayStepper(c).step(list(A), [9])
    ack_all(c)
    c.evict(32)
    c.hier.evict_l2(32)
    ack_all(c)
    assert c.num_nodes == 1 and in_l3(c, A) == [True, True]
    seq = TokenSeq(AB)
    m = c.load(_locked(c, seq), seq)  # emits the prefetch of A (FULL, SWA)
    slots, ok = request_slots(c, 16, 0, 16)
    res = c.insert(seq, 16, c.alloc(4), 0, after=m, slots=slots)
    held = MatchResult(res.handle.node.end, res.handle)
    c.lock(held)
    c.unlock(m)
    a = node_at(c, A)
    assert a is res.handle.node and (a.pending, a.lock_ref) == (2, 1)
    (tid,) = [t for t, (tr, _) in c.hier.pending.items() if tr.kind == "prefetch" and tr.component == "full"]
    c.ack(tid, ok=False)
    if unlock_first:
        c.unlock(held)
    ack_all(c)
    if not unlock_first:
        assert (a.alive, a.value, a.host, a.pending, a.lock_ref) == (True, None, None, 0, 1)  # held
        c.unlock(held)
    check(c)  # before the fix: "node #3: on no tier and nothing in flight"
    assert (c.num_nodes, a.alive, l2_free(c)) == (1, False, 8)


def _locked(c, seq):
    m = c.match(seq)
    c.lock(m)
    return m


@pytest.mark.parametrize("store, per", [(StorageIndex(None), 1), (StorageIndex(4), 1),
                                        (MooncakeStore(8, objects_per_page=2, ssd_pages=8), 2)])
def test_discard_forgets_pages_wherever_the_store_holds_them(store, per):
    keys = np.array([11, 12, 13, 14], dtype=np.uint64)
    store.put(keys)
    store.touch(keys[:2])
    assert store.leading(keys) == 4
    store.discard(keys[1:3])
    assert (store.leading(keys), len(store), [int(k) in store for k in keys]) == (1, 2 * per, [True, False, False, True])
    store.put(keys)  # written again: present again
    assert store.leading(keys) == 4


def test_insert_after_a_match_whose_storage_run_is_not_loaded_is_refused():
    """`insert(after=m)` resumes the walk at m's node from m.cached_tokens: a match that still
    counts an L3 run it has not loaded (cached 8, node = the root) would file the new edge under
    the root with the wrong tokens; it is refused, and the tree is unchanged."""
    c = _a_in_l3_only()
    seq = TokenSeq(A)
    m = c.match(seq)
    assert (m.cached_tokens, m.storage_tokens, m.handle.node.end) == (8, 8, 0)
    c.lock(m)
    with pytest.raises(ValueError, match="ending at its node"):
        c.insert(seq, 8, c.alloc(2), 0, after=m)
    c.unlock(m)
    assert c.num_nodes == 1


def test_a_read_that_fails_on_one_engine_is_seen_by_another_engines_kept_match():
    """Two caches on one shared L3 store (a fleet): engine A's failed prefetch drops the run
    from the store, which must change the store's version, or engine B keeps reusing a match
    that still counts the dropped run (8 storage tokens instead of 0)."""
    from cache_core.tiers.store import make_store

    cfg = CacheConfig(page_size=4, capacity_tokens=32, tiers=TierConfig(l2_tokens=32, l3=True, min_prefetch_tokens=0))
    store = make_store(cfg.tiers, 4)
    a, b = (RadixCache(cfg, auto_ack=False, storage=store) for _ in range(2))
    seq_a, seq_b = TokenSeq(np.arange(8)), TokenSeq(np.arange(8))
    store.put(seq_a.page_keys(4)[:2])  # another engine stored the two pages
    first = b.match(seq_b, 8).storage_tokens
    m = a.match(seq_a, 8)
    a.lock(m)
    assert a.prefetch(m, seq_a) == 8
    a.unlock(m)
    ack_all(a, ok=False)
    assert [int(k) in store for k in seq_a.page_keys(4)[:2]] == [False, False]
    assert (first, b.match(seq_b, 8).storage_tokens) == (8, 0)
