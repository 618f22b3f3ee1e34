"""Multi-turn workload generator (scenarios/workloads.py): exact streams, keys, orders, errors."""
import math
import subprocess
import sys

import numpy as np
import pytest

from cache_core.keys import page_keys
from scenarios.workloads import MultiTurnConfig, MultiTurnWorkload, WorkloadRequest

from conftest import ROOT


def cfg(**kw):
    base = dict(num_clients=4, num_rounds=5, request_length=100, output_length=16, page_size=64,
                vocab_size=1000, seed=7)
    base.update(kw)
    return MultiTurnConfig(**base)


def by_key(workload):
    """{(client, round): request}, checking each key occurs once."""
    out = {}
    for q in workload:
        assert (q.session_id, q.round) not in out
        out[q.session_id, q.round] = q
    return out


# ---------------------------------------------------------------- token streams
@pytest.mark.parametrize("output_length", [0, 1, 16])
def test_prompt_is_previous_prompt_plus_output_plus_new_tokens(output_length):
    c = cfg(output_length=output_length)
    reqs = by_key(MultiTurnWorkload(c))
    assert len(reqs) == c.num_clients * c.num_rounds
    for (client, r), q in reqs.items():
        assert isinstance(q, WorkloadRequest)
        assert q.prompt.dtype == np.int64 and q.output.dtype == np.int64
        assert len(q.prompt) == r * c.request_length + (r - 1) * c.output_length
        assert len(q.output) == c.output_length
        if r > 1:
            prev = reqs[client, r - 1]
            head = len(prev.prompt) + len(prev.output)
            assert np.array_equal(q.prompt[: len(prev.prompt)], prev.prompt)
            assert np.array_equal(q.prompt[len(prev.prompt) : head], prev.output)
            assert len(q.prompt) - head == c.request_length


def test_views_are_read_only_and_share_the_client_buffer():
    reqs = by_key(MultiTurnWorkload(cfg()))
    q1, q2 = reqs[0, 1], reqs[0, 2]
    for a in (q1.prompt, q1.output, q1.page_keys):
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[:1] = 0
    assert np.shares_memory(q1.prompt, q2.prompt)  # a view of one history, not a copy
    assert np.shares_memory(q1.output, q2.prompt)
    assert not np.shares_memory(reqs[0, 1].prompt, reqs[1, 1].prompt)


def test_token_ids_lie_in_vocab_and_clients_share_no_token():
    c = cfg(num_clients=6, num_rounds=4, vocab_size=600)
    reqs = by_key(MultiTurnWorkload(c))
    seen = []
    for client in range(c.num_clients):
        last = reqs[client, c.num_rounds]
        toks = np.concatenate([last.prompt, last.output])
        assert toks.min() >= 0 and toks.max() < c.vocab_size
        seen.append(set(toks.tolist()))
    for i in range(len(seen)):
        for j in range(i + 1, len(seen)):
            assert not seen[i] & seen[j], (i, j)


def test_outputs_are_fresh_per_round():
    c = cfg(num_clients=1, num_rounds=3, vocab_size=10**9, output_length=16)
    reqs = by_key(MultiTurnWorkload(c))
    outs = [reqs[0, r].output for r in (1, 2, 3)]
    assert not np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[1], outs[2])


# ---------------------------------------------------------------- page keys
@pytest.mark.parametrize("page_size", [1, 7, 64, 100, 128, 1000])
@pytest.mark.parametrize("output_length", [0, 16])
def test_page_keys_equal_keys_computed_from_scratch(page_size, output_length):
    c = cfg(page_size=page_size, output_length=output_length, num_rounds=6, num_clients=3)
    for q in MultiTurnWorkload(c):
        assert q.page_keys.dtype == np.uint64
        assert len(q.page_keys) == len(q.prompt) // page_size
        expect, _ = page_keys(q.prompt, page_size)
        assert np.array_equal(q.page_keys, expect), (q.session_id, q.round)


def test_page_keys_of_a_round_extend_the_previous_rounds_keys():
    reqs = by_key(MultiTurnWorkload(cfg(page_size=7)))
    k1, k2 = reqs[2, 1].page_keys, reqs[2, 2].page_keys
    assert np.array_equal(k2[: len(k1)], k1)
    assert np.shares_memory(k1, k2)


# ---------------------------------------------------------------- determinism
def flat(workload):
    return [(q.rid, q.session_id, q.round, q.prompt.tobytes(), q.output.tobytes(),
             q.page_keys.tobytes(), q.arrival_s) for q in workload]


def test_same_seed_same_stream_and_iterating_twice_repeats_it():
    c = cfg(ready_queue_policy="random", request_rate=10.0)
    w = MultiTurnWorkload(c)
    assert flat(w) == flat(MultiTurnWorkload(cfg(ready_queue_policy="random", request_rate=10.0)))
    assert flat(w) == flat(w)


def test_different_seeds_differ():
    a = by_key(MultiTurnWorkload(cfg(seed=1)))
    b = by_key(MultiTurnWorkload(cfg(seed=2)))
    for key in a:
        assert not np.array_equal(a[key].prompt, b[key].prompt)


def test_tokens_do_not_depend_on_the_replay_order():
    base = by_key(MultiTurnWorkload(cfg()))
    for kw in (dict(ready_queue_policy="random"), dict(round_barrier=False, request_rate=3.0),
               dict(round_barrier=False, ready_queue_policy="random", request_rate=1.0)):
        other = by_key(MultiTurnWorkload(cfg(**kw)))
        assert other.keys() == base.keys()
        for key, q in base.items():
            assert np.array_equal(other[key].prompt, q.prompt)
            assert np.array_equal(other[key].output, q.output)
            assert np.array_equal(other[key].page_keys, q.page_keys)


def test_a_client_does_not_depend_on_the_number_of_rounds():
    short = by_key(MultiTurnWorkload(cfg(num_rounds=2)))
    long = by_key(MultiTurnWorkload(cfg(num_rounds=5)))
    for key, q in short.items():
        assert np.array_equal(long[key].prompt, q.prompt)


# ---------------------------------------------------------------- order
def order(workload):
    return [(q.round, q.session_id) for q in workload]


def test_rids_are_replay_positions():
    assert [q.rid for q in MultiTurnWorkload(cfg())] == list(range(20))


def test_round_barrier_fifo_order():
    c = cfg(num_clients=3, num_rounds=3)
    assert order(MultiTurnWorkload(c)) == [(r, k) for r in (1, 2, 3) for k in (0, 1, 2)]


def test_round_barrier_random_order_is_a_seeded_permutation_per_round():
    c = cfg(num_clients=8, num_rounds=6, ready_queue_policy="random")
    got = order(MultiTurnWorkload(c))
    rounds = [got[i * 8 : (i + 1) * 8] for i in range(6)]
    perms = []
    for i, chunk in enumerate(rounds):
        assert {r for r, _ in chunk} == {i + 1}  # the barrier holds
        perm = [k for _, k in chunk]
        assert sorted(perm) == list(range(8))
        perms.append(perm)
    assert any(p != list(range(8)) for p in perms)  # not fifo
    assert len({tuple(p) for p in perms}) > 1  # drawn per round
    assert got == order(MultiTurnWorkload(c))
    assert got != order(MultiTurnWorkload(cfg(num_clients=8, num_rounds=6, ready_queue_policy="random",
                                               seed=8)))


def test_barrier_arrivals_start_at_zero_and_never_decrease():
    for policy in ("fifo", "random"):
        c = cfg(num_clients=10, request_rate=5.0, ready_queue_policy=policy)
        t = [q.arrival_s for q in MultiTurnWorkload(c)]
        assert t[0] == 0.0
        assert all(a <= b for a, b in zip(t, t[1:]))


def test_first_round_arrivals_are_poisson_at_request_rate():
    c = MultiTurnConfig(num_clients=4000, num_rounds=1, request_length=1, output_length=0,
                        request_rate=50.0, page_size=1, vocab_size=4000)
    t = np.array([q.arrival_s for q in MultiTurnWorkload(c)])
    gaps = np.diff(t)
    assert t[0] == 0.0 and (gaps >= 0).all()
    assert abs(gaps.mean() * 50.0 - 1.0) < 0.1  # mean gap 1/rate
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.1  # exponential: cv = 1


@pytest.mark.parametrize("barrier", [True, False])
def test_infinite_rate_sends_everything_at_once(barrier):
    c = cfg(request_rate=math.inf, round_barrier=barrier)
    w = MultiTurnWorkload(c)
    assert all(q.arrival_s == 0.0 for q in w)
    assert order(w) == order(MultiTurnWorkload(cfg()))  # no clock: round-major, client order


@pytest.mark.parametrize("policy", ["fifo", "random"])
def test_without_barrier_requests_come_in_ready_time_order(policy):
    c = cfg(num_clients=12, num_rounds=8, round_barrier=False, request_rate=4.0,
            ready_queue_policy=policy)
    w = MultiTurnWorkload(c)
    reqs = list(w)
    first = {q.session_id: q.arrival_s for q in reqs if q.round == 1}
    period = c.num_clients / c.request_rate
    for q in reqs:
        assert q.arrival_s == pytest.approx(first[q.session_id] + (q.round - 1) * period)
    t = [q.arrival_s for q in reqs]
    assert all(a <= b for a, b in zip(t, t[1:]))
    # each client's rounds in order
    last = {}
    for q in reqs:
        assert q.round == last.get(q.session_id, 0) + 1
        last[q.session_id] = q.round
    # round-1 dispatch follows the ready-queue policy and Poisson times
    disp = w.dispatch_times()
    r1 = [q for q in reqs if q.round == 1]
    assert [q.session_id for q in r1] == w.round_order(1).tolist()
    assert [q.arrival_s for q in r1] == disp.tolist()


def test_without_barrier_rounds_overlap_where_dispatch_runs_past_the_period():
    # Round r+1 of the first client is ready one period (N / rate) after its round r; when the
    # round-1 Poisson dispatch of all N clients takes longer than that, rounds overlap.
    for seed in range(50):
        c = cfg(num_clients=48, num_rounds=4, round_barrier=False, request_rate=64.0,
                vocab_size=48_000, seed=seed)
        w = MultiTurnWorkload(c)
        if w.dispatch_times()[-1] > c.num_clients / c.request_rate:
            break
    else:
        pytest.fail("no seed in 0..49 gives a dispatch longer than the period")
    got = [q.round for q in w]
    assert got != sorted(got)  # a round r+1 request comes before a round r request
    barrier = cfg(num_clients=48, num_rounds=4, request_rate=64.0, vocab_size=48_000, seed=seed)
    assert [q.round for q in MultiTurnWorkload(barrier)] == sorted(got)


def test_without_barrier_ties_break_by_round_then_client():
    c = cfg(num_clients=3, num_rounds=2, round_barrier=False, request_rate=math.inf)
    assert order(MultiTurnWorkload(c)) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]


def test_schedule_matches_iteration():
    w = MultiTurnWorkload(cfg(round_barrier=False, ready_queue_policy="random", request_rate=2.0))
    clients, rounds, times = w.schedule()
    reqs = list(w)
    assert clients.tolist() == [q.session_id for q in reqs]
    assert rounds.tolist() == [q.round for q in reqs]
    assert times.tolist() == [q.arrival_s for q in reqs]


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("kw", [dict(), dict(output_length=0), dict(num_rounds=1),
                                dict(num_clients=1, num_rounds=9, request_length=3, output_length=5)])
def test_len_and_total_prompt_tokens_closed_form(kw):
    w = MultiTurnWorkload(cfg(**kw))
    reqs = list(w)
    assert len(w) == len(reqs)
    assert w.total_prompt_tokens() == sum(len(q.prompt) for q in reqs)


def test_default_config_totals_without_generation():
    w = MultiTurnWorkload()
    c = w.config
    assert (c.num_clients, c.num_rounds, c.request_length, c.output_length) == (48, 60, 4096, 16)
    assert len(w) == 48 * 60
    assert w.total_prompt_tokens() == 48 * sum(r * 4096 + (r - 1) * 16 for r in range(1, 61))


# ---------------------------------------------------------------- validation
BAD = [
    ("num_clients", 0), ("num_clients", -1), ("num_clients", 2.0), ("num_clients", True),
    ("num_rounds", 0), ("num_rounds", "3"),
    ("request_length", 0), ("request_length", 1.5),
    ("output_length", -1), ("output_length", None),
    ("max_parallel", 0), ("max_parallel", 1.0),
    ("request_rate", 0.0), ("request_rate", -1.0), ("request_rate", math.nan), ("request_rate", "64"),
    ("request_rate", True),
    ("round_barrier", 1), ("round_barrier", "yes"),
    ("ready_queue_policy", "lifo"), ("ready_queue_policy", "FIFO"), ("ready_queue_policy", None),
    ("seed", -1), ("seed", 1.0),
    ("page_size", 0), ("page_size", 64.0),
    ("vocab_size", 0), ("vocab_size", 47), ("vocab_size", 2**62 + 1),
]


@pytest.mark.parametrize("field,value", BAD)
def test_bad_config_field_raises_naming_it(field, value):
    with pytest.raises(ValueError, match=rf"MultiTurnConfig\.{field} must be"):
        MultiTurnConfig(**{field: value})


def test_too_long_conversation_is_rejected():
    with pytest.raises(ValueError, match="num_rounds x"):
        MultiTurnConfig(num_rounds=100_000, request_length=4096)


def test_config_is_frozen_and_keyword_only():
    c = MultiTurnConfig()
    with pytest.raises(AttributeError):
        c.num_clients = 3
    with pytest.raises(TypeError):
        MultiTurnConfig(48)
    with pytest.raises(TypeError):
        MultiTurnWorkload({"num_clients": 3})


def test_good_edge_values_are_accepted():
    c = MultiTurnConfig(request_rate=math.inf, output_length=0, num_clients=1, num_rounds=3,
                        vocab_size=1, ready_queue_policy="random", round_barrier=False, seed=0)
    reqs = list(MultiTurnWorkload(c))
    assert [len(q.prompt) for q in reqs] == [4096, 8192, 12288]
    assert (reqs[-1].prompt == 0).all()  # one client owning the whole (one-token) vocabulary


# ---------------------------------------------------------------- purity
def test_importing_workloads_loads_no_heavy_module():
    code = ("import sys, scenarios.workloads; "
            "print(sorted(m for m in ('simpy','torch','matplotlib','pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
