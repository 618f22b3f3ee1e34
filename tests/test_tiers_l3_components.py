"""SWA windows and MAMBA checkpoints that only L3 still holds, on a tree path whose FULL pages
are in the tree (L1 or L2): the voted match reports the deeper boundary (`MatchResult.
l3_boundary`), `RadixCache.prefetch` / `load` fetch the missing payloads L3 -> L2 ("prefetch"
transfers, valid only at the ack, a failure frees the L2 slots) and `load` then brings them
L2 -> L1 as for any host hit. `cached_tokens` counts only what is reusable now.

The situation arises when the tree holds a path recomputed as one node (its window and
checkpoint only at its end) while an earlier boundary's payloads were stored in L3 — here by a
second engine sharing the L3 store (`other.hier.storage = c.hier.storage`), as engines
sharing a Mooncake store do. P=4: A = [0,16), AB2 = [0,24) (one node in the cache under test).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import simpy

from cache_core import CacheConfig, MambaConfig, RadixCache, ReplayStepper, SwaConfig, TokenSeq, invariants
from cache_core.actions import L1, L2, L3, CopyState, Transfer
from cache_core.engine_types import EngineConfig, EngineRequest
from cache_core.keys import page_keys
from cache_core.tiers import TierConfig
from scenarios.presets import get_hardware
from sim.cost import RooflineCostModel
from sim.simulator import build
from helpers import ckpt, ints, node_at, swa_l1, swa_l2, swa_pl, transfers
from helpers import tshape as shape

MAMBA_WHY = "no MAMBA checkpoint at boundary"
SWA_WHY = "SWA window incomplete"


# ---------------------------------------------------------------------------------------------
# helpers (as in tests/test_tiers_hybrid.py)
# ---------------------------------------------------------------------------------------------
def make(P=4, l1=64, *, W=None, swa_cap=32, slots=None, auto_ack=True, min_prefetch=0) -> RadixCache:
    swa = None if W is None else SwaConfig(window_tokens=W, capacity_tokens=swa_cap)
    mamba = None if slots is None else MambaConfig(slots=slots)
    tc = TierConfig(hicache_ratio=2, l3=True, l3_tokens=None, min_prefetch_tokens=min_prefetch)
    return RadixCache(CacheConfig(page_size=P, capacity_tokens=l1, swa=swa, mamba=mamba, tiers=tc),
                      record_actions=True, auto_ack=auto_ack)


def toks(*ranges) -> np.ndarray:
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


def step(cache, prompt, output=(9999,)):
    r = ReplayStepper(cache).step(prompt, np.asarray(output, dtype=np.int64))
    invariants.check(cache)
    return r


def ack_all(cache, ok=True) -> None:
    while cache.hier.pending:
        for t in list(cache.hier.pending):
            if t in cache.hier.pending:
                cache.ack(t, ok)
                invariants.check(cache)








def keys_of(tokens, P=4) -> list:
    return [int(k) for k in page_keys(np.asarray(tokens, dtype=np.int64), P)[0]]










def probe(cache, tokens, limit):
    return copy.deepcopy(cache).match(TokenSeq(tokens), limit)


def l1_serves(c, tokens, b) -> bool:
    """The boundary b is served by L1 alone: FULL of [0, b), a node ending at b, the SWA window
    pages before b, the checkpoint at b."""
    seq = TokenSeq(tokens)
    P = c.page_size
    path = c.tree.path_nodes(seq.data, b)
    if sum(k for _, k in path) != b or path[-1][0].end != b or any(nd.value is None for nd, _ in path):
        return False
    if c.swa is not None:
        lo = max(0, b - c.swa.window_pages * P)
        for nd, _ in path:
            if nd.end > lo and not (swa_pl(nd).pages[max(0, (lo - nd.parent.end) // P):] >= 0).all():
                return False
    return c.mamba is None or ckpt(path[-1][0])[0] >= 0


A = toks((0, 16))
AB2 = toks((0, 24))
REQ = np.concatenate([A, toks((200, 204))])  # prompt 20: the replay limit is 16
KEYS = keys_of(AB2)


def setup(*, W=None, slots=None, demote=True, auto_ack=True, other_prompt=A, min_prefetch=0):
    """The cache under test holds AB2 as one node (window / checkpoint only at 24), FULL on L2
    (`demote`) or L1; a second engine sharing its L3 store processed `other_prompt`, storing
    its payloads. Returns (cache, the AB2 node)."""
    c = make(W=W, slots=slots, auto_ack=auto_ack, min_prefetch=min_prefetch)
    other = make(W=W, slots=slots)
    other.hier.storage = c.hier.storage
    ReplayStepper(c).step(AB2, np.array([9999]))
    if not auto_ack:
        ack_all(c)
    invariants.check(c)
    step(other, other_prompt)
    n = node_at(c, AB2)
    assert n.parent is c.tree.root and n.value is not None and n.host is not None
    if demote:
        assert c.evict(10**9) == 24
        assert n.value is None and n.host is not None
    invariants.check(c)
    return c, n


# =============================================================================================
# 1. the match reports the boundary, replay reuses it
# =============================================================================================
@pytest.mark.parametrize("demote", [True, False])
def test_swa_window_only_in_l3_is_fetched_then_loaded_and_reused(demote):
    """W=8. The tree's node [0,24) has SWA pages only at 4,5 (L2, and L1 unless demoted); the
    window before 16 (pages 2,3) is in L3 only. The match offers 0 now and 16 after a fetch;
    replay prefetches exactly pages 2,3 L3 -> L2 into the new node [0,16) (split at 16), loads
    FULL (if demoted) and the two SWA pages L2 -> L1, and reuses 16."""
    c, n = setup(W=8, demote=demote)
    assert swa_l2(n) == [-1, -1, -1, -1, 0, 1]
    assert ("swa", KEYS[2]) in c.hier.storage and ("swa", KEYS[3]) in c.hier.storage
    m = probe(c, REQ, 16)
    assert (m.cached_tokens, m.traversed_tokens, m.storage_tokens, m.l3_boundary) == (0, 16, 0, 16)
    assert m.lost == (("swa", 16, SWA_WHY),)
    n0 = len(c.actions)
    r = step(c, REQ)
    dev = 0 if demote else 16
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (16, dev, 16 - dev, 0)
    assert r.lost == () and l1_serves(c, REQ, 16)
    ts = transfers(c, n0)
    want = [("prefetch", "swa", L3, L2, 8)] + [("load", "full", L2, L1, 16)] * demote + [("load", "swa", L2, L1, 8)]
    assert shape(ts[: len(want)]) == want
    pf, ls = ts[0], ts[len(want) - 1]
    assert [int(k) for k in pf.keys] == KEYS[2:4] and pf.src is None
    a = node_at(c, A)
    assert a is not None and a.parent is c.tree.root and n.parent is a  # split at 16
    assert swa_l2(a) == [-1, -1] + ints(pf.dst) and ints(ls.src) == ints(pf.dst)
    assert swa_l1(a) == [-1, -1] + ints(ls.dst)
    # the rest is the request's own leaf [16,20): its backups and store
    assert {t.kind for t in ts[len(want):]} <= {"backup", "store"}


@pytest.mark.parametrize("demote", [True, False])
def test_mamba_checkpoint_only_in_l3_is_fetched_then_loaded_and_reused(demote):
    """MAMBA: the tree's node [0,24) has its checkpoint at 24 only; L3 holds ("mamba", key of
    page 3) (the checkpoint at 16). Replay splits at 16, prefetches the checkpoint into an L2
    slot, loads it L2 -> L1, copies it into the request's private slot and reuses 16."""
    c, n = setup(slots=4, demote=demote)
    assert ("mamba", KEYS[3]) in c.hier.storage
    m = probe(c, REQ, 16)
    assert (m.cached_tokens, m.traversed_tokens, m.l3_boundary) == (0, 16, 16)
    assert m.lost == (("mamba", 16, MAMBA_WHY),)
    h0 = c.mamba.host_pool.free_pages
    n0 = len(c.actions)
    r = step(c, REQ)
    dev = 0 if demote else 16
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (16, dev, 16 - dev, 0)
    acts = [x for x in c.actions[n0:] if isinstance(x, (Transfer, CopyState))]
    kinds = [(x.kind, x.component, x.src_tier, x.dst_tier) if isinstance(x, Transfer) else ("copy", x.component)
             for x in acts]
    want = ([("prefetch", "mamba", L3, L2)] + [("load", "full", L2, L1)] * demote
            + [("load", "mamba", L2, L1), ("copy", "mamba")])
    assert kinds[: len(want)] == want
    pm, lm, cp = acts[0], acts[len(want) - 2], acts[len(want) - 1]
    assert [int(k) for k in pm.keys] == [KEYS[3]] and pm.tokens == 0 and pm.src is None
    a = node_at(c, A)
    assert a is not None and n.parent is a
    assert ckpt(a) == (int(lm.dst), int(pm.dst)) and lm.src == pm.dst
    assert (cp.src, cp.at_tokens) == (int(lm.dst), 16)
    assert c.mamba.host_pool.free_pages < h0


def test_swa_and_mamba_both_fetched_from_l3():
    """Both components: the window pages 2,3 and the checkpoint at 16 come from L3."""
    c, n = setup(W=8, slots=4)
    assert probe(c, REQ, 16).l3_boundary == 16
    n0 = len(c.actions)
    r = step(c, REQ)
    assert (r.cached_tokens, r.cached_host) == (16, 16) and l1_serves(c, REQ, 16)
    ts = transfers(c, n0)
    assert shape(ts[:5]) == [("prefetch", "swa", L3, L2, 8), ("prefetch", "mamba", L3, L2, 0),
                             ("load", "full", L2, L1, 16), ("load", "swa", L2, L1, 8),
                             ("load", "mamba", L2, L1, 0)]
    assert [int(k) for k in ts[0].keys] == KEYS[2:4] and [int(k) for k in ts[1].keys] == [KEYS[3]]


def test_only_the_window_pages_missing_from_the_tree_are_fetched():
    """W=12 (3 pages). The tree's window before 24 is pages 3,4,5 (L2); the other engine stored
    A's window, pages 1,2,3. A request limited to 20 needs pages 2,3,4: only page 2 is fetched
    (one page, into the node split at 20), pages 3,4 are loaded from L2."""
    c, n = setup(W=12)
    assert swa_l2(n) == [-1, -1, -1, 0, 1, 2]
    req = np.concatenate([AB2[:20], toks((300, 305))])  # prompt 25: limit 24, traversal 20
    m = probe(c, req, 24)
    assert (m.cached_tokens, m.traversed_tokens, m.l3_boundary) == (0, 20, 20)
    n0 = len(c.actions)
    r = step(c, req)
    assert (r.cached_tokens, r.cached_host) == (20, 20) and l1_serves(c, req, 20)
    ts = transfers(c, n0)
    assert shape(ts[:3]) == [("prefetch", "swa", L3, L2, 4), ("load", "full", L2, L1, 20),
                             ("load", "swa", L2, L1, 12)]
    assert [int(k) for k in ts[0].keys] == [KEYS[2]]
    up = node_at(c, AB2[:20])
    assert up is not None and swa_l2(up)[2:] == ints(ts[0].dst) + [0, 1]


# =============================================================================================
# 2. no boundary where L3 lacks a payload, or the gain is below min_prefetch_tokens
# =============================================================================================
def test_no_l3_boundary_without_the_payload_in_l3():
    """The other engine processed an unrelated prompt: nothing of A's window in L3."""
    c, _ = setup(W=8, slots=4, other_prompt=toks((500, 516)))
    m = probe(c, REQ, 16)
    assert (m.cached_tokens, m.l3_boundary) == (0, 0)
    n0 = len(c.actions)
    r = step(c, REQ)
    assert r.cached_tokens == 0
    assert not any(t.kind == "prefetch" for t in transfers(c, n0))


def test_only_the_checkpoint_in_l3_is_not_enough_for_swa_and_mamba():
    """SWA+MAMBA, but the other engine had no SWA (its store has the checkpoint only)."""
    c = make(W=8, slots=4)
    other = make(slots=4)
    other.hier.storage = c.hier.storage
    step(c, AB2)
    step(other, A)
    c.evict(10**9)
    assert ("mamba", KEYS[3]) in c.hier.storage and ("swa", KEYS[3]) not in c.hier.storage
    assert probe(c, REQ, 16).l3_boundary == 0


def test_l3_boundary_respects_min_prefetch_tokens():
    c, _ = setup(W=8, min_prefetch=20)
    assert probe(c, REQ, 16).l3_boundary == 0
    c, _ = setup(W=8, min_prefetch=16)
    assert probe(c, REQ, 16).l3_boundary == 16


# =============================================================================================
# 3. acknowledged later (engine style): prefetch at arrival, failure frees, success reuses
# =============================================================================================
@pytest.mark.parametrize("comp", ["swa", "mamba"])
def test_failed_fetch_frees_its_slots_and_the_request_recomputes(comp):
    """auto_ack=False. `load` emits the prefetch and, with nothing reusable yet, returns the
    match at 0 (the request would recompute). A failed ack frees the L2 slot(s); the node keeps
    no payload; L3 forgets the payload it could not read (tiers/failures.py), so the match no
    longer offers 16 through L3 and a second load reads nothing (before: it offered 16 again,
    and every later request read the same unreadable payload)."""
    kw = {"W": 8} if comp == "swa" else {"slots": 4}
    c, n = setup(auto_ack=False, **kw)
    pool = c.swa.host_pool if comp == "swa" else c.mamba.host_pool
    free0 = pool.free_pages
    seq = TokenSeq(REQ)
    m = c.match(seq, 16)
    assert (m.cached_tokens, m.l3_boundary) == (0, 16)
    c.lock(m)
    n0 = len(c.actions)
    m2 = c.load(m, seq)
    invariants.check(c)
    assert m2.cached_tokens == 0
    ts = transfers(c, n0)
    assert shape(ts) == [("prefetch", comp, L3, L2, 8 if comp == "swa" else 0)]
    assert pool.free_pages == free0 - (2 if comp == "swa" else 1)
    read = [KEYS[2], KEYS[3]] if comp == "swa" else [KEYS[3]]  # the window before 16, the checkpoint at 16
    assert [(comp, k) in c.hier.storage for k in read] == [True] * len(read)
    c.ack(ts[0].id, False)
    invariants.check(c)
    assert pool.free_pages == free0 and c.hier.failed == 1
    a = node_at(c, A)
    if comp == "swa":
        assert swa_l2(a) in (None, [-1] * 4)
    else:
        assert ckpt(a) == (-1, -1)
    c.unlock(m2)
    invariants.check(c)
    assert [(comp, k) in c.hier.storage for k in read] == [False] * len(read)
    m3 = c.match(seq, 16)
    assert (m3.cached_tokens, m3.l3_boundary) == (0, 0)
    c.lock(m3)
    n1 = len(c.actions)
    assert c.load(m3, seq).cached_tokens == 0 and transfers(c, n1) == []
    c.unlock(m3)
    invariants.check(c)


@pytest.mark.parametrize("comp", ["swa", "mamba"])
def test_prefetch_at_arrival_then_match_and_load_reuse(comp):
    """Engine flow with auto_ack=False: `prefetch` (arrival) emits only the component
    prefetch and returns 0 (no FULL token comes from L3); once acknowledged the match reuses
    16 from the tree (FULL on L2, the payload on L2) and `load` brings both to L1."""
    kw = {"W": 8} if comp == "swa" else {"slots": 4}
    c, n = setup(auto_ack=False, **kw)
    seq = TokenSeq(REQ)
    m = c.match(seq, 16)
    c.lock(m)
    n0 = len(c.actions)
    assert c.prefetch(m, seq) == 0
    c.unlock(m)
    invariants.check(c)
    ts = transfers(c, n0)
    assert shape(ts) == [("prefetch", comp, L3, L2, 8 if comp == "swa" else 0)]
    ack_all(c)
    m = c.match(seq, 16)
    assert (m.cached_tokens, m.device_tokens, m.host_tokens, m.l3_boundary) == (16, 0, 16, 0)
    # the engine's resolve loop: match, lock, load; wait for the acks; again
    c.pipeline_loads = True
    n0 = len(c.actions)
    for rounds in range(1, 5):
        m = c.match(seq, 16)
        c.lock(m)
        m2 = c.load(m, seq)
        invariants.check(c)
        if not c.hier.pending:
            break
        ack_all(c)
        c.unlock(m2)
    assert rounds == 3 and (m2.cached_tokens, m2.device_tokens) == (16, 16) and l1_serves(c, REQ, 16)
    assert shape(transfers(c, n0)) == [("load", "full", L2, L1, 16), ("load", comp, L2, L1, 8 if comp == "swa" else 0)]
    c.unlock(m2)
    invariants.check(c)


# =============================================================================================
# 4. the engine: arrival prefetch, then loads, then reuse
# =============================================================================================
@pytest.mark.parametrize("prefetch", ["wait_complete", "best_effort"])
def test_engine_reuses_a_window_that_only_l3_holds(prefetch):
    """P=16, W=64. The engine computed a 640-token prompt (one node; its window at the end);
    another engine sharing L3 stored the window before 320. A request on the first 320 tokens
    (+ new ones) reuses 320: an L3 -> L2 SWA prefetch, then the L2 -> L1 load."""
    tiers = TierConfig(hicache_ratio=2, l3=True, kv_bytes_per_token=100_000, swa_bytes_per_token=20_000,
                       min_prefetch_tokens=16)
    cfg = CacheConfig(page_size=16, capacity_tokens=4_096, swa=SwaConfig(window_tokens=64, capacity_tokens=1_024),
                      tiers=tiers)
    env = simpy.Environment()
    cache = RadixCache(cfg, record_actions=True, auto_ack=False)
    e = build(env, cache, EngineConfig(max_running_requests=1, chunked_prefill_tokens=None, prefetch_policy=prefetch),
              RooflineCostModel("qwen3-32b", "h200x1", 1), get_hardware("h200x1"))
    other = RadixCache(cfg, record_actions=True)
    other.hier.storage = cache.hier.storage
    base = np.arange(640, dtype=np.int64)
    seen = []
    orig = e.dataplane.submit

    def spy(t, cb):
        seen.append((t.kind, t.component))
        return orig(t, cb)

    e.dataplane.submit = spy

    def req(rid, prompt):
        seq = TokenSeq(np.concatenate([prompt, -(np.arange(1, dtype=np.int64) + 1 + 1000 * rid)]))
        return EngineRequest(rid=rid, session_id=None, prompt=prompt, output_length=2, arrival_s=0.0, seq=seq)

    def source():
        e.arrive(req(0, base))
        yield env.timeout(50.0)
        ReplayStepper(other).step(base[:320], np.array([7], dtype=np.int64))  # stores the window before 320
        seen.clear()
        r = req(1, np.concatenate([base[:320], np.full(40, 5, dtype=np.int64)]))
        e.arrive(r)
        yield env.timeout(50.0)
        e.close_input()

    env.process(source())
    env.process(e.loop())
    env.run()
    invariants.check(cache)
    got = {r.rid: r for r in e.finished}
    assert got[1].cached_tokens == 320
    if prefetch == "wait_complete":  # fetched at arrival (Engine.arrive), before admission; the window's
        # L2 -> L1 load goes in the first resolve round with the FULL pages (overlap15), so one round
        assert got[1].prefetch_wait_s > 0 and got[1].resolve_rounds == 1
    assert ("prefetch", "swa") in seen and ("load", "swa") in seen
    assert ("prefetch", "full") not in seen
    assert e.inflight == 0
