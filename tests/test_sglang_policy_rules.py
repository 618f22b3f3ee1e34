"""SGLang 0.5.23's eviction rules, one pinned small tree each (they always run; the harness
comparison against SGLang itself is tests/test_sglang_reference.py).

SGLang's RadixCache (mem_cache/radix_cache.py, evict_policy.py) ranks evictable leaves by
  lru (last_access_time), lfu (hit_count, last_access_time), fifo (creation_time),
  mru (-last_access_time), filo (-creation_time), priority (priority, last_access_time),
  slru (hit_count >= 2, last_access_time),
and updates them as follows: a match or an insert sets the access time of every node it
walks through; a split creates the upper half (new creation and access time, the hit count
and priority of the node it was cut from); hits are counted at *insert* only, one on every
node of the path that ends past the request's `inserted_len` (the upper half of a split,
not the lower one; the new leaf too); a request's finish inserts prompt + output[:-1], then
the page-aligned prompt again with priority + 1 and no hits.

Each test below builds a sequence whose eviction order differs between that rule and the
obvious alternative (count at match; the lower half keeps a hit; a chunk counted twice; ...).
Edges are 4-token blocks, one character = one token (helpers.toks).
"""
import pytest

from cache_core import CacheConfig, RadixCache, ReplayStepper, TokenSeq, invariants
from helpers import drain, evict_one, toks


def new_cache(policy, page_size=1, capacity=256):
    return RadixCache(CacheConfig(page_size=page_size, capacity_tokens=capacity, policy=policy))


def put(cache, s: str, inserted_len: int = 0):
    """One insert of s with fresh pages for all of it (duplicates freed)."""
    pages = cache.alloc(len(s))
    kw = {"inserted_len": inserted_len} if inserted_len else {}
    res = cache.insert(TokenSeq(toks(s)), len(s), pages, 0, **kw)
    invariants.check(cache)
    return res


def match(cache, s: str, times: int = 1):
    for _ in range(times):
        cache.match(TokenSeq(toks(s)))


def test_lfu_counts_a_hit_at_insert_not_at_match():
    cache = new_cache("lfu")
    put(cache, "xxxx")
    put(cache, "yyyy")
    put(cache, "yyyy")  # y: 2 hits
    match(cache, "xxxx", 3)  # counted at match, x would have 3 and y would go first
    assert drain(cache) == ["xxxx", "yyyy"]


def test_lfu_split_gives_the_count_to_the_upper_half_only():
    cache = new_cache("lfu")
    put(cache, "zzzz")  # Z: 1 hit, the oldest tick
    put(cache, "wwww")
    put(cache, "wwww")  # W: 2 hits
    put(cache, "aaaabbbb")  # X: 1
    put(cache, "aaaacccc")  # split: P = "aaaa" 1 + 1, X (lower) keeps 1 and gets this call's tick, Y 1
    # X with an extra hit (2) would go after W; P (2 hits, newest tick) goes after W
    assert drain(cache) == ["zzzz", "bbbb", "cccc", "wwww", "aaaa"]


def test_lfu_a_split_in_a_match_counts_nothing():
    cache = new_cache("lfu")
    put(cache, "aaaabbbb")  # X: 1 hit
    put(cache, "wwww")  # W: 1 hit, newer than X
    match(cache, "aaaadddd")  # splits X into "aaaa" / "bbbb": no hit anywhere, X's tick now newest
    assert drain(cache) == ["wwww", "bbbb", "aaaa"]  # (1, older) before (1, newer)
    cache = new_cache("lfu")
    put(cache, "aaaabbbb")
    put(cache, "wwww")
    put(cache, "wwww")  # W: 2 hits
    match(cache, "aaaadddd", 3)
    assert drain(cache) == ["bbbb", "aaaa", "wwww"]


def test_lfu_a_chunked_request_counts_each_node_once():
    """SGLang's inserted_len: a request that inserted [0, 8) after its first chunk counts no
    second hit there when it inserts [0, 16)."""
    cache = new_cache("lfu")
    put(cache, "zzzz")
    put(cache, "zzzz")  # Z: 2 hits, the oldest tick
    put(cache, "aaaaaaaa")  # chunk 1: A = [0, 8) 1 hit
    put(cache, "aaaaaaaabbbb", inserted_len=8)  # chunk 2: B = [8, 12) 1 hit, A still 1
    assert evict_one(cache) == "bbbb"
    assert drain(cache) == ["aaaaaaaa", "zzzz"]  # A counted twice (2, newer) would go after Z


def test_slru_protects_nodes_inserted_twice_not_matched_twice():
    cache = new_cache("slru")
    put(cache, "xxxx")
    put(cache, "xxxx")  # x: 2 hits -> protected
    put(cache, "yyyy")  # y: 1 hit -> probation, although matched below
    match(cache, "yyyy", 5)
    assert drain(cache) == ["yyyy", "xxxx"]


@pytest.mark.parametrize("policy,want", [
    ("mru", ["bbbb", "cccc", "aaaa"]),  # newest access first: b (matched last), c, a
    ("filo", ["cccc", "bbbb", "aaaa"]),  # newest creation first, accesses ignored
    ("fifo", ["aaaa", "bbbb", "cccc"]),
    ("lru", ["aaaa", "cccc", "bbbb"]),
])
def test_access_and_creation_orders(policy, want):
    cache = new_cache(policy)
    for s in ("aaaa", "bbbb", "cccc"):
        put(cache, s)
    match(cache, "bbbb")
    assert drain(cache) == want


def test_filo_a_split_upper_half_is_created_at_the_split():
    cache = new_cache("filo")
    put(cache, "aaaabbbb")
    put(cache, "zzzz")
    match(cache, "aaaacccc")  # split: "aaaa" created now, "bbbb" keeps its creation
    # leaves first: z (newer than "bbbb"), "bbbb"; then "aaaa", the newest node of all
    assert drain(cache) == ["zzzz", "bbbb", "aaaa"]


def test_priority_the_prompt_outlives_its_output_tail():
    """The finish inserts prompt + output[:-1] at the request's priority and the prompt
    again at priority + 1: a request's output tail goes before any prompt, even a prompt
    older than it."""
    cache = new_cache("priority", page_size=4, capacity=64)
    stepper = ReplayStepper(cache)
    stepper.step(toks("aaaaaaaa"), toks("ppppq"))  # A = "aaaaaaaa" (1) -> "pppp" (0)
    stepper.step(toks("bbbbbbbb"), toks("rrrrs"))  # B = "bbbbbbbb" (1) -> "rrrr" (0)
    assert drain(cache) == ["pppp", "rrrr", "aaaaaaaa", "bbbbbbbb"]


def test_priority_is_the_highest_of_the_requests_on_the_path():
    cache = new_cache("priority", page_size=4, capacity=64)
    stepper = ReplayStepper(cache)
    stepper.step(toks("aaaa"), toks("pppq"), priority=3)  # prompt-only page: one insert, priority 3
    stepper.step(toks("bbbb"), toks("rrrs"), priority=1)
    stepper.step(toks("cccc"), toks("ssst"), priority=2)
    assert drain(cache) == ["bbbb", "cccc", "aaaa"]


def test_engine_chunked_prefill_counts_each_node_once():
    """The engine inserts a chunked request after every chunk (SGLang's cache_unfinished_req)
    and passes what it inserted before as inserted_len: after 4 chunks and the finish every
    node of the path holds exactly 1 hit (counted again per chunk: 4, 3, 2, 1)."""
    import numpy as np
    import simpy

    from cache_core.engine_types import EngineConfig, EngineRequest
    from scenarios.presets import get_hardware
    from sim.cost import RooflineCostModel
    from sim.simulator import build, timed_arrivals

    env = simpy.Environment()
    cache = RadixCache(CacheConfig(page_size=16, capacity_tokens=10_000, policy="lfu"), record_actions=True)
    hw = get_hardware("h200x1")
    engine = build(env, cache, EngineConfig(max_running_requests=1, chunked_prefill_tokens=256),
                   RooflineCostModel("qwen3-32b", "h200x1", 1), hw)
    prompt = np.arange(1000, dtype=np.int64)
    seq = TokenSeq(np.concatenate([prompt, [-1, -2]]))
    r = EngineRequest(rid=0, session_id=None, prompt=prompt, output_length=3, arrival_s=0.0, seq=seq)
    env.process(timed_arrivals(env, engine, [(0.0, r)]))
    env.process(engine.loop())
    env.run()
    ends, hits = [], []
    while cache.num_nodes > 1:  # the path, deepest first: each node's hits once it is the leaf
        leaf = next(n for n in cache.tree.iter_nodes() if not n.children)
        ends.append(leaf.end)
        hits.append(leaf.hits)
        cache.evict(1)
    assert ends == [992, 768, 512, 256]
    assert hits == [1, 1, 1, 1]


@pytest.fixture
def tlru_8_0():
    """SGLang's tlru with threshold 8 and next_prompt_estimate 0 tokens, as policy 'tlru-8-0'."""
    from cache_core import register_policy
    from cache_core.eviction import _REGISTRY
    from cache_core.policies.tlru import TLRU

    register_policy("tlru-8-0")(TLRU.with_params(8, 0))
    yield "tlru-8-0"
    _REGISTRY._classes.pop("tlru-8-0")


def test_tlru_tel_safe_leaves_first_and_the_branch_keeps_its_high_water_depth(tlru_8_0):
    """TLRUStrategy: budget = max(history + Q - T, 0) with T = 8, Q = 0; a leaf is TEL-safe (key
    -1, before every other) when its start >= budget; LRU within each class. history is the
    deepest end ever created under the node and does not shrink when its tail goes.
      E "eeeeffffgggg"  [0, 12)  history 12, budget 4, start 0: not safe (the oldest leaf)
      X "aaaabbbbcccc", then "aaaabbbbdddd" splits it: U "aaaabbbb" [0, 8) (history 12),
        "cccc" and "dddd" [8, 12): safe (8 >= 4)
      Z "zzzz", Y "yyyy" [0, 4): history 4, budget 0: safe
    Safe leaves by access: cccc, dddd, zzzz, yyyy; then U is a leaf with history 12 (not its
    end 8): budget 4 > start 0, not safe, after yyyy; E (older) before U.
    With history = the node's end U would be safe and go before zzzz; LRU: E first."""
    cache = new_cache(tlru_8_0)
    for s in ("eeeeffffgggg", "aaaabbbbcccc", "aaaabbbbdddd", "zzzz", "yyyy"):
        put(cache, s)
    assert drain(cache) == ["cccc", "dddd", "zzzz", "yyyy", "eeeeffffgggg", "aaaabbbb"]
    lru = new_cache("lru")
    for s in ("eeeeffffgggg", "aaaabbbbcccc", "aaaabbbbdddd", "zzzz", "yyyy"):
        put(lru, s)
    assert drain(lru) == ["eeeeffffgggg", "cccc", "dddd", "aaaabbbb", "zzzz", "yyyy"]
