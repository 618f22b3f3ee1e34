"""How often the engine matches each request on its way in (issue 16 item 3): a match result
is reused while the cache's state is unchanged (l1_match.py), so a request is matched
once per state change, not once per caller (arrival, ordering, probe, resolve)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cache_core import CacheConfig, RadixCache
from cache_core.records import TokenSeq
from cache_core.config import SwaConfig
from cache_core.tiers.config import TierConfig
from cache_core.tree import RadixTree
from test_engine import make, req, run


def _count_walks(monkeypatch) -> Counter:
    """Count the walks over each request's tokens, by its TokenSeq's bytes: `RadixTree.walk`
    (inserts; matches before l1_match.py) and `RadixTree.path_nodes` (a match's query)."""
    walks: Counter = Counter()
    for name in ("walk", "path_nodes"):
        orig = getattr(RadixTree, name)

        def counted(self, qb, *a, _orig=orig, **kw):
            walks[id(qb)] += 1
            return _orig(self, qb, *a, **kw)

        monkeypatch.setattr(RadixTree, name, counted)
    return walks


def _shared_prefix(policy, swa=False):
    cfg = CacheConfig(page_size=16, capacity_tokens=4_000,
                      swa=SwaConfig(window_tokens=64, capacity_tokens=2_048) if swa else None)
    env, cache, e, _ = make(cfg, max_running_requests=3, chunked_prefill_tokens=None, schedule_policy=policy, seed=7)
    shared = np.arange(256)
    timed = [(0.01 * i, req(i, np.concatenate([shared, np.arange(40) + 1000 * (i + 1)]), 3)) for i in range(12)]
    return env, e, timed


@pytest.mark.parametrize("policy,swa,walks_per_request", [
    # before the memo: lpm [5, 5, 5, 8, 8, 7, 10, 9, 9, 12, 11, 11] (100), lpm+SWA
    # [4, 4, 4, 7, 7, 6, 9, 9, 9, 12, 11, 11] (93); with the memo while locks still changed the
    # version: lpm [4, 5, 5, 6, 7, 6, 7, 8, 8, 9, 9, 9] (83), fcfs [4] * 12 (48: the probe's lock
    # made resolve match again), lpm+SWA [3, 3, 4, 5, 6, 5, 6, 7, 7, 8, 9, 9] (72); while pool
    # allocations (a request's own pages) still changed it: lpm+SWA [2, 2, 2, 4, 4, 3, 5, 5, 5, 7, 7, 7] (53)
    ("lpm", False, [3, 4, 3, 5, 5, 4, 6, 6, 6, 8, 7, 7]),
    ("fcfs", False, [3, 4] + [3] * 10),
    ("lpm", True, [2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5]),
])
def test_engine_matches_each_request_once_per_state_change(monkeypatch, policy, swa, walks_per_request):
    """12 requests sharing a 256-token prefix, at most 3 running: the tree walks over each
    request's tokens (its matches plus its commit's insert), exactly."""
    walks = _count_walks(monkeypatch)
    env, e, timed = _shared_prefix(policy, swa)
    keys = [id(r.seq.data) for _, r in timed]
    got = run(env, e, timed)
    assert len(got) == 12
    seen = [walks[k] for k in keys]
    print(policy, swa, "walks", seen, sum(seen))
    assert seen == walks_per_request


def _tiered_groups(l3, swa):
    """Tiers: L1 1,024 tokens, L2 1,536 (L3 if `l3`); 18 requests over six 384-token prefixes
    (i % 6) with their own tails, at most 3 running, the last six after a pause."""
    tiers = TierConfig(hicache_ratio=1.5, l3=l3, kv_bytes_per_token=200_000, min_prefetch_tokens=16)
    cfg = CacheConfig(page_size=16, capacity_tokens=1_024, tiers=tiers,
                      swa=SwaConfig(window_tokens=64, capacity_tokens=2_048) if swa else None)
    env, cache, e, _ = make(cfg, max_running_requests=3, chunked_prefill_tokens=None, schedule_policy="lpm", seed=7)
    pre = [np.arange(384) + 10_000 * g for g in range(6)]
    tail = 8 if swa else 40  # SWA: the window at the prefix's end survives the commit
    timed = [(0.01 * i + (2.0 if i >= 12 else 0.0),
              req(i, np.concatenate([pre[i % 6], np.arange(tail) + 1000 * (i + 1)]), 3)) for i in range(18)]
    return env, e, timed


@pytest.mark.parametrize("l3,swa,walks_per_request,hits", [
    # device hits for rids 6..11, then host (L2) or storage (L3) hits. Before tiers/match.py
    # (every match walked): FULL+L2 [5, 5, 8, 13, 12, 17, 5, 7, 8, 12, 15, 17, 5, 8, 8, 11, 6, 5]
    # (167), FULL+L2+L3 [6, 6, 9, 14, 13, 18, 6, 8, 9, 13, 16, 18, 7, 12, 7, 18, 12, 11] (203),
    # SWA+L2 [4, 4, 16, 10, 22, 16, 6, 6, 12, 12, 21, 18, 4, 14, 5, 11, 11, 10] (202); while pool
    # allocations still changed the version, SWA+L2 [2, 2, 6, 6, 10, 10, 3, 3, 7, 7, 11, 11, 2, 7, 3, 5, 7, 6] (108)
    (False, False, [3, 4, 6, 10, 10, 14, 4, 5, 7, 11, 13, 15, 3, 6, 6, 9, 4, 4], (2304, 384, 0)),
    (True, False, [3, 5, 7, 11, 11, 15, 5, 6, 8, 12, 14, 16, 5, 10, 5, 12, 11, 7], (2304, 0, 1920)),
    (False, True, [2, 2, 5, 5, 9, 9, 3, 3, 7, 7, 11, 11, 2, 7, 3, 5, 7, 6], (2304, 1152, 0)),
])
def test_engine_matches_each_tiered_request_once_per_state_change(monkeypatch, l3, swa, walks_per_request, hits):
    """The same count on caches with tiers (FULL with L2; FULL with L2 and L3; SWA with L2):
    the walks over each request's tokens, exactly, and the tokens reused from each tier."""
    walks = _count_walks(monkeypatch)
    env, e, timed = _tiered_groups(l3, swa)
    keys = [id(r.seq.data) for _, r in timed]
    got = run(env, e, timed)
    seen = [walks[k] for k in keys]
    rows = list(got.values())
    tiers = tuple(sum(getattr(r, f"cached_{t}") for r in rows) for t in ("device", "host", "storage"))
    print("l3", l3, "swa", swa, "walks", seen, sum(seen), "tiers", tiers)
    assert tiers == hits
    assert seen == walks_per_request


def _ticks(cache) -> list:
    out, stack = [], [cache.tree.root]
    while stack:
        n = stack.pop()
        out.append((n.id, n.tick))
        stack.extend(n.children.values())
    return sorted(out)


@pytest.mark.parametrize("swa,memo_walks", [(False, 2), (True, 1)])
def test_a_reused_match_has_the_ticks_of_a_walk_and_a_state_change_walks_again(monkeypatch, swa, memo_walks):
    """Two caches, one without the memo, take the same calls (five matches of `a`): every
    match result and every node's tick agree. The memo walks `a` again only after a state
    change: b's match splitting the inserted node at 24 (FULL only: with SWA the window of
    tokens 16..24 is not cached, b reuses nothing and nothing is split). A lock and an unlock
    change no query (the version holds): the matches of `a` after them are reused."""
    walks = _count_walks(monkeypatch)
    caches = []
    for memo in (True, False):
        cfg = CacheConfig(page_size=4, capacity_tokens=400,
                          swa=SwaConfig(window_tokens=8, capacity_tokens=400) if swa else None)
        c = RadixCache(cfg)
        if not memo:
            c.matcher.memo = None  # every match queries
        caches.append(c)
    a = TokenSeq(np.arange(40))
    b = TokenSeq(np.concatenate([np.arange(24), np.arange(16) + 100]))
    got = []
    for c in caches:
        ins = TokenSeq(np.arange(32))
        c.insert(ins, 32, c.alloc(8), 0, slots={"swa": c.swa.alloc(2)} if swa else None)
        walks.clear()
        seen = [c.match(a, 36), c.match(b, 36), c.match(a, 36)]
        m = seen[-1]
        v = c.matcher.version
        c.lock(m)
        seen.append(c.match(a, 36))
        c.unlock(m)
        assert c.matcher.version == v
        seen += [c.match(a, 36), c.match(a, 36)]
        got.append(([(m.cached_tokens, m.traversed_tokens, m.lost, m.handle.node.id) for m in seen], _ticks(c),
                    walks[id(a.data)]))
    assert got[0][0] == got[1][0] and got[0][1] == got[1][1]
    assert (got[0][2], got[1][2]) == (memo_walks, 5)


@pytest.mark.parametrize("swa,cut,result,nodes", [(False, 24, (24, 24, 3), 3), (True, None, (0, 24, 1), 2)])
def test_query_is_pure_and_touch_does_what_match_does(swa, cut, result, nodes):
    """`query` changes no tick, node or version; `touch(query(...))` then gives the result,
    ticks and split of `match` on a twin cache. FULL only: the 24-token match splits the
    32-token node (new node 3); with SWA the window before token 24 is not cached: the root."""
    caches = []
    for _ in range(2):
        c = RadixCache(CacheConfig(page_size=4, capacity_tokens=400,
                                   swa=SwaConfig(window_tokens=4, capacity_tokens=400) if swa else None))
        c.insert(TokenSeq(np.arange(32)), 32, c.alloc(8), 0, slots={"swa": c.swa.alloc(1)} if swa else None)
        caches.append(c)
    b = TokenSeq(np.concatenate([np.arange(24), np.arange(16) + 100]))
    c, twin = caches
    before = (_ticks(c), c.tree.now, c.matcher.version)
    plan = c.query(b, 36)
    assert (_ticks(c), c.tree.now, c.matcher.version) == before and plan.cut == cut
    got, want = c.touch(plan), twin.match(b, 36)
    assert (got.cached_tokens, got.traversed_tokens, got.handle.node.id) == \
        (want.cached_tokens, want.traversed_tokens, want.handle.node.id) == result
    assert _ticks(c) == _ticks(twin) and c.num_nodes == twin.num_nodes == nodes


def _result(m) -> tuple:
    return (m.cached_tokens, m.traversed_tokens, m.lost, m.device_tokens, m.host_tokens, m.storage_tokens,
            m.l3_boundary, m.handle.node.id)


def _ack_all(c) -> None:
    while c.hier.pending:
        c.ack(min(c.hier.pending))


def _tiered_calls(c, swa: bool) -> list:
    """The tiered reuse test's calls on `c`: pairs of matches of `a` around every kind of state
    change a tiered query reads, and a lock, which is none."""
    a = TokenSeq(np.arange(40))
    b = TokenSeq(np.concatenate([np.arange(24), np.arange(16) + 100]))
    seen = [c.match(a, 36), c.match(a, 36), c.match(b, 36), c.match(a, 36)]  # b splits at 24 (FULL only)
    m = seen[-1]
    c.lock(m)
    seen.append(c.match(a, 36))  # reused: a lock is no state change
    c.unlock(m)
    c.hier.storage.put(a.page_keys(4)[8:9])  # the L3 store's contents: page 8 of `a`
    if swa:
        c.hier.storage.put_many([("swa", int(k)) for k in a.page_keys(4)[7:9]])
    seen += [c.match(a, 36), c.match(a, 36)]  # 4 storage tokens
    c.evict(400)  # demoted: L2 only
    seen += [c.match(a, 36), c.match(a, 36)]
    m = seen[-1]
    c.lock(m)
    got = c.load(m, a)  # L2 -> L1 in flight: L1 pages taken, node.value not yet set
    seen.append(c.match(a, 36))
    _ack_all(c)  # the acknowledgement alone puts the node on L1
    seen += [c.match(a, 36), c.match(a, 36)]
    c.unlock(got)
    return seen


A32, A36 = [(32, 32, (), 32, 0, 0, 0, 2)] * 2, [(36, 32, (), 32, 0, 4, 0, 2)] * 2  # device; + 4 storage tokens
HOST = [(36, 32, (), 0, 32, 4, 0, 2)] * 3  # demoted to L2; the match while the load is in flight


@pytest.mark.parametrize("swa,results,walks_memo", [
    # FULL: b splits node 2 at 24 (node 3 above it); a load loads one node per call: node 3
    (False, A32 + [(24, 24, (), 24, 0, 0, 0, 3)] + A32 + A36 + HOST + [(36, 32, (), 24, 8, 4, 0, 2)] * 2, 7),
    # SWA: b's window before 24 is not cached: b reuses nothing, nothing is split
    (True, A32 + [(0, 24, (("swa", 24, "SWA window incomplete"),), 0, 0, 0, 0, 1)] + A32 + A36 + HOST + A36, 6),
])
def test_a_reused_tiered_match_has_the_ticks_of_a_walk_and_a_state_change_walks_again(monkeypatch, swa, results,
                                                                                     walks_memo):
    """Tiers (L2, L3; acknowledgements by hand): a cache with the memo and one without take
    the same calls (`_tiered_calls`); every match result and every node's tick agree. The
    memo walks `a` again only after a state change the query reads: b's split (FULL only),
    an L3 put, a demotion (pool frees), a load's emission (L1 pages) and its acknowledgement
    (node.value, no pool change); the match after each pair's first and after the lock is
    reused. Walks: a's and b's (without the memo: all 12 matches)."""
    walks = _count_walks(monkeypatch)
    got = []
    for memo in (True, False):
        cfg = CacheConfig(page_size=4, capacity_tokens=400,
                          tiers=TierConfig(hicache_ratio=2, l3=True, min_prefetch_tokens=4),
                          swa=SwaConfig(window_tokens=8, capacity_tokens=400) if swa else None)
        c = RadixCache(cfg, auto_ack=False)
        if not memo:
            c.matcher.memo = None
        c.insert(TokenSeq(np.arange(32)), 32, c.alloc(8), 0, slots={"swa": c.swa.alloc(2)} if swa else None)
        _ack_all(c)
        walks.clear()
        seen = [_result(m) for m in _tiered_calls(c, swa)]
        got.append((seen, _ticks(c), sum(walks.values())))
    print(got[0][0], got[0][2], got[1][2])
    assert got[0][0] == got[1][0] == results and got[0][1] == got[1][1]
    assert (got[0][2], got[1][2]) == (walks_memo, 12)


@pytest.mark.parametrize("l3,swa", [(False, False), (True, False), (True, True)])
def test_a_tiered_query_is_pure(l3, swa):
    """`query` on a tiered cache changes no tick, node, version, queue or L3 order; touch then
    gives what match gives on a twin cache (FULL: the split at 24)."""
    caches = []
    for _ in range(2):
        cfg = CacheConfig(page_size=4, capacity_tokens=400, tiers=TierConfig(hicache_ratio=2, l3=l3, min_prefetch_tokens=4),
                          swa=SwaConfig(window_tokens=4, capacity_tokens=400) if swa else None)
        c = RadixCache(cfg)
        c.insert(TokenSeq(np.arange(32)), 32, c.alloc(8), 0, slots={"swa": c.swa.alloc(1)} if swa else None)
        if l3:
            c.hier.storage.put(TokenSeq(np.arange(40)).page_keys(4))
        caches.append(c)
    b = TokenSeq(np.concatenate([np.arange(24), np.arange(16) + 100]))
    c, twin = caches

    def state(c):
        store = None if c.hier.storage is None else list(c.hier.storage._keys)
        return _ticks(c), c.tree.now, c.matcher.version, len(c.full.queue), len(c.hier.queue), store
    before = state(c)
    plan = c.query(b, 36)
    assert state(c) == before
    got, want = c.touch(plan), twin.match(b, 36)
    assert _result(got) == _result(want)
    assert _ticks(c) == _ticks(twin) and c.num_nodes == twin.num_nodes


def _verified_memo(monkeypatch) -> Counter:
    """Every plan the memo hands out is checked against a fresh query of the same state (the
    memo's version must cover everything a query reads). Counts reuses and queries."""
    from cache_core.l1_match import MemoMatch

    seen: Counter = Counter()
    orig = MemoMatch.match

    def checked(self, seq, n):
        memo = self.memo
        plan = None if memo is None else memo.get(seq, n, self.version)
        if plan is not None:
            fresh = self.query(seq, n)
            assert fresh == plan, f"a kept plan differs from a fresh query: {plan} != {fresh}"
            seen["reused"] += 1
        else:
            seen["queried"] += 1
        return orig(self, seq, n)

    monkeypatch.setattr(MemoMatch, "match", checked)
    return seen


@pytest.mark.parametrize("scenario,reused", [
    ("fig4-inkling-small-l3", 47), ("fig4-dsv4-flash-l3", 36), ("fig4-dsv4-flash-l1", 18),
    ("fig6-qwen3.5-397b-b32-session", 9),
])
def test_every_reused_plan_equals_a_fresh_query_on_catalog_runs(monkeypatch, scenario, reused):
    """Smoke-size catalog runs (tiers with L3, SWA and MAMBA; L1 only; session policy): every
    reuse of a kept plan equals what a query of the state at that moment returns. (The same
    check over the fourteen full-size figure-4/6 runs passed too: e.g. fig6-dsv4-pro-b256-lru
    reused 17,815 plans and queried 21,297 times.)"""
    from radixsim.run import simulate
    from scenarios.scenario import from_file

    seen = _verified_memo(monkeypatch)
    simulate(from_file(scenario, smoke_run=True))
    print(scenario, dict(seen))
    assert seen["reused"] == reused
