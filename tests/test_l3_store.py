"""The L3 store models (cache_core/store.py): Mooncake Store's watermark batch eviction, its
lease order (never-read objects first), failed puts on a full pool, the SSD tier below it, and
what they do to a request's hits (a lost middle page cuts the run; the SSD serves it)."""
from __future__ import annotations

import numpy as np
import pytest

from cache_core.store import MooncakeStore, StorageIndex
from cache_core.tiers import TierConfig
from test_tiers import ABC, A, Y, in_l3, keys_of, make, request


def held(store) -> list:
    return sorted(k for k in range(100) if store.in_memory(k))


def test_watermark_batch_eviction_evicts_exactly_the_oldest_objects():
    s = MooncakeStore(20)  # Mooncake's defaults: high watermark 0.90, eviction ratio 0.05
    s.put_many(list(range(18)))  # 0.90: not above the watermark
    assert len(s) == 18 and s.evicted_pages == 0 and s.eviction_batches == 0
    s.touch(np.array([0, 1, 5]))  # read: leased, so evicted after every never-read object
    s.put_many([18])  # 0.95 > 0.90: ceil(19 x max(0.05, 0.95 - 0.90 + 0.05)) = 2 objects
    assert s.eviction_batches == 1 and s.evicted_pages == 2
    assert held(s) == [0, 1, *range(4, 19)]  # 2 and 3: the oldest never read
    s.put_many([19, 20])  # 19 objects again: 2 more, never-read ones in put order (not 5)
    assert held(s) == [0, 1, 5, *range(7, 21)] and s.evicted_pages == 4


def test_read_objects_go_in_lease_order_once_no_never_read_object_is_left():
    s = MooncakeStore(10, high_watermark=0.5, eviction_ratio=0.2)
    s.put_many(list(range(5)))
    s.touch(np.array([3, 1, 4, 0, 2]))  # lease order: 3 1 4 0 2
    s.put_many([5])  # 0.6 > 0.5: ceil(6 x max(0.2, 0.6 - 0.5 + 0.2)) = 2: the new 5, then 3
    assert held(s) == [0, 1, 2, 4]


def test_a_put_on_a_full_pool_fails_and_wakes_a_batch_eviction():
    s = MooncakeStore(10, high_watermark=1.0, eviction_ratio=0.2)
    s.put_many(list(range(12)))  # 10 fit, 10 and 11 fail; then ceil(10 x 0.2) = 2 go
    assert s.rejected_puts == 2 and 10 not in s and 11 not in s
    assert held(s) == list(range(2, 10))


def test_a_present_key_is_not_put_again_its_lease_is_renewed():
    s = MooncakeStore(10, high_watermark=0.5, eviction_ratio=0.1)
    s.put_many([0, 1, 2, 3, 4])
    s.put_many([0, 5])  # 0 exists: leased (SGLang probes batch_is_exist before putting)
    assert held(s) == [0, 3, 4, 5]  # 0.6 > 0.5: ceil(6 x 0.2) = 2 never-read objects: 1, 2
    assert s.evicted_pages == 2


def test_replicas_share_the_pool():
    assert MooncakeStore(10, replicas=2).capacity_pages == 5


def cut_scenario(**store):
    """ABC stored (6 pages, never read), A read back from L3, then Y stored: 8 objects in an
    8-page pool (above the 0.90 watermark) evict 2."""
    c = make(l1=32, l2_tokens=32, l3=True, l3_tokens=32, min_prefetch_tokens=0, **store)
    request(c, ABC)
    c.evict(24)
    assert c.hier.evict_l2(24) == 24 and c.num_nodes == 1
    assert request(c, A).storage_tokens == 8
    request(c, Y)
    return c


@pytest.mark.parametrize("model,l3,cached", [
    ("prefix", [True] * 6, 24),  # LRU by put: 8 pages fit the 8-page pool, nothing goes
    ("mooncake", [True, True, False, False, True, True], 8),  # B (never read, oldest) goes: C is cut off
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
    assert st.stats() == {"l3_pages": 6, "l3_evicted_pages": 2, "l3_rejected_puts": 0,
                          "l3_eviction_batches": 1, "l3_ssd_pages": 2, "l3_ssd_evicted_pages": 0}
    m = request(c, ABC)
    assert (m.cached_tokens, m.device, m.storage_tokens) == (24, 8, 16)


def test_a_full_ssd_tier_drops_its_oldest_offload():
    c = cut_scenario(l3_model="mooncake", l3_ssd_tokens=4)  # 1 page: B's first page is pushed out
    assert in_l3(c, ABC) == [True, True, False, True, True, True]
    assert c.hier.storage.ssd_evicted_pages == 1
    assert request(c, ABC).cached_tokens == 8


def test_prefix_model_is_the_default_and_keeps_its_index():
    assert TierConfig().l3_model == "prefix"
    assert type(make(l2_tokens=8, l3=True).hier.storage) is StorageIndex


@pytest.mark.parametrize("bad,msg", [
    (dict(l3_model="lru"), "l3_model 'lru': expected one of prefix, mooncake"),
    (dict(l3_replicas=0), "l3_replicas must be an integer >= 1, got 0"),
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
                  l3_replicas=2, l3_ssd_tokens=65536)
    t = sc.cache.tiers
    assert (t.l3_model, t.l3_high_watermark, t.l3_eviction_ratio, t.l3_replicas, t.l3_ssd_tokens) == (
        "mooncake", 0.8, 0.1, 2, 65536)
    assert sc.doc["cache"]["l3_ssd_tokens"] == 65536


@pytest.mark.parametrize("cache,msg", [
    (dict(l3_tokens="1GiB", l3_model="lru"), "t.yaml: cache.l3_model: got 'lru'; expected one of prefix, mooncake"),
    (dict(l3_tokens="1GiB", l3_ssd_tokens=64), "t.yaml: cache.l3_ssd_tokens: an SSD tier needs an L3 with "
                                               "cache.l3_model mooncake; expected both"),
])
def test_bad_store_keys_are_one_line_scenario_errors(cache, msg):
    from scenarios.schema import ScenarioError

    with pytest.raises(ScenarioError) as e:
        scenario(**cache)
    assert str(e.value) == msg
