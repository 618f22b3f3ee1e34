"""The engine's L3 prefetch policies (EngineConfig.prefetch_policy) and the runs that used to
hang: each policy changes the outcome of one request whose prefix only L3 still holds, and
multi-turn runs with L3 hits finish under every policy (or stop with EngineStalled naming the
stuck requests, never silently)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import simpy
from test_engine import COST, HW, req, run

from cache_core import CacheConfig, RadixCache
from cache_core.engine import EngineStalled
from cache_core.engine_types import EngineConfig
from cache_core.tiers import TierConfig
from sim.simulator import build

KV = 200_000  # bytes per token
SLOW_L3 = 1e8  # bytes/s: the 960-token prefetch (192 MB) takes 1.92 s, longer than timeout's budget


def _back_from_l3(policy: str, l3_bytes_per_s: float | None = None):
    """rid 0 computes a 960-token prompt; 8 unrelated prompts push it out of L1 (2k) and L2
    (4k), so only L3 holds it when rid 99 (the same prompt + 40 tokens) arrives at t=100.
    Returns (rid 99, engine, cache)."""
    tiers = TierConfig(hicache_ratio=2, l3=True, kv_bytes_per_token=KV, min_prefetch_tokens=16)
    cfg = CacheConfig(page_size=16, capacity_tokens=2_000, tiers=tiers)
    hw = HW if l3_bytes_per_s is None else dataclasses.replace(HW, l3_rdma_bytes_per_s=l3_bytes_per_s)
    env = simpy.Environment()
    cache = RadixCache(cfg, record_actions=True, auto_ack=False)
    e = build(env, cache, EngineConfig(max_running_requests=1, chunked_prefill_tokens=None,
                                       prefetch_policy=policy), COST, hw)
    base = np.arange(960)
    timed = [(0.0, req(0, base, 2))]
    timed += [(10.0 + i, req(1 + i, np.arange(960) + 10_000 * (i + 1), 2)) for i in range(8)]
    timed += [(100.0, req(99, np.concatenate([base, [5] * 40]), 2))]
    got = run(env, e, timed)
    assert e.inflight == 0 and cache.hier.tokens_moved["L3->L2"] == 960  # the prefetch always ran to the end
    return got[99], e, cache


def _l3_time(bw: float) -> float:
    return HW.l3_latency_s + 960 * KV / bw + 60 * HW.l3_block_overhead_s  # 60 pages of 16


def test_wait_complete_holds_the_request_until_the_prefetch_landed():
    r, e, cache = _back_from_l3("wait_complete", SLOW_L3)
    assert r.prefetch_wait_s == pytest.approx(_l3_time(SLOW_L3), rel=1e-12)
    assert (r.cached_tokens, r.cached_device, r.cached_host, r.cached_storage) == (960, 0, 0, 960)
    assert r.queue_s == 0.0 and r.load_s > r.prefetch_wait_s  # then L2 -> L1
    assert cache.hier.tokens_moved["L2->L1"] == 960


def test_best_effort_schedules_at_once_and_computes_what_has_not_landed():
    """Before the fix the request waited for the prefetch after admission (load_s 1.92 s,
    960 storage hits); a multi-turn run could hang that way (see below)."""
    r, e, cache = _back_from_l3("best_effort", SLOW_L3)
    assert r.prefetch_wait_s == 0.0 and r.load_s == 0.0 and r.queue_s == 0.0
    assert r.admit_s == r.ready_s == r.arrival_s == 100.0
    assert (r.cached_tokens, r.cached_storage, r.prefetch_tokens) == (0, 0, 0)
    assert cache.hier.tokens_moved["L2->L1"] == 0
    wait, _, _ = _back_from_l3("wait_complete", SLOW_L3)
    assert r.first_token_s - r.arrival_s < wait.first_token_s - wait.arrival_s  # computing 1000 beats a 1.92 s wait


def test_timeout_gives_up_after_its_budget_on_a_slow_l3_link():
    r, e, cache = _back_from_l3("timeout", SLOW_L3)
    budget = cache.hier.cfg.prefetch_budget_s(960)
    assert budget == 1.234375 < _l3_time(SLOW_L3)
    assert r.prefetch_wait_s == r.load_s == budget and r.queue_s == 0.0
    assert (r.cached_tokens, r.cached_storage) == (0, 0)


@pytest.mark.parametrize("policy", ["timeout", "wait_complete"])
def test_a_prefetch_within_the_budget_is_used(policy):
    """On the default (fast) L3 link the prefetch lands within timeout's budget: timeout and
    wait_complete give the same request; best_effort still does not wait."""
    r, e, cache = _back_from_l3(policy)
    assert r.prefetch_wait_s == pytest.approx(_l3_time(HW.l3_bytes_per_s), rel=1e-12)
    assert (r.cached_tokens, r.cached_storage) == (960, 960)
    b, _, _ = _back_from_l3("best_effort")
    assert (b.prefetch_wait_s, b.cached_tokens) == (0.0, 0)


# -- multi-turn runs with L3 hits: every request finishes ----------------------------------------------
HANG = ["workload.num_clients=20", "workload.num_rounds=10", "workload.request_length=4096",
        "cache.l3_tokens=unbounded"]


def _simulate(sets):
    from radixsim.run import request_rows, simulate
    from scenarios.scenario import from_file

    eng, env, _, _ = simulate(from_file("quickstart", sets))
    return eng, request_rows(eng)


def test_best_effort_multiturn_with_l3_hits_finishes():
    """Stopped with 140 of 200 requests finished before the fix: admitted requests waited for
    their prefetch holding no memory, admission handed that memory to others, and both ended
    up holding loaded prefixes that neither could complete with."""
    eng, rows = _simulate(HANG + ["cache.prefetch_policy=best_effort"])
    assert len(rows) == 200 and eng.inflight == 0
    assert all(r.prefetch_wait_s == 0.0 for r in eng.finished)
    assert sum(x["cached_storage"] for x in rows) > 0


@pytest.mark.parametrize("policy", ["wait_complete", "timeout", "best_effort"])
def test_small_l1_multiturn_with_l3_hits_finishes(policy):
    """L1 50k tokens: admitted requests holding locked prefixes (no pages yet) could block
    each other for good under every policy (121 of 200 finished); the engine now gives back
    the latest one's, as it did for pages."""
    eng, rows = _simulate(HANG + ["cache.l1_tokens=50000", f"cache.prefetch_policy={policy}"])
    assert len(rows) == 200 and eng.counters["retractions"] > 0


def test_a_run_that_stops_early_names_the_stuck_requests():
    """A data plane that loses a transfer: the run ends with the request still loading; the
    engine says which, instead of ending as if it were done."""
    from test_engine import make

    tiers = TierConfig(hicache_ratio=4, kv_bytes_per_token=1_000_000)
    env, cache, e, _ = make(CacheConfig(page_size=16, capacity_tokens=1_024, tiers=tiers),
                            max_running_requests=1, chunked_prefill_tokens=None)
    submit = e.dataplane.submit
    e.dataplane.submit = lambda t, done: None if t.kind == "load" else submit(t, done)  # loads never finish
    base = np.arange(640)
    timed = [(0.0, req(0, base, 2)), (5.0, req(1, np.arange(640) + 5000, 2)),
             (10.0, req(2, np.concatenate([base, [3] * 30]), 2))]
    with pytest.raises(EngineStalled, match=r"^the run stopped with 2 of 3 requests finished; 1 of 3 arrived "
                                            r"requests unfinished: loading 1 \(rids 2\); .* transfers in flight 1$"):
        run(env, e, timed)
