"""Session-aware eviction, generations, belady, the comparison mode and pluggable policies.

Pinned against cache_core/eviction.py (the `session` key: (referenced, session refcount,
base priority, LRU tick); SWA / MAMBA: (referenced, LRU tick)), cache_core/sessions.py
(registration on finish, generations, the bounded closed set, frontiers that move up on
removal), cache_core/belady.py and SPEC.md section 4.

Trees are built from 4-token blocks ("aaaa", "bbbb"; one character = one token) so the same
scenario holds at page size 1 and 4. Victims are identified as the node that stopped being
`alive`, with edges collected BEFORE evicting (a removed node keeps no key).

Access semantics used in the hand computations: `put` is an insert without a match (one
tick, no hit; a new leaf gets a fresh later tick); registering a session
(`session_finish`) changes no tick; LRU ranks leaves by tick, ties by older node id.
"""
import csv
import json

import numpy as np
import pytest

from cache_core import (CacheConfig, MambaConfig, Policy, RadixCache, ReplayStepper, SwaConfig, TokenSeq,
                        invariants, register_policy)
from cache_core.belady import NextUseOracle
from cache_core.sessions import SessionRegistry
from radixsim.cli import main


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
from helpers import drain, edge, evict_one, mamba_pl, shape, swa_pl, toks  # noqa: E402  (shared test helpers)


def new_cache(policy, page_size=1, capacity=256):
    return RadixCache(CacheConfig(page_size=page_size, capacity_tokens=capacity, policy=policy))


def put(cache, s: str, priority: int = 0):
    """Insert s with fresh pages for all of it, no match (no hit); invariants checked."""
    P = cache.page_size
    pages = cache.alloc(-(-len(s) // P))
    assert pages is not None
    res = cache.insert(TokenSeq(toks(s)), len(s) // P * P, pages, 0, priority=priority)
    invariants.check(cache)
    return res


def reg(cache, sid, res) -> None:
    """A request of `sid` that ended at `res` completes (no tick is taken)."""
    gen = cache.session_begin(sid)
    assert cache.session_finish(sid, gen, res) is True


def srefs(cache) -> dict:
    """{path edge string: srefs} for every node (path = concatenated edges from the root)."""
    out = {}

    def rec(node, prefix):
        for c in node.children.values():
            p = prefix + edge(c)
            out[p] = c.srefs
            rec(c, p)

    rec(cache.tree.root, "")
    return out


def expected_srefs(cache) -> dict:
    """Recount srefs from the open sessions' frontiers (each covers its path to the root)."""
    want = {}
    for n in cache.tree.iter_nodes():
        if n.parent is not None:
            want[n.id] = 0
    for st in cache.sessions.sessions.values():
        n = st.node
        while n is not None and n.parent is not None:
            want[n.id] += 1
            n = n.parent
    return want


def assert_srefs_consistent(cache) -> None:
    want = expected_srefs(cache)
    got = {n.id: n.srefs for n in cache.tree.iter_nodes() if n.parent is not None}
    assert got == want


# ---------------------------------------------------------------------------------------
# 1. FULL victim order: session vs lru
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("policy,want", [
    ("lru", ["aaaa", "bbbb", "cccc"]),  # pure creation/access order: the frontier A is oldest
    ("session", ["bbbb", "cccc", "aaaa"]),  # unreferenced B, C first; A last, yet not pinned
])
def test_frontier_leaf_outlives_older_unreferenced_ones(policy, want, page_size):
    cache = new_cache(policy, page_size, capacity=64)
    a = put(cache, "aaaa")
    put(cache, "bbbb")
    put(cache, "cccc")
    if cache.sessions is not None:
        reg(cache, "s", a)
    assert drain(cache) == want
    assert cache.num_nodes == 1 and cache.free_tokens == 64
    invariants.check(cache)


def test_lru_has_no_session_registry():
    cache = new_cache("lru")
    a = put(cache, "aaaa")
    assert cache.sessions is None
    assert cache.session_begin("s") == 0
    assert cache.session_finish("s", 0, a) is False
    assert a.handle._node.srefs == 0


@pytest.mark.parametrize("page_size", [1, 4])
def test_lower_refcount_first_among_referenced(page_size):
    def build(policy):
        cache = new_cache(policy, page_size, capacity=64)
        x = put(cache, "xxxx")
        y = put(cache, "yyyy")
        put(cache, "zzzz")
        w = put(cache, "wwww")
        if cache.sessions is not None:
            reg(cache, "s1", x)
            reg(cache, "s2", x)  # X: 2 sessions
            reg(cache, "s3", y)  # Y: 1
            reg(cache, "s4", w)  # W: 1 (newer than Y)
            assert srefs(cache) == {"xxxx": 2, "yyyy": 1, "zzzz": 0, "wwww": 1}
        return cache

    # lru: ticks X < Y < Z < W
    assert drain(build("lru")) == ["xxxx", "yyyy", "zzzz", "wwww"]
    # session: unreferenced Z; refcount 1: Y (older) then W; refcount 2: X
    assert drain(build("session")) == ["zzzz", "yyyy", "wwww", "xxxx"]


def test_refcount_ranks_before_priority():
    cache = new_cache("session")
    g = put(cache, "gggg", priority=0)
    h = put(cache, "hhhh", priority=9)
    reg(cache, "s1", g)
    reg(cache, "s2", g)  # G: 2 refs, priority 0
    reg(cache, "s3", h)  # H: 1 ref, priority 9
    assert drain(cache) == ["hhhh", "gggg"]


@pytest.mark.parametrize("page_size", [1, 4])
def test_base_priority_before_lru(page_size):
    def build(policy):
        cache = new_cache(policy, page_size, capacity=64)
        put(cache, "aaaa", priority=5)
        put(cache, "bbbb", priority=0)
        put(cache, "cccc", priority=1)
        d = put(cache, "dddd", priority=3)
        e = put(cache, "eeee", priority=0)
        if cache.sessions is not None:
            reg(cache, "sd", d)
            reg(cache, "se", e)
        return cache

    assert drain(build("lru")) == ["aaaa", "bbbb", "cccc", "dddd", "eeee"]
    # unreferenced by priority: B(0) C(1) A(5); then referenced (1 ref each) by priority: E(0) D(3)
    assert drain(build("session")) == ["bbbb", "cccc", "aaaa", "eeee", "dddd"]
    # the `priority` policy agrees on the unreferenced part and ignores references
    assert drain(build("priority")) == ["bbbb", "eeee", "cccc", "dddd", "aaaa"]


def test_equal_priority_and_refs_fall_back_to_lru():
    cache = new_cache("session")
    p = put(cache, "pppp", priority=2)
    q = put(cache, "qqqq", priority=2)
    r = put(cache, "rrrr", priority=2)
    for sid, res in (("a", r), ("b", q), ("c", p)):
        reg(cache, sid, res)
    cache.match(TokenSeq(toks("pppp")))  # P becomes the most recent
    assert drain(cache) == ["qqqq", "rrrr", "pppp"]


@pytest.mark.parametrize("page_size", [1, 4])
def test_references_change_order_but_never_pin(page_size):
    cache = new_cache("session", page_size, capacity=16)
    a = put(cache, "aaaa")
    b = put(cache, "bbbb")
    put(cache, "cccc")
    d = put(cache, "dddd")
    reg(cache, "sa", a)
    reg(cache, "sb", b)
    reg(cache, "sd", d)
    assert cache.free_tokens == 0
    # 8 tokens: the only unreferenced leaf (C) is not enough, the oldest referenced one goes too
    before = {edge(n): n for n in cache.tree.iter_nodes() if n.parent is not None}
    assert cache.evict(8) == 8
    assert sorted(e for e, n in before.items() if not n.alive) == ["aaaa", "cccc"]
    assert shape(cache) == {"bbbb": {}, "dddd": {}}
    # only referenced leaves remain: they go too, by LRU
    assert drain(cache) == ["bbbb", "dddd"]
    assert cache.free_tokens == 16
    assert cache.sessions.referenced_sessions() == 0  # every frontier was at depth 1: gone
    invariants.check(cache)


def test_replay_pressure_evicts_a_referenced_frontier():
    """Capacity for one request only: a session's frontier does not block the next request."""
    cache = new_cache("session", 1, capacity=8)
    st = ReplayStepper(cache)
    r0 = st.step(toks("aaaaaaaa"), None, session_id="s")
    r1 = st.step(toks("bbbbbbbb"), None)
    assert (r0.rejected, r1.rejected, r1.evicted_tokens) == (False, False, 8)
    assert shape(cache) == {"bbbbbbbb": {}}
    assert cache.sessions.sessions["s"].node is None  # the frontier left with its node
    invariants.check(cache)


# ---------------------------------------------------------------------------------------
# 2. SWA and MAMBA: unreferenced entries first, referenced ones when needed
# ---------------------------------------------------------------------------------------
def hybrid(policy):
    cfg = CacheConfig(page_size=1, capacity_tokens=100, policy=policy,
                      swa=SwaConfig(window_tokens=2, capacity_tokens=100),
                      mamba=MambaConfig(slots=10, every_tokens=8))
    cache = RadixCache(cfg)
    return cache, ReplayStepper(cache)


def three_leaves(policy):
    """A (session s), B, C: 8-token prompts, one leaf each with 2 SWA pages (window 2) and a
    MAMBA checkpoint at its end; ticks A < B < C."""
    cache, st = hybrid(policy)
    st.step(toks("aaaaaaaa"), None, session_id="s")
    st.step(toks("bbbbbbbb"), None)
    st.step(toks("cccccccc"), None)
    nodes = {edge(n)[0]: n for n in cache.tree.root.children.values()}
    assert sorted(nodes) == ["a", "b", "c"]
    for n in nodes.values():
        assert swa_pl(n).pages[-2:].min() >= 0 and swa_pl(n).ntomb == 6
        assert mamba_pl(n).slot >= 0
    if cache.sessions is not None:
        assert swa_pl(nodes["a"]).sess == [5]  # ws = end - W - P = 8 - 2 - 1
        assert mamba_pl(nodes["a"]).srefs == 1
        assert (swa_pl(nodes["b"]).sess, mamba_pl(nodes["b"]).srefs) == ([], 0)
    invariants.check(cache)
    return cache, nodes


def _alive(nodes) -> str:
    return "".join(k for k, n in sorted(nodes.items()) if n.alive)


@pytest.mark.parametrize("policy,want", [
    ("lru", ["bc", "c", ""]),
    ("session", ["ac", "a", ""]),  # B and C (unreferenced) first, then the referenced A
])
def test_swa_evicts_unreferenced_first_then_referenced(policy, want):
    cache, nodes = three_leaves(policy)
    got = []
    for _ in range(3):
        assert cache.swa.evict_tokens(1) == 2  # one leaf, removed whole with its 2 SWA pages
        got.append(_alive(nodes))
        invariants.check(cache)
    assert got == want
    assert cache.swa.evict_tokens(1) == 0 and cache.num_nodes == 1


@pytest.mark.parametrize("policy,after4", [("lru", "c"), ("session", "a")])
def test_swa_one_call_takes_referenced_only_when_needed(policy, after4):
    cache, nodes = three_leaves(policy)
    assert cache.swa.evict_tokens(4) == 4
    assert _alive(nodes) == after4
    cache, nodes = three_leaves(policy)
    assert cache.swa.evict_tokens(6) == 6  # needs all three: the referenced one goes too
    assert _alive(nodes) == ""
    assert cache.swa.free_tokens == 100
    invariants.check(cache)


@pytest.mark.parametrize("policy,want", [
    ("lru", ["bc", "c", ""]),
    ("session", ["ac", "a", ""]),
])
def test_mamba_evicts_unreferenced_first_then_referenced(policy, want):
    cache, nodes = three_leaves(policy)
    got = []
    for _ in range(3):
        assert cache.mamba.evict(1) == 1
        got.append(_alive(nodes))
        invariants.check(cache)
    assert got == want
    assert cache.mamba.pool.free_pages == 10


@pytest.mark.parametrize("pressure", ["swa", "mamba"])
@pytest.mark.parametrize("policy,want", [
    ("lru", ([0, 0, 0, 0, 0], "bcd")),  # r3 takes A's (oldest) SWA window / checkpoint
    ("session", ([0, 0, 0, 0, 8], "acd")),  # r3 takes unreferenced B instead; r4 reuses A
])
def test_replay_pool_pressure_spares_the_session_entry(policy, want, pressure):
    """Replay with a tight SWA pool (7 tokens: each request takes 3 pages, keeps its 2-page
    window and returns 1) or a tight MAMBA pool (3 slots: one checkpoint per request). r3 is
    the first request that must evict from that pool (one leaf, removed whole); r4 is A's
    session coming back with 4 more tokens."""
    swa_cap, slots = (7, 10) if pressure == "swa" else (100, 3)
    cache = RadixCache(CacheConfig(page_size=1, capacity_tokens=100, policy=policy,
                                   swa=SwaConfig(window_tokens=2, capacity_tokens=swa_cap),
                                   mamba=MambaConfig(slots=slots, every_tokens=8)))
    st = ReplayStepper(cache)
    cached = [st.step(toks("aaaaaaaa"), None, session_id="s").cached_tokens]
    for g in "bcd":
        cached.append(st.step(toks(g * 8), None).cached_tokens)
        invariants.check(cache)
    alive = "".join(sorted(edge(n)[0] for n in cache.tree.root.children.values()))
    cached.append(st.step(toks("aaaaaaaaaaaa"), None, session_id="s").cached_tokens)
    invariants.check(cache)
    assert (cached, alive) == want


@pytest.mark.parametrize("policy", ["lru", "session"])
def test_swa_internal_node_ranked_by_reference(policy):
    """A internal (tick 6, referenced under session), X its leaf (tick 7), B (tick 10).
    lru: A loses its SWA pages (tombstones, the node stays); then X goes and takes the now
    useless A with it. session: X (unreferenced) first; A stays (a leaf with its window and
    checkpoint), then B, then A."""
    cache, st = hybrid(policy)
    st.step(toks("aaaaaaaa"), None, session_id="s")
    st.step(toks("aaaaaaaaxxxxxxxx"), None)
    st.step(toks("bbbbbbbb"), None)
    assert shape(cache) == {"aaaaaaaa": {"xxxxxxxx": {}}, "bbbbbbbb": {}}
    a = cache.tree.root.children[np.array(toks("a"), dtype=np.int64).tobytes()]
    x = next(iter(a.children.values()))
    b = cache.tree.root.children[np.array(toks("b"), dtype=np.int64).tobytes()]
    assert (a.tick, x.tick, b.tick) == (6, 7, 10)
    first = cache.swa.evict_tokens(1)
    invariants.check(cache)
    if policy == "lru":
        assert first == 2 and a.alive and x.alive and b.alive and swa_pl(a).ntomb == 8
        assert cache.swa.evict_tokens(1) == 2  # X removed, and the useless A (all tombstones) with it
        assert (a.alive, x.alive, b.alive) == (False, False, True)
        assert shape(cache) == {"bbbbbbbb": {}}
    else:
        assert first == 2 and a.alive and not x.alive and b.alive
        assert swa_pl(a).ntomb == 6 and swa_pl(a).sess == [5]
        assert cache.swa.evict_tokens(1) == 2
        assert (a.alive, b.alive) == (True, False)
        assert cache.swa.evict_tokens(1) == 2
        assert not a.alive and cache.num_nodes == 1
    invariants.check(cache)


def test_mamba_internal_checkpoint_ranked_by_reference():
    for policy in ("lru", "session"):
        cache, st = hybrid(policy)
        st.step(toks("aaaaaaaa"), None, session_id="s")
        st.step(toks("aaaaaaaaxxxxxxxx"), None)
        a = next(iter(cache.tree.root.children.values()))
        x = next(iter(a.children.values()))
        assert cache.mamba.evict(1) == 1
        if policy == "lru":  # A (older) loses its checkpoint and stays as a tombstone
            assert a.alive and x.alive and mamba_pl(a).slot == -1
        else:  # X (unreferenced) is removed whole; A keeps its referenced checkpoint
            assert a.alive and not x.alive and mamba_pl(a).slot >= 0
            assert mamba_pl(a).srefs == 1
        invariants.check(cache)


def test_hybrid_close_releases_swa_and_mamba_references():
    cache, nodes = three_leaves("session")
    cache.close_session("s")
    a = nodes["a"]
    assert a.srefs == 0 and swa_pl(a).sess == [] and mamba_pl(a).srefs == 0
    # now plain LRU order: A (oldest) goes first
    assert cache.swa.evict_tokens(1) == 2
    assert _alive(nodes) == "bc"
    invariants.check(cache)


# ---------------------------------------------------------------------------------------
# 3. generations and the bounded closed set
# ---------------------------------------------------------------------------------------
def test_close_then_stale_finish_restores_nothing():
    cache = new_cache("session")
    res = put(cache, "aaaabbbb")
    gen = cache.session_begin("s")
    assert gen == 1
    cache.close_session("s")
    assert cache.session_finish("s", gen, res) is False
    assert srefs(cache) == {"aaaabbbb": 0}
    assert cache.sessions.stale_finishes == 1
    assert cache.sessions.referenced_sessions() == 0
    assert list(cache.sessions.closed.items()) == [("s", 1)]
    # an unreferenced leaf ranks as plain LRU again: A (older) before Z
    put(cache, "zzzz")
    assert drain(cache) == ["aaaabbbb", "zzzz"]


def test_close_reopen_old_generation_refused_new_one_registers():
    cache = new_cache("session")
    res = put(cache, "aaaa")
    g1 = cache.session_begin("s")
    cache.close_session("s")
    g2 = cache.session_begin("s")  # reopen: next generation, no longer in the closed set
    assert (g1, g2) == (1, 2)
    assert "s" not in cache.sessions.closed
    assert cache.session_begin("s") == 2  # a second request of the open session: same generation
    assert cache.session_finish("s", g1, res) is False  # stale: from before the close
    assert res.handle._node.srefs == 0 and cache.sessions.stale_finishes == 1
    assert cache.session_finish("s", g2, res) is True
    assert res.handle._node.srefs == 1
    assert cache.session_finish("s", g2, res) is True  # re-registering replaces: still 1
    assert res.handle._node.srefs == 1 and cache.sessions.stale_finishes == 1
    # close and reopen twice more: generations keep counting
    cache.close_session("s")
    assert res.handle._node.srefs == 0
    assert cache.session_begin("s") == 3
    assert cache.session_finish("s", g2, res) is False
    assert res.handle._node.srefs == 0 and cache.sessions.stale_finishes == 2


def test_closed_bound_forgets_the_oldest_first():
    cache = new_cache("session")
    res = put(cache, "aaaa")
    reg_ = cache.sessions
    reg_.closed_bound = 2
    gens = {}
    for sid in ("s1", "s2", "s3"):
        gens[sid] = cache.session_begin(sid)
        cache.close_session(sid)
    assert gens == {"s1": 1, "s2": 2, "s3": 3}  # one generation counter for all ids
    assert list(reg_.closed) == ["s2", "s3"]  # s1, the oldest, was forgotten
    # a stale finish of a forgotten id with no open state is still refused (nothing to match)
    assert cache.session_finish("s1", 1, res) is False
    assert res.handle._node.srefs == 0
    # remembered: reopening s2 gives a new generation and refuses the old one
    assert cache.session_begin("s2") == 4
    assert cache.session_finish("s2", 2, res) is False
    # forgotten: reopening s1 also gets a NEW generation, never its first one again, so a
    # stale finish from that first incarnation stays refused even after the bound forgot s1
    assert cache.session_begin("s1") == 5
    assert cache.session_finish("s1", 1, res) is False
    assert res.handle._node.srefs == 0
    assert cache.session_finish("s1", 5, res) is True
    assert res.handle._node.srefs == 1
    assert reg_.stale_finishes == 3
    # re-closing an id moves it to the newest end
    cache.close_session("s2")
    assert list(reg_.closed) == ["s3", "s2"]
    cache.close_session("s3")
    assert list(reg_.closed) == ["s2", "s3"]


def test_closed_bound_constructor_and_zero_bound():
    cache = new_cache("session")
    res = put(cache, "aaaa")
    with pytest.raises(ValueError, match="closed_bound must be >= 0"):
        SessionRegistry(cache, closed_bound=-1)
    assert SessionRegistry(cache).closed_bound == 8192
    cache.sessions = SessionRegistry(cache, closed_bound=0)
    g = cache.session_begin("s")
    cache.close_session("s")
    assert len(cache.sessions.closed) == 0  # remembered by nobody
    assert cache.session_finish("s", g, res) is False  # no open state: refused anyway
    assert cache.session_begin("s") == g + 1  # a reopen never reuses a generation
    assert cache.session_finish("s", g, res) is False
    assert res.handle._node.srefs == 0
    assert cache.session_finish("s", g + 1, res) is True
    assert res.handle._node.srefs == 1


def test_close_of_an_unknown_id_is_remembered():
    cache = new_cache("session")
    cache.close_session("never")
    assert list(cache.sessions.closed.items()) == [("never", 0)]
    assert cache.session_begin("never") == 1


def test_close_removes_references_not_entries():
    cache = new_cache("session")
    st = ReplayStepper(cache)
    st.step(toks("aaaabbbb"), None, session_id="s")
    st.step(toks("aaaacccc"), None, session_id="t")
    assert srefs(cache) == {"aaaa": 2, "aaaabbbb": 1, "aaaacccc": 1}
    cache.close_session("s")
    assert srefs(cache) == {"aaaa": 1, "aaaabbbb": 0, "aaaacccc": 1}
    cache.close_session("t")
    assert srefs(cache) == {"aaaa": 0, "aaaabbbb": 0, "aaaacccc": 0}
    assert cache.sessions._at == {}
    # every token is still there
    assert cache.match(TokenSeq(toks("aaaabbbb"))).cached_tokens == 8
    assert cache.match(TokenSeq(toks("aaaacccc"))).cached_tokens == 8
    assert cache.cached_tokens_total == 12
    r = st.step(toks("aaaabbbbx"), None, session_id="s")  # reopened: reuses the closed one's entries
    assert r.cached_tokens == 8
    invariants.check(cache)


# ---------------------------------------------------------------------------------------
# 4. a frontier whose node is evicted moves to its parent
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("page_size", [1, 4])
def test_frontier_moves_to_parent_then_close_releases_the_rest(page_size):
    cache = new_cache("session", page_size, capacity=64)
    reg_ = cache.sessions
    put(cache, "aaaacccc")  # C: unreferenced
    b = put(cache, "aaaabbbb")  # splits nothing: "aaaa" is already a node
    assert shape(cache) == {"aaaa": {"cccc": {}, "bbbb": {}}}
    top = b.handle._node.parent
    reg(cache, "s1", b)  # frontier at leaf B
    reg(cache, "s2", InsertResultFor(top))  # frontier at the internal "aaaa"
    assert srefs(cache) == {"aaaa": 2, "aaaacccc": 0, "aaaabbbb": 1}
    z = put(cache, "zzzz")
    assert evict_one(cache) == "cccc"  # unreferenced, older than Z
    assert evict_one(cache) == "zzzz"  # unreferenced
    assert evict_one(cache) == "bbbb"  # s1's frontier: referenced, but nothing else is a leaf
    assert not z.handle._node.alive
    assert reg_.sessions["s1"].node is top  # moved to the parent
    assert reg_._at == {top.id: ["s2", "s1"]}
    assert srefs(cache) == {"aaaa": 2}  # both sessions still cover it
    assert_srefs_consistent(cache)
    # the moved frontier still ranks as referenced: a newer unreferenced leaf goes first
    put(cache, "yyyy")
    assert evict_one(cache) == "yyyy"
    cache.close_session("s1")
    assert srefs(cache) == {"aaaa": 1}
    assert_srefs_consistent(cache)
    cache.close_session("s2")
    assert srefs(cache) == {"aaaa": 0} and reg_._at == {} and reg_.referenced_sessions() == 0
    invariants.check(cache)
    put(cache, "wwww")  # now plain LRU: "aaaa" (older) first
    assert drain(cache) == ["aaaa", "wwww"]


class InsertResultFor:
    """A stand-in for a cache result whose handle ends at `node` (what a request that reused
    exactly that prefix hands to session_finish)."""

    def __init__(self, node):
        from cache_core.cache import LockHandle

        self.handle = LockHandle(node)


def test_frontier_at_depth_one_evicted_leaves_no_reference():
    cache = new_cache("session")
    a = put(cache, "aaaa")
    reg(cache, "s", a)
    assert evict_one(cache) == "aaaa"
    assert cache.sessions.sessions["s"].node is None
    assert cache.sessions._at == {}
    cache.close_session("s")  # nothing left to release
    assert cache.sessions.referenced_sessions() == 0
    invariants.check(cache)


def test_hybrid_frontier_moves_up_and_close_releases_everything():
    cache, st = hybrid("session")
    st.step(toks("aaaaaaaa"), None)
    st.step(toks("aaaaaaaabbbb"), None, session_id="s")  # frontier: leaf "bbbb" under "aaaaaaaa"
    st.step(toks("aaaaaaaacccc"), None, session_id="t")
    a = next(iter(cache.tree.root.children.values()))
    b, c = list(a.children.values())
    assert (edge(b), edge(c)) == ("bbbb", "cccc")
    assert (a.srefs, b.srefs, c.srefs) == (2, 1, 1)
    # window 2, P 1: ws = 12 - 3 = 9: only the leaves intersect [9, 12)
    assert (swa_pl(a).sess, swa_pl(b).sess, swa_pl(c).sess) == ([], [9], [9])
    assert (mamba_pl(a).srefs, mamba_pl(b).srefs, mamba_pl(c).srefs) == (0, 1, 1)
    assert cache.mamba.evict(1) == 1  # A's checkpoint (unreferenced): a tombstone, A stays
    assert a.alive and mamba_pl(a).slot == -1
    assert cache.mamba.evict(1) == 1  # B (referenced, older than C): removed whole
    assert not b.alive and c.alive and a.alive
    st = cache.sessions.sessions["s"]
    assert st.node is a and [(c.name, t) for c, t in st.refs] == [("swa", 9), ("mamba", None)]
    assert (a.srefs, c.srefs) == (2, 1)
    invariants.check(cache)
    cache.close_session("s")
    cache.close_session("t")
    for n in cache.tree.iter_nodes():
        if n.parent is not None:
            assert (n.srefs, swa_pl(n).sess, mamba_pl(n).srefs) == (0, [], 0)
    assert cache.sessions._at == {}
    invariants.check(cache)


# ---------------------------------------------------------------------------------------
# trace replay through the CLI
# ---------------------------------------------------------------------------------------
def block(ch: str, n: int) -> list[int]:
    return [ord(ch)] * n


def write_trace(path, lines) -> str:
    with open(path, "w") as f:
        for obj in lines:
            f.write(json.dumps(obj) + "\n")
    return str(path)


def replay(trace, out, policy, capacity, page_size, *extra) -> tuple[list[int], dict]:
    rc = main(["replay", str(trace), "--policy", policy, "--capacity-tokens", str(capacity),
               "--page-size", str(page_size), "--out", str(out), "--no-progress", "--check-invariants", *extra])
    assert rc == 0
    with open(out / "requests.csv") as f:
        cached = [int(row["cached_tokens"]) for row in csv.DictReader(f)]
    with open(out / "summary.json") as f:
        return cached, json.load(f)


# 5. close_session events ------------------------------------------------------------------
# Page size 1, capacity 24 = three 8-token prompts. A, B, C, D, E are distinct 8-token blocks;
# every output is one token, so each request caches exactly its prompt.
#   r0 s1: A          tree A B C after r2 (full)
#   r1 s2: B
#   r2   : C
#   [close s1]
#   r3   : D  evict 8   session: unreferenced A (closed, oldest) and C -> A;  lru: A
#   r4   : E  evict 8   session: unreferenced C, D -> C (B is s2's);           lru: B
#   r5 s2: B+bb         session: B cached (8), evict 2 for "bb": unreferenced D -> D
#                       lru: B gone -> 0, evict 10: C, D
#   r6 s1: A+aa         A was evicted at r3 under both policies -> 0
# Without the close, session evicts C at r3 (A is referenced), D at r4, E at r5, so r6 reuses A (8).
def session_trace(path, close: bool):
    lines = [
        {"session_id": "s1", "tokens": block("A", 8), "output_length": 1},
        {"session_id": "s2", "tokens": block("B", 8), "output_length": 1},
        {"tokens": block("C", 8), "output_length": 1},
    ]
    if close:
        lines.append({"event": "close_session", "session_id": "s1"})
    lines += [
        {"tokens": block("D", 8), "output_length": 1},
        {"tokens": block("E", 8), "output_length": 1},
        {"session_id": "s2", "tokens": block("B", 8) + block("b", 2), "output_length": 1},
        {"session_id": "s1", "tokens": block("A", 8) + block("a", 2), "output_length": 1},
    ]
    return write_trace(path, lines)


def test_replay_honours_close_session_events(tmp_path):
    with_close = session_trace(tmp_path / "close.jsonl", close=True)
    no_close = session_trace(tmp_path / "open.jsonl", close=False)

    cached, summary = replay(with_close, tmp_path / "s-close", "session", 24, 1)
    assert cached == [0, 0, 0, 0, 0, 8, 0]
    assert summary["sessions"] == {"closed_events": 1, "stale_finishes": 0, "open_with_references": 2}
    assert summary["total_cached_tokens"] == 8

    cached, summary = replay(no_close, tmp_path / "s-open", "session", 24, 1)
    assert cached == [0, 0, 0, 0, 0, 8, 8]
    assert summary["sessions"] == {"closed_events": 0, "stale_finishes": 0, "open_with_references": 2}

    for trace, name in ((with_close, "l-close"), (no_close, "l-open")):
        cached, summary = replay(trace, tmp_path / name, "lru", 24, 1)
        assert cached == [0, 0, 0, 0, 0, 0, 0]
        assert "sessions" not in summary  # lru keeps no registry


# 6. belady ---------------------------------------------------------------------------------
# Page size 4, capacity 16. Request i's prompt is one 4-token group G (A, B or C) plus one
# extra token (a partial page): the match covers G exactly, the insert adds only G. A miss
# needs 2 pages (demand 5 + 4 = 9 tokens): with two groups cached (8 used, 8 free) it evicts
# one group, with one group cached it evicts nothing; a hit needs 5 tokens, never evicts. So
# the cache behaves as two slots of one group each, a hit being worth 4 tokens.
#   sequence  A B C A B A C B     (requests 0..7; A's carry session "sa")
#   lru:      - - A B C h B A     (evicted at each miss; h = hit)         hits r5        ->  4
#   belady:   - - B h C h A h     r2: next A=3, B=4 -> B; r4: A=5, C=6 -> C;
#                                 r6: A never again (inf), B=7 -> A       hits r3 r5 r7  -> 12
#   session:  - - B h C h B C     A referenced from r0 on: never chosen   hits r3 r5     ->  8
#   mru:      - - B h A B h C     most recent first                       hits r3 r6     ->  8
# Capacity 24: three groups fit, every repeat hits (5 x 4 = 20) under every policy.
SEQ = "ABCABACB"
WANT_CACHED = {
    "lru": [0, 0, 0, 0, 0, 4, 0, 0],
    "belady-node": [0, 0, 0, 4, 0, 4, 0, 4],
    "session": [0, 0, 0, 4, 0, 4, 0, 0],
}


def paging_trace(path):
    lines = []
    for i, g in enumerate(SEQ):
        rec = {"rid": f"r{i}", "tokens": block(g, 4) + [1000 + i], "output_length": 1}
        if g == "A":
            rec["session_id"] = "sa"
        lines.append(rec)
    return write_trace(path, lines)


@pytest.mark.parametrize("policy", ["lru", "belady-node", "session"])
def test_paging_trace_exact_hits(policy, tmp_path):
    trace = paging_trace(tmp_path / "t.jsonl")
    cached, summary = replay(trace, tmp_path / policy, policy, 16, 4)
    assert cached == WANT_CACHED[policy]
    assert summary["total_prompt_tokens"] == 40
    assert summary["hit_rate"] == sum(WANT_CACHED[policy]) / 40
    # cold misses: A B C first seen (5 each) + the extra token of the 5 repeats = 20
    assert summary["cold_miss_tokens"] == 20
    assert summary["evicted_miss_tokens"] == 20 - sum(WANT_CACHED[policy])
    cached24, _ = replay(trace, tmp_path / f"{policy}-24", policy, 24, 4)
    assert cached24 == [0, 0, 0, 4, 4, 4, 4, 4]


def test_belady_beats_lru_and_evicts_never_used_again_first(tmp_path):
    trace = paging_trace(tmp_path / "t.jsonl")
    b, sb = replay(trace, tmp_path / "b", "belady-node", 16, 4)
    l, sl = replay(trace, tmp_path / "l", "lru", 16, 4)
    assert (sum(b), sum(l)) == (12, 4)
    # tokens evicted: belady evicts at its misses r2 r4 r6, lru at r2 r3 r4 r6 r7 (4 each)
    assert sb["evictions"]["full"]["L1"] == 12 and sl["evictions"]["full"]["L1"] == 20


def test_belady_direct_never_used_again_leaf_goes_first():
    """Leaves X, Y, Z (inserted in that order); the future: Z at request 1, X at request 3,
    Y never again. belady takes Y (never used), then X (furthest), then Z; lru X, Y, Z."""
    from cache_core.keys import page_keys

    P = 4
    keys = {s: int(page_keys(np.array(toks(s), dtype=np.int64), P)[0][0]) for s in ("xxxx", "yyyy", "zzzz")}
    future = [np.array([], dtype=np.uint64), np.array([keys["zzzz"]], dtype=np.uint64),
              np.array([], dtype=np.uint64), np.array([keys["xxxx"]], dtype=np.uint64)]
    cache = new_cache("belady-node", P, capacity=64)
    with pytest.raises(RuntimeError, match="belady-node needs the future"):
        put(cache, "xxxx")  # the key is computed when a leaf is offered to the queue
    cache = new_cache("belady-node", P, capacity=64)
    cache.policy.oracle = NextUseOracle(future)
    cache.policy.now = 0
    for s in ("xxxx", "yyyy", "zzzz"):
        put(cache, s)
    assert drain(cache) == ["yyyy", "xxxx", "zzzz"]


def test_next_use_oracle_exact_values():
    u = np.uint64
    oracle = NextUseOracle([np.array([10, 20], dtype=u), np.array([20, 20], dtype=u),
                            np.array([], dtype=u), np.array([30, 10], dtype=u)])
    inf = float("inf")
    assert [oracle.next_use(10, now) for now in (-1, 0, 1, 2, 3, 4)] == [0, 3, 3, 3, inf, inf]
    assert [oracle.next_use(20, now) for now in (-1, 0, 1, 2)] == [0, 1, inf, inf]
    assert [oracle.next_use(30, now) for now in (0, 2, 3)] == [3, 3, inf]
    assert oracle.next_use(99, -1) == inf
    assert oracle.next_use(2**63 + 5, -1) == inf  # a key above int64 (page keys are uint64)
    assert isinstance(oracle.next_use(10, 0), int)
    empty = NextUseOracle([])
    assert empty.next_use(10, 0) == inf


# 7. the comparison mode ---------------------------------------------------------------------
def test_comparison_rows_match_single_runs(tmp_path):
    trace = paging_trace(tmp_path / "t.jsonl")
    out = tmp_path / "cmp"
    rc = main(["replay", trace, "--policy", "lru,session,belady-node", "--capacity-tokens", "16,24",
               "--page-size", "4", "--out", str(out), "--no-progress"])
    assert rc == 0
    with open(out / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["policy"], r["capacity_tokens"]) for r in rows] == [
        ("lru", "16"), ("session", "16"), ("belady-node", "16"),
        ("lru", "24"), ("session", "24"), ("belady-node", "24")]
    assert [r["dir"] for r in rows] == [f"{p}-cap={c}" for c in (16, 24) for p in ("lru", "session", "belady-node")]
    assert [float(r["hit_rate"]) for r in rows] == [0.1, 0.2, 0.3, 0.5, 0.5, 0.5]
    assert [int(r["total_cached_tokens"]) for r in rows] == [4, 8, 12, 20, 20, 20]
    for r in rows:
        _, single = replay(trace, tmp_path / ("single-" + r["dir"]), r["policy"], r["capacity_tokens"], 4)
        assert float(r["hit_rate"]) == single["hit_rate"]
        with open(out / r["dir"] / "summary.json") as f:
            assert json.load(f)["hit_rate"] == single["hit_rate"]
        assert float(r["evicted_miss_rate"]) == single["evicted_miss_tokens"] / 40
    for cap in ("16", "24"):
        cold = {r["cold_miss_rate"] for r in rows if r["capacity_tokens"] == cap}
        assert cold == {"0.5"}  # 20 / 40 cold tokens, whatever the policy
    # parallel workers give the same table
    rc = main(["replay", trace, "--policy", "lru,session,belady-node", "--capacity-tokens", "16,24",
               "--page-size", "4", "--out", str(tmp_path / "cmp3"), "--no-progress", "--jobs", "3"])
    assert rc == 0
    with open(tmp_path / "cmp3" / "comparison.csv") as f:
        assert list(csv.DictReader(f)) == rows


# 8. a policy written here works through the CLI -------------------------------------------
@register_policy("test_policies_mru")
class MostRecentlyUsed(Policy):
    """Most recently used first (newest tick goes first)."""

    def key(self, node):
        return -node.tick


def test_new_policy_works_in_replay_via_cli(tmp_path):
    trace = paging_trace(tmp_path / "t.jsonl")
    cached, summary = replay(trace, tmp_path / "mru", "test_policies_mru", 16, 4)
    assert cached == [0, 0, 0, 4, 0, 0, 4, 0]
    assert summary["total_cached_tokens"] == 8
    with open(tmp_path / "mru" / "config.yaml") as f:
        assert "policy: test_policies_mru" in f.read()
    rc = main(["replay", trace, "--policy", "lru,test_policies_mru", "--capacity-tokens", "16",
               "--page-size", "4", "--out", str(tmp_path / "cmp"), "--no-progress"])
    assert rc == 0
    with open(tmp_path / "cmp" / "comparison.csv") as f:
        assert [(r["policy"], r["total_cached_tokens"]) for r in csv.DictReader(f)] == [
            ("lru", "4"), ("test_policies_mru", "8")]


# ---------------------------------------------------------------------------------------
# bugs found (core left unchanged): minimal reproducers
# ---------------------------------------------------------------------------------------
PRIORITY_BUG = ("FULL-only cache: insert() raises the priority of the existing leaf that ends the inserted "
                "sequence AFTER re-offering it to the FULL queue (full.touched(last) runs before the priority "
                "loop; hybrid and tiered caches re-touch every visited node afterwards, FULL-only ones do not), "
                "so the queued key is stale and pop() drops it: the leaf leaves the eviction queue for good "
                "(pinned, never evicted) under `priority` and `session`")


@pytest.mark.parametrize("policy", ["priority", "session"])
def test_bug_priority_raise_of_existing_leaf_keeps_it_evictable(policy):
    cache = new_cache(policy, 1, capacity=16)
    put(cache, "aaaa")
    put(cache, "bbbb")
    pages = cache.alloc(4)
    cache.insert(TokenSeq(toks("aaaa")), 4, pages, 0, priority=5)  # same tokens, higher priority
    assert cache.tree.root.children[np.array(toks("a"), dtype=np.int64).tobytes()].priority == 5
    assert cache.evict(100) == 8  # actual: 4 ("aaaa" is no longer a candidate anywhere)
    invariants.check(cache)  # actual: "evictable leaf missing from the eviction queue"


@pytest.mark.parametrize("policy", ["priority", "session"])
def test_bug_repeated_request_with_higher_priority_blocks_the_next_one(policy):
    """Replay, capacity 8: the same 4-token request twice (the second with priority 2: it
    fits without evicting, its match splits [1 2 3 | 4], its insert raises leaf [4] to
    priority 2), then an unrelated 8-token request. lru (and the fixed core) evict [4] and
    then [1 2 3] and serve it; here [4] is lost from the queue, [1 2 3] never becomes a
    leaf, nothing is evictable and the request is rejected."""
    for pol in ("lru", policy):
        cache = new_cache(pol, 1, capacity=8)
        st = ReplayStepper(cache)
        st.step([1, 2, 3, 4], None)
        assert st.step([1, 2, 3, 4], None, priority=2).evicted_tokens == 0
        r = st.step([5, 6, 7, 8, 9, 10, 11, 12], None)
        assert (pol, r.rejected, r.evicted_tokens) == (pol, False, 4)  # actual for policy: (True, 0)
