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
    for name in ("sieve", "s3fifo", "gdsf", "tier-lru", "session-next", "arc", "tail-lru"):
        assert name in policy_names() and make_policy(name).name == name


def l1_victims(cache, n: int) -> list[str]:
    """`n` times cache.evict(1): the edge of the device leaf each call evicted or demoted."""
    from cache_core import invariants
    from helpers import edge

    out = []
    for _ in range(n):
        on_l1 = {n: edge(n) for n in cache.tree.iter_nodes() if n.parent is not None and n.value is not None}
        cache.evict(1)
        invariants.check(cache)
        out += [e for node, e in on_l1.items() if not node.alive or node.value is None]
    return out


def test_tier_lru_demotes_backed_up_leaves_first():
    from cache_core import CacheConfig, RadixCache
    from cache_core.tiers import TierConfig

    def run(policy):
        cache = RadixCache(CacheConfig(page_size=1, capacity_tokens=64, policy=policy, tiers=TierConfig(
            hicache_ratio=2, write_policy="write_through_selective", write_through_threshold=2)))
        put(cache, "aaaa")
        put(cache, "bbbb")
        put(cache, "bbbb")  # second hit: backed up to L2
        put(cache, "cccc")
        assert [n.host is not None for n in cache.tree.root.children.values()] == [False, True, False]
        return l1_victims(cache, 3), cache.stats()["tiers"]["l1_demoted_tokens"]

    assert run("tier-lru") == (["bbbb", "aaaa", "cccc"], 4)  # b demoted (still on L2), then LRU
    assert run("lru") == (["aaaa", "bbbb", "cccc"], 4)


SESSION_REQUESTS = (("A", "aaaa"), ("B", "bbbb"), ("C", "cccc"), ("A", "aaaaxxxx"), ("B", "bbbbzzzz"),
                    ("A", "aaaaxxxxyyyy"))


def session_cache(policy):
    """Sessions A (arrives at 0, 3, 5), B (1, 4), C (2): each prompt extends the session's last
    one by 4 tokens (no output)."""
    from cache_core import ReplayStepper
    from helpers import toks

    cache = new_cache(policy)
    st = ReplayStepper(cache)
    for sid, prompt in SESSION_REQUESTS:
        st.step(toks(prompt), session_id=sid)
    return cache


def session_run(policy, close=None):
    cache = session_cache(policy)
    if close is not None:
        cache.close_session(close)
    return drain(cache)


def test_session_next_evicts_the_session_predicted_back_last_first():
    # A back at 5 + mean(3, 2), B at 4 + 3, C at 2 + 8/3 (one arrival: the mean gap of all sessions)
    assert {s: session_cache("session-next").policy.predicted(s) for s in "ABC"} == {"A": 7.5, "B": 7.0,
                                                                                     "C": 2 + 8 / 3}
    assert session_run("session-next") == ["yyyy", "xxxx", "aaaa", "zzzz", "bbbb", "cccc"]
    assert session_run("session") == ["cccc", "zzzz", "bbbb", "yyyy", "xxxx", "aaaa"]
    assert session_run("lru") == ["cccc", "zzzz", "bbbb", "yyyy", "xxxx", "aaaa"]


def test_session_next_a_closed_session_goes_first():
    assert session_run("session-next", close="B") == ["zzzz", "bbbb", "yyyy", "xxxx", "aaaa", "cccc"]


@PAGE_SIZES
def test_arc_evicts_from_t1_until_a_ghost_hit_raises_its_target(page_size):
    def run(policy):
        cache = new_cache(policy, page_size)
        put(cache, "aaaa")
        put(cache, "aaaa")  # two inserts: T2
        put(cache, "bbbb")  # T1
        put(cache, "cccc")  # T1
        first = evict_one(cache)  # p = 0 < |T1|: the LRU of T1 (b) goes, its page keys to B1
        put(cache, "bbbb")  # a ghost hit in B1: p grows by b's pages, b goes to T2
        return [first] + drain(cache), getattr(cache.policy, "p", None)

    assert run("arc") == (["bbbb", "aaaa", "bbbb", "cccc"], 4 // page_size)  # |T1| = p: T2 first
    assert run("lru") == (["aaaa", "cccc", "bbbb"], None)


@PAGE_SIZES
def test_arc_a_ghost_hit_in_b2_lowers_the_target_back(page_size):
    cache = new_cache("arc", page_size)
    pages = 4 // page_size
    put(cache, "aaaa")
    put(cache, "bbbb")
    assert evict_one(cache) == "aaaa"  # T1, p = 0
    put(cache, "aaaa")  # B1 hit: p = pages, a in T2
    put(cache, "cccc")
    assert cache.policy.p == pages and cache.policy.victim == 1  # |T1| = b + c > p
    assert evict_one(cache) == "bbbb"
    assert evict_one(cache) == "aaaa"  # |T1| = c = p: from T2; a's keys go to B2
    put(cache, "aaaa")  # B2 hit: p = max(p - max(|B1| / |B2|, 1) x pages, 0) = 0
    assert cache.policy.p == 0
    assert drain(cache) == ["cccc", "aaaa"]


@PAGE_SIZES
def test_tail_lru_evicts_leaves_whose_loss_keeps_the_next_turn_under_the_threshold_first(page_size):
    def run(policy, xi=None):
        cache = new_cache(policy, page_size)
        if xi is not None:
            cache.policy.xi = xi
        put(cache, "bbbbccccdddd")  # Q = 12 when ranked: 12 + 12 - 0 > xi, not tail-safe
        put(cache, "aaaa")  # Q = (12 + 4) / 2: 4 + 8 - 0 <= 12, tail-safe
        return drain(cache)

    assert run("tail-lru", xi=12) == ["aaaa", "bbbbccccdddd"]
    assert run("tail-lru", xi=24) == ["bbbbccccdddd", "aaaa"]  # both tail-safe: LRU
    assert run("lru") == ["bbbbccccdddd", "aaaa"]


@PAGE_SIZES
def test_tail_lru_a_parent_left_by_an_evicted_tail_counts_the_whole_lost_length(page_size):
    def run(policy):
        cache = new_cache(policy, page_size)
        if policy == "tail-lru":
            cache.policy.xi = 8
        put(cache, "bbbb")
        put(cache, "bbbbcccc")
        put(cache, "aaaa")  # Q = 4 (three leaves of 4 tokens ranked)
        return drain(cache)

    # cccc: 8 + 4 - 4 <= 8, tail-safe, goes first; then bbbb is a leaf of a path 8 tokens long
    # (8 + 4 - 0 > 8): aaaa (4 + 4 - 0 <= 8) goes before it
    assert run("tail-lru") == ["cccc", "aaaa", "bbbb"]
    assert run("lru") == ["cccc", "bbbb", "aaaa"]


def timed_session_cache(tools: dict):
    """SESSION_REQUESTS at 0, 100, ..., 500 ms; `tools`: request index -> tool_ms after it."""
    from cache_core import ReplayStepper
    from helpers import toks

    cache = new_cache("session-next")
    st = ReplayStepper(cache)
    for i, (sid, prompt) in enumerate(SESSION_REQUESTS):
        st.step(toks(prompt), session_id=sid)
        cache.policy.request_times(sid, 100.0 * i, tools.get(i))
    return cache


def test_session_next_predicts_the_return_after_the_tool_call_when_the_trace_has_it():
    # 6 requests in 500 ms: 0.01 a ms. A's last request (5) runs a 100-ms tool: back at 5 + 1;
    # B's (4) a 1000-ms one: back at 4 + 10; C carries none: its mean-gap prediction 2 + 8/3
    cache = timed_session_cache({5: 100.0, 4: 1000.0})
    assert {s: cache.policy.predicted(s) for s in "ABC"} == {"A": 6.0, "B": 14.0, "C": 2 + 8 / 3}
    assert drain(cache) == ["zzzz", "bbbb", "yyyy", "xxxx", "aaaa", "cccc"]
    assert drain(timed_session_cache({})) == ["yyyy", "xxxx", "aaaa", "zzzz", "bbbb", "cccc"]  # mean gaps
    assert drain(timed_session_cache({3: 1000.0})) == drain(timed_session_cache({}))  # A's 5 carried none


def test_session_next_reads_tool_ms_from_a_replayed_trace(tmp_path):
    import json

    from radixsim.replay import ReplayOptions, run_replay
    from helpers import toks

    def run(tools: dict) -> list[int]:
        reqs = SESSION_REQUESTS + (("D", "dddd"), ("B", "bbbbzzzzwwww"))
        lines = [json.dumps({"rid": i, "session_id": sid, "timestamp": 100 * i, "tokens": toks(p),
                             **({"tool_ms": tools[i]} if i in tools else {})}) for i, (sid, p) in enumerate(reqs)]
        path = tmp_path / "t.jsonl"
        path.write_text("\n".join(lines) + "\n")
        out = tmp_path / f"out{len(tools)}"
        run_replay(ReplayOptions(trace=str(path), page_size=4, capacity_tokens=28, policy="session-next",
                                 progress=False), out)
        with open(out / "requests.csv") as f:
            head = f.readline().strip().split(",")
            return [int(r.split(",")[head.index("cached_tokens")]) for r in f.read().splitlines()]

    # D needs room: with the tool times B (back after its 1000-ms tool) loses its newest page, A
    # keeps its; without them A (mean gap 2.5) is predicted back last and loses it
    assert run({5: 100.0, 4: 1000.0})[-1] == 4
    assert run({})[-1] == 8


def test_trace_lines_carry_tool_ms(tmp_path):
    from scenarios.traces import JsonlTrace, TraceError

    p = tmp_path / "t.jsonl"
    p.write_text('{"tokens": [1, 2], "session_id": "a", "tool_ms": 250}\n{"tokens": [3]}\n')
    assert [r.tool_ms for r in JsonlTrace(p)] == [250, None]
    p.write_text('{"tokens": [1, 2], "tool_ms": -1}\n')
    with pytest.raises(TraceError, match=r":1: 'tool_ms' must be a non-negative number of milliseconds, got -1$"):
        list(JsonlTrace(p))
