"""SWA pages and MAMBA checkpoints on the HiCache tiers (components/swa/tiers.py, components/mamba/tiers.py), pinned
exactly: they follow their node across L1 (device), L2 (host) and L3 (store by page key).

1. SWA window reuse from L2: a demoted prefix is reused as host tokens, and `load` brings back
   exactly the window pages before the boundary that are not on L1 (never pages outside it).
2. MAMBA checkpoint reuse from L2: the checkpoint at the boundary is loaded L2 -> L1, then
   copied into the request's private slot; no reuse where no tier holds a checkpoint.
3. SWA and MAMBA reuse from L3: a storage run counts only up to a boundary whose window pages
   ("swa", key) and checkpoint ("mamba", key) are stored; prefetches per component.
4. Backups copy the components (write_through at insert, write_back at L1 eviction);
   demotion frees L1 SWA pages and checkpoints, L2 copies stay.
5. SWA/MAMBA pool pressure with an L2 tier frees only L1 copies (nodes stay).
6. Fallback: a window or checkpoint that L1 cannot take makes the match fall back to the
   deepest boundary L1 alone serves.
7. A seeded stress (>= 10,000 ReplayStepper steps) over FULL+SWA, FULL+MAMBA, FULL+SWA+MAMBA
   with L1+L2 and L1+L2+L3, page sizes 1 and 4, small pools, `invariants.check` after every
   step, and host/storage hits (with component loads and prefetches) that actually happen;
   after every step the reused boundary must be one L1 alone serves (FULL path, SWA window,
   checkpoint), except for steps that hit a pinned defect (counted, FULL part still checked).
8. Regressions: minimal reproducers of defects found here (now fixed), each asserting the documented
   behaviour (so the strict marker fails the run once the core is fixed).

Node internals (`comp[SWA]`, `comp[MAMBA]`, `value`/`host`) are read only to name where a
payload lives; everything is driven through `ReplayStepper.step` or the public calls.
"""
from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from cache_core import CacheConfig, MambaConfig, RadixCache, ReplayStepper, SwaConfig, TokenSeq
from cache_core import invariants
from cache_core.actions import L1, L2, L3, CopyState, Free, Transfer
from cache_core.keys import page_keys
from cache_core.tiers import TierConfig
from helpers import ckpt, ints, mamba_pl, node_at, swa_l1, swa_l2, swa_pl, transfers
from helpers import tshape as shape

SWA_WHY = "SWA window incomplete"
MAMBA_WHY = "no MAMBA checkpoint at boundary"


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def make(P=4, l1=64, *, W=None, swa_cap=None, slots=None, every=None, l3=False,
         wp="write_through", tiers=True, l3_write="on_insert") -> RadixCache:
    swa = None if W is None else SwaConfig(window_tokens=W, capacity_tokens=swa_cap)
    mamba = None if slots is None else MambaConfig(slots=slots, every_tokens=every)
    tc = TierConfig(hicache_ratio=2, l3=l3, l3_tokens=None, min_prefetch_tokens=0, write_policy=wp,
                    l3_write=l3_write) if tiers else None
    return RadixCache(CacheConfig(page_size=P, capacity_tokens=l1, swa=swa, mamba=mamba, tiers=tc),
                      record_actions=True)


def toks(*ranges) -> np.ndarray:
    """toks((0, 8), (100, 104)) = [0..7, 100..103]."""
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


def step(cache, prompt, output=(9999,)):
    r = ReplayStepper(cache).step(prompt, np.asarray(output, dtype=np.int64))
    invariants.check(cache)
    return r
















def keys_of(tokens, P) -> list:
    return [int(k) for k in page_keys(np.asarray(tokens, dtype=np.int64), P)[0]]


def probe(cache, tokens, limit):
    """A bare match on a copy (the cache under test is left untouched)."""
    return copy.deepcopy(cache).match(TokenSeq(tokens), limit)


def drop_all(cache) -> None:
    """Demote everything from L1, then drop every host-only node from L2."""
    cache.evict(10**9)
    cache.hier.evict_l2(10**9)
    invariants.check(cache)


def l1_serves(c, tokens, b, full_only=False):
    """None if the boundary b is served by L1 alone: FULL pages of [0, b) on L1, a node
    ending at b, the SWA pages of the window before b on L1 (all of [0, b) when b < W), the
    checkpoint at b on L1 (`full_only`: the FULL part only). Otherwise what is missing.
    Read-only."""
    if b == 0:
        return None
    seq = tokens if isinstance(tokens, TokenSeq) else TokenSeq(tokens)
    P = c.page_size
    path = c.tree.path_nodes(seq.data, b)
    if sum(k for _, k in path) != b or path[-1][0].end != b:
        return f"no node ends at {b}"
    if any(nd.value is None for nd, _ in path):
        return f"FULL of [0, {b}) not all on L1"
    if full_only:
        return None
    if c.swa is not None:
        lo = max(0, b - c.swa.window_pages * P)
        for nd, _ in path:
            if nd.end > lo:
                j0 = max(0, (lo - nd.parent.end) // P)
                if not (swa_pl(nd).pages[j0:] >= 0).all():
                    return f"SWA window [{lo}, {b}) not all on L1"
    if c.mamba is not None:
        pl = mamba_pl(path[-1][0])
        if pl is None or pl.slot < 0:
            return f"no checkpoint on L1 at {b}"
    return None


A = toks((0, 16))  # 4 pages at P=4
AB = toks((0, 16), (100, 108))  # A + 2 pages
AB3 = toks((0, 16), (100, 112))  # A + 3 pages
X = toks((500, 516))  # shares nothing with A


# =============================================================================================
# 1. SWA window reuse from L2
# =============================================================================================
def test_swa_window_reuse_from_l2_loads_exactly_the_window_pages():
    """P=4, W=12 (3 pages). A=[0,16) keeps SWA on pages 1..3, B=[16,24) on both its pages.
    Everything demoted; a request reusing 24 needs the window [12,24): A's page 3 and B's
    pages 0, 1. A's pages 1, 2 (outside the window) have L2 copies too and stay on L2."""
    c = make(W=12, swa_cap=48)
    step(c, A)
    step(c, AB)
    a, b = node_at(c, A), node_at(c, AB)
    assert swa_l1(a) == [-1, 0, 1, 2] and swa_l1(b) == [3, 4]
    assert swa_l2(a) == [-1, 0, 1, 2] and swa_l2(b) == [3, 4]
    assert c.evict(64) == 24
    assert a.value is None and b.value is None and a.alive and b.alive
    assert swa_l1(a) == [-1] * 4 and swa_l1(b) == [-1, -1]
    assert c.swa.pool.free_pages == 12 and c.swa.host_pool.free_pages == 24 - 5
    req = np.concatenate([AB, toks((200, 204))])  # prompt of 28: the replay limit is 24
    m = c.match(TokenSeq(req), 24)
    assert (m.cached_tokens, m.traversed_tokens, m.device_tokens, m.host_tokens, m.storage_tokens) \
        == (24, 24, 0, 24, 0)
    assert m.lost == ()
    n0 = len(c.actions)
    r = step(c, req)
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (24, 0, 24, 0)
    assert l1_serves(c, req, 24) is None
    ts = transfers(c, n0)
    loads = [t for t in ts if t.kind == "load"]
    assert shape(loads) == [("load", "full", L2, L1, 16), ("load", "full", L2, L1, 8),
                            ("load", "swa", L2, L1, 8), ("load", "swa", L2, L1, 4)]
    sb, sa = loads[2], loads[3]
    assert ints(sb.src) == [3, 4] and ints(sb.dst) == swa_l1(b)
    assert ints(sa.src) == [2] and ints(sa.dst) == [swa_l1(a)[3]]
    assert sorted(ints(sb.dst) + ints(sa.dst)) == [0, 1, 2]
    # pages 1, 2 of A are outside the window: still only on L2
    assert swa_l1(a)[:3] == [-1, -1, -1] and swa_l2(a) == [-1, 0, 1, 2]
    # the rest is the new leaf [24,28): its FULL page and its SWA page backed up
    assert shape(ts[4:]) == [("backup", "full", L1, L2, 4), ("backup", "swa", L1, L2, 4)]


def test_swa_window_reuse_loads_only_the_window_pages_missing_from_l1():
    """Same tree; only B is demoted (A stays on L1 with its SWA pages): the match is 16 device
    + 8 host tokens and only B's two window pages are loaded (A's page 3 is on L1 already)."""
    c = make(W=12, swa_cap=48)
    step(c, A)
    step(c, AB)
    a, b = node_at(c, A), node_at(c, AB)
    assert c.evict(1) == 8  # LRU device leaf: B
    assert a.value is not None and b.value is None and swa_l1(b) == [-1, -1]
    a_pages = swa_l1(a)
    req = np.concatenate([AB, toks((200, 204))])
    n0 = len(c.actions)
    r = step(c, req)
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (24, 16, 8, 0)
    assert l1_serves(c, req, 24) is None
    loads = [t for t in transfers(c, n0) if t.kind == "load"]
    assert shape(loads) == [("load", "full", L2, L1, 8), ("load", "swa", L2, L1, 8)]
    assert ints(loads[1].src) == swa_l2(b) and ints(loads[1].dst) == swa_l1(b)
    assert swa_l1(a) == a_pages


def test_swa_window_reuse_when_only_swa_pages_left_l1():
    """W=8. FULL stays on L1, but SWA pressure dropped every L1 SWA page (A's and B's): no
    host tokens, yet `load` brings back B's two window pages for the boundary 24, and not
    A's pages [8,16) (outside the window, on L2 only)."""
    c = make(W=8, swa_cap=48)
    step(c, A)
    step(c, AB)
    a, b = node_at(c, A), node_at(c, AB)
    assert swa_l1(a) == [-1, -1, 0, 1] and swa_l1(b) == [2, 3]
    assert c.swa.evict_tokens(16) == 16  # LRU: A (internal), then B (leaf): both only lose L1 copies
    invariants.check(c)
    assert c.num_nodes == 3 and a.alive and b.alive
    assert swa_l1(a) == [-1, -1, -1, -1] and swa_l1(b) == [-1, -1]
    assert swa_l2(a) == [-1, -1, 0, 1] and swa_l2(b) == [2, 3]
    assert c.swa.pool.free_pages == 12
    req = np.concatenate([AB, toks((200, 204))])
    n0 = len(c.actions)
    r = step(c, req)
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (24, 24, 0, 0)
    assert l1_serves(c, req, 24) is None
    loads = [t for t in transfers(c, n0) if t.kind == "load"]
    assert shape(loads) == [("load", "swa", L2, L1, 8)]
    assert ints(loads[0].src) == [2, 3] and ints(loads[0].dst) == swa_l1(b)
    assert swa_l1(a) == [-1, -1, -1, -1] and swa_l2(a) == [-1, -1, 0, 1]


# =============================================================================================
# 2. MAMBA checkpoint reuse from L2
# =============================================================================================
def test_mamba_checkpoint_reuse_from_l2_loads_then_copies_into_the_private_slot():
    """P=4, 4 state slots. A=[0,16) gets the checkpoint at 16 (its private slot 0), backed up
    to L2 slot 0. Demoted: L1 slot freed, the L2 copy stays. A request extending A reuses 16:
    the checkpoint is loaded L2 -> L1, then copied into the request's private slot."""
    c = make(slots=4)
    step(c, A)
    a = node_at(c, A)
    assert ckpt(a) == (0, 0)
    assert c.evict(64) == 16
    assert a.alive and a.value is None and ckpt(a) == (-1, 0)
    assert c.mamba.pool.free_pages == 4 and c.mamba.host_pool.free_pages == 8 - 1
    req = np.concatenate([A, toks((200, 204))])
    m = c.match(TokenSeq(req), 16)
    assert (m.cached_tokens, m.device_tokens, m.host_tokens, m.storage_tokens) == (16, 0, 16, 0)
    n0 = len(c.actions)
    r = step(c, req)
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (16, 0, 16, 0)
    assert l1_serves(c, req, 16) is None
    acts = [x for x in c.actions[n0:] if isinstance(x, (Transfer, CopyState))]
    kinds = [(x.kind, x.component, x.src_tier, x.dst_tier) if isinstance(x, Transfer) else ("copy", x.component)
             for x in acts]
    assert kinds == [("load", "full", L2, L1), ("load", "mamba", L2, L1), ("copy", "mamba"),
                     ("backup", "full", L1, L2), ("backup", "mamba", L1, L2)]
    load, cp = acts[1], acts[2]
    assert (load.tokens, load.src, load.dst) == (0, 0, ckpt(a)[0])
    assert ckpt(a) == (0, 0)
    assert (cp.tier, cp.src, cp.at_tokens) == (L1, 0, 16) and cp.dst != cp.src
    tail = node_at(c, req[:20])
    assert ckpt(tail)[0] == cp.dst  # the private slot became the checkpoint at 20
    assert c.mamba.copies == 1


def test_mamba_reuse_only_at_a_boundary_with_a_checkpoint():
    """Checkpoints at 16 and 28 (both on L2 only after demotion). A request limited to 24
    (inside B) reuses 16: only A's checkpoint is loaded, B stays on L2."""
    c = make(slots=4)
    step(c, A)
    step(c, AB3)
    a, b = node_at(c, A), node_at(c, AB3)
    assert ckpt(a) == (0, 0) and ckpt(b) == (1, 1)
    c.evict(64)
    assert ckpt(a) == (-1, 0) and ckpt(b) == (-1, 1)
    req = np.concatenate([AB3[:24], toks((300, 305))])  # prompt 29: limit 28 -> traversal 24
    m = probe(c, req, 28)
    assert (m.cached_tokens, m.traversed_tokens, m.host_tokens) == (16, 24, 16)
    assert m.lost == (("mamba", 8, MAMBA_WHY),)
    n0 = len(c.actions)
    r = step(c, req)
    assert (r.cached_tokens, r.cached_host, r.traversed_tokens) == (16, 16, 24)
    assert l1_serves(c, req, 16) is None and l1_serves(c, req, 24) is not None
    loads = [t for t in transfers(c, n0) if t.kind == "load"]
    assert shape(loads) == [("load", "full", L2, L1, 16), ("load", "mamba", L2, L1, 0)]
    assert loads[1].src == 0
    assert ckpt(b)[0] == -1 and ckpt(b)[1] == 1


def test_mamba_no_reuse_without_a_checkpoint_on_any_tier():
    """write_back: A's checkpoint is dropped from L1 by MAMBA pressure before A has any L2
    copy; A's later backup (at L1 eviction) has no checkpoint to copy. A stays in the tree
    (FULL on L2), but no tier holds a checkpoint at 16: nothing is reused, nothing loaded."""
    c = make(slots=4, wp="write_back")
    step(c, A)
    a = node_at(c, A)
    assert ckpt(a) == (0, -1) and transfers(c) == []
    assert c.mamba.evict(1) == 1
    assert a.alive and ckpt(a) == (-1, -1)
    n0 = len(c.actions)
    assert c.evict(64) == 16
    assert shape(transfers(c, n0)) == [("backup", "full", L1, L2, 16)]
    assert a.value is None and a.host is not None
    req = np.concatenate([A, toks((200, 204))])
    m = probe(c, req, 16)
    assert (m.cached_tokens, m.traversed_tokens, m.host_tokens) == (0, 16, 0)
    assert m.lost == (("mamba", 16, MAMBA_WHY),)
    n0 = len(c.actions)
    r = step(c, req)
    assert (r.cached_tokens, r.cached_host, r.traversed_tokens) == (0, 0, 16)
    assert r.lost == (("mamba", 16, MAMBA_WHY),)
    assert [t for t in transfers(c, n0) if t.kind == "load"] == []
    assert not any(isinstance(x, CopyState) for x in c.actions[n0:])


# =============================================================================================
# 3. SWA and MAMBA reuse from L3
# =============================================================================================
def _stored(c, tokens):
    """The component keys L3 holds for `tokens`' pages: ([page idx with ("swa", k)], [with ("mamba", k)])."""
    ks = keys_of(tokens, c.page_size)
    st = c.hier.storage
    return ([j for j, k in enumerate(ks) if ("swa", k) in st], [j for j, k in enumerate(ks) if ("mamba", k) in st])


def test_l3_round_trip_swa_and_mamba_prefetch_per_component():
    """P=4, W=8, MAMBA at request ends. A=[0,16), B=[16,28): SWA on pages 2,3 and 5,6,
    checkpoints at 16 and 28, all stored in L3 at backup. L1 and L2 both dropped (empty tree);
    a request reusing 28 prefetches FULL, SWA and the checkpoint L3 -> L2, then loads them."""
    c = make(W=8, swa_cap=32, slots=4, l3=True)
    step(c, A)
    step(c, AB3)
    ks = keys_of(AB3, 4)
    assert all(k in c.hier.storage for k in ks)
    assert _stored(c, AB3) == ([2, 3, 5, 6], [3, 6])
    drop_all(c)
    assert c.num_nodes == 1
    assert c.swa.host_pool.free_pages == 16 and c.mamba.host_pool.free_pages == 8
    req = np.concatenate([AB3, toks((300, 304))])  # prompt 32: limit 28
    m = probe(c, req, 28)
    assert (m.cached_tokens, m.traversed_tokens, m.device_tokens, m.host_tokens, m.storage_tokens) \
        == (28, 0, 0, 0, 28)
    n0 = len(c.actions)
    r = step(c, req)
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (28, 0, 0, 28)
    assert l1_serves(c, req, 28) is None
    ts = transfers(c, n0)
    # SWA: only the window before the node's end comes back (pages 5, 6), not the older one
    assert shape(ts[:6]) == [("prefetch", "full", L3, L2, 28), ("prefetch", "swa", L3, L2, 8),
                             ("prefetch", "mamba", L3, L2, 0), ("load", "full", L2, L1, 28),
                             ("load", "swa", L2, L1, 8), ("load", "mamba", L2, L1, 0)]
    pf, ps, pm, lf, ls, lm = ts[:6]
    assert [int(k) for k in pf.keys] == ks
    assert [int(k) for k in ps.keys] == [ks[5], ks[6]]
    assert [int(k) for k in pm.keys] == [ks[6]]
    node = node_at(c, AB3)
    assert node.parent is c.tree.root  # one prefetched node: only the checkpoint at its end came back
    assert swa_l2(node) == [-1] * 5 + ints(ps.dst)
    assert ints(ls.src) == ints(ps.dst) and swa_l1(node) == [-1] * 5 + ints(ls.dst)
    assert ckpt(node) == (int(lm.dst), int(pm.dst)) and lm.src == pm.dst
    cps = [x for x in c.actions[n0:] if isinstance(x, CopyState)]
    assert [(x.src, x.at_tokens) for x in cps] == [(int(lm.dst), 28)]


@pytest.mark.parametrize("W, every, want", [
    (8, 8, [0, 0, 0, 0, 16, 16, 16, 28]),  # SWA binds: checkpoints at 8, 16, 24, 28
    (16, 8, [0, 0, 8, 8, 16, 16, 24, 28]),  # MAMBA binds: the window [0,b) is always stored
    (8, None, [0, 0, 0, 0, 16, 16, 16, 28]),
])
def test_l3_storage_run_stops_at_the_deepest_boundary_every_component_stored(W, every, want):
    """Empty tree, everything in L3: storage tokens for limits 0, 4, ..., 28."""
    c = make(W=W, swa_cap=64, slots=8, every=every, l3=True)
    step(c, A)
    step(c, AB3)
    swa_pages = {8: [2, 3, 5, 6], 16: [0, 1, 2, 3, 4, 5, 6]}[W]
    mamba_pages = [3, 6] if every is None else [1, 3, 5, 6]
    assert _stored(c, AB3) == (swa_pages, mamba_pages)
    drop_all(c)
    req = np.concatenate([AB3, toks((300, 304))])
    got = []
    for limit in range(0, 29, 4):
        m = probe(c, req, limit)
        assert m.cached_tokens == m.storage_tokens and m.traversed_tokens == 0
        got.append(m.storage_tokens)
    assert got == want


def test_l3_partial_run_prefetches_only_up_to_the_accepted_boundary():
    """W=8, checkpoints every 8 tokens. A request limited to 24: the FULL pages of [0,24) are
    all in L3, but the window before 24 is not (page 4 has no SWA copy): 16 is reused."""
    c = make(W=8, swa_cap=64, slots=8, every=8, l3=True)
    step(c, A)
    step(c, AB3)
    ks = keys_of(AB3, 4)
    drop_all(c)
    req = np.concatenate([AB3[:24], toks((300, 305))])  # prompt 29: limit 28 -> run of 6 pages
    n0 = len(c.actions)
    r = step(c, req)
    assert (r.cached_tokens, r.cached_storage, r.cached_host, r.cached_device) == (16, 16, 0, 0)
    assert l1_serves(c, req, 16) is None
    ts = transfers(c, n0)
    assert shape(ts[:6]) == [("prefetch", "full", L3, L2, 16), ("prefetch", "swa", L3, L2, 8),
                             ("prefetch", "mamba", L3, L2, 0), ("load", "full", L2, L1, 16),
                             ("load", "swa", L2, L1, 8), ("load", "mamba", L2, L1, 0)]
    assert [int(k) for k in ts[0].keys] == ks[:4]
    assert [int(k) for k in ts[1].keys] == ks[2:4]
    assert [int(k) for k in ts[2].keys] == [ks[3]]


def test_l3_swa_window_continues_the_run_of_the_tree():
    """SWA only, W=12, write_back. A=[0,16) stays in the tree (L1+L2) with no SWA page on any
    tier; B=[16,28) (SWA on all 3 pages) survives only in L3. A storage boundary inside B needs
    the whole window in L3 after A's tombstones: only 28 qualifies (not 20 or 24)."""
    c = make(W=12, swa_cap=64, l3=True, wp="write_back")
    step(c, A)
    step(c, AB3)
    a, b = node_at(c, A), node_at(c, AB3)
    assert swa_l1(a) == [-1, 0, 1, 2] and swa_l1(b) == [3, 4, 5]
    assert c.swa.evict_tokens(4) == 12  # LRU: A (internal) loses its L1 SWA pages; no L2 copy yet
    assert swa_l1(a) == [-1] * 4 and swa_l2(a) is None
    assert c.evict(12) == 12  # B demoted: write_back backs up A (FULL only), then B
    assert c.hier.evict_l2(12) == 12
    assert not b.alive and a.alive and a.value is not None and a.host is not None
    assert _stored(c, AB3) == ([4, 5, 6], [])
    req = np.concatenate([AB3, toks((300, 304))])
    got = [(probe(c, req, lim).cached_tokens, probe(c, req, lim).storage_tokens) for lim in (16, 20, 24, 28)]
    assert got == [(0, 0), (0, 0), (0, 0), (28, 12)]
    r = step(c, req)
    assert (r.cached_tokens, r.cached_device, r.cached_storage) == (28, 16, 12)
    assert l1_serves(c, req, 28) is None


def test_prefetched_node_is_not_evicted_by_its_own_load():
    """write_back, L1 = 8 pages, L2 = 16 pages. A (with its checkpoint) lives only in L3. Three
    host-only prompts (12 L2 pages) are locked by held matches; Z (8 pages, no L2 copy) fills
    L1. Reusing A prefetches it into the last 4 L2 pages; its load evicts Z from L1, whose
    write_back backup needs 8 L2 pages: the prefetched node (the only unlocked host-only
    leaf) must not be the victim. Z's backup fails, Z is dropped, A is loaded and reused.
    (Up to fa5eed0 the prefetched node was evicted and a load of 0 tokens with src=None was
    emitted for it; 325d340 locks it while it loads.)"""
    c = make(l1=32, slots=8, l3=True, wp="write_back")
    step(c, A)
    c.evict(16)
    c.hier.evict_l2(16)
    assert c.num_nodes == 1 and _stored(c, A) == ([], [3])
    held = []
    for i in range(3):
        xi = toks((1000 * (i + 1), 1000 * (i + 1) + 16))
        step(c, xi)
        c.evict(16)
        m = c.match(TokenSeq(np.concatenate([xi, [1]])), 16)
        c.lock(m)
        held.append(m)
        assert (m.cached_tokens, m.host_tokens) == (16, 16)
    step(c, toks((9000, 9032)))
    assert c.free_tokens == 0 and c.hier.pool.free_pages == 4
    req = TokenSeq(np.concatenate([A, toks((200, 204))]))
    m = c.match(req, 16)
    assert m.storage_tokens == 16
    c.lock(m)
    n0 = len(c.actions)
    m2 = c.load(m, req)
    ts = transfers(c, n0)
    assert shape(ts) == [("prefetch", "full", L3, L2, 16), ("prefetch", "mamba", L3, L2, 0),
                         ("load", "full", L2, L1, 16), ("load", "mamba", L2, L1, 0)]
    assert ints(ts[2].src) == ints(ts[0].dst) and len(ints(ts[2].dst)) == 4 and ts[3].src == ts[1].dst
    assert (m2.cached_tokens, m2.storage_tokens) == (16, 16)
    assert l1_serves(c, req, 16) is None
    invariants.check(c)
    c.unlock(m2)
    for h in held:
        c.unlock(h)
    invariants.check(c)


# =============================================================================================
# 4. backups copy the components; demotion frees their L1 copies
# =============================================================================================
def _free_counts(c):
    return (c.swa.pool.free_pages, c.swa.host_pool.free_pages, c.mamba.pool.free_pages, c.mamba.host_pool.free_pages)


def test_write_through_backs_up_swa_pages_and_checkpoint_at_insert():
    """P=4, W=8: SWA pool 8 pages (L2: 16), 4 slots (L2: 8)."""
    c = make(W=8, swa_cap=32, slots=4)
    assert (c.swa.host_pool.capacity_pages, c.mamba.host_pool.capacity_pages) == (16, 8)
    step(c, A)
    a = node_at(c, A)
    ts = transfers(c)
    assert shape(ts) == [("backup", "full", L1, L2, 16), ("backup", "swa", L1, L2, 8),
                         ("backup", "mamba", L1, L2, 0)]
    assert ints(ts[1].src) == [0, 1] == swa_l1(a)[2:] and ints(ts[1].dst) == swa_l2(a)[2:] == [0, 1]
    assert (ts[2].src, ts[2].dst) == (0, 0) == ckpt(a)
    assert _free_counts(c) == (6, 14, 3, 7)
    # extending A backs up only the new leaf's window pages and checkpoint
    n0 = len(c.actions)
    step(c, AB3)
    b = node_at(c, AB3)
    ts = transfers(c, n0)
    assert shape(ts) == [("backup", "full", L1, L2, 12), ("backup", "swa", L1, L2, 8),
                         ("backup", "mamba", L1, L2, 0)]
    assert ints(ts[1].src) == swa_l1(b)[1:] and ints(ts[1].dst) == swa_l2(b)[1:] == [2, 3]
    assert (ts[2].src, ts[2].dst) == ckpt(b) == (1, 1)
    assert _free_counts(c) == (4, 12, 2, 6)
    # demotion (LRU leaf B, then A): L1 copies freed, L2 copies stay
    n0 = len(c.actions)
    assert c.evict(1) == 12
    assert _free_counts(c) == (6, 12, 3, 6)
    assert swa_l1(b) == [-1] * 3 and swa_l2(b) == [-1, 2, 3] and ckpt(b) == (-1, 1)
    frees = [(x.component, x.tier, x.indices) for x in c.actions[n0:] if isinstance(x, Free)]
    assert sorted(frees) == [("full", L1, (4, 5, 6)), ("mamba", L1, (1,)), ("swa", L1, (2, 3))]
    assert transfers(c, n0) == []
    assert c.evict(1) == 16
    assert _free_counts(c) == (8, 12, 4, 6)
    assert swa_l1(a) == [-1] * 4 and swa_l2(a) == [-1, -1, 0, 1] and ckpt(a) == (-1, 0)
    invariants.check(c)


def test_write_back_backs_up_components_at_l1_eviction_then_demotes():
    c = make(W=8, swa_cap=32, slots=4, wp="write_back")
    step(c, A)
    a = node_at(c, A)
    assert transfers(c) == [] and a.host is None and swa_l2(a) is None and ckpt(a) == (0, -1)
    assert _free_counts(c) == (6, 16, 3, 8)
    n0 = len(c.actions)
    assert c.evict(1) == 16
    ts = transfers(c, n0)
    assert shape(ts) == [("backup", "full", L1, L2, 16), ("backup", "swa", L1, L2, 8),
                         ("backup", "mamba", L1, L2, 0)]
    assert ints(ts[1].src) == [0, 1] and ints(ts[1].dst) == [0, 1] and (ts[2].src, ts[2].dst) == (0, 0)
    # then demoted: every L1 copy freed, the L2 copies are the backups just made
    assert a.alive and a.value is None and a.host.tolist() == [0, 1, 2, 3]
    assert swa_l1(a) == [-1] * 4 and swa_l2(a) == [-1, -1, 0, 1] and ckpt(a) == (-1, 0)
    assert _free_counts(c) == (8, 14, 4, 7)
    invariants.check(c)
    # and it is reusable from L2
    r = step(c, np.concatenate([A, toks((200, 204))]))
    assert (r.cached_tokens, r.cached_host) == (16, 16)


# =============================================================================================
# 5. SWA / MAMBA L1 pressure with an L2 tier frees only L1 copies
# =============================================================================================
Y = toks((700, 716))


@pytest.mark.parametrize("tiered", [True, False])
def test_component_pressure_frees_only_l1_copies_with_tiers(tiered):
    """W=8, SWA pool 5 pages, 2 state slots. A, X, Y are unrelated 16-token prompts; Y's
    request needs 3 SWA pages (1 free) and a private slot (none free): SWA drops A's window and
    MAMBA A's checkpoint (both least recently used). With an L2 tier A only loses its L1
    copies; without one A is removed whole (the contrast that makes the first case count)."""
    c = make(W=8, swa_cap=20, slots=2, tiers=tiered)
    step(c, A)
    step(c, X)
    a = node_at(c, A)
    assert c.swa.pool.free_pages == 1 and c.mamba.pool.free_pages == 0
    r = step(c, Y)
    assert not r.rejected and r.evicted_tokens == (0 if tiered else 16)
    assert c.swa.evicted_pages == 2
    if not tiered:  # A removed whole by SWA: its checkpoint went with it, MAMBA evicted nothing
        assert not a.alive and c.num_nodes == 3
        assert (c.swa.evicted_nodes, c.mamba.evicted_nodes, c.mamba.evicted_slots) == (1, 0, 0)
        return
    assert c.mamba.evicted_slots == 1
    assert a.alive and c.num_nodes == 4 and (c.swa.evicted_nodes, c.mamba.evicted_nodes) == (0, 0)
    assert a.value is not None and a.host is not None  # FULL untouched on both tiers
    assert swa_l1(a) == [-1] * 4 and swa_l2(a) == [-1, -1, 0, 1] and ckpt(a) == (-1, 0)
    assert c.full.evicted_tokens == 0
    # A is still reusable: FULL from L1, its window and checkpoint from L2
    n0 = len(c.actions)
    r = step(c, np.concatenate([A, toks((200, 204))]))
    assert (r.cached_tokens, r.cached_device, r.cached_host) == (16, 16, 0)
    assert l1_serves(c, np.concatenate([A, toks((200, 204))]), 16) is None
    loads = [t for t in transfers(c, n0) if t.kind == "load"]
    assert shape(loads) == [("load", "swa", L2, L1, 8), ("load", "mamba", L2, L1, 0)]
    assert ints(loads[0].src) == [0, 1] and loads[1].src == 0
    assert c.swa.evicted_nodes == 0 and c.mamba.evicted_nodes == 0 and c.full.evicted_tokens == 0


def test_component_pressure_never_removes_a_node_without_l2_copies():
    """write_back: A has no L2 copy of anything when SWA and MAMBA pressure take its L1 SWA
    pages and checkpoint; with an L2 tier configured the node still stays (FULL on L1)."""
    c = make(W=8, swa_cap=20, slots=2, wp="write_back")
    step(c, A)
    step(c, X)
    a = node_at(c, A)
    step(c, Y)
    assert a.alive and c.num_nodes == 4 and a.value is not None and a.host is None
    assert swa_l1(a) == [-1] * 4 and swa_l2(a) is None and ckpt(a) == (-1, -1)
    assert c.full.evicted_tokens == 0 and (c.swa.evicted_nodes, c.mamba.evicted_nodes) == (0, 0)


# =============================================================================================
# 6. fallback to the deepest boundary L1 alone accepts
# =============================================================================================
def _held(c, tokens):
    m = c.match(TokenSeq(tokens))
    c.lock(m)
    return m


def test_fallback_when_the_swa_pool_cannot_take_the_window():
    """W=8, SWA pool 5 pages. A=[0,16) on L1 (window pages 2,3), B=[16,28) demoted (its window
    on L2). X holds 2 SWA pages; A's window and X's are locked by held matches: 1 SWA page
    free, none evictable. Reusing 28 needs B's 2 window pages: the load fails and the match
    falls back to 16 (A: FULL and window on L1). B's FULL was loaded, but not reused."""
    c = make(W=8, swa_cap=20)
    step(c, A)
    step(c, AB3)
    a, b = node_at(c, A), node_at(c, AB3)
    assert c.evict(1) == 12 and b.value is None and swa_l1(b) == [-1] * 3
    step(c, X)
    hx, ha = _held(c, X), _held(c, A)
    assert (hx.cached_tokens, ha.cached_tokens) == (16, 16)
    assert c.swa.pool.free_pages == 1
    req = TokenSeq(np.concatenate([AB3, toks((300, 304))]))
    m = c.match(req, 28)
    assert (m.cached_tokens, m.device_tokens, m.host_tokens) == (28, 16, 12)
    c.lock(m)
    n0 = len(c.actions)
    m2 = c.load(m, req)
    assert (m2.cached_tokens, m2.device_tokens, m2.host_tokens, m2.storage_tokens) == (16, 16, 0, 0)
    assert m2.handle._node is a and l1_serves(c, req, 16) is None and l1_serves(c, req, 28) is not None
    assert shape(transfers(c, n0)) == [("load", "full", L2, L1, 12)]
    assert b.value is not None and swa_l1(b) == [-1] * 3 and swa_l1(a) == [-1, -1, 0, 1]
    assert c.swa.pool.free_pages == 1
    invariants.check(c)
    for h in (m2, hx, ha):
        c.unlock(h)
    invariants.check(c)


def test_fallback_when_the_mamba_pool_cannot_take_the_checkpoint():
    """2 state slots. A=[0,16) keeps its checkpoint on L1, B=[16,28) is demoted (checkpoint on
    L2). A's checkpoint is locked by a held match, the other slot is a request's private
    state: reusing 28 cannot load B's checkpoint, the match falls back to 16."""
    c = make(slots=2)
    step(c, A)
    step(c, AB3)
    a, b = node_at(c, A), node_at(c, AB3)
    assert c.evict(1) == 12 and ckpt(b) == (-1, 1) and ckpt(a) == (0, 0)
    ha = _held(c, A)
    priv = c.mamba.acquire(1)
    assert ints(priv) == [1] and c.mamba.pool.free_pages == 0
    req = TokenSeq(np.concatenate([AB3, toks((300, 304))]))
    m = c.match(req, 28)
    assert (m.cached_tokens, m.device_tokens, m.host_tokens) == (28, 16, 12)
    c.lock(m)
    n0 = len(c.actions)
    m2 = c.load(m, req)
    assert (m2.cached_tokens, m2.device_tokens, m2.host_tokens, m2.storage_tokens) == (16, 16, 0, 0)
    assert m2.handle._node is a and l1_serves(c, req, 16) is None and l1_serves(c, req, 28) is not None
    assert shape(transfers(c, n0)) == [("load", "full", L2, L1, 12)]
    assert ckpt(b) == (-1, 1) and ckpt(a) == (0, 0)
    acts = c.finalize(m2, {"mamba": [int(priv[0])]})
    assert [(x.src, x.dst, x.at_tokens) for x in acts] == [(0, 1, 16)]
    invariants.check(c)
    c.unlock(m2)
    c.unlock(ha)
    c.mamba.release(priv)
    invariants.check(c)


def test_fallback_through_the_stepper_gives_the_request_that_boundary():
    """The SWA case through ReplayStepper: cached_tokens equals the fallback boundary 16 (the
    request is then rejected: its own window pages cannot be had either)."""
    c = make(W=8, swa_cap=20)
    step(c, A)
    step(c, AB3)
    c.evict(1)
    step(c, X)
    hx, ha = _held(c, X), _held(c, A)
    r = step(c, np.concatenate([AB3, toks((300, 304))]))
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.traversed_tokens) == (16, 16, 0, 28)
    assert r.rejected
    c.unlock(hx)
    c.unlock(ha)
    invariants.check(c)


# =============================================================================================
# 7. seeded stress: every pool evicts, invariants after every step, hits on every tier
# =============================================================================================
STRESS_STEPS = 1250
KIND_TIERS = {"backup": (L1, L2), "load": (L2, L1), "store": (L2, L3), "prefetch": (L3, L2)}
STRESS = [(comps, l3, P) for comps in ("swa", "mamba", "swa+mamba") for l3 in (False, True) for P in (1, 4)]
assert len(STRESS) * STRESS_STEPS >= 10_000


def _stress(comps, l3, P, seed):
    """One seeded run. Returns (cache, steps with host hits, steps with storage hits,
    transfer counts by (kind, component), rejected steps, storage hits that passed the full
    L1 check, {known defect: steps excused from the component part of that check})."""
    rng = random.Random(seed)
    wp = ("write_through", "write_back")[seed % 2]
    names = comps.split("+")
    W = 3 * P if P > 1 else 5
    wpages = -(-W // P)
    c = make(P=P, l1=32 * P if P > 1 else 96, W=W if "swa" in names else None,
             swa_cap=(wpages + 1) * 3 * P, slots=4 if "mamba" in names else None,
             every=4 * P if P > 1 else 6, l3=l3, wp=wp)
    st = ReplayStepper(c)
    docs = [[rng.randrange(10**6) for _ in range(80)] for _ in range(5)]
    convs = [[] for _ in range(4)]
    n_host = n_storage = n_rej = n_checked_storage = 0
    bugs = {"component prefetch short": 0, "storage load failed": 0}
    comp = {}
    for _ in range(STRESS_STEPS):
        if rng.random() < 0.5:  # a conversation: the next prompt extends the last sequence
            k = rng.randrange(len(convs))
            if not convs[k] or len(convs[k]) > 64:
                convs[k] = docs[rng.randrange(len(docs))][: rng.randrange(P, 32)]
            prompt = convs[k] + [rng.randrange(3) for _ in range(rng.randrange(1, 3 * P + 2))]
            out = [rng.randrange(3) for _ in range(rng.randrange(1, 2 * P + 2))]
            convs[k] = prompt + out[:-1]
        else:  # a document prefix with a short random tail
            d = docs[rng.randrange(len(docs))]
            prompt = d[: rng.randrange(1, 80)] + [rng.randrange(3) for _ in range(rng.randrange(3))]
            out = [rng.randrange(3) for _ in range(rng.randrange(1, 4))]
        prompt, out = np.array(prompt, dtype=np.int64), np.array(out, dtype=np.int64)
        seq = TokenSeq(np.concatenate([prompt, out[:-1]]))
        n0 = len(c.actions)
        r = st.step(prompt, out, seq=seq)
        invariants.check(c)
        assert r.cached_device + r.cached_host + r.cached_storage == r.cached_tokens
        assert r.cached_tokens % P == 0 and r.cached_tokens <= max(len(prompt) - 1, 0) // P * P
        assert r.cached_tokens <= r.traversed_tokens + r.cached_storage
        if not l3:
            assert r.cached_storage == 0
        ts = transfers(c, n0)
        for t in ts:
            comp[(t.kind, t.component)] = comp.get((t.kind, t.component), 0) + 1
            assert (t.src_tier, t.dst_tier) == KIND_TIERS[t.kind], t
            if t.component == "swa":  # one slot per page on each addressed side
                assert all(len(ints(x)) * P == t.tokens for x in (t.src, t.dst) if x is not None), t
            elif t.component == "mamba":  # one state slot
                assert t.tokens == 0 and all(np.ndim(x) == 0 for x in (t.src, t.dst) if x is not None), t
        pf = {t.component for t in ts if t.kind == "prefetch"}
        beyond_vote = any(r.cached_tokens > r.traversed_tokens - t for _, t, _ in r.lost)
        # the reused boundary is one L1 alone serves, for every component (a payload that
        # could not be prefetched or loaded moves it up: RadixCache.load's L1-only vote)
        why = l1_serves(c, seq, r.cached_tokens)
        assert why is None, why
        if r.cached_storage and not set(names) <= pf:
            bugs["component prefetch short"] += 1  # fixed: kept as a count of the situation
        elif not r.cached_storage and beyond_vote:
            bugs["storage load failed"] += 1
        n_checked_storage += r.cached_storage > 0
        n_host += r.cached_host > 0
        n_storage += r.cached_storage > 0
        n_rej += r.rejected
        del c.actions[:]  # the pool listeners append to this very list
    return c, n_host, n_storage, comp, n_rej, n_checked_storage, bugs


@pytest.mark.parametrize("comps, l3, P", STRESS)
def test_tiers_hybrid_stress(comps, l3, P):
    seed = STRESS.index((comps, l3, P))
    c, n_host, n_storage, comp, n_rej, n_checked_storage, bugs = _stress(comps, l3, P, seed)
    assert n_rej < STRESS_STEPS // 10
    st = c.stats()
    # every pool evicted
    assert st["full"]["evicted_tokens"] > 0 and st["tiers"]["l2_evicted_tokens"] > 0
    if "swa" in comps:
        assert c.swa.evicted_pages > 0
    if "mamba" in comps:
        assert c.mamba.evicted_slots > 0
    # host hits, with the components' payloads loaded from L2
    assert n_host > 0
    assert comp.get(("load", "full"), 0) > 0
    for name in comps.split("+"):
        assert comp.get(("backup", name), 0) > 0
        assert comp.get(("load", name), 0) > 0
    if l3:
        assert n_storage > 0 and n_checked_storage > 0
        for name in ["full"] + comps.split("+"):
            assert comp.get(("prefetch", name), 0) > 0
    else:
        assert n_storage == 0 and not any(k[0] in ("prefetch", "store") for k in comp)


# =============================================================================================
# 8. regressions of defects these tests found (fixed)
# =============================================================================================
@pytest.mark.parametrize("comp", ["swa", "mamba"])
@pytest.mark.parametrize("l3_write, want", [("on_l2_evict", (0, 0)), ("on_insert", (16, 16))])
def test_storage_hit_whose_component_payload_gets_no_l2_slot_is_reused_anyway(comp, l3_write, want):
    """A=[0,16) lives only in L3 (FULL, SWA window pages 2,3 / checkpoint at page 3). Three
    (SWA) or four (MAMBA) unrelated prompts then fill the component's small L2 pool with
    copies of nodes that stay on L1 (not L2-evictable). A request reusing A: the match offers
    16 storage tokens; the FULL prefetch succeeds. With ``l3_write="on_l2_evict"`` L3 holds
    none of those copies, so the component's prefetch gets no L2 slot. Observed (defect): cached
    16 (cached_storage 16) with no SWA page (resp. no checkpoint) of A on any tier and no
    CopyState. Expected: a boundary L1 serves (here 0). With ``"on_insert"`` L3 holds the
    copies, so the pool drops them (L3HeldCopies) and A is reused from storage (16): pinned as
    (0, 0) for both writes before the pools could drop such copies."""
    if comp == "swa":
        c = make(W=8, swa_cap=12, l3=True, l3_write=l3_write)  # SWA L2 pool: 6 pages
        fill = (X, Y, toks((800, 816)))
    else:
        c = make(slots=2, l3=True, l1=96, l3_write=l3_write)  # MAMBA L2 pool: 4 slots
        fill = (X, Y, toks((800, 816)), toks((900, 916)))
    step(c, A)
    drop_all(c)
    assert _stored(c, A) == (([2, 3], []) if comp == "swa" else ([], [3]))
    for d in fill:
        step(c, d)
    pool = c.swa.host_pool if comp == "swa" else c.mamba.host_pool
    assert pool.free_pages == 0 and len(c.hier.queue) == 0
    req = np.concatenate([A, toks((200, 204))])
    assert probe(c, req, 16).storage_tokens == 16
    n0 = len(c.actions)
    r = step(c, req)
    assert ("prefetch", "full") in [(t.kind, t.component) for t in transfers(c, n0)]
    assert l1_serves(c, req, r.cached_tokens) is None
    assert (r.cached_tokens, r.cached_storage) == want


def test_failed_storage_load_reuses_a_rejected_boundary():
    """MAMBA only, L1 = 8 pages. [0,16) is on L1 with no checkpoint at 16 (it was split off by
    a request A+Q whose checkpoint is at 20); [16,28) (checkpoint at 28) is only in L3. X
    (3 pages, locked by a held match) and [0,16) (locked by the request) leave 1 free L1 page.
    The match offers 28 (16 device + 12 storage); the prefetch succeeds but its load cannot
    get 3 L1 pages. Observed: cached 16 (a boundary MAMBA rejected: no checkpoint at 16 on any
    tier; finalize copies nothing). Expected: the deepest boundary L1 serves, 0."""
    c = make(l1=32, slots=8, l3=True)
    step(c, AB3)  # [0,28), checkpoint at 28
    AQ = np.concatenate([A, toks((400, 404))])
    r = step(c, AQ)  # no checkpoint at 16: recomputed; splits [0,28) at 16
    assert (r.cached_tokens, r.traversed_tokens) == (0, 16)
    assert c.hier.evict_l2(12) == 12  # [16,28): host-only, dropped (it is in L3)
    assert _stored(c, AB3) == ([], [6])
    step(c, X[:12])
    hx = _held(c, X[:12])
    a = node_at(c, A)
    assert a.value is not None and ckpt(a) == (-1, -1) and c.free_tokens == 4
    req = TokenSeq(np.concatenate([AB3, toks((300, 304))]))
    m = c.match(req, 28)
    assert (m.cached_tokens, m.device_tokens, m.storage_tokens) == (28, 16, 12)
    assert m.lost == (("mamba", 16, MAMBA_WHY),)
    c.lock(m)
    m2 = c.load(m, req)
    try:
        assert l1_serves(c, req, m2.cached_tokens) is None
        assert m2.cached_tokens == 0
    finally:
        c.unlock(m2)
        c.unlock(hx)


@pytest.mark.parametrize("comp", ["swa", "mamba"])
def test_write_through_selective_backs_up_with_votes(comp):
    """threshold 1. A=[0,16); its insert counts A's one hit and backs A up (the FULL pages
    first); three matches walk through A and count none (SGLang 0.5.23 counts at insert)."""
    kw = {"swa": SwaConfig(window_tokens=8, capacity_tokens=32)} if comp == "swa" else \
        {"mamba": MambaConfig(slots=4)}
    c = RadixCache(CacheConfig(page_size=4, capacity_tokens=64, **kw,
                               tiers=TierConfig(hicache_ratio=2, write_policy="write_through_selective",
                                                write_through_threshold=1)), record_actions=True)
    step(c, A)
    for _ in range(3):
        c.match(TokenSeq(np.concatenate([A, toks((200, 204))])))
    a = node_at(c, A)
    assert a.hits == 1
    assert [(t.kind, t.component) for t in transfers(c)][:1] == [("backup", "full")]
    assert a.host is not None


# =============================================================================================
# 9. component L2 copies that L3 holds go first (l3_copies.L3HeldCopies)
# =============================================================================================
Z, V = toks((800, 816)), toks((900, 916))


def _l2_copy(c, comp, tokens):
    n = node_at(c, tokens)
    return swa_l2(n) if comp == "swa" else ckpt(n)[1]


@pytest.mark.parametrize("comp", ["swa", "mamba"])
def test_component_l2_copy_that_l3_holds_is_dropped_before_any_node_leaves_l2(comp):
    """Unrelated 16-token prompts A, X, Y, Z (and V for MAMBA), write_through with L3 on
    insert, a small component L2 pool (SWA 6 pages = 3 windows; MAMBA 4 slots). A has been
    demoted to a host-only leaf by the time the pool is full. The next backup drops A's
    component L2 copy (the least recently used one that L3 holds): A stays in the tree with
    its FULL pages on L2 (no L2 eviction at all), its copy stays in L3, and A is reused in
    full through L3. Before: L2 evicted A's node (16 tokens) to make room."""
    if comp == "swa":
        c, prompts, pool = make(W=8, swa_cap=12, l3=True), (A, X, Y, Z), "swa"
    else:
        c, prompts, pool = make(slots=2, l3=True, l1=48), (A, X, Y, Z, V), "mamba"
    for t in prompts:
        step(c, t)
    a = node_at(c, A)
    assert a is not None and a.value is None and a.host is not None  # host-only leaf, kept
    assert c.hier.evicted_l2_tokens == 0 and len(c.hier.queue) >= 1
    host_pool = getattr(c, pool).host_pool
    assert host_pool.free_pages == 0 and getattr(c, pool).l3_copies.dropped == (2 if comp == "swa" else 1)
    assert _l2_copy(c, comp, A) == ([-1] * 4 if comp == "swa" else -1)  # dropped from L2 ...
    assert _stored(c, A) == (([2, 3], []) if comp == "swa" else ([], [3]))  # ... still in L3
    newest = prompts[-1]
    assert _stored(c, newest) == (([2, 3], []) if comp == "swa" else ([], [3]))  # the new one got L2, then L3
    req = np.concatenate([A, toks((200, 204))])
    r = step(c, req)
    assert r.cached_tokens == 16 and l1_serves(c, req, 16) is None


@pytest.mark.parametrize("comp", ["swa", "mamba"])
def test_full_component_l2_pool_no_longer_blocks_new_backups(comp):
    """L1 large enough that no node leaves it (the L2 queue stays empty: nothing host-only to
    evict), a small component L2 pool: A, X, Y fill it with copies of nodes that stay in the
    tree, all held in L3 too. The backups of Z and V drop the oldest such copies and proceed;
    Z's and V's windows (checkpoints) reach L2 and L3. Before: both backups were refused and
    Z's and V's payloads never reached L3."""
    c = make(W=8, swa_cap=12, l3=True, l1=128) if comp == "swa" else make(slots=2, l3=True, l1=128)
    for t in (A, X, Y, Z, V):
        step(c, t)
    assert len(c.hier.queue) == 0 and c.hier.evicted_l2_tokens == 0
    assert all(node_at(c, t).value is not None for t in (A, X, Y, Z, V))
    if comp == "swa":
        assert [_l2_copy(c, comp, t) for t in (A, X, Y, Z, V)] == [[-1] * 4, [-1] * 4, [-1, -1, 4, 5],
                                                                  [-1, -1, 0, 1], [-1, -1, 2, 3]]
    else:
        assert [_l2_copy(c, comp, t) for t in (A, X, Y, Z, V)] == [-1, 1, 2, 3, 0]
    want = ([2, 3], []) if comp == "swa" else ([], [3])
    assert [_stored(c, t) for t in (A, X, Y, Z, V)] == [want] * 5


def test_component_l2_copies_l3_does_not_hold_are_kept():
    """l3_write on_l2_evict: L3 holds none of the SWA L2 copies, so the pool drops nothing and
    (as before) the backup of Z evicts the host-only node A from L2."""
    c = make(W=8, swa_cap=12, l3=True, l3_write="on_l2_evict")
    for t in (A, X, Y, Z):
        step(c, t)
    assert node_at(c, A) is None and c.hier.evicted_l2_tokens == 16
    assert [_l2_copy(c, "swa", t) for t in (X, Y, Z)] == [[-1, -1, 2, 3], [-1, -1, 4, 5], [-1, -1, 0, 1]]


def test_storage_prefetch_landing_after_a_boundary_fetch_of_the_same_pages_keeps_one_copy():
    """auto_ack=False, W=8. A=[0,16) only in L3. `prefetch` for A+Q emits the FULL and the SWA
    (pages 2,3) prefetch; only the FULL one lands. The next match sees A on L2 without its
    window and fetches pages 2,3 again (l3_boundary 16); that fetch lands first, then the
    first SWA prefetch. Before: its callback overwrote the landed copy and leaked 2 SWA L2
    slots (invariants: free 12 + held 2 != 16). Now the first copy stays, the later slots are
    freed."""
    c = RadixCache(CacheConfig(page_size=4, capacity_tokens=64, swa=SwaConfig(window_tokens=8, capacity_tokens=32),
                               tiers=TierConfig(hicache_ratio=2, l3=True, min_prefetch_tokens=0)),
                   record_actions=True, auto_ack=False)

    def ack_all():
        while c.hier.pending:
            c.ack(next(iter(c.hier.pending)))

    ReplayStepper(c).step(A, np.asarray([9999], dtype=np.int64))
    ack_all()
    c.evict(10**9)
    ack_all()
    c.hier.evict_l2(10**9)
    ack_all()
    req = TokenSeq(np.concatenate([A, toks((200, 204))]))

    def prefetch():
        m = c.match(req, 16)
        c.lock(m)
        n0 = len(c.actions)
        c.prefetch(m, req)
        c.unlock(m)
        return m, transfers(c, n0)

    m, ts = prefetch()
    assert (m.storage_tokens, shape(ts)) == (16, [("prefetch", "full", L3, L2, 16), ("prefetch", "swa", L3, L2, 8)])
    c.ack(ts[0].id)
    m2, ts2 = prefetch()
    assert (m2.cached_tokens, m2.l3_boundary, shape(ts2)) == (0, 16, [("prefetch", "swa", L3, L2, 8)])
    c.ack(ts2[0].id)
    c.ack(ts[1].id)
    invariants.check(c)
    assert swa_l2(node_at(c, A)) == [-1, -1] + ints(ts2[0].dst)
    assert c.swa.host_pool.free_pages == c.swa.host_pool.capacity_pages - 2


# =============================================================================================
# 10. write_through_selective after a MAMBA split: every node of the counted path is offered
# =============================================================================================
def _record_on_hit(c) -> list:
    calls: list = []
    real = c.hier.on_hit
    c.hier.on_hit = lambda n: (calls.append(n.end), real(n))
    return calls


def test_on_hit_sees_the_nodes_a_mamba_checkpoint_split_put_on_the_counted_path():
    """every_tokens=8: the first request's insert makes one leaf [0, 16) and counts its hit;
    placing the snapshot at 8 then splits it. The nodes offered to `on_hit` (top-down) are
    the path as it is after the split, [0, 8) then [8, 16), not only the leaf counted."""
    c = RadixCache(CacheConfig(page_size=4, capacity_tokens=64, mamba=MambaConfig(slots=8, every_tokens=8),
                               tiers=TierConfig(hicache_ratio=2, write_policy="write_through_selective",
                                                write_through_threshold=1)), record_actions=True)
    calls = _record_on_hit(c)
    step(c, toks((0, 17)))
    assert calls == [8, 16]
    assert [n.end for n in reversed(c.tree.hit_path(node_at(c, toks((0, 16)))))] == [8, 16]
    assert [(t.kind, t.component, t.tokens) for t in transfers(c) if t.component == "full"] == \
        [("backup", "full", 8), ("backup", "full", 8)]
