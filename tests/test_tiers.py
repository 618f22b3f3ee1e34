"""HiCache tiers (cache_core/tiers/hierarchy.py): exact tier transitions, demotion vs drop, storage hits,
the device/host/storage split of a match, in-flight protection with manual acks, and the
per-round shape of a small multi-turn workload on L1 / L1+L2 / L1+L2+L3.

Every test drives a `RadixCache` through its public calls (match -> lock -> load -> alloc/evict
-> insert -> unlock, `ack`, or `ReplayStepper.step`) and reads the tree only to name the node
that holds a given prefix (`tree.path_nodes`, read-only).

Behaviour that once contradicted the tiers/hierarchy.py docstring or the Transfer contract in
actions.py is pinned here by minimal reproducers that assert the correct behaviour.
"""
from __future__ import annotations

import numpy as np
import pytest

from cache_core import CacheConfig, RadixCache, ReplayStepper, TokenSeq
from cache_core import invariants
from cache_core.actions import L1, L2, L3, Alloc, Free, Transfer
from cache_core.keys import page_keys
from cache_core.tiers import TierConfig
from scenarios.workloads import MultiTurnConfig, MultiTurnWorkload


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def make(P=4, l1=32, auto_ack=True, **tiers):
    return RadixCache(CacheConfig(page_size=P, capacity_tokens=l1, tiers=TierConfig(**tiers)),
                      record_actions=True, auto_ack=auto_ack)


def toks(*ranges):
    """Concatenate runs of token ids: toks((0, 8), (100, 104)) = [0..7, 100..103]."""
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


def transfers(cache, since=0):
    return [a for a in cache.actions[since:] if isinstance(a, Transfer)]


def shape(ts):
    return [(t.kind, t.src_tier, t.dst_tier, t.tokens) for t in ts]


def node_at(cache, tokens):
    """The node whose edge ends exactly at len(tokens) on tokens' path, or None."""
    seq = TokenSeq(tokens)
    for nd, k in cache.tree.path_nodes(seq.data, seq.length):
        if nd.end == seq.length and k == nd.num_tokens:
            return nd
    return None


def keys_of(tokens, P):
    return page_keys(np.asarray(tokens, dtype=np.int64), P)[0]


def in_l3(cache, tokens, lo=0):
    """Membership in L3 of every page key of tokens (from page `lo` on)."""
    return [int(k) in cache.hier.storage for k in keys_of(tokens, cache.page_size)[lo:]]


def request(cache, tokens, limit=None):
    """One request: match, lock, load, evict/alloc, insert, unlock (with auto_ack=False its
    transfers stay pending). Returns the match in force after `load` (cached_tokens = what
    was reused)."""
    P = cache.page_size
    seq = TokenSeq(tokens)
    m = cache.match(seq, limit)
    cache.lock(m)
    m = cache.load(m, seq)
    aligned = seq.length // P * P
    n = (aligned - m.cached_tokens) // P
    if n > 0:
        if cache.free_tokens < n * P:
            cache.evict(n * P - cache.free_tokens)
        pages = cache.alloc(n)
        assert pages is not None
        cache.insert(seq, aligned, pages, m.cached_tokens, after=m)
    cache.unlock(m)
    check(cache)
    return m


def check(cache):
    """invariants.check (its dump prints host-only nodes too)."""
    invariants.check(cache)


def ack_all(cache, ok=True):
    """Acknowledge every pending transfer in id order, including those the acks emit."""
    while cache.hier.pending:
        cache.ack(min(cache.hier.pending), ok)


def l2_free(cache):
    return cache.hier.pool.free_pages


def l1_free(cache):
    return cache.full.pool.free_pages


A = toks((0, 8))
AB = toks((0, 8), (100, 108))
ABC = toks((0, 8), (100, 108), (200, 208))
X = toks((500, 516))
Y = toks((600, 608))


# ---------------------------------------------------------------------------------------------
# 1. write policies and the L3 write mode
# ---------------------------------------------------------------------------------------------
def test_write_through_backs_up_new_leaf_at_insert_and_stores_on_insert():
    c = make(hicache_ratio=2, l3=True, l3_write="on_insert", kv_bytes_per_token=10)
    assert c.hier.pool.capacity_pages == 16
    request(c, A)
    a = node_at(c, A)
    allocs = [x for x in c.actions if isinstance(x, Alloc)]
    assert [x.indices for x in allocs] == [(0, 1)]
    ts = transfers(c)
    assert shape(ts) == [("backup", L1, L2, 8), ("store", L2, L3, 8)]
    backup, store = ts
    assert backup.src.tolist() == [0, 1] == a.value.tolist()
    assert backup.dst.tolist() == a.host.tolist() == [0, 1]
    assert backup.keys.tolist() == keys_of(A, 4).tolist() == store.keys.tolist()
    assert store.src.tolist() == [0, 1] and store.dst is None
    assert backup.bytes == store.bytes == 80 and backup.component == "full"
    assert in_l3(c, A) == [True, True] and len(c.hier.storage) == 2
    assert l2_free(c) == 14 and l1_free(c) == 6
    # extending the prefix backs up (and stores) only the new leaf
    n0 = len(c.actions)
    request(c, AB)
    b = node_at(c, AB)
    ts = transfers(c, n0)
    assert shape(ts) == [("backup", L1, L2, 8), ("store", L2, L3, 8)]
    assert ts[0].src.tolist() == b.value.tolist() == [2, 3]
    assert ts[0].dst.tolist() == b.host.tolist() == [2, 3]
    assert ts[1].keys.tolist() == keys_of(AB, 4)[2:].tolist()
    assert in_l3(c, AB) == [True] * 4 and len(c.hier.storage) == 4
    assert a.host.tolist() == [0, 1]


def test_write_through_backs_up_ancestors_without_a_copy_top_down():
    # L2 holds 4 pages: X (4 pages, on L1 too) fills it, so A gets no backup at insert
    c = make(l1=32, l2_tokens=16)
    request(c, X)
    assert shape(transfers(c)) == [("backup", L1, L2, 16)]
    request(c, A)
    a = node_at(c, A)
    assert shape(transfers(c)) == [("backup", L1, L2, 16)]
    assert a.host is None and l2_free(c) == 0
    # X (least recently used) is demoted from L1: now a host-only leaf that L2 may evict
    assert c.evict(1) == 16
    x = node_at(c, X)
    assert x.value is None and x.host.tolist() == [0, 1, 2, 3]
    n0 = len(c.actions)
    request(c, AB)  # B's backup first backs up A (no copy yet), evicting X from L2
    ts = transfers(c, n0)
    assert shape(ts) == [("backup", L1, L2, 8), ("backup", L1, L2, 8)]
    assert ts[0].src.tolist() == a.value.tolist() and ts[0].dst.tolist() == a.host.tolist()
    b = node_at(c, AB)
    assert ts[1].src.tolist() == b.value.tolist() and ts[1].dst.tolist() == b.host.tolist()
    assert node_at(c, X) is None and not x.alive
    assert l2_free(c) == 0
    assert c.hier.evicted_l2_tokens == 16


@pytest.mark.parametrize("threshold", [1, 2, 3])
def test_write_through_selective_backs_up_after_threshold_inserts(threshold):
    """SGLang 0.5.23 counts a node's hits at insert (matches count none) and backs a node up
    the moment its count reaches the threshold."""
    c = make(hicache_ratio=2, l3=True, write_policy="write_through_selective",
             write_through_threshold=threshold)
    request(c, A)  # its insert counts A's first hit
    for _ in range(3):
        c.match(TokenSeq(A))  # matches count no hit
    for i in range(1, threshold):
        assert transfers(c) == [], i
        c.insert(TokenSeq(A), len(A))  # one more hit, no new tokens
    a = node_at(c, A)
    ts = transfers(c)
    assert shape(ts) == [("backup", L1, L2, 8), ("store", L2, L3, 8)]
    assert ts[0].src.tolist() == a.value.tolist() and ts[0].dst.tolist() == a.host.tolist()
    assert in_l3(c, A) == [True, True]
    c.insert(TokenSeq(A), len(A))  # already backed up: nothing more
    assert len(transfers(c)) == 2
    check(c)


def test_write_through_selective_counts_inserts_through_each_node():
    c = make(hicache_ratio=2, write_policy="write_through_selective", write_through_threshold=2)
    request(c, A)  # A: 1 hit
    assert transfers(c) == []
    request(c, AB)  # its insert walks through A (2 hits -> backed up); B is new (1)
    ts = transfers(c)
    assert shape(ts) == [("backup", L1, L2, 8)]
    assert ts[0].src.tolist() == node_at(c, A).value.tolist()
    assert node_at(c, AB).host is None
    c.match(TokenSeq(AB))  # a match counts nothing
    assert len(transfers(c)) == 1
    c.insert(TokenSeq(AB), len(AB))  # B: 2 hits
    ts = transfers(c)
    assert shape(ts) == [("backup", L1, L2, 8)] * 2
    assert ts[1].src.tolist() == node_at(c, AB).value.tolist()
    check(c)


def test_write_through_selective_lower_half_of_a_split_gets_no_hit():
    c = make(P=1, l1=16, hicache_ratio=2, write_policy="write_through_selective", write_through_threshold=2)
    request(c, [1, 2, 3, 4])  # its insert: 1 hit
    c.insert(TokenSeq([1, 2, 9]), 3, c.alloc(3), 0)  # split: [1,2] 1 + 1 hits, [3,4] keeps 1, [9] 1
    assert shape(transfers(c)) == [("backup", L1, L2, 2)]
    assert node_at(c, [1, 2, 3, 4]).host is None
    check(c)


def test_on_hit_takes_the_nodes_count_hits_walked():
    """The insert offers `on_hit` (top-down) the nodes `tree.count_hits` walked and
    returned, instead of walking the path a second time: a count_hits reporting only the
    leaf B (A's hit still counted) gets only B offered."""
    c = make(hicache_ratio=2, write_policy="write_through_selective", write_through_threshold=2)
    request(c, A)
    real_count, real_hit = c.tree.count_hits, c.hier.on_hit
    calls = []
    c.tree.count_hits = lambda node, inserted_len=0: real_count(node, inserted_len)[:1]
    c.hier.on_hit = lambda n: (calls.append(n.end), real_hit(n))
    request(c, AB)
    assert calls == [len(AB)]
    assert node_at(c, A).hits == 2 and node_at(c, A).host is None  # counted, never offered


def test_write_back_backs_up_only_when_l1_evicts():
    c = make(hicache_ratio=2, l3=True, write_policy="write_back")
    request(c, A)
    request(c, AB)
    a, b = node_at(c, A), node_at(c, AB)
    assert transfers(c) == [] and a.host is None and b.host is None
    b_l1 = b.value.tolist()
    n0 = len(c.actions)
    assert c.evict(8) == 8  # B is the only device leaf: backed up (A first, top-down), demoted
    acts = c.actions[n0:]
    ts = [x for x in acts if isinstance(x, Transfer)]
    assert shape(ts) == [("backup", L1, L2, 8), ("store", L2, L3, 8), ("backup", L1, L2, 8), ("store", L2, L3, 8)]
    assert ts[0].src.tolist() == a.value.tolist() and ts[2].src.tolist() == b_l1
    assert ts[2].dst.tolist() == b.host.tolist()
    frees = [x for x in acts if isinstance(x, Free)]
    assert [x.indices for x in frees] == [tuple(b_l1)]
    assert acts.index(frees[0]) > acts.index(ts[2])  # pages freed after their backup
    assert b.alive and b.value is None and a.value is not None
    assert in_l3(c, AB) == [True] * 4
    check(c)


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_l3_on_l2_evict_stores_when_l2_evicts(policy):
    c = make(l1=8, l2_tokens=8, l3=True, l3_write="on_l2_evict", write_policy=policy)
    request(c, A)
    a = node_at(c, A)
    if policy == "write_through":
        assert shape(transfers(c)) == [("backup", L1, L2, 8)]
    else:
        assert transfers(c) == []
    assert len(c.hier.storage) == 0
    a_host = None if a.host is None else a.host.tolist()
    n0 = len(c.actions)
    request(c, Y)  # L1 (2 pages) must drop A: demoted (under write_back backed up first)
    ts = transfers(c, n0)
    if policy == "write_through":
        # Y's backup needs L2: A (now a host-only leaf) goes, handed to L3 first
        assert shape(ts) == [("store", L2, L3, 8), ("backup", L1, L2, 8)]
        assert ts[0].src.tolist() == a_host == [0, 1] and ts[0].keys.tolist() == keys_of(A, 4).tolist()
        assert ts[1].dst.tolist() == node_at(c, Y).host.tolist() == [0, 1]
        assert not a.alive and node_at(c, A) is None
    else:
        # A's backup at L1 eviction; Y gets none; nothing in L3 until L2 evicts A
        assert shape(ts) == [("backup", L1, L2, 8)]
        assert a.alive and a.value is None and ts[0].dst.tolist() == a.host.tolist()
        assert node_at(c, Y).host is None and len(c.hier.storage) == 0
        a_host = a.host.tolist()
        n1 = len(c.actions)
        assert c.hier.evict_l2(1) == 8
        ts = transfers(c, n1)
        assert shape(ts) == [("store", L2, L3, 8)] and ts[0].src.tolist() == a_host
        assert not a.alive
    assert in_l3(c, A) == [True, True] and len(c.hier.storage) == 2
    check(c)


def test_l3_on_insert_does_not_store_again_at_l2_eviction():
    c = make(l1=8, l2_tokens=8, l3=True, l3_write="on_insert")
    request(c, A)
    assert shape(transfers(c)) == [("backup", L1, L2, 8), ("store", L2, L3, 8)]
    c.evict(8)
    n0 = len(c.actions)
    assert c.hier.evict_l2(8) == 8
    assert transfers(c, n0) == []
    assert node_at(c, A) is None and in_l3(c, A) == [True, True]


def test_bounded_l3_drops_least_recently_used_pages():
    c = make(l1=8, l2_tokens=8, l3=True, l3_tokens=12)  # 3 pages
    request(c, A)
    request(c, Y)
    assert in_l3(c, A) == [False, True] and in_l3(c, Y) == [True, True]
    assert c.hier.storage.evicted_pages == 1


def test_prefetch_refreshes_l3_recency():
    Z = toks((700, 708))
    c = make(l1=8, l2_tokens=16, l3=True, l3_tokens=16, min_prefetch_tokens=0)  # L3: 4 pages
    request(c, A)
    request(c, Y)  # A demoted from L1
    assert c.hier.evict_l2(8) == 8 and node_at(c, A) is None
    assert in_l3(c, A) == [True, True] and in_l3(c, Y) == [True, True]
    m = request(c, A)  # storage hit: prefetch touches A's keys (now more recent than Y's)
    assert m.storage_tokens == 8 and m.cached_tokens == 8
    request(c, Z)  # storing Z drops the 2 least recently used pages: Y's
    assert in_l3(c, A) == [True, True] and in_l3(c, Y) == [False, False] and in_l3(c, Z) == [True, True]
    assert c.hier.storage.evicted_pages == 2


# ---------------------------------------------------------------------------------------------
# 2. demotion vs drop
# ---------------------------------------------------------------------------------------------
def test_l1_eviction_demotes_a_node_with_an_l2_copy_and_load_brings_it_back():
    c = make(l1=16, hicache_ratio=2)
    request(c, A)
    a = node_at(c, A)
    host = a.host.tolist()
    n0 = len(c.actions)
    assert c.evict(8) == 8
    assert [type(x).__name__ for x in c.actions[n0:]] == ["Free"]
    assert a.alive and a.value is None and a.host.tolist() == host
    assert c.num_nodes == 2 and l1_free(c) == 4 and l2_free(c) == 6
    assert c.stats()["tiers"]["l1_demoted_tokens"] == 8
    check(c)
    seq = TokenSeq(AB)
    m = c.match(seq)
    assert (m.cached_tokens, m.device, m.host_tokens, m.storage_tokens, m.traversed) == (8, 0, 8, 0, 8)
    c.lock(m)
    n0 = len(c.actions)
    m2 = c.load(m, seq)
    ts = transfers(c, n0)
    assert shape(ts) == [("load", L2, L1, 8)]
    assert ts[0].src.tolist() == host and ts[0].dst.tolist() == a.value.tolist()
    assert (m2.cached_tokens, m2.device, m2.host_tokens) == (8, 0, 8)
    c.unlock(m2)
    m3 = c.match(seq)
    assert (m3.cached_tokens, m3.device, m3.host_tokens) == (8, 8, 0)
    check(c)


def test_replay_reports_host_hits():
    c = make(l1=16, hicache_ratio=2)
    st = ReplayStepper(c)
    r = st.step(A, [9])
    assert (r.cached_tokens, r.cached_host) == (0, 0)
    c.evict(8)
    r = st.step(AB, [9])
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (8, 0, 8, 0)
    assert shape(transfers(c))[-2:] == [("load", L2, L1, 8), ("backup", L1, L2, 8)]


def test_l1_eviction_without_l2_removes_the_node():
    c = make(l1=16, l3=True)  # tiered, but no L2 pool
    assert c.hier.pool is None
    request(c, A)
    assert c.evict(8) == 8
    assert node_at(c, A) is None and c.num_nodes == 1 and transfers(c) == []
    m = c.match(TokenSeq(A))
    assert (m.cached_tokens, m.device, m.host_tokens) == (0, 0, 0)
    check(c)


def test_l1_eviction_with_l2_full_removes_the_node():
    c = make(l1=16, l2_tokens=8)
    request(c, A)  # backed up: L2 is full
    request(c, Y)  # no L2 room and nothing L2 can evict (A is on L1): no copy
    assert node_at(c, Y).host is None and l2_free(c) == 0
    assert c.evict(16) == 16
    a = node_at(c, A)
    assert a is not None and a.value is None and a.host is not None
    assert node_at(c, Y) is None and c.num_nodes == 2
    check(c)


def test_l2_eviction_drops_host_only_leaves_bottom_up():
    c = make(l1=16, hicache_ratio=2)
    request(c, A)
    request(c, AB)
    request(c, X)  # evicts A and AB from L1 (demoted), X on L1 + L2
    a, b = node_at(c, A), node_at(c, AB)
    assert a.value is None and b.value is None and a.host is not None and b.host is not None
    assert c.hier.evict_l2(1) == 8  # only the host-only leaf B is a candidate
    assert not b.alive and a.alive
    assert c.hier.evict_l2(100) == 8  # then A; X (on L1) is never taken
    assert not a.alive and node_at(c, X).host is not None
    assert c.hier.evict_l2(100) == 0
    assert l2_free(c) == 8 - 4  # X's 4 pages
    check(c)


# ---------------------------------------------------------------------------------------------
# 3. storage hits
# ---------------------------------------------------------------------------------------------
def _flushed(min_prefetch):
    """R = 16 tokens, stored in L3 then evicted from L1 and L2 by other requests."""
    c = make(l1=32, hicache_ratio=2, l3=True, min_prefetch_tokens=min_prefetch)
    st = ReplayStepper(c)
    R = toks((1000, 1016))
    st.step(R, [7])
    for i in range(8):
        st.step(toks((2000 + 100 * i, 2016 + 100 * i)), [7])
    assert node_at(c, R) is None and c.tree.path_nodes(TokenSeq(R).data, 16) == []
    assert in_l3(c, R) == [True] * 4
    check(c)
    return c, st, R


@pytest.mark.parametrize("min_prefetch", [0, 8, 16])
def test_storage_hit_prefetches_then_loads(min_prefetch):
    c, st, R = _flushed(min_prefetch)
    prompt = np.concatenate([R, toks((3000, 3008))])  # match limit 20: R's 16 tokens in L3
    m = c.match(TokenSeq(prompt), 20)
    assert (m.cached_tokens, m.device, m.host_tokens, m.storage_tokens, m.traversed) == (16, 0, 0, 16, 0)
    n0 = len(c.actions)
    r = st.step(prompt, [7])
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (16, 0, 0, 16)
    ts = transfers(c, n0)
    assert shape(ts)[:2] == [("prefetch", L3, L2, 16), ("load", L2, L1, 16)]
    pre, load = ts[:2]
    assert pre.src is None and pre.keys.tolist() == keys_of(R, 4).tolist()
    r_node = node_at(c, R)
    assert pre.dst.tolist() == r_node.host.tolist() == load.src.tolist()
    assert load.dst.tolist() == r_node.value.tolist()
    check(c)


@pytest.mark.parametrize("min_prefetch", [17, 20, 256])
def test_storage_runs_shorter_than_min_prefetch_are_ignored(min_prefetch):
    c, st, R = _flushed(min_prefetch)
    prompt = np.concatenate([R, toks((3000, 3008))])
    m = c.match(TokenSeq(prompt), 20)
    assert (m.cached_tokens, m.device, m.host_tokens, m.storage_tokens) == (0, 0, 0, 0)
    n0 = len(c.actions)
    r = st.step(prompt, [7])
    assert (r.cached_tokens, r.cached_storage) == (0, 0)
    assert [t.kind for t in transfers(c, n0)] == ["backup", "store"]  # recomputed, backed up again


# ---------------------------------------------------------------------------------------------
# 4. the device / host / storage split
# ---------------------------------------------------------------------------------------------
def test_match_split_device_then_host_then_storage():
    c = make(l1=64, hicache_ratio=2, l3=True, min_prefetch_tokens=0)
    request(c, A)
    request(c, AB)
    request(c, ABC)
    assert c.evict(16) == 16  # C, then B, demoted
    assert c.hier.evict_l2(1) == 8  # C leaves L2 (still in L3)
    assert node_at(c, ABC) is None and node_at(c, AB).value is None
    full = np.concatenate([ABC, toks((300, 308))])
    m = c.match(TokenSeq(full))
    assert (m.device, m.host_tokens, m.storage_tokens, m.traversed, m.cached_tokens) == (8, 8, 8, 16, 24)
    for limit, want in [(0, (0, 0, 0, 0)), (4, (4, 0, 0, 4)), (8, (8, 0, 0, 8)), (12, (8, 4, 0, 12)),
                        (16, (8, 8, 0, 16)), (20, (8, 8, 4, 20)), (24, (8, 8, 8, 24)), (32, (8, 8, 8, 24)),
                        (31, (8, 8, 8, 24))]:
        m = c.match(TokenSeq(full), limit)
        assert (m.device, m.host_tokens, m.storage_tokens, m.cached_tokens) == want, limit
    check(c)
    seq = TokenSeq(full)
    m = c.match(seq)
    c.lock(m)
    n0 = len(c.actions)
    m = c.load(m, seq)
    # B was split at 12 by the limit-12 match: two loads, then C through L2
    assert shape(transfers(c, n0)) == [("load", L2, L1, 4), ("load", L2, L1, 4), ("prefetch", L3, L2, 8),
                                       ("load", L2, L1, 8)]
    assert (m.cached_tokens, m.device, m.host_tokens, m.storage_tokens) == (24, 8, 8, 8)
    c.unlock(m)
    m = c.match(seq)
    assert (m.device, m.host_tokens, m.storage_tokens, m.cached_tokens) == (24, 0, 0, 24)
    check(c)


# ---------------------------------------------------------------------------------------------
# 5. in-flight transfers (auto_ack=False)
# ---------------------------------------------------------------------------------------------
def test_pending_backup_is_never_evicted_and_its_slots_are_held():
    c = make(l1=16, l2_tokens=16, auto_ack=False)
    request(c, A)
    a = node_at(c, A)
    (tid,) = c.hier.pending
    t = c.hier.pending[tid][0]
    assert (t.kind, t.src.tolist(), t.dst.tolist()) == ("backup", [0, 1], [0, 1])
    assert a.host is None and a.pending == 1
    assert l2_free(c) == 2 and set(t.dst.tolist()).isdisjoint(c.hier.pool.free_view().tolist())
    assert c.evict(16) == 0 and a.value.tolist() == [0, 1] and l1_free(c) == 2
    assert c.hier.evict_l2(16) == 0
    check(c)
    c.ack(tid)
    assert c.hier.pending == {} and a.host.tolist() == [0, 1] and a.pending == 0
    assert l2_free(c) == 2
    assert c.evict(16) == 8 and a.value is None  # now it can be demoted
    check(c)


def test_failed_backup_frees_l2_slots_and_keeps_l1():
    c = make(l1=16, l2_tokens=16, auto_ack=False)
    request(c, A)
    a = node_at(c, A)
    (tid,) = c.hier.pending
    c.ack(tid, ok=False)
    assert a.host is None and a.value.tolist() == [0, 1] and l2_free(c) == 4
    assert c.stats()["tiers"]["failed"] == 1
    check(c)
    m = c.match(TokenSeq(A))
    assert (m.device, m.host_tokens) == (8, 0)
    assert c.evict(8) == 8 and node_at(c, A) is None  # no L2 copy: removed
    check(c)


def _demoted_A(auto_ack=False, l1=16):
    c = make(l1=l1, l2_tokens=16, auto_ack=auto_ack)
    request(c, A)
    ack_all(c)
    assert c.evict(8) == 8
    return c, node_at(c, A)


def test_pending_load_is_never_evicted_and_counts_only_once_loaded():
    c, a = _demoted_A()
    host = a.host.tolist()
    seq = TokenSeq(AB)
    m = c.match(seq)
    assert (m.cached_tokens, m.device, m.host_tokens) == (8, 0, 8)
    c.lock(m)
    m = c.load(m, seq)
    (tid,) = c.hier.pending
    t = c.hier.pending[tid][0]
    assert (t.kind, t.src_tier, t.dst_tier, t.tokens) == ("load", L2, L1, 8)
    assert t.src.tolist() == host
    assert m.cached_tokens == 0 and m.device == 0  # not loaded yet: not cached
    assert a.value is None and a.pending == 1
    assert l1_free(c) == 2 and set(t.dst.tolist()).isdisjoint(c.full.pool.free_view().tolist())
    assert c.alloc(3) is None  # the load's slots are not handed out
    c.unlock(m)
    assert c.evict(16) == 0 and c.hier.evict_l2(16) == 0
    assert a.alive and a.host.tolist() == host
    check(c)
    m = c.match(seq)
    assert (m.device, m.host_tokens) == (0, 8)
    c.ack(tid)
    assert a.value.tolist() == t.dst.tolist() and a.pending == 0 and l1_free(c) == 2
    m = c.match(seq)
    assert (m.cached_tokens, m.device, m.host_tokens) == (8, 8, 0)
    check(c)


def test_failed_load_frees_l1_slots_and_keeps_the_host_copy():
    c, a = _demoted_A()
    host = a.host.tolist()
    seq = TokenSeq(A)
    m = c.match(seq)
    c.lock(m)
    m = c.load(m, seq)
    (tid,) = c.hier.pending
    assert l1_free(c) == 2
    c.unlock(m)
    c.ack(tid, ok=False)
    assert a.value is None and a.host.tolist() == host and l1_free(c) == 4
    check(c)
    m = c.match(seq)
    assert (m.cached_tokens, m.device, m.host_tokens) == (8, 0, 8)
    assert c.hier.evict_l2(8) == 8 and not a.alive  # still a valid L2 candidate
    check(c)


def test_pending_prefetch_then_load_with_manual_acks():
    c = make(l1=16, l2_tokens=16, l3=True, min_prefetch_tokens=0, auto_ack=False)
    request(c, A)
    (b,) = c.hier.pending
    c.ack(b)
    (st,) = c.hier.pending  # the backup's ack emitted the store
    assert c.hier.pending[st][0].kind == "store" and len(c.hier.storage) == 0
    c.ack(st)
    c.evict(8)
    c.hier.evict_l2(8)
    assert c.num_nodes == 1 and in_l3(c, A) == [True, True] and l2_free(c) == 4
    seq = TokenSeq(AB)
    m = c.match(seq)
    assert (m.cached_tokens, m.storage_tokens) == (8, 8)
    c.lock(m)
    m = c.load(m, seq)
    (tid,) = c.hier.pending
    t = c.hier.pending[tid][0]
    assert (t.kind, t.src_tier, t.dst_tier, t.tokens, t.src) == ("prefetch", L3, L2, 8, None)
    assert m.cached_tokens == 0 and l2_free(c) == 2
    assert set(t.dst.tolist()).isdisjoint(c.hier.pool.free_view().tolist())
    c.unlock(m)
    assert c.hier.evict_l2(16) == 0 and c.evict(16) == 0
    check(c)
    c.ack(tid)
    a = node_at(c, A)
    assert a.host.tolist() == t.dst.tolist() and a.value is None
    m = c.match(seq)
    assert (m.device, m.host_tokens, m.storage_tokens) == (0, 8, 0)
    c.lock(m)
    m = c.load(m, seq)
    (tid,) = c.hier.pending
    assert c.hier.pending[tid][0].kind == "load" and m.cached_tokens == 0
    c.ack(tid)
    c.unlock(m)
    m = c.match(seq)
    assert (m.device, m.host_tokens, m.cached_tokens) == (8, 0, 8)
    check(c)


def test_failed_prefetch_frees_l2_slots_and_drops_the_node():
    c = make(l1=16, l2_tokens=16, l3=True, min_prefetch_tokens=0, auto_ack=False)
    request(c, A)
    ack_all(c)
    c.evict(8)
    c.hier.evict_l2(8)
    seq = TokenSeq(A)
    m = c.match(seq)
    c.lock(m)
    m = c.load(m, seq)
    (tid,) = c.hier.pending
    c.unlock(m)
    c.ack(tid, ok=False)
    assert c.num_nodes == 1 and l2_free(c) == 4
    m = c.match(seq)
    assert (m.cached_tokens, m.storage_tokens) == (0, 0)  # unreadable: L3 forgot it (tiers/failures.py)
    check(c)


def test_replay_heal_of_a_host_only_node_beyond_the_match_limit():
    c = make(l1=32, hicache_ratio=2)
    st = ReplayStepper(c)
    st.step(A, [50])  # A (8 tokens) cached and backed up
    assert c.evict(8) == 8  # A demoted
    # limit (8-1)//4*4 = 4: A is split, [0,4) loaded; S = A + 4 new tokens: [4,8) is healed on
    # L1 with the request's first page, the new leaf must get the second page only
    r = st.step(A, [60, 61, 62, 63, 64])
    assert (r.cached_tokens, r.cached_host) == (4, 4)
    check(c)  # actual: "node #4: 2 L1 pages for 4 tokens", "a page is in two places"


# -- reproducers of in-flight bugs ----------------------------------------------------------------
def test_split_of_a_node_with_a_pending_backup():
    c = make(P=1, l1=8, hicache_ratio=2, auto_ack=False)
    request(c, [1, 2, 3, 4])
    (tid,) = c.hier.pending
    c.match(TokenSeq([1, 2, 9]))  # splits [1,2,3,4] into [1,2] + [3,4]
    c.ack(tid)
    check(c)  # actual: "node #2: 4 L2 pages for 2 tokens", L2 not prefix-closed
    assert node_at(c, [1, 2]).host is not None


def test_two_requests_loading_the_same_host_node():
    c, a = _demoted_A()
    seq = TokenSeq(AB)
    m1 = c.match(seq)
    c.lock(m1)
    m1 = c.load(m1, seq)
    m2 = c.match(seq)
    c.lock(m2)
    m2 = c.load(m2, seq)
    loads = [t for t, _ in c.hier.pending.values() if t.kind == "load"]
    assert len(loads) == 1  # actual: 2 loads of the same node


def test_two_requests_loading_the_same_host_node_invariants():
    c, a = _demoted_A()
    seq = TokenSeq(AB)
    for _ in range(2):
        m = c.match(seq)
        c.lock(m)
        m = c.load(m, seq)
        c.unlock(m)
    for tid in sorted(c.hier.pending):
        c.ack(tid)
    check(c)


def test_store_source_pages_are_held_while_in_flight():
    c = make(l1=8, l2_tokens=8, l3=True, l3_write="on_l2_evict", auto_ack=False)
    request(c, A)
    c.ack(1)
    c.evict(8)
    c.hier.evict_l2(8)
    (t, _), = c.hier.pending.values()
    assert t.kind == "store" and t.src.tolist() == [0, 1]
    assert set(t.src.tolist()).isdisjoint(c.hier.pool.free_view().tolist())  # actual: both free


def test_failed_load_with_a_child_inserted_meanwhile():
    c, a = _demoted_A(l1=32)
    seq = TokenSeq(AB)
    m = c.match(seq)
    c.lock(m)
    m = c.load(m, seq)
    (tid,) = c.hier.pending
    pages = c.alloc(4)
    c.insert(seq, 16, pages, 0, after=m)
    c.unlock(m)
    check(c)
    c.ack(tid, ok=False)
    check(c)  # actual: "on L1 below a parent that is not"


def test_successful_prefetch_with_a_child_inserted_meanwhile():
    c = make(l1=32, l2_tokens=32, l3=True, min_prefetch_tokens=0, auto_ack=False)
    request(c, A)
    ack_all(c)
    c.evict(8)
    c.hier.evict_l2(8)
    seq = TokenSeq(AB)
    m = c.match(seq)
    c.lock(m)
    m = c.load(m, seq)
    (tid,) = c.hier.pending
    assert m.cached_tokens == 0
    pages = c.alloc(4)
    c.insert(seq, 16, pages, 0, after=m)
    c.unlock(m)
    c.ack(tid)
    check(c)  # actual: "on L1 below a parent that is not"


def test_match_through_an_in_flight_prefetch():
    c = make(l1=32, l2_tokens=32, l3=True, min_prefetch_tokens=0, auto_ack=False)
    request(c, A)
    ack_all(c)
    c.evict(8)
    c.hier.evict_l2(8)
    seq = TokenSeq(AB)
    m = c.match(seq)
    c.lock(m)
    m = c.load(m, seq)
    c.unlock(m)
    assert [t.kind for t, _ in c.hier.pending.values()] == ["prefetch"]
    m2 = c.match(seq)
    c.lock(m2)
    c.load(m2, seq)
    assert m2.host_tokens == 0  # actual: 8
    assert all(t.kind != "load" or t.src is not None for t, _ in c.hier.pending.values())


def test_failed_prefetch_requeues_its_parent():
    c = make(P=1, l1=8, hicache_ratio=2, l3=True, min_prefetch_tokens=0, auto_ack=False)
    request(c, [1, 2, 3, 4, 5, 6, 7, 8])
    ack_all(c)
    c.evict(8)
    c.hier.evict_l2(8)  # [1..8] only in L3
    assert c.num_nodes == 1
    request(c, [1, 2, 3, 4], limit=0)  # fresh [1..4] on L1
    ack_all(c)
    seq = TokenSeq([1, 2, 3, 4, 5, 6, 7, 8])
    m = c.match(seq)
    assert (m.device, m.storage_tokens) == (4, 4)
    c.lock(m)
    m = c.load(m, seq)
    c.unlock(m)
    (tid,) = [i for i, (t, _) in c.hier.pending.items() if t.kind == "prefetch"]
    assert c.evict(4) == 4  # [1..4] demoted: host-only, with the prefetch node below it
    c.ack(tid, ok=False)
    check(c)  # actual: "node #..: L2 candidate missing from its eviction queue"


def test_failed_backup_after_an_eviction_attempt():
    c = make(l1=16, l2_tokens=16, auto_ack=False)
    request(c, A)
    (tid,) = c.hier.pending
    assert c.evict(8) == 0
    c.ack(tid, ok=False)
    assert c.evict(8) == 8  # actual: 0 (and "evictable leaf missing from the eviction queue")


def test_write_back_failed_backup():
    c = make(l1=16, l2_tokens=16, auto_ack=False, write_policy="write_back")
    request(c, A)
    assert c.evict(8) == 0
    (tid,) = c.hier.pending
    c.ack(tid, ok=False)
    check(c)


def test_failed_load_after_an_l2_eviction_attempt():
    c, a = _demoted_A()
    seq = TokenSeq(A)
    m = c.match(seq)
    c.lock(m)
    m = c.load(m, seq)
    c.unlock(m)
    (tid,) = c.hier.pending
    assert c.hier.evict_l2(8) == 0
    c.ack(tid, ok=False)
    assert c.hier.evict_l2(8) == 8  # actual: 0 ("L2 candidate missing from its eviction queue")


def test_failed_parent_backup_with_backed_up_child():
    c = make(P=1, l1=16, hicache_ratio=2, auto_ack=False)
    request(c, [1, 2, 3, 4])
    request(c, [1, 2, 3, 4, 5, 6])
    # the child's backup waits: its parent's own backup is still in flight (L2 prefix-closed)
    assert [t.tokens for t, _ in c.hier.pending.values()] == [4]
    c.ack(1, ok=False)
    check(c)
    assert node_at(c, [1, 2, 3, 4]).host is None and node_at(c, [1, 2, 3, 4, 5, 6]).host is None


def test_parent_demoted_while_child_loads():
    c = make(P=1, l1=16, hicache_ratio=2, auto_ack=False)
    request(c, [1, 2])
    c.ack(1)
    request(c, [1, 2, 3, 4])
    c.ack(2)
    assert c.evict(2) == 2  # [3,4] demoted
    seq = TokenSeq([1, 2, 3, 4, 5])
    m = c.match(seq)
    c.lock(m)
    m = c.load(m, seq)
    c.unlock(m)
    (tid,) = c.hier.pending
    c.evict(2)  # expected: nothing to demote ([1,2] has a child arriving on L1)
    c.ack(tid)
    check(c)  # actual: "on L1 below a parent that is not"


def test_prefetch_below_a_node_without_l2_copy():
    c = make(P=1, l1=8, hicache_ratio=2, l3=True, min_prefetch_tokens=0, write_policy="write_back")
    request(c, [1, 2, 3, 4])
    c.evict(4)  # backed up (and stored) at eviction
    c.hier.evict_l2(4)
    request(c, [1, 2], limit=0)  # recomputed: on L1, no L2 copy
    m = c.match(TokenSeq([1, 2, 3, 4, 5]))
    assert (m.device_tokens, m.host_tokens, m.storage_tokens, m.cached_tokens) == (2, 0, 2, 4)
    n = len(c.actions)
    assert request(c, [1, 2, 3, 4, 5]).cached_tokens == 4  # storage hit [3,4] below [1,2]
    # [1,2] is backed up (and stored) first so that L2 stays prefix-closed, then [3,4] comes up
    assert shape(transfers(c, n)) == [("backup", L1, L2, 2), ("store", L2, L3, 2), ("prefetch", L3, L2, 2),
                                      ("load", L2, L1, 2)]


@pytest.mark.parametrize("ok", [False, True])
def test_pages_computed_over_an_in_flight_prefetch_become_the_l1_copy(ok):
    """Request 1's prefetch of B (L3 -> L2) is in flight; request 2 computed B itself (its match
    stops above the node in flight) and inserts A+B keeping the result locked, as the engine
    does after a prefill chunk. Its pages must become B's L1 copy: the locked node then has
    L1 slots before and after the prefetch's ack (failed or not), and its slots are request
    2's pages (the torch executor reads them through `slots_of`)."""
    from cache_core.records import MatchResult

    c = make(l1=32, l2_tokens=32, l3=True, min_prefetch_tokens=0, auto_ack=False)
    request(c, AB)
    ack_all(c)
    c.evict(16)
    c.hier.evict_l2(16)  # A and B only in L3
    request(c, A, limit=0)  # A recomputed: on L1
    ack_all(c)
    a_pages = node_at(c, A).value.tolist()
    seq = TokenSeq(AB)
    m1 = c.match(seq)
    assert (m1.device, m1.storage_tokens) == (8, 8)
    c.lock(m1)
    assert c.prefetch(m1, seq) == 8  # request 1 waits for B
    c.unlock(m1)
    (tid,) = c.hier.pending
    m2 = c.match(seq)
    assert m2.cached_tokens == 8  # nothing in flight is reused
    c.lock(m2)
    pages = c.alloc(2)
    res = c.insert(seq, 16, pages, 8, after=m2)
    held = MatchResult(res.handle._node.end, res.handle)
    c.lock(held)
    c.unlock(m2)
    assert c.slots_of(seq, 16)["full"].tolist() == a_pages + pages.tolist()
    assert held.cached_tokens == 16 and res.freed_pages == 0
    c.ack(tid, ok=ok)
    assert c.slots_of(seq, 16)["full"].tolist() == a_pages + pages.tolist()
    check(c)
    c.unlock(held)
    check(c)
    m = c.match(seq)
    assert (m.device, m.host_tokens) == (16, 0)
    assert (node_at(c, AB).host is not None) == ok


def test_invariants_dump_with_host_only_node():
    c, a = _demoted_A(auto_ack=True)
    assert "#" in invariants.dump(c)


# ---------------------------------------------------------------------------------------------
# 6. per-round shape of a multi-turn workload
# ---------------------------------------------------------------------------------------------
ROUNDS_L1 = 1024
# cached tokens per round (4 clients x 12 rounds, 64 new + 4 output tokens a round, page 4)
EXPECT_ROUND_CACHED = {
    "L1": [0, 256, 528, 800, 396, 0, 0, 0, 0, 0, 0, 0],
    "L1+L2": [0, 256, 528, 800, 1072, 1344, 1616, 1820, 1208, 396, 0, 0],
    "L1+L2+L3": [0, 256, 528, 800, 1072, 1344, 1616, 1888, 2160, 2432, 2704, 2976],
}


def _replay_rounds(cache, reqs):
    st = ReplayStepper(cache)
    cached, prompt, per_req, parts = {}, {}, [], {}
    for r in reqs:
        res = st.step(r.prompt, r.output)
        assert not res.rejected
        assert res.cached_device + res.cached_host + res.cached_storage == res.cached_tokens
        cached[r.round] = cached.get(r.round, 0) + res.cached_tokens
        prompt[r.round] = prompt.get(r.round, 0) + res.prompt_tokens
        p = parts.setdefault(r.round, [0, 0, 0])
        p[0] += res.cached_device
        p[1] += res.cached_host
        p[2] += res.cached_storage
        per_req.append(res.cached_tokens)
        if r.rid % 8 == 7:
            check(cache)
    rounds = sorted(cached)
    return ([cached[k] for k in rounds], [cached[k] / prompt[k] for k in rounds], per_req,
            [tuple(parts[k]) for k in rounds])


def test_multi_turn_rounds_l1_l2_l3():
    wl = MultiTurnWorkload(MultiTurnConfig(num_clients=4, num_rounds=12, request_length=64,
                                           output_length=4, page_size=4))
    reqs = list(wl)
    assert len(reqs) == 48
    configs = {
        "L1": CacheConfig(page_size=4, capacity_tokens=ROUNDS_L1),
        "L1+L2": CacheConfig(page_size=4, capacity_tokens=ROUNDS_L1, tiers=TierConfig(hicache_ratio=2)),
        "L1+L2+L3": CacheConfig(page_size=4, capacity_tokens=ROUNDS_L1,
                                tiers=TierConfig(hicache_ratio=2, l3=True, l3_tokens=None, min_prefetch_tokens=0)),
        "unbounded": CacheConfig(page_size=4, capacity_tokens=None),
    }
    out = {name: _replay_rounds(RadixCache(cfg), reqs) for name, cfg in configs.items()}
    for name, want in EXPECT_ROUND_CACHED.items():
        assert out[name][0] == want, name
    l1, l2, l3, unb = (out[k][1] for k in ("L1", "L1+L2", "L1+L2+L3", "unbounded"))
    for r in range(12):
        assert l1[r] <= l2[r] <= l3[r], r
    assert any(a < b for a, b in zip(l1, l2)) and any(a < b for a, b in zip(l2, l3))
    # L1+L2+L3 (unbounded, no minimum prefetch) equals an unbounded L1, round by round and request by request
    assert l3 == unb
    assert out["L1+L2+L3"][0] == out["unbounded"][0]
    assert out["L1+L2+L3"][2] == out["unbounded"][2]
    # where the hits came from: L1 falls off from round 5, L2 from round 8
    parts2, parts3 = out["L1+L2"][3], out["L1+L2+L3"][3]
    assert [p[1] > 0 for p in parts2] == [False] * 4 + [True] * 6 + [False] * 2
    assert all(p[2] == 0 for p in parts2)
    assert [p[2] > 0 for p in parts3] == [False] * 7 + [True] * 5


@pytest.mark.parametrize("keep", [False, True])
def test_pages_below_a_node_not_on_l1_stay_the_callers_when_kept(keep):
    """An insert whose path ends at a node that is not on L1 (demoted A, its load not done)
    cannot cache the new tokens below it. By default their pages are freed; with
    `keep_uncached` (the engine, still computing on them) they stay the caller's, so the KV a
    request computed is never swapped for fresh, empty pages."""
    c, a = _demoted_A(auto_ack=False, l1=32)
    free0 = l1_free(c)
    pages = c.alloc(2)  # the KV of AB's B half (tokens 8..15), computed by the caller
    res = c.insert(TokenSeq(AB), 16, pages, 8, keep_uncached=keep)
    assert res.handle._node is a and a.value is None  # nothing cached below A
    assert l1_free(c) == (free0 - 2 if keep else free0)
    if keep:
        c.free(pages)  # the caller's to free once done
    assert l1_free(c) == free0
    check(c)
