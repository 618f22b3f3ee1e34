"""Exact eviction orders of the literature policies (cache_core/policies/), on small trees
as tests/test_eviction_order.py builds them (4-token blocks: valid at page sizes 1 and 4),
each next to the order a built-in policy gives on the same accesses."""
import pytest

from cache_core import make_policy, policy_names
from helpers import drain, evict_one
from test_eviction_order import new_cache, put, touch

PAGE_SIZES = pytest.mark.parametrize("page_size", [1, 4])


@PAGE_SIZES
def test_sieve_skips_visited_leaves_once_in_insertion_order(page_size):
    def run(policy):
        cache = new_cache(policy, page_size)
        for s in ("aaaa", "bbbb", "cccc", "dddd"):
            put(cache, s)
        touch(cache, "dddd")
        touch(cache, "bbbb")
        return drain(cache)

    assert run("sieve") == ["aaaa", "cccc", "bbbb", "dddd"]  # unvisited by creation, then visited
    assert run("lru") == ["aaaa", "cccc", "dddd", "bbbb"]


@PAGE_SIZES
def test_sieve_hand_stays_where_it_evicted(page_size):
    def run(policy):
        cache = new_cache(policy, page_size)
        for s in ("aaaa", "bbbb", "cccc"):
            put(cache, s)
        touch(cache, "aaaa")  # a visited: the hand clears it and takes b
        first = evict_one(cache)
        put(cache, "dddd")  # new, ahead of the hand in this lap; a comes back only next lap
        return [first] + drain(cache)

    assert run("sieve") == ["bbbb", "cccc", "dddd", "aaaa"]
    assert run("lru") == ["bbbb", "cccc", "aaaa", "dddd"]


@PAGE_SIZES
def test_sieve_a_leaf_accessed_after_the_hand_passed_it_waits_another_lap(page_size):
    cache = new_cache("sieve", page_size)
    for s in ("aaaa", "bbbb", "cccc"):
        put(cache, s)
    touch(cache, "aaaa")
    assert evict_one(cache) == "bbbb"  # hand passed a (cleared) in lap 0, stops at b
    touch(cache, "aaaa")  # visited again: next reached in lap 1, skipped, goes in lap 2
    put(cache, "dddd")
    assert cache.policy.hand[0] == 0
    assert drain(cache) == ["cccc", "dddd", "aaaa"]


@PAGE_SIZES
def test_s3fifo_one_hit_wonders_first_then_frequency_classes_in_fifo_order(page_size):
    def run(policy):
        cache = new_cache(policy, page_size)
        for s, inserts in (("aaaa", 1), ("bbbb", 2), ("cccc", 1), ("dddd", 5), ("eeee", 4)):
            for _ in range(inserts):
                put(cache, s)
        touch(cache, "cccc", 3)  # matches count no hit (SGLang): c stays a one-hit leaf
        return drain(cache)

    assert run("s3fifo") == ["aaaa", "cccc", "bbbb", "dddd", "eeee"]  # d, e: both in class 3
    assert run("lfu") == ["aaaa", "cccc", "bbbb", "eeee", "dddd"]


@PAGE_SIZES
def test_gdsf_deep_pages_are_worth_more_and_the_clock_ages(page_size):
    def run(policy):
        cache = new_cache(policy, page_size)
        put(cache, "bbbbbbbb")  # 8 tokens: cost per token 1 + 8 / 2K
        put(cache, "aaaa")  # 4 tokens: 1 + 4 / 2K, the cheapest to recompute per token
        first = evict_one(cache)
        put(cache, "cccc")  # H = clock (a's H) + 1 + 4 / 2K: above b's
        return [first] + drain(cache)

    assert run("gdsf") == ["aaaa", "bbbbbbbb", "cccc"]
    assert run("lru") == ["bbbbbbbb", "aaaa", "cccc"]


@PAGE_SIZES
def test_gdsf_frequency_outweighs_the_clock_for_a_while(page_size):
    cache = new_cache("gdsf", page_size)
    put(cache, "aaaa")
    put(cache, "bbbb")
    put(cache, "bbbb")
    put(cache, "bbbb")  # b: 3 hits
    assert evict_one(cache) == "aaaa"
    k = 1 + 4 / 65536
    assert cache.policy.clock == pytest.approx(k)
    put(cache, "cccc")  # H = 2k < b's 3k
    put(cache, "dddd")  # H = 2k
    assert drain(cache) == ["cccc", "dddd", "bbbb"]


def test_literature_policies_are_registered():
    for name in ("sieve", "s3fifo", "gdsf"):
        assert name in policy_names() and make_policy(name).name == name
