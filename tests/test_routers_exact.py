"""Exact routing decisions on small constructed fleets (issue 27), computed by hand from each
router's stated rule: each test pins one comparison (a bound, a threshold, a tie, a trim) so
that changing it changes a decision."""
from __future__ import annotations

import copy
import math

import pytest

from fleet.routers import make_router
from radixsim.fleet_run import fleet_rows, simulate_fleet
from scenarios.scenario import resolve

from helpers import KeyReq, KeySeq, stub_cache

P = 64


Seq, Req = KeySeq, KeyReq  # tests/helpers.py (pages of P = 64 tokens)


def router(kind, n=2, **params):
    return make_router({"kind": kind, **params}, n, page_size=P)


def send(r, req, now=0.0) -> int:
    i = r.pick(req, now)
    r.routed(req, i, now)
    return i


# -- least_load ------------------------------------------------------------------------------

def test_least_load_counts_tokens_not_requests():
    r = router("least_load")
    big, small, third = Req(0, [1], prompt=990, output=10), Req(1, [2], prompt=90, output=10), Req(2, [3], 90, 10)
    assert [send(r, big), send(r, small)] == [0, 1]
    assert r.outstanding_tokens == [1000, 100]
    assert send(r, third) == 1  # 100 tokens < 1,000 (by request counts, 1 = 1: engine 0)
    r.finished(big, 0, 1.0)
    assert r.outstanding_tokens == [0, 200] and r.pick(Req(3, [4]), 1.0) == 0


# -- cache_aware -----------------------------------------------------------------------------

def test_cache_aware_a_match_rate_equal_to_the_threshold_does_not_count():
    r = router("cache_aware")
    r.trees[0].touch([1, 2, 3])
    r.trees[1].touch([50])
    assert 192 / 640 == r.cache_threshold == 0.3
    # 3 of 10 pages match on engine 0: rate 0.3, not above 0.3: the smallest tree (engine 1)
    assert r.pick(Req(0, list(range(1, 11))), 0.0) == 1
    r = router("cache_aware")
    r.trees[0].touch([1, 2, 3, 4])
    r.trees[1].touch([50])
    assert r.pick(Req(0, list(range(1, 11))), 0.0) == 0  # 4 of 10: 0.4 > 0.3


def test_cache_aware_ties_go_to_the_lowest_index():
    r = router("cache_aware", n=3)
    for t in r.trees[1:]:
        t.touch([1, 2, 3, 4])
    assert r.pick(Req(0, list(range(1, 11))), 0.0) == 1  # engines 1 and 2 match 4 pages each
    r = router("cache_aware", n=3)
    r.trees[0].touch([7])
    assert r.pick(Req(0, [90, 91]), 0.0) == 1  # no match: trees of 1, 0, 0 pages: the first smallest
    assert list(r.trees[1]) == [91, 90]


def test_cache_aware_trims_each_tree_to_max_tree_size_every_interval():
    r = router("cache_aware", max_tree_size=2 * P, eviction_interval_s=10.0)
    assert send(r, Req(0, [1, 2, 3, 4, 5]), 0.0) == 0
    assert send(r, Req(1, [1, 2, 3, 4, 5, 6]), 9.9) == 0  # 5 of 6 pages; no trim before t = 10
    assert list(r.trees[0]) == [6, 5, 4, 3, 2, 1]
    assert send(r, Req(2, [20, 21, 22, 23]), 10.0) == 1  # trimmed first: trees of 2 and 0 pages
    assert list(r.trees[0]) == [2, 1]  # the prefix's leaves went first
    assert list(r.trees[1]) == [23, 22, 21, 20]  # next trim at t = 20
    assert send(r, Req(3, [1, 2, 9]), 19.9) == 0  # 2 of 3 pages on engine 0
    assert r.pick(Req(4, [30]), 20.0) == 0 and list(r.trees[1]) == [21, 20]


@pytest.mark.parametrize("gap, balanced", [(64, True), (65, False)])
def test_cache_aware_balances_only_beyond_both_load_thresholds(gap, balanced):
    r = router("cache_aware")
    r.trees[0].touch([1, 2, 3, 4])
    for rid in range(gap):
        r.routed(Req(100 + rid, [999]), 0, 0.0)  # engine 0: `gap` unfinished requests, engine 1: none
    # max - min > 64 and max > min x 1.5: the least loaded; else the match (4 of 5 pages on engine 0)
    assert r.pick(Req(0, [1, 2, 3, 4, 5]), 0.0) == (0 if balanced else 1)
    assert (r.balanced_picks, r.imbalanced_picks) == ((1, 0) if balanced else (0, 1))


def test_cache_aware_low_match_policy_least_load_sends_to_the_fewest_requests():
    """sgl-model-gateway's rule for a low match: the least loaded worker, not the smallest tree."""
    for policy, want in (("smallest_tree", 1), ("least_load", 0)):
        r = router("cache_aware", low_match=policy)
        r.trees[0].touch([1, 2, 3])
        r.routed(Req(9, [8]), 1, 0.0)  # engine 1: empty tree, one unfinished request
        assert r.pick(Req(0, [20, 21]), 0.0) == want
    with pytest.raises(ValueError, match="fleet.router.low_match: got 'x'; expected smallest_tree or least_load"):
        router("cache_aware", low_match="x")


# -- session_affinity ------------------------------------------------------------------------

def test_session_affinity_moves_a_session_whose_home_is_at_the_bound():
    r = router("session_affinity", epsilon=0.0)
    s = next(k for k in range(100) if r.home(k) == 0)
    first = Req(0, [1], session=s)
    assert send(r, first) == 0 and r.moves == []
    # bound ceil((1 + 0) x (1 + 1) / 2) = 1: engine 0's one unfinished request is at it
    assert send(r, Req(1, [1], session=s)) == 1
    assert r.moves == [(1, 0, 1, 1, 1)]
    r.finished(first, 0, 1.0)
    # one unfinished (on 1): bound ceil(2 / 2) = 1, engine 0 holds 0 < 1: home again
    assert r.pick(Req(2, [1], session=s), 1.0) == 0 and len(r.moves) == 1


def test_session_affinity_bound_with_epsilon():
    r = router("session_affinity", n=4, epsilon=0.5)
    s = next(k for k in range(100) if r.home(k) == 2)
    for rid in range(2):
        r.routed(Req(50 + rid, [1]), 2, 0.0)
    # bound ceil(1.5 x 3 / 4) = 2: the home's 2 requests are at it, the session moves
    assert math.ceil(1.5 * 3 / 4) == 2
    i = r.pick(Req(0, [1], session=s), 0.0)
    assert i != 2 and r.moves == [(0, 2, i, 2, 2)]


# -- kv_overlap ------------------------------------------------------------------------------

def test_kv_overlap_index_keeps_only_the_engine_capacity():
    r = router("kv_overlap")
    r.capacity_pages = [4, 4]
    a, b = Req(0, [1, 2, 3, 4]), Req(1, [11, 12, 13, 14])
    for req in (a, b):
        r.routed(req, 1, 0.0)
        r.finished(req, 1, 0.0)
    assert r.pick(Req(2, [11, 12, 13, 14]), 0.0) == 1  # logits 4 + 4 and 0 + 4
    assert list(r.index[1]) == [14, 13, 12, 11]  # a's 4 blocks were the least recently stored
    assert r.pick(Req(3, [1, 2, 3, 4]), 0.0) == 0  # equal logits: engine 0


def test_kv_overlap_logits_weigh_prefill_blocks_against_active_blocks():
    r = router("kv_overlap", overlap_score_weight=2.0)
    r.capacity_pages = [None, None]
    done = Req(0, [1, 2, 3])
    r.routed(done, 1, 0.0)
    r.finished(done, 1, 0.0)
    r.routed(Req(1, [7, 8, 9, 10, 11]), 1, 0.0)  # engine 1: 5 active blocks
    # engine 0: 2 x 4 prefill + 0 + 4 = 12; engine 1: 2 x 1 + 5 + 4 = 11
    assert r.pick(Req(2, [1, 2, 3, 4]), 0.0) == 1
    r.routed(Req(3, [20]), 1, 0.0)  # 6 active blocks: engine 1 12, a tie: engine 0
    assert r.pick(Req(4, [1, 2, 3, 4]), 0.0) == 0


# -- cache_aware_exact -----------------------------------------------------------------------

class _Match:
    def __init__(self, device, host, storage):
        self.device, self.host_tokens, self.storage_tokens = device, host, storage
        self.cached_tokens = device + host + storage


class _Engine:
    def __init__(self, device=0, host=0, storage=0):
        self.cache = stub_cache(_Match(device, host, storage))


def test_cache_aware_exact_counts_device_and_host_but_not_shared_storage():
    r = router("cache_aware_exact")
    r.engines = [[_Engine(storage=6400)], [_Engine(device=2560, host=640)]]
    assert r.pick(Req(0, list(range(10)), prompt=10_000), 0.0) == 1  # 3,200 / 10,000 > 0.3; storage ignored
    r.engines = [[_Engine(device=1000, storage=6400)], [_Engine(device=2000, host=1100)]]
    assert r.pick(Req(1, list(range(10)), prompt=10_000), 0.0) == 1
    r.engines = [[_Engine(device=2000, storage=6400)], [_Engine(device=500)], [_Engine()]][:2]
    r.routed(Req(2, [1], prompt=50, output=0), 0, 0.0)  # 0.2 and 0.05: no match; fewest tokens: 1
    assert r.pick(Req(3, list(range(10)), prompt=10_000), 0.0) == 1


def test_cache_aware_exact_takes_an_engine_best_dp_rank():
    r = router("cache_aware_exact")
    r.engines = [[_Engine(device=1000), _Engine(device=2000)], [_Engine(device=3500), _Engine()]]
    assert r.pick(Req(0, list(range(10)), prompt=10_000), 0.0) == 1
    r.engines[0].append(_Engine(device=3600))
    assert r.pick(Req(1, list(range(10)), prompt=10_000), 0.0) == 0


def test_cache_aware_exact_reads_the_caches_without_touching_them(monkeypatch):
    """On 3 engines (L1 + L2), at every pick: the exact router's tokens are what each cache's
    match would give (device + host), and asking leaves every tree's LRU clock where it was (it
    used to call `match`, which ticks every engine's tree at every pick and so reorders evictions
    on the engines it does not pick)."""
    from fleet.routers.cache_aware_exact import CacheAwareExact

    seen = []
    plain = CacheAwareExact.matched_tokens

    def checked(self, req, keys):
        clocks = [e.cache.tree.now for ranks in self.engines for e in ranks]
        got = plain(self, req, keys)
        assert [e.cache.tree.now for ranks in self.engines for e in ranks] == clocks  # read only
        want = [m.device + m.host_tokens for m in (ranks[0].cache.match(req.seq, req.limit)
                                                   for ranks in self.engines)]
        assert got == want
        seen.append(max(got))
        return got

    monkeypatch.setattr(CacheAwareExact, "matched_tokens", checked)
    raw = {"name": "exact", "seed": 3, "model": "qwen3-32b", "hardware": "h200x1",
           "cache": {"page_size": 64, "l1_tokens": 200_000, "hicache_ratio": 2},
           "engine": {"max_running_requests": 8},
           "workload": {"kind": "multiturn", "num_clients": 8, "num_rounds": 3, "request_length": 1024,
                        "output_length": 16, "max_parallel": 8, "request_rate": 32, "round_barrier": False},
           "fleet": {"engines": 3, "router": "cache_aware_exact"}}
    f, *_ = simulate_fleet(resolve(raw, "test"))
    assert len(fleet_rows(f)) == len(seen) == 24 and max(seen) > 0


def test_cache_aware_exact_refuses_a_low_match_rule():
    with pytest.raises(ValueError, match="fleet.router.low_match: cache_aware_exact keeps no tree"):
        make_router({"kind": "cache_aware_exact", "low_match": "least_load"}, 2, page_size=P)


def test_oracle_is_refused_with_its_new_name():
    with pytest.raises(ValueError, match=r"unknown router 'oracle'.*'oracle' is now 'cache_aware_exact'"):
        router("oracle")


# -- the fleet: DP ranks, shared L3 links --------------------------------------------------------

SMALL = {  # 8 clients x 3 rounds on one H200 per engine (well under a second)
    "name": "routers-exact", "seed": 3, "model": "qwen3-32b", "hardware": "h200x1",
    "cache": {"page_size": 64, "l1_tokens": 200_000, "hicache_ratio": 2},
    "engine": {"max_running_requests": 8},
    "workload": {"kind": "multiturn", "num_clients": 8, "num_rounds": 3, "request_length": 1024,
                 "output_length": 16, "max_parallel": 8, "request_rate": 32, "round_barrier": False},
}


def _fleet(fleet, hardware="h200x1", **cache):
    raw = copy.deepcopy(SMALL)
    raw["hardware"] = hardware
    raw["cache"].update(cache)
    raw["fleet"] = fleet
    f, env, *_ = simulate_fleet(resolve(raw, "test"))
    return f, fleet_rows(f)


def test_dp_sends_each_request_to_its_engine_and_the_dispatcher_rank():
    """3 engines x 2 ranks, round robin at both levels: request k goes to engine k mod 3 and
    there to rank (k // 3) mod 2 (each dispatcher sees every third request): fleet index
    engine x 2 + rank; every finish is booked back to the router and dispatcher that sent it
    (TP2 engines: DP attention splits an engine's tp ranks, so dp must divide tp)."""
    f, rows = _fleet({"engines": 3, "dp": 2}, hardware="h200x2")
    assert len(rows) == 24
    assert [(r["engine"], r["dp_rank"]) for r in rows] == [(k % 3, k // 3 % 2) for k in range(24)]
    assert [f.engine_of[k] for k in range(24)] == [k % 3 * 2 + k // 3 % 2 for k in range(24)]
    assert [len(e.queues.finished) for e in f.engines] == [4] * 6
    assert f.router.outstanding == [0, 0, 0] and [d.outstanding for d in f.dispatchers] == [[0, 0]] * 3
    assert f.router.outstanding_tokens == [0, 0, 0]


def test_the_shared_l3_links_are_priced_at_the_l3_bandwidth():
    f, rows = _fleet({"engines": 2, "shared_l3": True}, l3_tokens="unbounded")
    hw = f.engines[0].links.links  # every engine holds the same two L3 links
    h = resolve({**copy.deepcopy(SMALL), "fleet": {"engines": 1}}, "test").hardware
    assert h.l3_bytes_per_s != h.pcie_bytes_per_s
    for pair in (("L3", "L2"), ("L2", "L3")):
        link = hw[pair]
        assert (link.bandwidth_Bps, link.latency_s, link.per_page_s) == (h.l3_bytes_per_s, h.l3_latency_s,
                                                                         h.l3_block_overhead_s)
        assert link is f.engines[1].links.links[pair]
    assert f.engines[0].links.ssd.bandwidth_Bps == h.ssd_bytes_per_s
