"""The L3 store models (cache_core/tiers/store.py): Mooncake Store's watermark batch eviction, its
lease order (never-read objects first), failed puts on a full pool, the SSD tier below it, and
what they do to a request's hits (a lost middle page cuts the run; the SSD serves it)."""
from __future__ import annotations

import numpy as np
import pytest

from cache_core.tiers.store import MooncakeStore, StorageIndex, make_store
from cache_core.tiers import TierConfig
from test_tiers import ABC, A, Y, in_l3, keys_of, make, request


def held(store) -> list:
    return sorted(k for k in range(100) if store.in_memory(k))


def test_watermark_batch_eviction_evicts_exactly_the_oldest_leases():
    s = MooncakeStore(20)  # Mooncake's defaults: high watermark 0.90, eviction ratio 0.05
    s.put_many(list(range(18)))  # 0.90: not above the watermark
    s.touch(np.array([6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 5, 0, 1]))  # read: leased in this order
    assert len(s) == 18 and s.evicted_pages == 0 and s.eviction_batches == 0
    s.put_many([18])  # 0.95 > 0.90: n = ceil(19 x max(0.05, 0.95 - 0.90 + 0.05)) = 2
    # the 2nd oldest lease is a never-read object's (the epoch): all 4 never-read objects go
    assert s.eviction_batches == 1 and s.evicted_pages == 4
    assert held(s) == [0, 1, *range(5, 18)]
    s.put_many([18, 19, 20, 21])  # 19 objects: n = 2 again; 18..21 are never read: all 4 go
    assert held(s) == [0, 1, *range(5, 18)] and s.evicted_pages == 8
    s.put_many([2, 3, 4])  # 18 objects, 0.90: no eviction
    s.touch(np.array([2, 3, 4]))
    s.put_many([30])  # one never-read object, n = 2: it, then the oldest lease (6)
    assert held(s) == [0, 1, 2, 3, 4, 5, *range(7, 18)] and s.evicted_pages == 10


def test_read_objects_go_in_lease_order_once_no_never_read_object_is_left():
    s = MooncakeStore(10, high_watermark=0.5, eviction_ratio=0.2)
    s.put_many(list(range(5)))
    s.touch(np.array([3, 1, 4, 0, 2]))  # lease order: 3 1 4 0 2
    s.put_many([5])  # 0.6 > 0.5: ceil(6 x max(0.2, 0.6 - 0.5 + 0.2)) = 2: the new 5, then 3
    assert held(s) == [0, 1, 2, 4]


def test_a_put_on_a_full_pool_fails_and_wakes_a_batch_eviction():
    s = MooncakeStore(10, high_watermark=1.0, eviction_ratio=0.2)
    s.put_many(list(range(5)))
    s.touch(np.arange(5))
    s.put_many(list(range(5, 12)))  # 10 fit, 10 and 11 fail; then ceil(10 x 0.2) = 2: every never-read
    assert s.rejected_puts == 2 and 10 not in s and 11 not in s
    assert held(s) == list(range(5))


def test_a_present_key_is_not_put_again_its_lease_is_renewed():
    s = MooncakeStore(10, high_watermark=0.5, eviction_ratio=0.1)
    s.put_many([0, 1, 2, 3, 4])
    s.put_many([0, 5])  # 0 exists: leased (SGLang probes batch_is_exist before putting)
    assert held(s) == [0]  # 0.6 > 0.5: n = 2, a never-read object's lease: all 5 never-read go
    assert s.evicted_pages == 5


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_an_object_read_at_t_is_evictable_after_t_plus_ttl_not_before():
    s = MooncakeStore(10, high_watermark=0.5, eviction_ratio=0.1, lease_ttl_s=10.0)
    s.clock = clock = FakeClock()
    s.put_many([0, 1, 2, 3, 4])
    clock.t = 3.0
    s.touch(np.array([0, 1, 2, 3, 4]))  # leased until 13.0
    clock.t = 12.5
    s.put_many([5])  # 0.6 > 0.5: n = ceil(6 x 0.2) = 2, but only the never-read 5 may go
    assert held(s) == [0, 1, 2, 3, 4] and s.evicted_pages == 1
    s.put_many([6])  # the same: 6 is the only candidate
    assert held(s) == [0, 1, 2, 3, 4] and s.evicted_pages == 2
    clock.t = 13.0  # the leases expire (Mooncake: now >= lease_timeout)
    s.put_many([7])  # n = 2: the never-read 7, then 0, the oldest expired lease
    assert held(s) == [1, 2, 3, 4] and s.evicted_pages == 4


def test_a_full_pool_of_leased_objects_rejects_puts_until_a_lease_expires():
    s = MooncakeStore(4, high_watermark=1.0, eviction_ratio=0.25, lease_ttl_s=10.0)
    s.clock = clock = FakeClock()
    s.put_many([0, 1, 2, 3])
    s.touch(np.array([0, 1, 2, 3]))  # leased until 10.0
    s.put_many([4])  # full, nothing evictable: rejected, the eviction stays pending
    assert s.rejected_puts == 1 and held(s) == [0, 1, 2, 3] and s.eviction_batches == 0
    clock.t = 10.0
    s.put_many([5])  # the pending pass evicts ceil(4 x 0.25) = 1 (0, the oldest lease); 5 fits
    assert held(s) == [1, 2, 3, 5] and s.rejected_puts == 1 and s.eviction_batches == 1


def test_without_a_clock_leases_only_order_eviction():
    s = MooncakeStore(10, high_watermark=0.5, eviction_ratio=0.2)  # replay: no clock
    s.put_many(list(range(5)))
    s.touch(np.arange(5))
    s.put_many([5])  # n = 2: 5, then 0 (leases never protect without a clock)
    assert held(s) == [1, 2, 3, 4]


def test_per_shard_eviction_takes_the_oldest_lease_of_a_shard_without_never_read_objects():
    """Mooncake's BatchEvict before #2286: shard by shard from a random one (Random(0): shard 1),
    each evicting ceil(objects so far x target) - evicted so far, oldest lease first."""
    s = MooncakeStore(20, high_watermark=0.5, eviction_ratio=0.1, shards=2)
    assert [s.shard(k) for k in (0, 2, 3, 4, 5, 6, 7, 8)] == [0] * 8 and [s.shard(k) for k in (1, 9, 10)] == [1] * 3
    s.put_many([0, 2, 1, 9, 10])
    s.touch(np.array([1, 9, 10, 0, 2]))  # lease order 1 9 10 0 2
    s.put_many([3, 4, 5, 6, 7, 8])  # never read, all in shard 0; 11 objects, 0.55: target 0.15
    # shard 1 (3 objects): ceil(3 x 0.15) = 1, its oldest lease, 1; shard 0 (11 so far):
    # ceil(11 x 0.15) - 1 = 1, a never-read object's lease: all 6 never-read go
    assert held(s) == [0, 2, 9, 10] and s.evicted_pages == 7 and s.eviction_batches == 1
    g = MooncakeStore(20, high_watermark=0.5, eviction_ratio=0.1)  # one pool-wide pass: only the 6
    g.put_many([0, 2, 1, 9, 10])
    g.touch(np.array([1, 9, 10, 0, 2]))
    g.put_many([3, 4, 5, 6, 7, 8])
    assert held(g) == [0, 1, 2, 9, 10]


def test_a_page_is_lost_with_either_of_its_objects_and_only_the_missing_one_is_put_again():
    """SGLang stores a page's K and V as two objects; per-shard eviction may take one of them."""
    s = MooncakeStore(10, high_watermark=0.4, eviction_ratio=0.1, shards=2, objects_per_page=2)
    assert s.capacity_pages == 20  # objects
    assert [s.shard((9, h)) for h in (0, 1)] == [1, 1] and [s.shard((0, h)) for h in (0, 1)] == [0, 1]
    assert {s.shard((k, h)) for k in (2, 4, 5) for h in (0, 1)} == {0}
    s.put_many([9, 0])
    s.touch(np.array([9, 0]))  # lease order (9, K) (9, V) (0, K) (0, V)
    s.put_many([2, 4, 5])  # 10 objects, 0.5: target 0.2
    # shard 1 holds (9, K) (9, V) (0, V): ceil(3 x 0.2) = 1, its oldest lease: 9's K;
    # shard 0: ceil(10 x 0.2) - 1 = 1, a never-read object's lease: the 6 objects of 2, 4, 5
    assert (9 in s, 0 in s, len(s), s.evicted_objects, s.evicted_pages) == (False, True, 3, 7, 3)
    assert s.leading(np.array([0, 9, 2])) == 1 and held(s) == [0]
    s.put_many([9])  # only 9's K is put again (its V is present: leased)
    assert 9 in s and len(s) == 4 and s.eviction_batches == 1


def test_replicas_share_the_pool():
    assert MooncakeStore(10, replicas=2).capacity_pages == 5


def cut_scenario(**store):
    """A, B, C stored as three nodes (6 pages); C read back from L3 below A B on the tree, then A
    read back alone: B was never read from L3. Storing Y then makes 8 objects in an 8-page pool
    (above the 0.90 watermark)."""
    c = make(l1=32, l2_tokens=32, l3=True, l3_tokens=32, min_prefetch_tokens=0, **store)
    for x in (A, ABC[:16], ABC):
        request(c, x)
    assert c.evict(8) == 8 and c.hier.evict_l2(8) == 8  # C leaves the tree
    m = request(c, ABC)
    assert (m.device, m.storage_tokens) == (16, 8)
    c.evict(24)
    assert c.hier.evict_l2(24) == 24 and c.num_nodes == 1
    assert request(c, A).storage_tokens == 8
    request(c, Y)
    return c


@pytest.mark.parametrize("model,l3,cached", [
    ("prefix", [True] * 6, 24),  # LRU by put: 8 pages fit the 8-page pool, nothing goes
    # n = ceil(8 x 0.15) = 2 reaches a never-read object: B and Y (never read) go, C is cut off
    ("mooncake", [True, True, False, False, True, True], 8),
])
def test_a_lost_middle_page_cuts_the_reusable_run(model, l3, cached):
    c = cut_scenario(l3_model=model)
    assert in_l3(c, ABC) == l3
    m = request(c, ABC)
    assert (m.cached_tokens, m.device, m.storage_tokens) == (cached, 8, cached - 8)


def test_the_ssd_tier_serves_what_the_memory_pool_evicted():
    c = cut_scenario(l3_model="mooncake", l3_ssd_tokens=16)
    st = c.hier.storage
    assert [st.in_memory(int(k)) for k in keys_of(ABC, 4)] == [True, True, False, False, True, True]
    assert in_l3(c, ABC) == [True] * 6 and st.on_ssd(keys_of(ABC, 4)) == 2
    assert st.stats() == {"l3_pages": 4, "l3_evicted_pages": 4, "l3_rejected_puts": 0,
                          "l3_eviction_batches": 1, "l3_ssd_pages": 4, "l3_ssd_evicted_pages": 0}
    m = request(c, ABC)
    assert (m.cached_tokens, m.device, m.storage_tokens) == (24, 8, 16)


def test_a_full_ssd_tier_drops_its_oldest_offload():
    c = cut_scenario(l3_model="mooncake", l3_ssd_tokens=4)  # 1 page: only Y's last page stays
    assert in_l3(c, ABC) == [True, True, False, False, True, True]
    assert c.hier.storage.ssd_evicted_pages == 3
    assert request(c, ABC).cached_tokens == 8


def test_prefix_model_is_the_default_and_keeps_its_index():
    assert TierConfig().l3_model == "prefix"
    assert type(make(l2_tokens=8, l3=True).hier.storage) is StorageIndex


@pytest.mark.parametrize("bad,msg", [
    (dict(l3_model="lru"), "l3_model 'lru': expected one of mooncake, prefix"),
    (dict(l3_replicas=0), "l3_replicas must be an integer >= 1, got 0"),
    (dict(l3_eviction_shards=0), "l3_eviction_shards must be an integer >= 1, got 0"),
    (dict(l3_objects_per_page=1.5), "l3_objects_per_page must be an integer >= 1, got 1.5"),
    (dict(l3_high_watermark=1.5), "l3_high_watermark and l3_eviction_ratio must be in [0, 1]"),
    (dict(l3_ssd_tokens=64), "l3_ssd_tokens needs l3_model 'mooncake'"),
])
def test_bad_store_settings_are_one_line_errors(bad, msg):
    with pytest.raises(ValueError) as e:
        TierConfig(**bad)
    assert str(e.value) == msg


# ---------------------------------------------------------------------------------------------
# scenario keys
# ---------------------------------------------------------------------------------------------
def scenario(**cache):
    from scenarios.scenario import resolve

    base = {"model": "qwen3-8b", "hardware": "h200x1", "cache": {"l1_tokens": 4096, "l2_tokens": 8192, **cache},
            "workload": {"num_clients": 2, "num_rounds": 2, "request_length": 256}}
    return resolve(base, "t.yaml")


def test_scenario_keys_reach_the_store():
    sc = scenario(l3_tokens="1GiB", l3_model="mooncake", l3_eviction_high_watermark=0.8, l3_eviction_ratio=0.1,
                  l3_replicas=2, l3_ssd_tokens=65536, l3_lease_ttl_s=2.5, l3_eviction_shards=1024,
                  l3_objects_per_page=2)
    t = sc.cache.tiers
    assert (t.l3_model, t.l3_high_watermark, t.l3_eviction_ratio, t.l3_replicas, t.l3_ssd_tokens,
            t.l3_lease_ttl_s, t.l3_eviction_shards, t.l3_objects_per_page) == ("mooncake", 0.8, 0.1, 2, 65536, 2.5,
                                                                            1024, 2)
    st = make_store(t, 64)
    assert (st.lease_ttl_s, st.shards, st.objects_per_page) == (2.5, 1024, 2)
    default = scenario(l3_tokens="1GiB").cache.tiers
    assert (default.l3_lease_ttl_s, default.l3_eviction_shards, default.l3_objects_per_page) == (10.0, 1, 1)
    assert sc.doc["cache"]["l3_ssd_tokens"] == 65536


@pytest.mark.parametrize("cache,msg", [
    (dict(l3_tokens="1GiB", l3_model="lru"), "t.yaml: cache.l3_model: got 'lru'; expected one of mooncake, prefix"),
    (dict(l3_tokens="1GiB", l3_ssd_tokens=64), "t.yaml: cache.l3_ssd_tokens: an SSD tier needs an L3 with "
                                               "cache.l3_model mooncake; expected both"),
])
def test_bad_store_keys_are_one_line_scenario_errors(cache, msg):
    from scenarios.schema import ScenarioError

    with pytest.raises(ScenarioError) as e:
        scenario(**cache)
    assert str(e.value) == msg


# ---------------------------------------------------------------------------------------------
# replay and engine
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model,want,stats", [
    ("prefix", [0, 256, 528, 800, 1072, 1344, 1616, 1888, 2160, 1280, 0, 0],
     {"l3_pages": 512, "l3_evicted_pages": 1727}),
    ("mooncake", [0, 256, 528, 800, 1072, 1344, 1616, 1820, 1208, 396, 0, 0],
     {"l3_pages": 238, "l3_evicted_pages": 1836, "l3_rejected_puts": 123, "l3_eviction_batches": 6}),
])
def test_replay_multi_turn_cliff_is_deeper_with_the_mooncake_store(model, want, stats):
    """4 clients x 12 rounds of 68 tokens over a 2048-token L3 (test_tiers' multi-turn run):
    the prefix LRU holds every history up to round 9 and keeps 1,280 cached tokens in round 10;
    the Mooncake store, whose batch evictions take every never-read page at once, falls from
    round 8 on (1,820, 1,208, 396); invariants.check every 8 requests."""
    from cache_core import CacheConfig, RadixCache
    from scenarios.workloads import MultiTurnConfig, MultiTurnWorkload
    from test_tiers import _replay_rounds

    reqs = list(MultiTurnWorkload(MultiTurnConfig(num_clients=4, num_rounds=12, request_length=64,
                                                  output_length=4, page_size=4)))
    c = RadixCache(CacheConfig(page_size=4, capacity_tokens=1024, tiers=TierConfig(
        hicache_ratio=2, l3=True, l3_tokens=2048, min_prefetch_tokens=0, l3_model=model)))
    assert _replay_rounds(c, reqs)[0] == want
    assert c.hier.storage.stats() == stats


def test_engine_runs_with_the_mooncake_store_and_its_ssd_tier():
    """The engine (SimPy clock) with the Mooncake store: every request finishes, the tree
    holds its invariants, the pool evicts; an SSD tier as large as the pool keeps everything
    the pool evicted (reads of it go through the SSD link), so the run reuses more."""
    from cache_core import invariants
    from radixsim.run import request_rows, simulate
    from scenarios.scenario import from_file

    sets = ["workload.num_clients=8", "workload.num_rounds=6", "workload.request_length=2048",
            "cache.l1_tokens=16384", "cache.l2_tokens=32768"]
    runs = {}
    for name, extra in {"pool": ["cache.l3_tokens=60000", "cache.l3_model=mooncake"],
                        "pool+ssd": ["cache.l3_tokens=60000", "cache.l3_model=mooncake", "cache.l3_ssd_tokens=60000"],
                        "unbounded": ["cache.l3_tokens=unbounded"]}.items():
        eng, env, *_ = simulate(from_file("quickstart", sets + extra))
        assert eng.cache.hier.storage.clock() == env.now > 0  # leases expire on the simulated clock
        rows = request_rows(eng)
        assert len(rows) == 48 and eng.inflight == 0
        invariants.check(eng.cache)
        runs[name] = (sum(r["cached_tokens"] for r in rows), eng.cache.hier.storage.stats(), eng.links.ssd.bytes_done)
    assert runs["pool"][1]["l3_evicted_pages"] > 0 and runs["pool"][2] == 0
    st = runs["pool+ssd"][1]
    assert st["l3_ssd_pages"] == st["l3_evicted_pages"] > 0 and st["l3_ssd_evicted_pages"] == 0
    assert runs["pool+ssd"][2] > 0  # some prefetches read SSD pages
    assert runs["pool"][0] < runs["pool+ssd"][0]


@pytest.mark.parametrize("ssd_pages,done_at", [(0, 1e-4 + 4e6 / 2e9), (2, (1e-3 + 2e6 / 1e9) + (1e-4 + 4e6 / 2e9))])
def test_a_prefetch_of_ssd_pages_reads_them_on_the_ssd_link_first(ssd_pages, done_at):
    import types

    import simpy

    from cache_core.actions import L2, L3, Transfer
    from sim.links import DataPlane, LinkSet

    hw = types.SimpleNamespace(num_gpus=1, pcie_bytes_per_s=1e9, pcie_latency_s=0.0, l3_bytes_per_s=2e9,
                               l3_latency_s=1e-4, l3_block_overhead_s=0.0, ssd_bytes_per_s=1e9, ssd_latency_s=1e-3)
    env = simpy.Environment()
    plane = DataPlane(LinkSet.from_hardware(env, hw))
    t = Transfer(1, "prefetch", "full", L3, L2, 256, 4_000_000, None, np.arange(4), np.arange(4), (), ssd_pages)
    ev = plane.submit(t)
    env.run(ev)
    assert env.now == pytest.approx(done_at, rel=1e-12) and plane.links.ssd.bytes_done == ssd_pages * 1_000_000


def test_the_core_names_the_ssd_pages_of_a_prefetch():
    c = cut_scenario(l3_model="mooncake", l3_ssd_tokens=16)
    n0 = len(c.actions)
    request(c, ABC)
    (pf,) = [t for t in c.actions[n0:] if getattr(t, "kind", None) == "prefetch"]
    assert (pf.tokens, pf.ssd_pages) == (16, 2)  # B's 2 pages from the SSD, C's from the pool


def test_a_registered_l3_model_is_built_by_name():
    """L3 stores are a registry (issue 16 item 4): one registration line and `l3_model` (the
    core's TierConfig and the scenario schema) builds it."""
    from cache_core import CacheConfig, RadixCache
    from cache_core.tiers.store import register_l3_model, unregister_l3_model
    from scenarios.schema import SCHEMA, validate_document

    class HalfStore(StorageIndex):
        """A prefix index with half the capacity (a toy)."""

    @register_l3_model("test-half")
    def half(cfg, capacity_pages, page_size):
        return HalfStore(capacity_pages // 2)

    try:
        c = RadixCache(CacheConfig(page_size=4, capacity_tokens=64, tiers=TierConfig(
            hicache_ratio=2, l3=True, l3_tokens=400, l3_model="test-half")))
        assert type(c.hier.storage) is HalfStore and c.hier.storage.capacity_pages == 50
        assert validate_document({"l3_model": "test-half"}, SCHEMA["cache"], "s.yaml", "cache.")["l3_model"] == "test-half"
    finally:
        unregister_l3_model("test-half")
