"""The Mooncake store model's lease order and per-shard eviction by hand (cache_core/tiers/store.py,
cache_core/tiers/store_shards.py; docs/store_model.md): a renewed lease moves the object to the
young end, a lease expires at its timeout (Mooncake: now >= lease_timeout), each shard evicts
ceil(objects so far x target) - evicted so far, and a second pass takes the oldest candidates
left up to max(target / 2, used - watermark) of the pool. benchmarks/mutants_l3_store.txt lists
the mutants these tests kill."""
import numpy as np

from cache_core.tiers.store import MooncakeStore
from test_l3_store import FakeClock, held

SHARD1 = [1, 9, 10, 11]  # with shards=2 (checked below); every other key below 12 is in shard 0
SHARD0 = [0, 2, 3, 4, 5, 6, 7, 8]


def test_a_renewed_lease_moves_the_object_to_the_young_end_without_a_clock():
    s = MooncakeStore(10, high_watermark=0.5, eviction_ratio=0.2)
    s.put_many(list(range(5)))
    s.touch(np.arange(5))  # lease order 0 1 2 3 4
    s.touch(np.array([0]))  # renewed: 1 2 3 4 0
    assert list(s._keys) == [1, 2, 3, 4, 0]
    s.put_many([5])  # 0.6 > 0.5: n = ceil(6 x 0.2) = 2: the never-read 5, then the oldest lease, 1
    assert held(s) == [0, 2, 3, 4]


def test_a_renewed_lease_protects_the_object_until_its_new_timeout():
    s = MooncakeStore(10, high_watermark=0.5, eviction_ratio=0.2, lease_ttl_s=10.0)
    s.clock = clock = FakeClock()
    s.put_many(list(range(5)))
    s.touch(np.arange(5))  # leased until 10
    clock.t = 5.0
    s.touch(np.array([0]))  # renewed until 15: after 1..4 in lease order
    clock.t = 12.0
    assert s.expired() == 4
    s.put_many([5])  # n = min(1 never-read + 4 expired, 2) = 2: 5, then 1 (0 is still leased)
    assert held(s) == [0, 2, 3, 4]


def shard_store():
    s = MooncakeStore(20, high_watermark=0.55, eviction_ratio=0.2, shards=2, lease_ttl_s=10.0)
    assert [s.shard(k) for k in SHARD1] == [1] * 4 and [s.shard(k) for k in SHARD0] == [0] * 8
    return s


def test_per_shard_eviction_takes_the_second_pass_from_the_shards_with_candidates_left():
    """The walk starts at shard 1 (Random(0)); shard 0's objects are all under unexpired leases."""
    s = shard_store()
    s.clock = clock = FakeClock()
    s.put_many([1, 9, 10])
    for t, k in ((0.0, 1), (1.0, 9), (2.0, 10)):
        clock.t = t
        s.touch(np.array([k]))  # leases until 10, 11, 12
    clock.t = 5.0
    s.put_many(SHARD0)
    s.touch(np.array(SHARD0))  # leased until 15; 11 objects, 0.55: not above the watermark
    assert held(s) == sorted([1, 9, 10, *SHARD0]) and s.evicted_pages == 0
    clock.t = 10.0  # 1's lease expires (now >= timeout); 9's and 10's do not
    s.put_many([11])  # 12 objects, 0.6: target max(0.2, 0.6 - 0.55 + 0.2) = 0.25
    # shard 1 (11, 1 and the leased 9, 10): ceil(4 x 0.25) = 1: the never-read 11; shard 0
    # (12 so far): ceil(12 x 0.25) - 1 = 2 but no candidate; second pass: ceil(12 x
    # max(0.25 / 2, 0.05)) - 1 = 1 of the candidates left (1): 1 goes
    assert held(s) == sorted([9, 10, *SHARD0]) and s.evicted_pages == 2 and s.eviction_batches == 1


def test_per_shard_eviction_counts_what_the_earlier_shards_evicted():
    s = shard_store()  # no clock: leases only order eviction
    s.put_many([1, 9, 10])
    s.put_many(SHARD0)
    s.touch(np.array([1, 9, 10, 3, 7, 0, 2, 4, 5, 6, 8]))  # lease order
    s.put_many([11])  # 12 objects, 0.6: target 0.25
    # shard 1: ceil(4 x 0.25) = 1: the never-read 11; shard 0: ceil(12 x 0.25) - 1 = 2: 3 and 7;
    # second pass: ceil(12 x 0.125) - 3 < 0
    assert held(s) == [0, 1, 2, 4, 5, 6, 8, 9, 10] and s.evicted_pages == 3
