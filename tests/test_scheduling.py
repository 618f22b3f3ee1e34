"""Exact behaviour of cache_core/scheduling.py: queue orders per policy, admission per limit,
retraction order, validation.

Requests are hand-built: `req(rid, prompt_len, ...)` makes prompt tokens 0..prompt_len-1,
arrival_s = rid unless given. Numbers in the comments are the hand computations the
assertions pin (rules: the module's docstrings).
"""
import ast
import dataclasses
import pathlib
import uuid

import numpy as np
import pytest

from cache_core import CacheConfig, RadixCache, TokenSeq
from cache_core.admission import Admission, BatchLimits, RunningBatch
from cache_core.scheduling import (CLIP_MAX_NEW_TOKENS, FINISHED, RUNNING, WAITING, DfsWeight, Fcfs,
                                   LongestPrefixMatch, RandomOrder, Request, SchedulePolicy, SchedulingContext,
                                   make_schedule_policy, register_schedule_policy, schedule_policy_names)


def req(rid, prompt_len, out=8, t=None, prefix=0, computed=0, generated=0, **kw):
    r = Request(rid, None, np.arange(prompt_len), out, float(rid) if t is None else t, **kw)
    r.prefix_len, r.computed_tokens, r.generated_tokens = prefix, computed, generated
    return r


def rids(seq):
    return [r.rid for r in seq]


def admitted(res):
    return [(r.rid, n) for r, n in res.admitted]


BIG = dict(max_running_requests=1000, max_prefill_tokens=10**6, max_total_tokens=10**9)


def limits(**kw):
    return BatchLimits(**{**BIG, **kw})


def plenty():
    return 10**8


# ---------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------
def test_registry_names_and_instances():
    assert schedule_policy_names() == ["dfs-weight", "fcfs", "lpm", "random"]
    assert type(make_schedule_policy("fcfs")) is Fcfs
    assert type(make_schedule_policy("lpm")) is LongestPrefixMatch
    assert type(make_schedule_policy("dfs-weight")) is DfsWeight
    p = make_schedule_policy("random", seed=3)
    assert type(p) is RandomOrder and p.seed == 3
    assert make_schedule_policy("lpm", max_queue=5).max_queue == 5
    assert make_schedule_policy("fcfs") is not make_schedule_policy("fcfs")


def test_registry_errors_and_custom_policy():
    with pytest.raises(ValueError, match="unknown schedule policy 'nope'; known: dfs-weight, fcfs, lpm, random"):
        make_schedule_policy("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_schedule_policy("fcfs")(type("X", (SchedulePolicy,), {}))
    name = "test-" + uuid.uuid4().hex

    @register_schedule_policy(name)
    class LongestPromptFirst(SchedulePolicy):
        def order(self, waiting, ctx=None):
            return sorted(waiting, key=lambda r: (-len(r.prompt), r.rid))

    assert name in schedule_policy_names() and LongestPromptFirst.name == name
    q = [req(0, 5), req(1, 9), req(2, 7)]
    assert rids(make_schedule_policy(name).order(q)) == [1, 2, 0]


# ---------------------------------------------------------------------------------------
# fcfs
# ---------------------------------------------------------------------------------------
def test_fcfs_arrival_then_rid_and_input_untouched():
    q = [req(0, 4, t=3.0), req(1, 4, t=1.0), req(2, 4, t=2.0), req(3, 4, t=1.0)]
    before = list(q)
    assert rids(Fcfs().order(q)) == [1, 3, 2, 0]
    assert rids(Fcfs().order(q[::-1])) == [1, 3, 2, 0]
    assert q == before  # a new list; the input keeps its order
    assert Fcfs().order([]) == []


# ---------------------------------------------------------------------------------------
# lpm
# ---------------------------------------------------------------------------------------
def lpm_queue():
    # rid: prompt_len, match; arrival = rid except where given
    spec = {"a": (100, 64, 5.0), "b": (80, 64, 6.0), "c": (100, 64, 1.0),
            "d": (50, 0, 4.0), "e": (10, 0, 3.0), "f": (200, 128, 7.0)}
    q = [req(k, n, t=t) for k, (n, _, t) in spec.items()]
    match = {k: m for k, (_, m, _) in spec.items()}
    return q, match


def test_lpm_longest_match_then_hit_ratio_then_fcfs():
    q, match = lpm_queue()
    calls = []

    def match_len(r):
        calls.append(r.rid)
        return match[r.rid]

    out = LongestPrefixMatch().order(q, SchedulingContext(match_len=match_len))
    # f: 128 tokens (ratio 0.64) beats b's better ratio 64/80=0.8; b (0.8) before a and c
    # (64/100 each, a tie) -> fcfs: c (t=1) before a (t=5); d and e matched nothing (ratio 0)
    # -> fcfs: e (t=3) before d (t=4)
    assert rids(out) == ["f", "b", "c", "a", "e", "d"]
    assert sorted(calls) == sorted(match) and len(calls) == 6  # once per waiting request
    assert {r.rid: r.prefix_len for r in q} == match


def test_lpm_equal_ratio_different_prefix_is_not_a_tie():
    # 2/4 and 4/8 are the same ratio, but the longer match wins first
    q = [req(0, 4), req(1, 8)]
    out = LongestPrefixMatch().order(q, SchedulingContext(match_len=lambda r: len(r.prompt) // 2))
    assert rids(out) == [1, 0]


def _ramp(n):
    """n requests, arrival = rid, match = rid (so lpm reverses fcfs)."""
    return [req(i, 200) for i in range(n)]


def test_lpm_falls_back_to_fcfs_above_128():
    calls = []

    def match_len(r):
        calls.append(r.rid)
        return r.rid

    ctx = SchedulingContext(match_len=match_len)
    q = _ramp(129)
    for r in q:
        r.prefix_len = 7
    assert rids(LongestPrefixMatch().order(q[::-1], ctx)) == list(range(129))
    assert calls == []  # no match above the threshold
    assert {r.prefix_len for r in q} == {7}
    q = _ramp(128)
    assert rids(LongestPrefixMatch().order(q, ctx)) == list(range(127, -1, -1))
    assert len(calls) == 128


def test_lpm_threshold_is_configurable():
    ctx = SchedulingContext(match_len=lambda r: r.rid)
    assert rids(LongestPrefixMatch(max_queue=2).order(_ramp(3), ctx)) == [0, 1, 2]
    assert rids(LongestPrefixMatch(max_queue=3).order(_ramp(3), ctx)) == [2, 1, 0]


def test_lpm_errors():
    q = [req(0, 10)]
    with pytest.raises(ValueError, match="lpm needs ctx.match_len"):
        LongestPrefixMatch().order(q)
    with pytest.raises(ValueError, match="lpm needs ctx.match_len"):
        LongestPrefixMatch().order(q, SchedulingContext())
    with pytest.raises(ValueError, match=r"match_len\(0\) = 11 is outside \[0, 10\]"):
        LongestPrefixMatch().order(q, SchedulingContext(match_len=lambda r: 11))
    with pytest.raises(ValueError, match=r"match_len\(0\) = -1 is outside"):
        LongestPrefixMatch().order(q, SchedulingContext(match_len=lambda r: -1))
    with pytest.raises(ValueError, match="max_queue"):
        LongestPrefixMatch(max_queue=-1)


def test_lpm_with_a_real_cache_match():
    """match_len from RadixCache.match (limit fill_len - 1, as an engine would call it)."""
    cache = RadixCache(CacheConfig(page_size=4, capacity_tokens=256, policy="lru"))
    shared = list(range(1000, 1032))  # 32 tokens cached
    pages = cache.alloc(8)
    cache.insert(TokenSeq(shared), 32, pages, 0)

    def mk(rid, toks):
        return Request(rid, None, np.array(toks), 4, float(rid))

    q = [mk(0, list(range(50))), mk(1, shared[:16] + [1, 2, 3, 4, 5]), mk(2, shared + [9] * 10),
         mk(3, shared[:8] + [7] * 3)]

    def match_len(r):
        return cache.match(TokenSeq(r.prompt), r.fill_len - 1).cached_tokens

    out = LongestPrefixMatch().order(q, SchedulingContext(match_len=match_len))
    assert [(r.rid, r.prefix_len) for r in out] == [(2, 32), (1, 16), (3, 8), (0, 0)]


# ---------------------------------------------------------------------------------------
# dfs-weight
# ---------------------------------------------------------------------------------------
#   root
#   ├── 1
#   │   ├── 2        A(t0) B(t5)
#   │   └── 3        C(t1)
#   │       └── 4    D(t2) E(t3)
#   ├── 5            F(t4)
#   │   └── 6        G(t6)
#   └── (root)       H(t7)
# weights: 4:2, 3:3, 2:2, 1:5, 6:1, 5:2, root:8
PATHS = {"A": (1, 2), "B": (1, 2), "C": (1, 3), "D": (1, 3, 4), "E": (1, 3, 4), "F": (5,), "G": (5, 6), "H": ()}
ARRIVAL = {"A": 0, "B": 5, "C": 1, "D": 2, "E": 3, "F": 4, "G": 6, "H": 7}


def dfs_queue():
    return [req(k, 16, t=float(ARRIVAL[k])) for k in PATHS]


def test_dfs_weight_hand_drawn_tree():
    ctx = SchedulingContext(path_key=lambda r: PATHS[r.rid])
    # root: 1 (5) before 5 (2); under 1: 3 (3) before 2 (2) although 2 holds the earliest
    # request; post-order: 4's D, E, then 3's C, then 2's A, B; under 5: 6's G, then F; H last
    expected = ["D", "E", "C", "A", "B", "G", "F", "H"]
    assert rids(DfsWeight().order(dfs_queue(), ctx)) == expected
    assert rids(DfsWeight().order(dfs_queue()[::-1], ctx)) == expected


def test_dfs_weight_requests_at_one_node_are_fcfs():
    ctx = SchedulingContext(path_key=lambda r: (10,))
    q = [req(0, 4, t=2.0), req(1, 4, t=1.0), req(2, 4, t=1.0)]
    assert rids(DfsWeight().order(q, ctx)) == [1, 2, 0]


def test_dfs_weight_equal_weights_earliest_request_first():
    # siblings 100 and 50 weigh 1 each: 100 holds the earlier request, so it goes first
    # (not by node id); 7 weighs 2 and goes before both although its requests came last
    paths = {0: (100,), 1: (50,), 2: (7, 8), 3: (7,)}
    q = [req(0, 4, t=1.0), req(1, 4, t=2.0), req(2, 4, t=9.0), req(3, 4, t=8.0)]
    out = DfsWeight().order(q, SchedulingContext(path_key=lambda r: paths[r.rid]))
    assert rids(out) == [2, 3, 0, 1]


def test_dfs_weight_errors():
    q = [req(0, 4), req(1, 4)]
    with pytest.raises(ValueError, match="dfs-weight needs ctx.path_key"):
        DfsWeight().order(q)
    two_parents = {0: (1, 2), 1: (3, 2)}
    with pytest.raises(ValueError, match="node 2 has two parents"):
        DfsWeight().order(q, SchedulingContext(path_key=lambda r: two_parents[r.rid]))
    with pytest.raises(ValueError, match="repeats a node id"):
        DfsWeight().order(q, SchedulingContext(path_key=lambda r: (1, 1)))


def test_dfs_weight_deep_path_no_recursion_limit():
    depth = 5000
    q = [req(0, 4, t=1.0), req(1, 4, t=0.0)]
    paths = {0: tuple(range(depth)), 1: ()}
    assert rids(DfsWeight().order(q, SchedulingContext(path_key=lambda r: paths[r.rid]))) == [0, 1]


# ---------------------------------------------------------------------------------------
# random
# ---------------------------------------------------------------------------------------
def test_random_is_a_seeded_permutation_of_fcfs():
    q = [req(i, 4, t=float(10 - i)) for i in range(6)]  # fcfs order: rids 5, 4, 3, 2, 1, 0
    fcfs = rids(Fcfs().order(q))
    assert fcfs == [5, 4, 3, 2, 1, 0]
    p = RandomOrder(seed=7)
    first, second = rids(p.order(q)), rids(p.order(q))
    # np.random.default_rng(7).permutation(6) -> [5 2 0 4 1 3], then [5 0 4 1 3 2]
    assert first == [fcfs[i] for i in (5, 2, 0, 4, 1, 3)] == [0, 3, 5, 1, 4, 2]
    assert second == [fcfs[i] for i in (5, 0, 4, 1, 3, 2)]
    # same seed, same sequence, whatever the input order
    p2 = RandomOrder(seed=7)
    assert rids(p2.order(q[::-1])) == first and rids(p2.order(q[3:] + q[:3])) == second
    assert rids(RandomOrder(seed=1).order(q)) == [fcfs[i] for i in (4, 0, 2, 1, 5, 3)]
    assert rids(RandomOrder(seed=1).order(q)) != rids(RandomOrder(seed=2).order(q))
    assert RandomOrder().order([]) == []


# ---------------------------------------------------------------------------------------
# admission
# ---------------------------------------------------------------------------------------
def test_admission_max_running_requests():
    running = RunningBatch()
    for i in range(2):
        running.add(req(100 + i, 4, out=0))  # out=0: nothing held back
    adm = Admission()
    q = [req(i, 10) for i in range(4)]
    res = adm.select(q, running, plenty, limits(max_running_requests=4))
    assert admitted(res) == [(0, 10), (1, 10)] and res.chunked is None and adm.last_stop == "max_running"
    res = adm.select(q, running, plenty, limits(max_running_requests=2))
    assert admitted(res) == [] and adm.last_stop == "max_running"
    res = adm.select(q, [], plenty, limits(max_running_requests=6))
    assert admitted(res) == [(0, 10), (1, 10), (2, 10), (3, 10)] and adm.last_stop == "empty"


def test_admission_prefill_budget_without_chunking():
    adm = Admission()
    # uncached: 40 (prompt 100, prefix 60), 50, 10 -> budget 100: 40 (60 left), 50 (10 left),
    # then 10 >= 10 left -> stop (SGLang's >=)
    q = [req(0, 100, prefix=60), req(1, 50), req(2, 10), req(3, 1)]
    res = adm.select(q, [], plenty, limits(max_prefill_tokens=100))
    assert admitted(res) == [(0, 40), (1, 50)] and res.chunked is None
    assert adm.last_stop == "prefill_budget"
    # with 11 left the 10 fits
    res = adm.select(q, [], plenty, limits(max_prefill_tokens=101))
    assert admitted(res) == [(0, 40), (1, 50), (2, 10)] and adm.last_stop == "prefill_budget"


def test_admission_first_request_may_exceed_prefill_budget_without_chunking():
    adm = Admission()
    q = [req(0, 150), req(1, 10)]
    res = adm.select(q, [], plenty, limits(max_prefill_tokens=100))
    assert admitted(res) == [(0, 150)] and res.chunked is None and adm.last_stop == "prefill_budget"


def test_admission_chunks_one_request_at_the_chunk_budget():
    adm = Admission()
    # chunk budget 64: 30 whole (34 left), then 50 uncached (prompt 80, prefix 30) > 34 -> cut to 34
    q = [req(0, 30), req(1, 80, prefix=30), req(2, 10)]
    res = adm.select(q, [], plenty, limits(chunked_prefill_tokens=64))
    assert admitted(res) == [(0, 30), (1, 34)] and res.chunked is q[1] and adm.last_stop == "chunked"
    # the first candidate itself longer than the budget: cut, nothing after it
    res = adm.select([req(5, 200), req(6, 4)], [], plenty, limits(chunked_prefill_tokens=64))
    assert admitted(res) == [(5, 64)] and res.chunked.rid == 5


def test_admission_chunk_room_is_the_smaller_budget():
    adm = Admission()
    # prefill budget 50, chunk 64: 30 whole -> 20 / 34 left; 40 > 20 -> cut to 20
    q = [req(0, 30), req(1, 40), req(2, 1)]
    res = adm.select(q, [], plenty, limits(max_prefill_tokens=50, chunked_prefill_tokens=64))
    assert admitted(res) == [(0, 30), (1, 20)] and res.chunked is q[1]
    # exactly the room: admitted whole, then the exhausted budget stops the step
    q = [req(0, 30), req(1, 20), req(2, 1)]
    res = adm.select(q, [], plenty, limits(max_prefill_tokens=50, chunked_prefill_tokens=64))
    assert admitted(res) == [(0, 30), (1, 20)] and res.chunked is None and adm.last_stop == "prefill_budget"


def test_admission_continuing_chunked_request_goes_first():
    adm = Admission()
    lim = limits(chunked_prefill_tokens=64)
    # r1 was cut after 34 new tokens: prefix 30, computed 64, 16 left
    r1 = req(1, 80, prefix=30, computed=64)
    q = [req(2, 10), req(3, 50)]
    res = adm.select(q, [], plenty, lim, chunked=r1)
    # 16 (48 left), 10 (38 left), 50 > 38 -> cut to 38
    assert admitted(res) == [(1, 16), (2, 10), (3, 38)] and res.chunked is q[1]
    # still longer than the budget: one chunk, nothing else this step
    big = req(7, 300, computed=64)
    res = adm.select(q, [], plenty, lim, chunked=big)
    assert admitted(res) == [(7, 64)] and res.chunked is big and adm.last_stop == "chunked"


def test_admission_last_chunk_is_charged_its_tokens_and_output():
    adm = Admission()
    lim = limits(chunked_prefill_tokens=64)
    r1 = req(1, 80, computed=64, out=10)  # last chunk: 16 tokens + 10 reserved = 26
    # 60 - 26 = 34 available: 30 + 4 = 34 does not fit (strict), 61 - 26 = 35 does
    res = adm.select([req(2, 30, out=4)], [], lambda: 60, lim, chunked=r1)
    assert admitted(res) == [(1, 16)] and res.chunked is None and adm.last_stop == "memory"
    res = adm.select([req(2, 30, out=4)], [], lambda: 61, lim, chunked=r1)
    assert admitted(res) == [(1, 16), (2, 30)] and adm.last_stop == "empty"


def test_admission_continuing_chunk_counts_as_running_and_skips_the_memory_check():
    adm = Admission()
    running = [req(100 + i, 4, out=0) for i in range(2)]
    r1 = req(1, 80, computed=64, out=10)
    res = adm.select([req(2, 4)], running, plenty, limits(max_running_requests=3, chunked_prefill_tokens=64),
                     chunked=r1)
    assert admitted(res) == [(1, 16)] and res.chunked is None and adm.last_stop == "max_running"
    # no memory at all: the chunked request still runs its chunk; nothing new is admitted
    res = adm.select([req(2, 4)], [], lambda: 0, limits(chunked_prefill_tokens=64), chunked=r1)
    assert admitted(res) == [(1, 16)] and adm.last_stop == "memory"


def test_admission_page_aligned_chunks():
    adm = Admission(page_size=16)
    # chunk budget 64: a request with a 32-token prefix and 168 left -> 64 new (ends at 96)
    res = adm.select([req(0, 200, prefix=32)], [], plenty, limits(chunked_prefill_tokens=64))
    assert admitted(res) == [(0, 64)]
    # 20 uncached is charged ceil -> 32: 32 chunk / 8 prefill tokens left (budget 40); the
    # next one (prefix 16) could take 8 -> its end floors to 16 -> nothing -> stop
    q = [req(0, 20), req(1, 100, prefix=16)]
    res = adm.select(q, [], plenty, limits(max_prefill_tokens=40, chunked_prefill_tokens=64))
    assert admitted(res) == [(0, 20)] and res.chunked is None and adm.last_stop == "prefill_budget"
    # an unaligned start: prefix 20 (pages ok for the engine), room 64 -> end 80 -> 60 new
    res = adm.select([req(0, 200, prefix=20)], [], plenty, limits(chunked_prefill_tokens=64))
    assert admitted(res) == [(0, 60)]


def test_admission_memory_reservations_and_strict_fit():
    adm = Admission(new_token_ratio=0.5)
    running = [req(100, 10, out=100), req(101, 10, out=10_000)]  # held back 0.5*100 + 0.5*4096
    assert adm.held_back(running) == 50 + 2048
    free = lambda: 3000  # noqa: E731
    # available 3000 - 2098 = 902: r0 400 + 100 = 500 < 902 -> 402 left; r1 300 + 102 = 402 -> stop
    q = [req(0, 400, out=100), req(1, 300, out=102), req(2, 1, out=1)]
    res = adm.select(q, running, free, limits())
    assert admitted(res) == [(0, 400)] and adm.last_stop == "memory"
    q[1].output_length = 101  # 401 < 402
    res = adm.select(q, running, free, limits())
    assert admitted(res) == [(0, 400), (1, 300)]
    # r2: 1 + 1 = 2 >= 402 - 401 = 1 -> stop
    assert adm.last_stop == "memory"


def test_admission_output_reservation_is_clipped_and_counts_generated():
    adm = Admission()
    r = req(0, 10, out=10)
    r.generated_tokens = 4  # retracted after 4 tokens: 14 to re-prefill, 6 to go
    assert (r.fill_len, r.uncached_tokens, adm.reservation(r), adm.request_tokens(r)) == (14, 14, 6, 20)
    big = req(1, 10, out=10**6)
    assert adm.reservation(big) == CLIP_MAX_NEW_TOKENS == 4096
    assert Admission(clip_max_new_tokens=100).reservation(big) == 100
    # 20 < 21 fits, 20 >= 20 does not
    assert admitted(adm.select([r], [], lambda: 21, limits())) == [(0, 14)]
    assert admitted(adm.select([r], [], lambda: 20, limits())) == []
    # running requests hold back their remaining output x ratio
    run = req(5, 10, out=10, generated=4)
    assert Admission(new_token_ratio=0.25).held_back([run]) == 1.5


def test_admission_max_total_tokens_caps_memory_and_rejects_impossible_requests():
    adm = Admission()
    lim = limits(max_total_tokens=1000)
    q = [req(0, 592, out=8), req(1, 392, out=8)]  # 600, then 400 >= 1000 - 600
    res = adm.select(q, [], plenty, lim)
    assert admitted(res) == [(0, 592)] and adm.last_stop == "memory"
    with pytest.raises(ValueError, match="request 9 needs 1000 tokens, max_total_tokens is 1000"):
        adm.select([req(9, 992, out=8)], [], plenty, lim)


def test_admission_reads_free_tokens_before_every_candidate():
    adm = Admission()
    values = iter([1000, 500, 60])
    calls = []

    def free():
        calls.append(1)
        return next(values)

    # r0 400 < 1000; r1: 500 - 400 = 100 > 50; r2: 60 - 450 < 0 -> stop
    q = [req(0, 392), req(1, 42), req(2, 1)]
    res = adm.select(q, [], free, limits())
    assert admitted(res) == [(0, 392), (1, 42)] and len(calls) == 3 and adm.last_stop == "memory"


def test_fcfs_never_skips_a_large_request():
    adm = Admission()
    q = Fcfs().order([req(2, 10, t=2.0), req(0, 900, t=0.0), req(1, 10, t=1.0)])
    assert rids(q) == [0, 1, 2]
    # the big one (900 + 8) comes first and does not fit in 500; the small ones behind it
    # (10 + 8 each) would, but admission does not skip ahead
    for free in (500, 908):
        res = adm.select(q, [], lambda: free, limits())
        assert admitted(res) == [] and adm.last_stop == "memory"
    # 908 < 920: the big one goes; 12 left < 18: the next waits
    res = adm.select(q, [], lambda: 920, limits())
    assert admitted(res) == [(0, 900)] and adm.last_stop == "memory"
    res = adm.select(q, [], lambda: 945, limits())  # 908, 18 (19 left), 18 (1 left)
    assert admitted(res) == [(0, 900), (1, 10), (2, 10)] and adm.last_stop == "empty"


def test_admission_match_len_refreshes_each_candidate_just_before():
    adm = Admission()
    calls = []

    def match_len(r):
        calls.append(r.rid)
        return {0: 60, 1: 0, 2: 5}[r.rid]

    q = [req(0, 100), req(1, 50), req(2, 10)]
    res = adm.select(q, [], plenty, limits(max_prefill_tokens=90), match_len=match_len)
    # 40 (50 left), then 50 >= 50 -> stop; r2 is never matched
    assert admitted(res) == [(0, 40)] and calls == [0, 1] and (q[0].prefix_len, q[1].prefix_len) == (60, 0)
    # an exhausted budget stops before the next candidate is matched (memory is read first)
    calls.clear()
    reads = []
    q = [req(0, 150), req(1, 5)]
    res = adm.select(q, [], lambda: reads.append(1) or 10**6, limits(max_prefill_tokens=100),
                     match_len=lambda r: calls.append(r.rid) or 0)
    assert admitted(res) == [(0, 150)] and calls == [0] and len(reads) == 2 and adm.last_stop == "prefill_budget"
    with pytest.raises(ValueError, match=r"match_len\(0\) = 101 is outside"):
        adm.select([req(0, 100)], [], plenty, limits(), match_len=lambda r: 101)


def test_admission_errors():
    adm = Admission()
    with pytest.raises(TypeError, match="BatchLimits"):
        adm.select([], [], plenty, dict(BIG))
    with pytest.raises(ValueError, match="leaves nothing to prefill"):
        adm.select([req(0, 10, prefix=10)], [], plenty, limits())
    with pytest.raises(ValueError, match="needs chunked_prefill_tokens"):
        adm.select([], [], plenty, limits(), chunked=req(0, 10))
    r = req(0, 100, computed=64)
    with pytest.raises(ValueError, match="must not be in the running batch"):
        adm.select([], [r], plenty, limits(chunked_prefill_tokens=64), chunked=r)
    with pytest.raises(ValueError, match="both waiting and the chunked request"):
        adm.select([r], [], plenty, limits(chunked_prefill_tokens=64), chunked=r)
    with pytest.raises(ValueError, match="nothing left to prefill"):
        adm.select([], [], plenty, limits(chunked_prefill_tokens=64), chunked=req(1, 64, computed=64))
    with pytest.raises(ValueError, match="must be a multiple of page_size"):
        Admission(page_size=16).select([], [], plenty, limits(chunked_prefill_tokens=40))
    with pytest.raises(ValueError, match="at least one page"):
        Admission(page_size=16).select([], [], plenty, limits(max_prefill_tokens=8, chunked_prefill_tokens=64))
    for bad in (-0.1, float("nan"), float("inf"), True, "x"):
        with pytest.raises(ValueError, match="new_token_ratio"):
            Admission(new_token_ratio=bad)
    with pytest.raises(ValueError, match="page_size"):
        Admission(page_size=0)
    with pytest.raises(ValueError, match="clip_max_new_tokens"):
        Admission(clip_max_new_tokens=-1)


# ---------------------------------------------------------------------------------------
# BatchLimits and Request validation
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["max_running_requests", "max_prefill_tokens", "max_total_tokens",
                                   "chunked_prefill_tokens"])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_batch_limits_validation(field, bad):
    with pytest.raises(ValueError, match=field):
        limits(**{field: bad})


def test_batch_limits_shape():
    lim = BatchLimits(max_running_requests=1, max_prefill_tokens=1, max_total_tokens=1)
    assert lim.chunked_prefill_tokens is None
    with pytest.raises(TypeError):
        BatchLimits(1, 1, None, 1)  # keyword-only
    with pytest.raises(dataclasses.FrozenInstanceError):
        lim.max_running_requests = 2
    with pytest.raises(TypeError):
        BatchLimits(max_running_requests=1, max_prefill_tokens=1)  # max_total_tokens is required


def test_request_fields_and_validation():
    r = Request("x", "s1", [3, 4, 5], 2, 1)
    assert r.prompt.dtype == np.int64 and r.prompt.tolist() == [3, 4, 5] and r.arrival_s == 1.0
    assert (r.priority, r.prefix_len, r.seq, r.match, r.computed_tokens, r.generated_tokens, r.state,
            r.retracted) == (0, 0, None, None, 0, 0, WAITING, 0)
    assert r != Request("x", "s1", [3, 4, 5], 2, 1)  # identity, not value equality
    for prompt in ([], [[1, 2]], [1.5, 2.0]):
        with pytest.raises(ValueError, match="prompt must be a non-empty 1-D integer array"):
            Request(0, None, prompt, 1, 0.0)
    for out in (-1, True, 1.5):
        with pytest.raises(ValueError, match="output_length"):
            Request(0, None, [1], out, 0.0)
    with pytest.raises(ValueError, match="arrival_s must be finite"):
        Request(0, None, [1], 1, float("nan"))
    with pytest.raises(ValueError, match="state must be one of"):
        Request(0, None, [1], 1, 0.0, state="done")


# ---------------------------------------------------------------------------------------
# running batch
# ---------------------------------------------------------------------------------------
def test_running_batch_add_remove_finished():
    b = RunningBatch()
    rs = [req(i, 8, out=3) for i in range(4)]
    for r in rs:
        b.add(r)
    assert [r.state for r in rs] == [RUNNING] * 4 and len(b) == 4 and rs[2] in b
    with pytest.raises(ValueError, match="already running"):
        b.add(rs[0])
    rs[1].generated_tokens, rs[3].generated_tokens, rs[0].generated_tokens = 3, 5, 2
    done = b.remove_finished()
    assert rids(done) == [1, 3] and [r.state for r in done] == [FINISHED, FINISHED]
    assert rids(b) == [0, 2] and rs[1] not in b
    with pytest.raises(ValueError, match="is finished"):
        b.add(rs[1])
    b.remove(rs[0])
    assert rids(b) == [2] and rs[0].state == RUNNING
    with pytest.raises(ValueError, match="not running"):
        b.remove(rs[0])
    assert b.remove_finished() == []


def test_decode_tokens_per_page():
    b1, b4 = RunningBatch(), RunningBatch(page_size=4)
    specs = [(8, 1), (8, 2), (7, 2), (5, 0), (4, 5)]  # (prompt, generated)
    for i, (p, g) in enumerate(specs):
        b1.add(req(i, p, out=100, generated=g))
        b4.add(req(10 + i, p, out=100, generated=g))
    # page 1: every request that has a token to decode -> 4 (the one with 0 generated: 0)
    assert b1.decode_tokens() == 4
    # page 4: the KV written is at fill_len - 1 = 8, 9, 8, -, 8 -> new pages for 3 requests
    assert b4.decode_tokens() == 12


def retract_batch(page_size=1):
    b = RunningBatch(page_size=page_size)
    # batch order A..E; (generated, prompt): A (5, 10) B (2, 10) C (2, 30) D (9, 5) E (2, 30)
    for rid, g, p in [("A", 5, 10), ("B", 2, 10), ("C", 2, 30), ("D", 9, 5), ("E", 2, 30)]:
        r = req(rid, p, out=100, t=0.0, generated=g, computed=p)
        r.match = ("handle", rid)
        b.add(r)
    return b


def test_retract_order_fewest_decoded_then_longest_prompt_then_later_in_batch():
    b = retract_batch()
    assert rids(b.retract_order()) == ["E", "C", "B", "A", "D"]
    assert rids(b.retract_order(lambda r: -r.generated_tokens)) == ["D", "A", "E", "C", "B"]


def test_retract_until_the_shortfall_is_covered():
    # default freed = computed - prefix + generated - 1; plus one decode token each (page 1)
    # E: 30 + 1 + 1 = 32, C: 32, B: 10 + 1 + 1 = 12, A: 10 + 4 + 1 = 15
    b = retract_batch()
    out = b.retract(32)
    assert rids(out) == ["E"] and rids(b) == ["A", "B", "C", "D"] and b.last_shortfall == 0
    e = out[0]
    assert (e.state, e.computed_tokens, e.prefix_len, e.retracted, e.generated_tokens, e.match) == \
        (WAITING, 0, 0, 1, 2, ("handle", "E"))
    b = retract_batch()
    assert rids(b.retract(33)) == ["E", "C"] and rids(b) == ["A", "B", "D"]
    assert b.last_shortfall == 0


def test_retract_never_takes_the_last_request():
    b = retract_batch()
    out = b.retract(10**6)
    assert rids(out) == ["E", "C", "B", "A"] and rids(b) == ["D"]
    assert b.last_shortfall == 10**6 - (32 + 32 + 12 + 15)
    assert b.retract(5) == [] and rids(b) == ["D"] and b.last_shortfall == 5


def test_retract_nothing_needed():
    b = retract_batch()
    assert b.retract(0) == [] and b.retract(-3) == [] and len(b) == 5 and b.last_shortfall == 0


def test_retract_custom_order_and_freed_tokens():
    b = retract_batch()
    assert rids(b.retract(101, freed_tokens=lambda r: 100)) == ["E"]
    b = retract_batch()
    assert rids(b.retract(102, freed_tokens=lambda r: 100)) == ["E", "C"]
    b = retract_batch()
    out = b.retract(20, order=lambda r: -r.generated_tokens, freed_tokens=lambda r: 10)
    assert rids(out) == ["D", "A"] and [r.retracted for r in out] == [1, 1]


def test_retract_counts_the_page_a_request_would_have_needed():
    b = retract_batch(page_size=4)
    # fill_len - 1: E 31, C 31 (no new page), B 11 (no), A 14 (no), D 13 (no)
    assert b.decode_tokens() == 0
    b.requests[1].generated_tokens = 3  # B: fill 13 -> writes 12 -> a new page
    assert b.decode_tokens() == 4
    # E (10 + 0), C (10 + 0) -> 20 < 25; B (10 + 4) -> covered
    out = b.retract(25, order=lambda r: "ECBAD".index(r.rid),
                    freed_tokens=lambda r: 10)
    assert rids(out) == ["E", "C", "B"]
    assert rids(b) == ["A", "D"] and b.requests[0].state == RUNNING


# ---------------------------------------------------------------------------------------
# purity: no clock, no tree
# ---------------------------------------------------------------------------------------
def test_module_reads_no_clock_and_imports_only_stdlib_and_numpy():
    path = pathlib.Path(__file__).resolve().parent.parent / "cache_core" / "scheduling.py"
    tree = ast.parse(path.read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mods.add((node.module or "").split(".")[0] if node.level == 0 else "." + (node.module or ""))
    # standard library, numpy, and the core's own name registry (cache_core/registry.py)
    assert mods == {"__future__", "operator", "dataclasses", "fractions", "typing", "numpy", ".registry"}


def test_a_registered_schedule_policy_is_accepted_by_the_engine_config_and_scenarios():
    """No hard-coded list beside the registry (issue 16 item 4): registering is enough."""
    from cache_core.engine_types import EngineConfig
    from cache_core.scheduling import _REGISTRY, SchedulePolicy, register_schedule_policy
    from scenarios.schema import SCHEMA, validate_document

    @register_schedule_policy("test-reverse")
    class Reverse(SchedulePolicy):
        def order(self, waiting, ctx=None):
            return list(reversed(waiting))

    try:
        assert EngineConfig(schedule_policy="test-reverse").schedule_policy == "test-reverse"
        out = validate_document({"schedule_policy": "test-reverse"}, SCHEMA["engine"], "s.yaml", "engine.")
        assert out["schedule_policy"] == "test-reverse"
    finally:
        del _REGISTRY._classes["test-reverse"]
