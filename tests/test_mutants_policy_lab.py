"""Literature policies' sort keys by hand (cache_core/policies/): S3-FIFO's frequency classes
go up to 3, GDSF's cost per token counts the attention over the tokens before the node's start.
benchmarks/mutants_policy_lab.txt lists the mutants these tests kill."""
from helpers import drain, evict_one
from test_eviction_order import new_cache, put


def test_s3fifo_three_hits_and_four_hits_are_different_classes():
    cache = new_cache("s3fifo", 1)
    for _ in range(4):
        put(cache, "xxxx")  # class min(4 - 1, 3) = 3, created first
    for _ in range(3):
        put(cache, "yyyy")  # class 2
    assert drain(cache) == ["yyyy", "xxxx"]


def test_gdsf_cost_per_token_is_one_plus_the_mean_position_over_k():
    cache = new_cache("gdsf", 1)
    put(cache, "aaaabbbb")
    put(cache, "aaaacccc")  # b, c: tokens 4..8, 1 + 12 / 2K per token
    put(cache, "eeeeeeeeee")  # tokens 0..10: 1 + 10 / 2K, cheaper than b and c
    assert drain(cache) == ["eeeeeeeeee", "bbbb", "cccc", "aaaa"]


def test_sieve_a_node_first_ranked_after_its_children_left_counts_its_visits():
    cache = new_cache("sieve", 1)
    put(cache, "aaaabbbb")
    put(cache, "aaaacccc")  # the split's upper node aaaa: created now, visited below since
    assert [evict_one(cache), evict_one(cache)] == ["cccc", "bbbb"]  # b visited by the split's walk
    put(cache, "dddd")
    put(cache, "eeee")
    # aaaa, a leaf now, ranked for the first time: touched after its creation, so visited and
    # skipped once; d and e, new and unvisited, go first although created after it
    assert drain(cache) == ["dddd", "eeee", "aaaa"]
