"""Exact eviction order of the FULL component under "lru", "lfu" and "fifo".

Trees are built with edges made of 4-token blocks ("aaaa", "bbbb", ...; one character =
one token) so that the same scenario is valid at page size 1 and page size 4. Nodes are
evicted one at a time with `cache.evict(1)` (which frees exactly one whole node) and the
victim is identified as the one node that stopped being `alive`.

Access semantics used below (cache.py / tree.py / eviction.py), SGLang 0.5.23's: every
insert call takes one tick and counts one hit on the nodes of its path (a new leaf gets a
fresh later tick and its first hit); every match call takes one tick and counts no hit;
LRU ranks leaves by tick, LFU by (hits, tick), FIFO by creation tick; ties fall to the
older node id.
"""
import uuid

import pytest

from cache_core import (CacheConfig, Policy, RadixCache, ReplayStepper, TokenSeq, make_policy,
                        policy_names, register_policy)
from cache_core import invariants

POLICIES = ["lru", "lfu", "fifo"]


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
from helpers import drain, edge, evict_one, shape, toks  # noqa: E402  (shared test helpers)


def new_cache(policy, page_size=1, capacity=256):
    return RadixCache(CacheConfig(page_size=page_size, capacity_tokens=capacity, policy=policy))


def put(cache, s: str, check: bool = True):
    """Insert s (page-aligned prefix) with freshly computed pages for all of it, without a
    match (one hit on every node of its path); duplicate pages and the partial tail page are freed;
    invariants.check afterwards."""
    P = cache.page_size
    seq = TokenSeq(toks(s))
    pages = cache.alloc(-(-len(s) // P))
    assert pages is not None
    res = cache.insert(seq, len(s) // P * P, pages, 0)
    if check:
        invariants.check(cache)
    return res


def touch(cache, s: str, times: int = 1) -> int:
    """`times` match calls (each one tick along the path, no hit); no lock."""
    for _ in range(times):
        m = cache.match(TokenSeq(toks(s)))
    return m.cached_tokens


# ---------------------------------------------------------------------------------------
# policy orders on flat trees
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("policy,want", [
    # insert order b, c, a; then accesses c, c, a, b
    ("lru", ["cccccccc", "aaaaaaaa", "bbbbbbbb"]),  # by last access: c(older) a b
    ("lfu", ["cccccccc", "aaaaaaaa", "bbbbbbbb"]),  # one hit each (the insert): tick order
    ("fifo", ["bbbbbbbb", "cccccccc", "aaaaaaaa"]),  # by creation, accesses ignored
])
def test_flat_order_per_policy(policy, want, page_size):
    cache = new_cache(policy, page_size, capacity=64)
    for s in ("bbbbbbbb", "cccccccc", "aaaaaaaa"):
        put(cache, s)
    assert touch(cache, "cccccccc", 2) == 8
    assert touch(cache, "aaaaaaaa") == 8
    assert touch(cache, "bbbbbbbb") == 8
    assert cache.full.evictable_tokens == 24
    assert drain(cache) == want
    assert shape(cache) == {} and cache.num_nodes == 1
    assert cache.free_tokens == 64
    assert cache.full.evicted_nodes == 3 and cache.full.evicted_tokens == 24
    invariants.check(cache)


def test_lru_every_access_moves_a_leaf_to_the_back():
    cache = new_cache("lru")
    for s in ("aaaa", "bbbb", "cccc", "dddd"):
        put(cache, s)
    touch(cache, "aaaa")  # order now b c d a
    assert evict_one(cache) == "bbbb"
    touch(cache, "cccc")  # order now d a c
    touch(cache, "dddd")  # order now a c d
    assert drain(cache) == ["aaaa", "cccc", "dddd"]


def test_lru_insert_of_an_existing_key_refreshes_it():
    cache = new_cache("lru")
    for s in ("aaaa", "bbbb", "cccc"):
        put(cache, s)
    res = put(cache, "aaaa")  # nothing new: all 4 pages are duplicates and freed
    assert (res.prefix_tokens, res.freed_pages) == (4, 4)
    assert drain(cache) == ["bbbb", "cccc", "aaaa"]


def test_lfu_tie_break_by_tick_then_hits_dominate():
    cache = new_cache("lfu")
    put(cache, "xxxx")  # lower id
    put(cache, "yyyy")
    touch(cache, "yyyy")
    touch(cache, "xxxx")  # both 1 hit (their inserts); y's tick is older although y's id is newer
    assert [n.hits for n in cache.tree.root.children.values()] == [1, 1]
    assert evict_one(cache) == "yyyy"

    cache = new_cache("lfu")
    put(cache, "xxxx")
    put(cache, "yyyy")
    put(cache, "yyyy")
    touch(cache, "xxxx")  # x: 1 hit, newest tick; y: 2 hits -> x goes first anyway
    assert drain(cache) == ["xxxx", "yyyy"]

    cache = new_cache("lfu")  # matches count no hit: q, r (1 hit each) before p (2)
    for s in ("pppp", "qqqq", "rrrr"):
        put(cache, s)
    touch(cache, "qqqq", 3)
    put(cache, "pppp")  # a second insert counts a second hit
    assert drain(cache) == ["rrrr", "qqqq", "pppp"]


def test_fifo_ignores_accesses_but_lru_does_not():
    def run(policy):
        cache = new_cache(policy)
        for s in ("aaaa", "bbbb", "cccc"):
            put(cache, s)
        touch(cache, "aaaa", 5)
        touch(cache, "cccc", 3)
        put(cache, "aaaa")
        return drain(cache)

    assert run("fifo") == ["aaaa", "bbbb", "cccc"]
    assert run("lru") == ["bbbb", "cccc", "aaaa"]
    assert run("lfu") == ["bbbb", "cccc", "aaaa"]


# ---------------------------------------------------------------------------------------
# parents: a candidate only once their last child is gone
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("page_size", [1, 4])
def test_fifo_oldest_parent_waits_for_its_children(page_size):
    cache = new_cache("fifo", page_size)
    put(cache, "aaaa")  # P: the oldest node of all
    put(cache, "zzzz")
    put(cache, "aaaabbbb")  # X below P (no split: P is a whole prefix)
    put(cache, "aaaacccc")  # Y below P
    assert shape(cache) == {"aaaa": {"bbbb": {}, "cccc": {}}, "zzzz": {}}
    assert evict_one(cache) == "zzzz"
    assert evict_one(cache) == "bbbb"
    assert shape(cache) == {"aaaa": {"cccc": {}}}  # P still there: it has a child
    assert evict_one(cache) == "cccc"
    assert evict_one(cache) == "aaaa"
    assert evict_one(cache) is None


@pytest.mark.parametrize("page_size", [1, 4])
def test_fifo_split_upper_is_newer_than_its_lower(page_size):
    cache = new_cache("fifo", page_size)
    put(cache, "aaaabbbb")  # X
    put(cache, "zzzz")  # Z
    put(cache, "aaaacccc")  # splits X: upper "aaaa" is created now, after Z; then Y
    assert shape(cache) == {"aaaa": {"bbbb": {}, "cccc": {}}, "zzzz": {}}
    # X's lower half keeps X's creation: it goes first; the upper waits for Y
    assert drain(cache) == ["bbbb", "zzzz", "cccc", "aaaa"]


@pytest.mark.parametrize("page_size", [1, 4])
def test_lru_parent_goes_right_after_its_last_child(page_size):
    cache = new_cache("lru", page_size)
    put(cache, "aaaa")
    put(cache, "aaaabbbb")
    put(cache, "aaaacccc")
    put(cache, "zzzz")
    # bbbb oldest leaf; then cccc; then P (its last visit, cccc's insert, predates zzzz)
    assert evict_one(cache) == "bbbb"
    assert shape(cache) == {"aaaa": {"cccc": {}}, "zzzz": {}}
    assert drain(cache) == ["cccc", "aaaa", "zzzz"]

    cache = new_cache("lru", page_size)
    put(cache, "aaaa")
    put(cache, "aaaabbbb")
    put(cache, "aaaacccc")
    put(cache, "zzzz")
    touch(cache, "aaaa")  # a match that ends at P refreshes P (and only its path)
    assert drain(cache) == ["bbbb", "cccc", "zzzz", "aaaa"]


def put_n(cache, s: str, times: int) -> None:
    for _ in range(times):
        put(cache, s)


def test_lfu_parent_counts_every_hit_through_it():
    """A parent's hits are all insert calls whose path covered it - those that ended at it
    and those that went on into its children - whichever way the cache stores them."""
    cache = new_cache("lfu")
    put(cache, "aaaabbbb")  # X 1 (P 1)
    put(cache, "aaaacccc")  # splits: P = "aaaa" 2, X = "bbbb" 1, Y = "cccc" 1
    put(cache, "zzzz")  # Z 1
    put(cache, "yyyy")  # W 1
    put_n(cache, "aaaabbbb", 2)  # X 3 (P 4)
    touch(cache, "aaaacccc", 3)  # matches count nothing: Y stays at 1
    put(cache, "aaaa")  # P 5
    put_n(cache, "yyyy", 4)  # W 5
    put_n(cache, "zzzz", 5)  # Z 6
    assert evict_one(cache) == "cccc"  # 1 hit
    assert evict_one(cache) == "bbbb"  # 3 hits
    # P is now a leaf with 5 hits, older tick than W (5): P, then W, then Z (6)
    assert drain(cache) == ["aaaa", "yyyy", "zzzz"]


def test_lfu_hits_survive_a_split():
    cache = new_cache("lfu")
    put_n(cache, "aaaabbbb", 4)  # 4 hits through the whole edge
    put(cache, "aaaacccc")  # split: P = "aaaa" 4 + 1, X = "bbbb" 4, Y = "cccc" 1
    put_n(cache, "zzzz", 2)  # Z 2
    put_n(cache, "wwww", 6)  # W 6, inserted after everything under P
    # Y(1), Z(2), X(4), then P (5 hits), then W (6)
    assert drain(cache) == ["cccc", "zzzz", "bbbb", "aaaa", "wwww"]


def test_lfu_parent_ranks_by_the_last_access_anywhere_below_it():
    """Once a parent is a leaf, its tick is the last call that visited it - including calls
    that went on into its (now evicted) children - so an LFU tie with another leaf is broken
    by that latest access."""
    cache = new_cache("lfu")
    put(cache, "aaaabbbb")
    put(cache, "aaaacccc")  # P = "aaaa" 2 -> {X = "bbbb" 1, Y = "cccc" 1}
    put_n(cache, "wwww", 3)  # W: 3 hits
    put(cache, "aaaabbbb")  # X: 2 hits, the newest access; P: 3 hits, last visited now
    assert evict_one(cache) == "cccc"  # 1 hit
    assert evict_one(cache) == "bbbb"  # 2 hits
    # P and W both have 3 hits; W's last access is older than P's (via X)
    assert drain(cache) == ["wwww", "aaaa"]


# ---------------------------------------------------------------------------------------
# locks
# ---------------------------------------------------------------------------------------
def _locked_tree(policy, page_size):
    cache = new_cache(policy, page_size, capacity=64)
    put(cache, "aaaabbbb")
    put(cache, "aaaacccc")
    put(cache, "zzzz")
    assert shape(cache) == {"aaaa": {"bbbb": {}, "cccc": {}}, "zzzz": {}}
    return cache


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("policy", POLICIES)
def test_locked_path_is_protected_and_never_evicted(policy, page_size):
    cache = _locked_tree(policy, page_size)
    m = cache.match(TokenSeq(toks("aaaabbbb")))
    assert m.cached_tokens == 8
    cache.lock(m)
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (8, 8)
    locks = {edge(n): n.lock_ref for n in cache.tree.iter_nodes() if n is not cache.tree.root}
    assert locks == {"aaaa": 1, "bbbb": 1, "cccc": 0, "zzzz": 0}

    # asking for far more than is evictable frees exactly the unlocked leaves and stops
    assert cache.evict(10**6) == 8
    assert shape(cache) == {"aaaa": {"bbbb": {}}}
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (8, 0)
    assert cache.free_tokens == 64 - 8
    assert cache.evict(1) == 0 and cache.evict(10**6) == 0
    assert shape(cache) == {"aaaa": {"bbbb": {}}}

    cache.unlock(m)
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (0, 8)
    invariants.check(cache)
    # the leaf skipped while locked is offered again on unlock; its parent follows it
    assert drain(cache) == ["bbbb", "aaaa"]
    assert cache.free_tokens == 64 and cache.full.evicted_tokens == 16
    invariants.check(cache)


@pytest.mark.parametrize("policy", POLICIES)
def test_locked_oldest_leaf_is_skipped_in_order(policy):
    cache = new_cache(policy)
    for s in ("aaaa", "bbbb", "cccc"):
        put(cache, s)
    m = cache.match(TokenSeq(toks("aaaa")))
    cache.lock(m)
    assert evict_one(cache) == "bbbb"  # a is first in every policy's order but locked
    assert evict_one(cache) == "cccc"
    assert evict_one(cache) is None
    cache.unlock(m)
    assert evict_one(cache) == "aaaa"
    invariants.check(cache)


@pytest.mark.parametrize("page_size", [1, 4])
def test_lock_ending_at_an_internal_node(page_size):
    """A match that ends exactly at an internal node locks that node and its ancestors
    only; its children stay evictable; once they are gone the node is a locked leaf, and
    it becomes a candidate again when unlocked."""
    cache = _locked_tree("lru", page_size)
    m = cache.match(TokenSeq(toks("aaaa")))
    cache.lock(m)
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (4, 12)
    assert cache.evict(10**6) == 12
    assert shape(cache) == {"aaaa": {}}
    assert cache.evict(10**6) == 0
    cache.unlock(m)
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (0, 4)
    assert drain(cache) == ["aaaa"]
    assert cache.num_nodes == 1


@pytest.mark.parametrize("page_size", [1, 4])
def test_lock_inside_an_edge_protects_only_the_upper_half(page_size):
    cache = new_cache("lru", page_size)
    put(cache, "aaaabbbbcccc")
    put(cache, "zzzz")
    m = cache.match(TokenSeq(toks("aaaabbbbxxxx")))  # splits after 8 tokens
    assert m.cached_tokens == 8
    cache.lock(m)
    assert shape(cache) == {"aaaabbbb": {"cccc": {}}, "zzzz": {}}
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (8, 8)
    # the lower half "cccc" was visited by the match (newest) but is not locked
    assert drain(cache) == ["zzzz", "cccc"]
    assert shape(cache) == {"aaaabbbb": {}}
    cache.unlock(m)
    assert drain(cache) == ["aaaabbbb"]


@pytest.mark.parametrize("page_size", [1, 4])
def test_split_of_a_locked_node_keeps_both_halves_locked(page_size):
    cache = new_cache("lru", page_size, capacity=64)
    put(cache, "aaaabbbbcccc")
    put(cache, "zzzz")
    m = cache.match(TokenSeq(toks("aaaabbbbcccc")))
    cache.lock(m)
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (12, 4)
    put(cache, "aaaaxxxx")  # splits the locked edge after "aaaa"
    assert shape(cache) == {"aaaa": {"bbbbcccc": {}, "xxxx": {}}, "zzzz": {}}
    locks = {edge(n): n.lock_ref for n in cache.tree.iter_nodes() if n is not cache.tree.root}
    assert locks == {"aaaa": 1, "bbbbcccc": 1, "xxxx": 0, "zzzz": 0}
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (12, 8)
    assert cache.evict(10**6) == 8
    assert shape(cache) == {"aaaa": {"bbbbcccc": {}}}
    cache.unlock(m)
    locks = {edge(n): n.lock_ref for n in cache.tree.iter_nodes() if n is not cache.tree.root}
    assert locks == {"aaaa": 0, "bbbbcccc": 0}
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (0, 12)
    invariants.check(cache)
    assert drain(cache) == ["bbbbcccc", "aaaa"]


def test_lock_counts_stack_and_unlock_reoffers_the_leaf_only_at_zero():
    cache = _locked_tree("lru", 1)
    m1 = cache.match(TokenSeq(toks("aaaabbbb")))
    m2 = cache.match(TokenSeq(toks("aaaabbbb")))
    m3 = cache.match(TokenSeq(toks("aaaacccc")))
    for m in (m1, m2, m3):
        cache.lock(m)
    locks = {edge(n): n.lock_ref for n in cache.tree.iter_nodes() if n is not cache.tree.root}
    assert locks == {"aaaa": 3, "bbbb": 2, "cccc": 1, "zzzz": 0}
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (12, 4)
    cache.unlock(m1)
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (12, 4)
    assert drain(cache) == ["zzzz"]
    cache.unlock(m3)  # cccc unlocked: evictable; bbbb still held by m2
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (8, 4)
    assert drain(cache) == ["cccc"]
    cache.unlock(m2)
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (0, 8)
    assert drain(cache) == ["bbbb", "aaaa"]
    invariants.check(cache)


# ---------------------------------------------------------------------------------------
# amounts: whole nodes, and "more than evictable" stops
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", POLICIES)
def test_evict_frees_whole_nodes_until_enough(policy):
    cache = new_cache(policy, capacity=64)
    for s in ("aaaa", "bbbb", "cccccccc", "dddddddddddd"):  # 4, 4, 8, 12 tokens
        put(cache, s)
    assert cache.free_tokens == 64 - 28
    assert cache.evict(0) == 0 and cache.evict(-5) == 0 and cache.num_nodes == 5
    # no accesses: the same order (insert order) under all three policies
    assert cache.evict(1) == 4  # "aaaa"
    assert cache.evict(5) == 4 + 8  # "bbbb" is not enough, "cccccccc" completes it
    assert shape(cache) == {"dddddddddddd": {}}
    assert cache.evict(12) == 12
    assert cache.free_tokens == 64 and cache.full.evicted_nodes == 4


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("policy", POLICIES)
def test_evict_more_than_evictable_frees_everything_and_stops(policy, page_size):
    cache = new_cache(policy, page_size, capacity=64)
    put(cache, "aaaabbbb")
    put(cache, "aaaacccc")
    put(cache, "aaaaccccdddd")
    put(cache, "zzzz")
    assert cache.cached_tokens_total == 20 and cache.num_nodes == 6
    assert cache.evict(10**9) == 20
    assert shape(cache) == {} and cache.num_nodes == 1
    assert cache.full.evicted_nodes == 5 and cache.full.evicted_tokens == 20
    assert cache.free_tokens == 64
    assert (cache.full.protected_tokens, cache.full.evictable_tokens) == (0, 0)
    assert cache.evict(10**9) == 0
    invariants.check(cache)


# ---------------------------------------------------------------------------------------
# page size 4 specifics
# ---------------------------------------------------------------------------------------
def test_page4_splits_on_page_boundaries_and_frees_tails():
    cache = new_cache("lru", page_size=4, capacity=40)  # 10 pages
    res = put(cache, "aaaabbbbcc")  # 10 tokens: 2 whole pages kept, tail page freed
    assert (res.prefix_tokens, res.freed_pages) == (0, 1)
    assert shape(cache) == {"aaaabbbb": {}}
    assert cache.free_tokens == 40 - 8
    res = put(cache, "aaaabbxxyyyy")  # diverges at token 6: cut back to the page at 4
    assert (res.prefix_tokens, res.freed_pages) == (4, 1)
    assert shape(cache) == {"aaaa": {"bbbb": {}, "bbxxyyyy": {}}}
    assert cache.free_tokens == 40 - 16
    assert touch(cache, "aaaabbbz") == 4  # a match is cut to whole pages too
    assert touch(cache, "aaaabbbbc") == 8
    # LRU: "bbxxyyyy" is now the oldest leaf; one evict(1) frees its 2 pages
    assert cache.evict(1) == 8
    assert shape(cache) == {"aaaa": {"bbbb": {}}}
    assert drain(cache) == ["bbbb", "aaaa"]
    assert cache.free_tokens == 40
    invariants.check(cache)


def test_page4_capacity_rounds_down_to_whole_pages():
    cache = new_cache("lru", page_size=4, capacity=18)
    assert cache.config.usable_tokens == 16 and cache.free_tokens == 16
    put(cache, "aaaabbbb")
    put(cache, "cccc")
    assert cache.free_tokens == 4
    assert cache.alloc(2) is None  # no eviction inside alloc
    assert cache.evict(4) == 8  # the oldest leaf is two pages
    assert cache.free_tokens == 12 and shape(cache) == {"cccc": {}}


# ---------------------------------------------------------------------------------------
# custom policies: registered by name, used by ReplayStepper with no change to the core
# ---------------------------------------------------------------------------------------
def test_custom_policy_in_replay_stepper():
    name = f"test-largest-first-{uuid.uuid4().hex[:8]}"

    @register_policy(name)
    class LargestFirst(Policy):
        """Biggest leaf first (a size-based policy, unlike any built-in one)."""

        def key(self, node):
            return -node.num_tokens

    assert name in policy_names() and make_policy(name).name == name
    assert isinstance(make_policy(name), LargestFirst)
    with pytest.raises(ValueError):
        register_policy(name)(LargestFirst)

    def run(policy):
        cache = RadixCache(CacheConfig(page_size=1, capacity_tokens=20, policy=policy))
        stepper = ReplayStepper(cache)
        r = [stepper.step(toks("aaaaaa")), stepper.step(toks("bbbbbbbbbb")), stepper.step(toks("ccccccc"))]
        invariants.check(cache)
        return cache, r

    cache, r = run("lru")  # 16 used, 4 free, 7 needed: evict 3 -> the oldest leaf (6)
    assert [x.evicted_tokens for x in r] == [0, 0, 6]
    assert shape(cache) == {"bbbbbbbbbb": {}, "ccccccc": {}}
    assert cache.free_tokens == 3

    cache, r = run(name)  # the same need: the largest leaf (10) goes
    assert [x.evicted_tokens for x in r] == [0, 0, 10]
    assert shape(cache) == {"aaaaaa": {}, "ccccccc": {}}
    assert cache.free_tokens == 7
    assert cache.stats()["policy"] == name


def test_custom_constant_policy_falls_back_to_node_id():
    name = f"test-constant-{uuid.uuid4().hex[:8]}"

    @register_policy(name)
    class Constant(Policy):
        def key(self, node):
            return 0

    cache = new_cache(name)
    for s in ("bbbb", "aaaa", "cccc"):
        put(cache, s)
    touch(cache, "cccc")
    touch(cache, "aaaa")
    touch(cache, "bbbb")
    put(cache, "aaaaxxxx")  # "xxxx" is the newest node
    assert drain(cache) == ["bbbb", "cccc", "xxxx", "aaaa"]


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError):
        CacheConfig(policy="no-such-policy")
    assert {"lru", "lfu", "fifo"} <= set(policy_names())


class _Moving(Policy):
    """A test-only volatile policy: the key is an attribute the test moves without re-offering."""

    volatile = True

    def key(self, node):
        return node.k


class _Item:
    def __init__(self, i, k):
        self.id, self.k, self.alive = i, k, True


def test_compaction_keeps_a_volatile_candidate_whose_key_moved_on_its_own():
    """A volatile queue re-ranks a popped entry whose key moved; compaction must not drop such a
    candidate (it would never be offered again and never evicted). 5,000 stale re-offers of
    node 0 trigger compaction while node 1's key has moved from 1 to 10 on its own: every live
    candidate still pops, in key order."""
    from cache_core.eviction import EvictionQueue

    q = EvictionQueue(_Moving(), lambda n: n.alive)
    a, b, c = _Item(0, 0), _Item(1, 1), _Item(2, 5)
    for n in (a, b, c):
        q.push(n)
    b.k = 10  # moved on its own: no push
    for k in range(1, 5_001):  # a's key moves with re-offers: 5,000 stale entries
        a.k = k
        q.push(a)
    q.maybe_compact(3)
    assert len(q) <= 3
    popped = []
    while (n := q.pop()) is not None:
        popped.append((n.id, n.k))
        n.alive = False
    assert popped == [(2, 5), (1, 10), (0, 5_000)]
