"""Hybrid components on one radix tree (SPEC.md section 2), pinned exactly.

1. The seed's figure-2 case: the traversal reaches n4, n2 is the deepest safe boundary, and
   `MatchResult.lost` names each component that stopped short with its exact tokens.
2. SWA window reuse: the boundary rule (W tokens before it, or all of them when the prefix
   is shorter than W), a new leaf keeps its last ceil(W/P) pages, tombstones block reuse
   until an insert heals them, internal nodes become tombstones while leaves go whole, and a
   window lock protects only the window.
3. MAMBA checkpoint reuse: copy-on-reuse into distinct private slots, no reuse between
   checkpoints, every-K node boundaries, internal tombstones, rejection only without a
   private slot.
4. Sidecars: actions list exactly the pools that follow a source; `slots_of` gives them the
   source's indices; the seed's six-page example (F4, F5 -> S0, S1).
5. FULL-only results unchanged where the hybrid components provably cannot change them.

Trees are built with `ReplayStepper` (and a few direct calls); node internals are read only
where no public call shows the fact (node ends for checkpoint boundaries). `invariants.check`
runs after every mutating step.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

from cache_core import (CacheConfig, MambaConfig, RadixCache, ReplayStepper, SidecarConfig,
                        SwaConfig, TokenSeq)
from cache_core import invariants
from cache_core.actions import L1, Alloc, CopyState, Free
from conftest import TRACE
from helpers import mamba_pl, swa_pl

SWA_WHY = "SWA window incomplete"
MAMBA_WHY = "no MAMBA checkpoint at boundary"

BASE = np.arange(1000, 1400, dtype=np.int64)  # one long document; prompts are its prefixes
OTHER = np.arange(5000, 5400, dtype=np.int64)  # shares nothing with BASE


def seq(*parts) -> np.ndarray:
    return np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])


def hybrid(P, *, W=None, swa_cap=None, mamba=False, slots=None, every=None, cap=None,
           sidecars=(), actions=False) -> RadixCache:
    swa = None if W is None else SwaConfig(window_tokens=W, capacity_tokens=swa_cap)
    mc = MambaConfig(slots=slots, every_tokens=every) if mamba else None
    return RadixCache(CacheConfig(page_size=P, capacity_tokens=cap, swa=swa, mamba=mc,
                                  sidecars=tuple(sidecars)), record_actions=actions)


def step(cache, prompt, output=None):
    r = ReplayStepper(cache).step(prompt, output)
    invariants.check(cache)
    return r


def swa_of(cache, tokens, n=None) -> list:
    return cache.slots_of(tokens, n)["swa"].tolist()


def full_of(cache, tokens, n=None) -> list:
    return cache.slots_of(tokens, n)["full"].tolist()


def cached_at(cache, tokens, limit) -> int:
    """cached_tokens of a bare match (no lock) of tokens[:limit]. A match takes a tick (LRU)
    and may split a node at the accepted boundary."""
    return cache.match(tokens, limit).cached_tokens


def probe(cache, tokens, limit):
    """(cached, traversed, lost) of a match on a copy: the cache itself is left untouched
    (no tick, no split), so a sweep over limits does not reshape the tree under test."""
    m = copy.deepcopy(cache).match(tokens, limit)
    return m.cached_tokens, m.traversed_tokens, m.lost


def sweep(cache, tokens, limits) -> list:
    return [probe(cache, tokens, b)[0] for b in limits]


def node_ends(cache, tokens) -> list:
    """End positions of the nodes on the cached path of `tokens` (read-only)."""
    t = TokenSeq(tokens)
    return [nd.end for nd, _ in cache.tree.path_nodes(t.data, t.length)]


def checkpoint_ends(cache, tokens) -> list:
    """Node ends on the path that hold a live MAMBA checkpoint (read-only)."""
    t = TokenSeq(tokens)
    out = []
    for nd, k in cache.tree.path_nodes(t.data, t.length):
        pl = mamba_pl(nd)
        if k == nd.num_tokens and pl is not None and pl.slot >= 0:
            out.append(nd.end)
    return out


def mamba_tombstone_ends(cache, tokens) -> list:
    t = TokenSeq(tokens)
    return [nd.end for nd, k in cache.tree.path_nodes(t.data, t.length)
            if mamba_pl(nd) is not None and mamba_pl(nd).slot < 0]


# =======================================================================================
# 1. figure 2: the traversal reaches n4, the deepest safe boundary is n2
# =======================================================================================
def _figure2_tree():
    """FULL+SWA+MAMBA, P=2, W=4 (two pages), no every-K. Five requests build the chain
    n1=[0,8) n2=[8,16) n3=[16,24) n4=[24,32) n5=[32,40); each new leaf keeps SWA KV only
    for its last window (2 pages) and a checkpoint at its end."""
    c = hybrid(2, W=4, mamba=True, actions=True)
    for e in (8, 16, 24, 32, 40):
        r = step(c, BASE[: e + 1])  # match limit e, S cut to e tokens
        assert (r.cached_tokens, r.traversed_tokens, r.lost, r.rejected) == (e - 8 if e > 8 else 0,
                                                                              e - 8 if e > 8 else 0, (), False)
    assert node_ends(c, BASE[:40]) == [8, 16, 24, 32, 40]
    assert checkpoint_ends(c, BASE[:40]) == [8, 16, 24, 32, 40]
    T = -1
    assert swa_of(c, BASE[:40]) == [T, T, 0, 1, T, T, 2, 3, T, T, 4, 5, T, T, 6, 7, T, T, 8, 9]
    return c


def test_figure2_traversal_reaches_n4_but_n2_is_the_deepest_safe_boundary():
    c = _figure2_tree()
    T = -1
    # LRU: touch n1, n2, so n3 and n4 are the oldest checkpoints (ties go to the older id)
    assert cached_at(c, BASE, 16) == 16
    assert c.mamba.evict(2) == 2
    assert mamba_tombstone_ends(c, BASE[:40]) == [24, 32]  # n3 and n4 keep their place
    assert checkpoint_ends(c, BASE[:40]) == [8, 16, 40]
    assert c.num_nodes == 6
    st = c.stats()["mamba"]
    assert (st["checkpoints"], st["tombstone_nodes"], st["evicted_slots"], st["evicted_nodes"]) == (3, 2, 2, 0)
    invariants.check(c)
    # touch n1..n3, so n4 is the oldest SWA candidate: its window goes, the node stays
    assert cached_at(c, BASE, 24) == 16
    assert c.swa.evict_tokens(2) == 4
    assert swa_of(c, BASE[:40]) == [T, T, 0, 1, T, T, 2, 3, T, T, 4, 5, T, T, T, T, T, T, 8, 9]
    assert c.num_nodes == 6
    st = c.stats()["swa"]
    assert (st["used_tokens"], st["tombstone_tokens"], st["tombstone_nodes"], st["evicted_tokens"],
            st["evicted_nodes"]) == (16, 24, 1, 4, 0)
    invariants.check(c)

    # n3's end: SWA accepts ([20,24) present), MAMBA rejects (tombstone);
    # n4's end: both reject. The walk still reaches n4.
    m = c.match(BASE[:33], 32)
    assert m.traversed_tokens == 32
    assert m.cached_tokens == 16
    assert m.lost == (("swa", 8, SWA_WHY), ("mamba", 16, MAMBA_WHY))
    # every limit: the deepest boundary all components accept
    for limit in range(0, 33):
        m = c.match(BASE[:33], limit)
        aligned = limit // 2 * 2
        assert m.traversed_tokens == aligned
        assert m.cached_tokens == (16 if aligned >= 16 else 8 if aligned >= 8 else 0), limit
    assert c.num_nodes == 6  # a match splits only at the accepted boundary (node ends here)

    # the same through the stepper: it recomputes [16, 32), which heals n4's window and its
    # checkpoint (the request's private state becomes the checkpoint at 32)
    n0 = len(c.actions)
    r = step(c, BASE[:33])
    assert (r.cached_tokens, r.traversed_tokens, r.rejected) == (16, 32, False)
    assert r.lost == (("swa", 8, SWA_WHY), ("mamba", 16, MAMBA_WHY))
    got = [a for a in c.actions[n0:] if a.component == "swa"]
    assert [type(a) for a in got] == [Alloc, Free] and len(got[0].indices) == 3  # window + 1
    s28, s30, spare = got[0].indices
    assert got[1].indices == (spare,)
    assert swa_of(c, BASE[:40]) == [T, T, 0, 1, T, T, 2, 3, T, T, 4, 5, T, T, s28, s30, T, T, 8, 9]
    assert checkpoint_ends(c, BASE[:40]) == [8, 16, 32, 40]
    m = c.match(BASE[:33], 32)
    assert (m.cached_tokens, m.traversed_tokens, m.lost) == (32, 32, ())
    m = c.match(BASE[:25], 24)  # n3: MAMBA tombstone still rejects
    assert (m.cached_tokens, m.traversed_tokens, m.lost) == (16, 24, (("mamba", 8, MAMBA_WHY),))


def test_figure2_a_rejection_does_not_stop_the_walk():
    """Only n3's checkpoint is gone: n3's end is rejected, n4's end is accepted again."""
    c = _figure2_tree()
    assert cached_at(c, BASE, 16) == 16  # n3, n4 oldest; n3 (older id) goes first
    assert c.mamba.evict(1) == 1
    assert mamba_tombstone_ends(c, BASE[:40]) == [24]
    for limit, want in ((24, 16), (26, 16), (30, 16), (32, 32), (34, 32), (40, 40)):
        m = c.match(BASE[:41], limit)
        assert (m.traversed_tokens, m.cached_tokens) == (limit, want), limit
    assert c.match(BASE[:41], 24).lost == (("mamba", 8, MAMBA_WHY),)
    # at 30 the window [26,30) reaches into n4's tombstones [24,28): SWA stops at 24
    assert c.match(BASE[:41], 30).lost == (("swa", 6, SWA_WHY), ("mamba", 14, MAMBA_WHY))
    assert c.match(BASE[:41], 32).lost == ()
    invariants.check(c)


# =======================================================================================
# 2. SWA: window reuse
# =======================================================================================
def _swa_chain(P, W, ends):
    c = hybrid(P, W=W, actions=True)
    for e in ends:
        step(c, BASE[:e])
    return c


def test_swa_boundary_needs_exactly_the_window():
    """P=1, W=3. Requests ending at 2, 4, 6, 8, 10 build nodes of 2 tokens each, every one
    fully present (each leaf is shorter than the window)."""
    c = _swa_chain(1, 3, (2, 4, 6, 8, 10))
    assert node_ends(c, BASE[:10]) == [2, 4, 6, 8, 10]
    assert swa_of(c, BASE[:10]) == list(range(10))
    assert sweep(c, BASE, range(11)) == list(range(11))  # all present: all reusable
    # evict one page run from the oldest SWA node, [0,2) (internal: it stays, as tombstones)
    assert c.swa.evict_tokens(1) == 2
    assert c.num_nodes == 6
    assert swa_of(c, BASE[:10]) == [-1, -1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert full_of(c, BASE[:10]) == list(range(10))  # FULL still anchors the node
    # b < W needs every token before it ("window at prefix start"); b=4 needs [1,4): 1 is gone;
    # b >= 5: the window [b-3, b) is present even though [0,2) is not
    assert sweep(c, BASE, range(11)) == [0, 0, 0, 0, 0, 5, 6, 7, 8, 9, 10]
    assert probe(c, BASE, 4) == (0, 4, (("swa", 4, SWA_WHY),))
    assert probe(c, BASE, 5) == (5, 5, ())
    invariants.check(c)
    # touch [0,4) so [4,6) is the oldest candidate; a tombstone there blocks 5..8
    assert cached_at(c, BASE, 4) == 0
    assert c.swa.evict_tokens(1) == 2
    assert swa_of(c, BASE[:10]) == [-1, -1, 2, 3, -1, -1, 6, 7, 8, 9]
    assert sweep(c, BASE, range(11)) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 10]
    assert probe(c, BASE, 8) == (0, 8, (("swa", 8, SWA_WHY),))
    st = c.stats()["swa"]
    assert (st["used_tokens"], st["tombstone_tokens"], st["tombstone_nodes"], st["evicted_tokens"],
            st["evicted_nodes"]) == (6, 4, 2, 4, 0)
    invariants.check(c)

    # healing: a request that ends at 7 recomputes [0,7); its window [4,7) refills 4 and 5
    n0 = len(c.actions)
    r = step(c, BASE[:7])
    assert (r.cached_tokens, r.traversed_tokens, r.lost) == (0, 6, (("swa", 6, SWA_WHY),))
    got = [a for a in c.actions[n0:] if a.component == "swa"]
    assert [type(a) for a in got] == [Alloc, Free] and len(got[0].indices) == 4  # min(7, 3 + 1)
    p4, p5, p6, extra = got[0].indices
    assert got[1].indices == (p6, extra)  # 6 was present: its recomputed page is a duplicate
    assert swa_of(c, BASE[:10]) == [-1, -1, 2, 3, p4, p5, 6, 7, 8, 9]
    assert sweep(c, BASE, range(11)) == [0, 0, 0, 0, 0, 5, 6, 7, 8, 9, 10]
    st = c.stats()["swa"]
    assert (st["used_tokens"], st["tombstone_tokens"], st["tombstone_nodes"]) == (8, 2, 1)
    invariants.check(c)


@pytest.mark.parametrize("P,W", [(2, 3), (2, 4), (4, 10), (4, 12)])
def test_swa_new_leaf_keeps_its_last_ceil_w_over_p_pages(P, W):
    wp = -(-W // P)
    c = hybrid(P, W=W, actions=True)
    r = step(c, BASE[: 10 * P + 1])  # S = 10P + 1 tokens; the leaf is the first 10 pages
    assert (r.cached_tokens, r.rejected) == (0, False)
    # the request got min(ceil(n/P), wp + 1) = wp + 1 SWA pages: 0..wp; the last is freed
    swa_acts = [a for a in c.actions if a.component == "swa"]
    assert swa_acts == [Alloc("swa", L1, tuple(range(wp + 1))), Free("swa", L1, (wp,))]
    assert swa_of(c, BASE[: 10 * P]) == [-1] * (10 - wp) + list(range(wp))
    assert full_of(c, BASE[: 10 * P]) == list(range(10))
    st = c.stats()["swa"]
    assert (st["used_tokens"], st["tombstone_tokens"], st["tombstone_nodes"]) == (wp * P, (10 - wp) * P, 0)
    # only the end of the leaf (and nothing inside it) is reusable
    assert sweep(c, BASE, range(0, 10 * P + 1, P)) == [0] * 10 + [10 * P]


def test_swa_page_rounding_needs_whole_pages():
    """P=2, W=3: the window [b-3, b) touches two pages, so both must be present."""
    c = hybrid(2, W=3, actions=True)
    step(c, BASE[:9])  # leaf [0,8): SWA for pages [4,6), [6,8)
    assert swa_of(c, BASE[:8]) == [-1, -1, 0, 1]
    assert sweep(c, BASE, (2, 4, 6, 8)) == [0, 0, 0, 8]
    # a prefix shorter than W is reusable only if every page before it is present
    step(c, OTHER[:3])  # limit 2, S cut to 2 tokens: one page, present
    assert swa_of(c, OTHER[:2]) == [2]
    assert cached_at(c, OTHER, 2) == 2
    invariants.check(c)


def test_swa_leaf_victim_is_removed_whole_internal_victim_is_tombstoned():
    """P=1, W=2. [0,4) is shared by two leaves a=[4,6) and b=[4,6)'."""
    c = hybrid(1, W=2, cap=100, actions=True)
    a = seq(BASE[:4], [1, 2])
    b = seq(BASE[:4], [3, 4])
    step(c, BASE[:4])  # node [0,4), SWA on [2,4)
    step(c, a)  # cached 4, leaf a
    step(c, b)  # cached 4, leaf b
    assert c.num_nodes == 4
    assert swa_of(c, a) == [-1, -1, 0, 1, 2, 3] and swa_of(c, b) == [-1, -1, 0, 1, 4, 5]
    assert c.free_tokens == 100 - 8
    st = c.stats()["swa"]
    assert (st["used_tokens"], st["tombstone_tokens"], st["tombstone_nodes"]) == (6, 2, 0)
    # LRU SWA order: leaf a (last seen in its own step), [0,4) (b's step), leaf b (newest).
    # leaf a is an unlocked leaf: removed whole, FULL pages too; its parent stays (it has b)
    assert c.swa.evict_tokens(1) == 2
    assert c.num_nodes == 3
    assert full_of(c, a) == [0, 1, 2, 3] and swa_of(c, b) == [-1, -1, 0, 1, 4, 5]
    assert c.free_tokens == 100 - 6
    st = c.stats()
    assert (st["full"]["evicted_tokens"], st["swa"]["evicted_nodes"], st["swa"]["evicted_tokens"]) == (2, 1, 2)
    invariants.check(c)
    # [0,4) is internal: its pages become tombstones, the node stays (FULL anchors it)
    assert c.swa.evict_tokens(1) == 2
    assert c.num_nodes == 3
    assert swa_of(c, b) == [-1, -1, -1, -1, 4, 5]
    assert full_of(c, b) == [0, 1, 2, 3, 6, 7]
    assert c.free_tokens == 100 - 6
    st = c.stats()
    assert st["full"]["evicted_tokens"] == 2
    assert (st["swa"]["used_tokens"], st["swa"]["tombstone_tokens"], st["swa"]["tombstone_nodes"],
            st["swa"]["evicted_nodes"]) == (2, 4, 1, 1)
    assert probe(c, b, 6) == (6, 6, ())  # b's own window [4,6) still serves
    assert probe(c, b, 4) == (0, 4, (("swa", 4, SWA_WHY),))
    invariants.check(c)
    # leaf b goes too; its parent is now a leaf with only tombstones: useless, removed with it
    assert c.swa.evict_tokens(1) == 2
    assert c.num_nodes == 1
    assert c.free_tokens == 100
    st = c.stats()
    assert st["full"]["evicted_tokens"] == 8 and st["full"]["evicted_nodes"] == 3
    assert (st["swa"]["used_tokens"], st["swa"]["tombstone_tokens"], st["swa"]["tombstone_nodes"],
            st["swa"]["evicted_tokens"], st["swa"]["evicted_nodes"]) == (0, 0, 0, 6, 2)
    invariants.check(c)


def test_swa_window_lock_protects_only_the_window():
    """P=2, W=6 (3 pages). Chain [0,8) [8,12) [12,16); a lock at 16 covers [10,16), i.e. the
    nodes [8,12) and [12,16); [0,8) stays SWA-evictable while the lock is held."""
    c = hybrid(2, W=6, actions=True)
    for e in (9, 13, 17):
        step(c, BASE[:e])
    assert node_ends(c, BASE[:16]) == [8, 12, 16]
    assert swa_of(c, BASE[:16]) == [-1, 0, 1, 2, 3, 4, 5, 6]
    m = c.match(BASE[:16])
    assert m.cached_tokens == 16
    c.lock(m)
    invariants.check(c)
    assert c.swa.evict_tokens(1000) == 6  # only [0,8)'s three pages
    assert swa_of(c, BASE[:16]) == [-1, -1, -1, -1, 3, 4, 5, 6]
    assert c.num_nodes == 4
    assert c.swa.evict_tokens(1000) == 0
    assert c.evict(1000) == 0  # FULL: the whole path is locked
    assert c.match(BASE[:16]).cached_tokens == 16  # the locked window still serves
    invariants.check(c)
    c.unlock(m)
    invariants.check(c)
    # unlocked: the leaf goes whole, then [8,12) (now a leaf), then [0,8) (a useless leaf)
    assert c.swa.evict_tokens(1000) == 8
    assert c.num_nodes == 1
    assert c.stats()["full"]["evicted_tokens"] == 16
    invariants.check(c)


def test_swa_window_lock_straddling_a_node_protects_all_of_it():
    """P=1, W=3: a lock at 9 has window [6,9); the node [4,8) intersects it and keeps all
    its pages, including 5, outside the window (protection is per node)."""
    c = hybrid(1, W=3, actions=True)
    step(c, BASE[:4])
    step(c, BASE[:8])
    step(c, BASE[:9])
    assert node_ends(c, BASE[:9]) == [4, 8, 9]
    assert swa_of(c, BASE[:9]) == [-1, 0, 1, 2, -1, 3, 4, 5, 6]
    m = c.match(BASE[:9])
    c.lock(m)
    assert c.swa.evict_tokens(100) == 3
    assert swa_of(c, BASE[:9]) == [-1, -1, -1, -1, -1, 3, 4, 5, 6]
    c.unlock(m)
    invariants.check(c)


# =======================================================================================
# 3. MAMBA: checkpoint reuse
# =======================================================================================
def test_mamba_two_requests_copy_one_checkpoint_into_distinct_private_slots():
    c = hybrid(1, mamba=True, actions=True)
    step(c, BASE[:10])  # checkpoint at 10: the request's private slot 0
    assert c.actions == [Alloc("full", L1, tuple(range(10))), Alloc("mamba", L1, (0,))]
    assert checkpoint_ends(c, BASE[:10]) == [10]
    shared = 0
    n0 = len(c.actions)
    r1 = step(c, seq(BASE[:10], [1, 2, 3]))
    r2 = step(c, seq(BASE[:10], [4, 5, 6]))
    assert r1.cached_tokens == r2.cached_tokens == 10
    acts = c.actions[n0:]
    copies = [a for a in acts if isinstance(a, CopyState)]
    assert copies == [CopyState("mamba", L1, shared, 1, 10), CopyState("mamba", L1, shared, 2, 10)]
    mamba_allocs = [a.indices for a in acts if isinstance(a, Alloc) and a.component == "mamba"]
    assert mamba_allocs == [(1,), (2,)]
    assert not [a for a in acts if isinstance(a, Free) and a.component == "mamba"]
    assert c.stats()["mamba"]["copies"] == 2
    # the private slots became the checkpoints at the two new ends; the shared one is intact
    assert checkpoint_ends(c, seq(BASE[:10], [1, 2, 3])) == [10, 13]
    assert checkpoint_ends(c, seq(BASE[:10], [4, 5, 6])) == [10, 13]
    t = TokenSeq(BASE[:10])
    assert mamba_pl(c.tree.path_nodes(t.data, 10)[0][0]).slot == shared


def test_mamba_concurrent_reuse_never_hands_out_the_shared_slot():
    """Two requests hold the same checkpoint at once (pool of 3 slots): each gets its own
    private slot; a third request finds the pool empty (the shared checkpoint is locked, so
    it is neither evicted nor handed out)."""
    c = hybrid(1, mamba=True, slots=3, cap=100, actions=True)
    step(c, BASE[:10])
    n0 = len(c.actions)
    ms, privs = [], []
    for tail in ([1, 2], [3, 4]):
        m = c.match(seq(BASE[:10], tail), 11)
        assert m.cached_tokens == 10
        c.lock(m)
        s = c.mamba.acquire(1)
        assert s is not None
        acts = c.finalize(m, {"mamba": [int(s[0])]})
        assert acts == [CopyState("mamba", L1, 0, int(s[0]), 10)]
        ms.append(m)
        privs.append(int(s[0]))
        invariants.check(c)
    assert privs == [1, 2]
    assert c.mamba.acquire(1) is None
    assert c.mamba.evict(1) == 0
    assert c.stats()["mamba"]["private_slots"] == 2
    handed = [i for a in c.actions[n0:] if isinstance(a, Alloc) and a.component == "mamba" for i in a.indices]
    freed = [i for a in c.actions[n0:] if isinstance(a, Free) and a.component == "mamba" for i in a.indices]
    assert handed == [1, 2] and freed == []
    c.mamba.release(privs)
    for m in ms:
        c.unlock(m)
    invariants.check(c)
    # unlocked, the checkpoint can be evicted: its leaf goes whole
    assert c.mamba.acquire(3) is not None
    assert c.num_nodes == 1 and c.stats()["mamba"]["evicted_nodes"] == 1


def test_mamba_every_k_boundaries_and_no_reuse_between_checkpoints():
    P, K = 2, 8
    c = hybrid(P, mamba=True, every=K, actions=True)
    r = step(c, BASE[:41])  # S cut to 40: private at 40, snapshots at 32, 24, 16, 8
    assert r.rejected is False
    assert node_ends(c, BASE[:40]) == [8, 16, 24, 32, 40]
    assert checkpoint_ends(c, BASE[:40]) == [8, 16, 24, 32, 40]
    assert c.num_nodes == 6
    snaps = [a for a in c.actions if isinstance(a, CopyState)]
    assert [a.at_tokens for a in snaps] == [32, 24, 16, 8]
    assert len({a.src for a in snaps}) == 1 and snaps[0].src == 0  # the private state
    assert [a.dst for a in snaps] == [4, 3, 2, 1]  # snapshot slots 1..4, latest first
    assert [a for a in c.actions if a.component == "mamba" and not isinstance(a, CopyState)] == [
        Alloc("mamba", L1, (0, 1, 2, 3, 4))]
    # a prompt whose FULL match ends between checkpoints reuses the last checkpoint
    q = seq(BASE[:29], [9, 9, 9])
    m = c.match(q, 30)
    assert (m.cached_tokens, m.traversed_tokens, m.lost) == (24, 28, (("mamba", 4, MAMBA_WHY),))
    for limit in range(0, 41, P):
        assert cached_at(c, BASE, limit) == limit // K * K
    assert c.num_nodes == 6  # MAMBA accepts only node ends: no split
    # a request that diverges between checkpoints: reuses 24, new checkpoint at its own end
    n0 = len(c.actions)
    r = step(c, q)
    assert (r.cached_tokens, r.traversed_tokens) == (24, 28)
    assert [a for a in c.actions[n0:] if isinstance(a, CopyState)] == [CopyState("mamba", L1, 3, 5, 24)]
    assert checkpoint_ends(c, q[:32]) == [8, 16, 24, 32]  # 32 of the new branch, not of BASE
    assert node_ends(c, q[:32]) == [8, 16, 24, 28, 32]  # split at the divergence point
    assert cached_at(c, q, 28) == 24  # 28 is a node end without a checkpoint


def test_mamba_internal_eviction_leaves_a_tombstone_leaf_goes_whole():
    P, K = 2, 8
    c = hybrid(P, mamba=True, every=K, slots=10, cap=200, actions=True)
    step(c, BASE[:41])
    # the oldest checkpoint is the original leaf [32,40): an unlocked leaf goes whole
    assert c.mamba.evict(1) == 1
    assert node_ends(c, BASE[:40]) == [8, 16, 24, 32]
    assert c.stats()["full"]["evicted_tokens"] == 8
    assert c.stats()["mamba"]["evicted_nodes"] == 1
    invariants.check(c)
    # lock the end at 32 (node [24,32)); the match gave [0,8)..[24,32) one tick, so the next
    # victim is the oldest id among the unlocked ones: [16,24), split off first; internal:
    # it becomes a tombstone
    m = c.match(BASE[:33], 32)
    assert m.cached_tokens == 32
    c.lock(m)
    assert c.mamba.evict(1) == 1
    assert node_ends(c, BASE[:32]) == [8, 16, 24, 32]
    assert mamba_tombstone_ends(c, BASE[:32]) == [24]
    assert checkpoint_ends(c, BASE[:32]) == [8, 16, 32]
    assert c.num_nodes == 5
    st = c.stats()["mamba"]
    assert (st["checkpoints"], st["tombstone_nodes"], st["evicted_slots"], st["evicted_nodes"]) == (3, 1, 2, 1)
    assert probe(c, BASE, 30) == (16, 30, (("mamba", 14, MAMBA_WHY),))
    c.unlock(m)
    invariants.check(c)


def test_mamba_rejects_only_without_a_private_slot():
    # one slot: a request that reuses the only checkpoint cannot get a private slot
    c = hybrid(1, mamba=True, slots=1, cap=100, actions=True)
    assert step(c, BASE[:10]).rejected is False
    r = step(c, seq(BASE[:10], [1, 2, 3]))
    assert (r.rejected, r.cached_tokens) == (True, 10)
    assert full_of(c, seq(BASE[:10], [1, 2, 3])) == list(range(10))  # nothing inserted
    assert c.free_tokens == 90 and c.stats()["mamba"]["private_slots"] == 0
    # a request that reuses nothing evicts the (unlocked) checkpoint's leaf and runs
    r = step(c, OTHER[:6])
    assert (r.rejected, r.cached_tokens, r.evicted_tokens) == (False, 0, 10)
    assert c.stats()["mamba"]["evicted_nodes"] == 1
    assert checkpoint_ends(c, OTHER[:6]) == [6]

    # two slots, every 4: snapshots cannot be had, the private slot can: no rejection
    c = hybrid(1, mamba=True, slots=2, every=4, cap=100, actions=True)
    r = step(c, BASE[:12])  # wants 1 + 2 snapshot slots (at 8, 4)
    assert r.rejected is False
    assert checkpoint_ends(c, BASE[:12]) == [12] and node_ends(c, BASE[:12]) == [12]
    r = step(c, BASE[:20])  # reuses 12 (locked); wants 1 + 1 (at 16); one slot is free
    assert (r.rejected, r.cached_tokens) == (False, 12)
    assert checkpoint_ends(c, BASE[:20]) == [12, 20]
    assert not [a for a in c.actions if isinstance(a, CopyState) and a.at_tokens == 16]
    # both slots are checkpoints now; a request reusing 20 (locked) gets its private slot by
    # evicting 12, which is internal: a tombstone, the node stays
    r = step(c, BASE[:25])
    assert (r.rejected, r.cached_tokens) == (False, 20)
    assert checkpoint_ends(c, BASE[:25]) == [20, 25] and mamba_tombstone_ends(c, BASE[:25]) == [12]
    assert c.stats()["mamba"]["evicted_slots"] == 1 and c.stats()["mamba"]["evicted_nodes"] == 0


# =======================================================================================
# 4. sidecars
# =======================================================================================
SIDECARS = (SidecarConfig(name="c4", follows="full"), SidecarConfig(name="c128", follows="full"),
            SidecarConfig(name="indexer", follows="full"), SidecarConfig(name="comp_a", follows="swa"),
            SidecarConfig(name="comp_b", follows="swa"))
FOLLOW = {"full": ("c4", "c128", "indexer"), "swa": ("comp_a", "comp_b"), "mamba": ()}


def test_six_page_example_direct_insert():
    P = 4
    c = hybrid(P, W=2 * P, sidecars=SIDECARS, actions=True)
    s = BASE[: 6 * P]
    pages = c.alloc(6)
    swa_pages = c.swa.alloc(2)
    assert pages.tolist() == [0, 1, 2, 3, 4, 5] and swa_pages.tolist() == [0, 1]
    c.insert(s, 6 * P, pages, 0, slots={"swa": swa_pages})
    invariants.check(c)
    out = c.slots_of(s)
    assert out["full"].tolist() == [0, 1, 2, 3, 4, 5]
    assert out["swa"].tolist() == [-1, -1, -1, -1, 0, 1]  # F4 -> S0, F5 -> S1
    for sc in SIDECARS:
        assert out[sc.name].tolist() == out[sc.follows].tolist()
    assert set(out) == {"full", "swa", "c4", "c128", "indexer", "comp_a", "comp_b"}
    assert c.actions == [Alloc("full", L1, (0, 1, 2, 3, 4, 5), FOLLOW["full"]),
                         Alloc("swa", L1, (0, 1), FOLLOW["swa"])]


def test_six_page_example_through_the_stepper():
    P = 4
    c = hybrid(P, W=2 * P, sidecars=SIDECARS, actions=True)
    r = step(c, BASE[: 6 * P])  # match limit 20 (nothing cached), S = 6 pages
    assert (r.cached_tokens, r.rejected) == (0, False)
    out = c.slots_of(BASE[: 6 * P])
    assert out["full"].tolist() == [0, 1, 2, 3, 4, 5]
    assert out["swa"].tolist() == [-1, -1, -1, -1, 0, 1]
    assert out["c4"].tolist() == [0, 1, 2, 3, 4, 5] and out["comp_b"].tolist() == [-1, -1, -1, -1, 0, 1]
    # the stepper takes window + 1 SWA pages; the spare one goes back (sidecars with it)
    assert c.actions == [Alloc("full", L1, (0, 1, 2, 3, 4, 5), FOLLOW["full"]),
                         Alloc("swa", L1, (0, 1, 2), FOLLOW["swa"]),
                         Free("swa", L1, (2,), FOLLOW["swa"])]


def test_sidecars_follow_every_alloc_and_free_of_their_source():
    """Small pools, so FULL, SWA and MAMBA all evict; every record names exactly its
    source's followers, and replaying the records gives back each pool's held indices."""
    P = 2
    c = hybrid(P, W=4, swa_cap=16, mamba=True, slots=4, every=8, cap=80, sidecars=SIDECARS, actions=True)
    rng = np.random.default_rng(7)
    docs = [rng.integers(0, 3, 60) for _ in range(3)]
    for i in range(120):
        d = docs[i % 3]
        k = int(rng.integers(2, 50))
        step(c, seq(d[:k], rng.integers(0, 3, int(rng.integers(0, 4)))))
        out = c.slots_of(seq(d[:k]))
        for sc in SIDECARS:
            assert np.array_equal(out[sc.name], out[sc.follows])
    st = c.stats()
    assert st["full"]["evicted_tokens"] > 0 and st["swa"]["evicted_tokens"] > 0 and st["mamba"]["evicted_slots"] > 0
    held = {"full": set(), "swa": set(), "mamba": set()}
    seen = set()
    for a in c.actions:
        if isinstance(a, CopyState):
            continue
        assert a.sidecars == FOLLOW[a.component], a
        assert a.tier == L1
        seen.add((type(a).__name__, a.component))
        for i in a.indices:
            if isinstance(a, Alloc):
                assert i not in held[a.component]
                held[a.component].add(i)
            else:
                held[a.component].remove(i)
    assert seen == {(k, p) for k in ("Alloc", "Free") for p in ("full", "swa", "mamba")}
    nodes = list(c.tree.iter_nodes())[1:]
    assert held["full"] == {int(i) for n in nodes for i in n.value}
    assert held["swa"] == {int(i) for n in nodes for i in swa_pl(n).pages if i >= 0}
    assert held["mamba"] == {mamba_pl(n).slot for n in nodes if mamba_pl(n) is not None
                             and mamba_pl(n).slot >= 0}


def test_sidecar_must_follow_a_present_pool():
    with pytest.raises(ValueError):
        CacheConfig(sidecars=(SidecarConfig(name="x", follows="swa"),))
    with pytest.raises(ValueError):
        SidecarConfig(name="x", follows="mamba")


# =======================================================================================
# 5. FULL-only results unchanged
# =======================================================================================
def _trace_requests(n):
    """The first n requests as (prompt, output): an output given only by its length becomes
    that many fresh tokens that match nothing (unique negative ids; prompts are >= 0), as
    the replay CLI does."""
    from scenarios.traces import JsonlTrace, TraceRequest

    nxt, out = -1, []
    for r in JsonlTrace(TRACE):
        if not isinstance(r, TraceRequest):
            continue
        o = r.output_tokens
        if o is None and r.output_length:
            o = np.arange(nxt, nxt - r.output_length, -1, dtype=np.int64)
            nxt -= r.output_length
        out.append((r.prompt, o))
        if len(out) == n:
            break
    return out


def _replay(cfg, reqs):
    c = RadixCache(cfg)
    st = ReplayStepper(c)
    res = [st.step(p, o) for p, o in reqs]
    invariants.check(c)
    return c, res


def test_full_only_results_unchanged_by_a_window_that_never_binds():
    """FULL+SWA with a window longer than every sequence and an SWA pool as large as the
    FULL pool must replay exactly like FULL alone: every new leaf keeps SWA KV for all its
    pages (the window covers the whole sequence), SWA pages never outnumber FULL pages
    (one per page in the tree, at most one per page handed out), so SWA never evicts and no
    tombstone ever appears; then every boundary passes the vote, the tree, its ticks and
    node ids evolve identically, no SWA-useless ancestor is ever removed, and FULL evicts
    the same leaves. This holds with a bounded FULL pool (eviction happens here)."""
    reqs = _trace_requests(600)
    cap = 2_000_000
    c0, a = _replay(CacheConfig(page_size=16, capacity_tokens=cap), reqs)
    longest = max(len(p) + (0 if o is None else len(o)) for p, o in reqs)
    c1, b = _replay(CacheConfig(page_size=16, capacity_tokens=cap,
                                swa=SwaConfig(window_tokens=longest + 1, capacity_tokens=cap)), reqs)
    assert [r.cached_tokens for r in a] == [r.cached_tokens for r in b]
    assert [r.evicted_tokens for r in a] == [r.evicted_tokens for r in b]
    assert [r.traversed_tokens for r in b] == [r.cached_tokens for r in b]
    assert all(r.lost == () and not r.rejected for r in b)
    assert sum(r.evicted_tokens for r in a) > 0 and sum(r.cached_tokens for r in a) > 0
    st = c1.stats()["swa"]
    assert (st["evicted_tokens"], st["tombstone_tokens"]) == (0, 0)
    assert c0.num_nodes == c1.num_nodes


@pytest.mark.parametrize("with_swa", [False, True], ids=["full+mamba", "full+swa+mamba"])
def test_full_only_results_unchanged_by_checkpoints_at_every_page(with_swa):
    """FULL+MAMBA with a checkpoint every page and nothing bounded must give FULL's cached
    tokens: every page boundary of every inserted sequence gets a checkpoint (snapshots in
    (cached, end), the private state at the end, and the cached boundary had one), none is
    evicted, so every boundary FULL reaches is accepted. With a bounded FULL pool this need
    not hold (one node per page changes which tokens a FULL eviction frees), so it is only
    pinned unbounded. With SWA too (a window longer than every sequence, unbounded pool:
    never a tombstone, see above) the same holds. Fewer requests: one node per 16 tokens
    makes this replay slow."""
    reqs = _trace_requests(100)
    _, a = _replay(CacheConfig(page_size=16), reqs)
    swa = SwaConfig(window_tokens=1 << 30) if with_swa else None
    c, b = _replay(CacheConfig(page_size=16, swa=swa, mamba=MambaConfig(every_tokens=16)), reqs)
    assert [r.cached_tokens for r in a] == [r.cached_tokens for r in b]
    assert [r.traversed_tokens for r in b] == [r.cached_tokens for r in b]
    assert sum(r.cached_tokens for r in a) > 0
    assert c.stats()["mamba"]["evicted_slots"] == 0


# =======================================================================================
# regressions of defects found by these tests (fixed)
# =======================================================================================
def test_swa_heal_keeps_pages_at_their_positions():
    """P=1, W=3. Nodes [0,7) (SWA on 4..6), [7,8), [8,10), [10,12); [8,10) loses its SWA
    pages. A request with prompt BASE[:8] (match limit 7 -> cached 7) and output
    BASE[8:10] + one more token has S = BASE[:10]: it computes SWA KV for the window
    [7,10) into its three SWA pages (7, 8, 9 in order). Position 7 is already present, so
    its page is a duplicate: 8 and 9 must get the second and third page, the first is
    freed. Actual: 8 and 9 get the first and second page, the third is freed."""
    c = hybrid(1, W=3, actions=True)
    for e in (7, 8, 10, 12):
        step(c, BASE[:e])
    assert node_ends(c, BASE[:12]) == [7, 8, 10, 12]
    m = c.match(BASE[:8])  # lock [5,8) so the next SWA victim is [8,10)
    c.lock(m)
    assert c.swa.evict_tokens(1) == 2
    c.unlock(m)
    assert swa_of(c, BASE[:12]) == [-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, 6, 7]
    n0 = len(c.actions)
    r = step(c, BASE[:8], seq(BASE[8:10], [77]))
    assert r.cached_tokens == 7
    got = [a for a in c.actions[n0:] if a.component == "swa"]
    assert isinstance(got[0], Alloc) and len(got[0].indices) == 3
    s7, s8, s9 = got[0].indices
    assert swa_of(c, BASE[:12])[7:10] == [3, s8, s9]
    assert got[1:] == [Free("swa", L1, (s7,))]
