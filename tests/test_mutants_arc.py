"""ARC's adaptation by hand (cache_core/policies/arc.py; Megiddo and Modha, FAST 2003, Fig. 4):
the step of p on a ghost hit is max(|B2| / |B1|, 1) (B1 hit) or max(|B1| / |B2|, 1) (B2 hit)
times the node's pages, p stays in [0, c], each ghost list is trimmed to c pages (c: what the
cache held before the eviction), and a node first ranked with two inserts is in T2.
Page size 4 and 4-token blocks: every node is one page. benchmarks/mutants_arc.txt lists the
mutants these tests kill."""
from cache_core.policies.arc import T1, T2
from helpers import drain, evict_one
from test_eviction_order import new_cache, put


def state(cache) -> tuple:
    """(p, |T1|, |T2|, |B1|, |B2|, victim list) in pages."""
    pol = cache.policy
    return pol.p, pol.size[T1], pol.size[T2], pol.ghost_pages[T1], pol.ghost_pages[T2], pol.victim


def arc_cache(twice: str, once: str):
    """An `arc` cache with each block of `twice` inserted twice (T2), then each of `once` (T1)."""
    cache = new_cache("arc", 4)
    for s in twice:
        put(cache, s * 4)
        put(cache, s * 4)
    for s in once:
        put(cache, s * 4)
    return cache


def test_arc_ghosts_are_trimmed_to_c_and_a_b2_hit_steps_by_b1_over_b2():
    cache = arc_cache("a", "bcdefgh")
    assert state(cache) == (0, 7, 1, 0, 0, T1)
    assert [evict_one(cache) for _ in range(5)] == ["bbbb", "cccc", "dddd", "eeee", "ffff"]
    # c before each eviction 8, 7, 6, 5, 4: at f's, B1 (b c d e f) is trimmed to 4 (b goes)
    assert state(cache) == (0, 2, 1, 4, 0, T1)
    put(cache, "bbbb")  # trimmed: a miss, a new T1 node
    assert state(cache) == (0, 3, 1, 4, 0, T1)
    assert evict_one(cache) == "gggg"  # c = 4 again: B1 (c d e f g) trimmed to d e f g
    assert state(cache) == (0, 2, 1, 4, 0, T1)
    put(cache, "dddd")  # B1 hit: p = min(0 + max(0 / 4, 1) x 1, c) = 1
    assert state(cache) == (1, 2, 2, 3, 0, T1)
    put(cache, "eeee")  # B1 hit: p = min(1 + 1, 2 + 2) = 2; |T1| = 2 = p: T2 is the victim list
    assert state(cache) == (2, 2, 3, 2, 0, T2)
    assert evict_one(cache) == "aaaa"  # T2's LRU; B2 = {a}
    assert state(cache) == (2, 2, 2, 2, 1, T2)
    put(cache, "aaaa")  # B2 hit: p = max(2 - max(|B1| 2 / |B2| 1, 1) x 1, 0) = 0
    assert state(cache) == (0, 2, 3, 2, 0, T1)
    assert drain(cache) == ["hhhh", "bbbb", "dddd", "eeee", "aaaa"]


def test_arc_a_b1_hit_steps_by_b2_over_b1():
    cache = arc_cache("abx", "")
    assert [evict_one(cache) for _ in range(2)] == ["aaaa", "bbbb"]  # T1 empty: from T2
    for s in "cdef":
        put(cache, s * 4)
    assert evict_one(cache) == "cccc"
    assert state(cache) == (0, 3, 1, 1, 2, T1)
    put(cache, "cccc")  # B1 hit: p = min(0 + max(|B2| 2 / |B1| 1, 1) x 1, c = 4) = 2
    assert state(cache) == (2, 3, 2, 0, 2, T1)
    # |T1| 3 > p: d; then |T1| = 2 = p: T2 by LRU (x, c); then T1 by LRU
    assert drain(cache) == ["dddd", "xxxx", "cccc", "eeee", "ffff"]


def test_arc_p_is_capped_at_c_on_a_b1_hit():
    cache = arc_cache("abx", "c")
    assert [evict_one(cache) for _ in range(3)] == ["cccc", "aaaa", "bbbb"]
    assert state(cache) == (0, 0, 1, 1, 2, T2)
    put(cache, "cccc")  # B1 hit: 0 + max(2 / 1, 1) x 1 = 2, capped at c = |T1| + |T2| = 1
    assert state(cache) == (1, 0, 2, 0, 2, T2)
    put(cache, "dddd")
    put(cache, "eeee")
    assert state(cache)[0] == 1 and state(cache)[-1] == T1  # |T1| 2 > p = 1
    assert drain(cache) == ["dddd", "xxxx", "cccc", "eeee"]


def test_arc_p_is_floored_at_0_on_a_b2_hit():
    cache = arc_cache("abx", "c")
    assert [evict_one(cache) for _ in range(3)] == ["cccc", "aaaa", "bbbb"]
    put(cache, "cccc")  # p = 1 (previous test)
    assert evict_one(cache) == "xxxx"  # T1 empty: T2's LRU; B2 = {a b x} trimmed to c = 2: {b x}
    assert state(cache) == (1, 0, 1, 0, 2, T2)
    put(cache, "xxxx")  # B2 hit: max(1 - max(0 / 2, 1) x 1, 0) = 0
    assert state(cache) == (0, 0, 2, 0, 1, T2)
    put(cache, "bbbb")  # B2 hit again: max(0 - 1, 0) = 0, never below
    assert state(cache)[0] == 0


def test_arc_an_internal_node_first_ranked_after_two_inserts_is_in_t2():
    cache = new_cache("arc", 4)
    put(cache, "aaaabbbb")
    put(cache, "aaaacccc")  # aaaa: an internal node with two inserts (hits 2)
    put(cache, "dddd")
    # b, c: T1 by LRU; aaaa then becomes a leaf, ranked for the first time: T2, after d
    assert drain(cache) == ["bbbb", "cccc", "dddd", "aaaa"]
