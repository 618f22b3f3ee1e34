"""Agentic multi-session workload (scenarios/agentic.py): prompt chains, sharing, sub-agent
forks, close events, timeline, concurrency cap, determinism, trace round trip, errors."""
import math

import numpy as np
import pytest

from scenarios.agentic import AgenticClose, AgenticConfig, AgenticRequest, AgenticWorkload
from scenarios.traces import JsonlTrace, TraceEvent, TraceRequest


def cfg(**kw):
    base = dict(num_sessions=6, concurrency=2, system_prompt_tokens=64, repo_context_tokens=(50, 200),
                turns=(2, 8), tool_output_tokens=(5, 40), output_tokens=(3, 20), subagent_prob=0.3,
                arrival_rate=2.0, vocab_size=100_000, seed=7)
    base.update(kw)
    return AgenticConfig(**base)


def records(c):
    return list(AgenticWorkload(c))


def by_session(recs):
    """{session: [requests in turn order]}, {session: close record}."""
    reqs, closes = {}, {}
    for r in recs:
        if isinstance(r, AgenticRequest):
            reqs.setdefault(r.session_id, []).append(r)
        else:
            assert isinstance(r, AgenticClose)
            assert r.session_id not in closes
            closes[r.session_id] = r
    return reqs, closes


@pytest.fixture(scope="module", params=[7, 8, 9])
def small(request):
    c = cfg(seed=request.param)
    w = AgenticWorkload(c)
    recs = list(w)
    return c, w, recs


# ---------------------------------------------------------------- prompts
def test_prompt_of_next_turn_starts_with_prompt_plus_output(small):
    c, w, recs = small
    reqs, _ = by_session(recs)
    for sid, qs in reqs.items():
        assert [q.turn for q in qs] == list(range(1, len(qs) + 1))
        for q in qs:
            assert q.prompt.dtype == np.int64 and q.output.dtype == np.int64
            assert c.output_tokens[0] <= len(q.output) <= c.output_tokens[1]
        for a, b in zip(qs, qs[1:]):
            head = len(a.prompt) + len(a.output)
            assert np.array_equal(b.prompt[: len(a.prompt)], a.prompt)
            assert np.array_equal(b.prompt[len(a.prompt) : head], a.output)
            assert c.tool_output_tokens[0] <= len(b.prompt) - head <= c.tool_output_tokens[1]


def test_every_prompt_starts_with_the_same_system_prompt(small):
    c, w, recs = small
    reqs = [r for r in recs if isinstance(r, AgenticRequest)]
    S = c.system_prompt_tokens
    system = reqs[0].prompt[:S]
    assert len(system) == S
    for q in reqs:
        assert np.array_equal(q.prompt[:S], system)
    # the first turn of a top-level session: system + repo context + task statement
    for p in w.sessions():
        if not p.is_subagent:
            first = next(q for q in reqs if q.session_id == p.session_id)
            assert c.repo_context_tokens[0] <= p.context <= c.repo_context_tokens[1]
            assert len(first.prompt) - S - p.context == p.tool[0]


def own_tokens(w, reqs):
    """{session: the tokens it wrote itself (beyond the system prompt / the fork)}."""
    out = {}
    for p in w.sessions():
        last = reqs[p.session_id][-1]
        out[p.session_id] = np.concatenate([last.prompt[p.inherited :], last.output])
    return out


def test_sessions_share_nothing_beyond_system_prompt_and_forks(small):
    c, w, recs = small
    reqs, _ = by_session(recs)
    plans = w.sessions()
    assert any(p.is_subagent for p in plans), "the small config should fork sub-agents"
    own = own_tokens(w, reqs)
    system = set(reqs[0][0].prompt[: c.system_prompt_tokens].tolist())
    seen = set(system)
    for sid, toks in own.items():
        s = set(toks.tolist())
        assert not (s & seen), f"session {sid} reuses tokens of another session"
        seen |= s
    # top-level sessions: exactly the system prompt in common
    tops = [p.session_id for p in plans if not p.is_subagent]
    for a in tops:
        for b in tops:
            if a < b:
                pa, pb = reqs[a][0].prompt, reqs[b][0].prompt
                n = min(len(pa), len(pb))
                diff = np.flatnonzero(pa[:n] != pb[:n])
                assert diff[0] == c.system_prompt_tokens


def test_subagent_starts_with_parent_context_at_fork(small):
    c, w, recs = small
    reqs, closes = by_session(recs)
    for p in w.sessions():
        if not p.is_subagent:
            assert p.parent is None and p.fork_turn is None and p.inherited == c.system_prompt_tokens
            continue
        assert p.session_id >= c.num_sessions
        assert c.subagent_turns[0] <= p.turns <= c.subagent_turns[1]
        parent_turns = reqs[p.parent]
        assert 1 <= p.fork_turn < len(parent_turns)  # never after the parent's last turn
        at_fork = parent_turns[p.fork_turn - 1]
        ctx = np.concatenate([at_fork.prompt, at_fork.output])
        first = reqs[p.session_id][0]
        assert p.inherited == len(ctx)
        assert np.array_equal(first.prompt[: len(ctx)], ctx)
        assert len(first.prompt) > len(ctx)
        # it starts when the parent's turn finishes, and the parent waits for its close
        assert first.timestamp_ms > at_fork.timestamp_ms
        assert parent_turns[p.fork_turn].timestamp_ms >= closes[p.session_id].timestamp_ms
        # beyond the fork it diverges from the parent's later context at once
        nxt = parent_turns[p.fork_turn].prompt
        assert np.array_equal(nxt[: len(ctx)], ctx)
        assert first.prompt[len(ctx)] != nxt[len(ctx)]


# ---------------------------------------------------------------- events and time
def test_one_close_per_session_after_its_last_request(small):
    c, w, recs = small
    reqs, closes = by_session(recs)
    assert set(closes) == set(reqs) == {p.session_id for p in w.sessions()}
    closed = set()
    for r in recs:
        if isinstance(r, AgenticClose):
            closed.add(r.session_id)
        else:
            assert r.session_id not in closed, "request after its session's close"
    for sid, qs in reqs.items():
        assert closes[sid].timestamp_ms > qs[-1].timestamp_ms
        assert closes[sid].timestamp_ms == w.sessions()[sid].close_ms


def test_timestamps_non_decreasing_and_rids_in_order(small):
    c, w, recs = small
    ts = [r.timestamp_ms for r in recs]
    assert all(isinstance(t, int) for t in ts)
    assert ts == sorted(ts)
    rids = [r.rid for r in recs if isinstance(r, AgenticRequest)]
    assert rids == list(range(len(rids)))


def test_timeline_model(small):
    """time(t+1) = time(t) + service(t) [+ sub-agent run] + think(t), think in the range."""
    c, w, recs = small
    reqs, closes = by_session(recs)
    forks = {(p.parent, p.fork_turn): p.session_id for p in w.sessions() if p.is_subagent}
    lo, hi = (round(x * 1000) for x in c.think_time_s)
    for sid, qs in reqs.items():
        for a, b in zip(qs, qs[1:]):
            service = max(1, round((c.service_base_s + c.service_s_per_output_token * len(a.output)) * 1000))
            ready = a.timestamp_ms + service
            sub = forks.get((sid, a.turn))
            if sub is not None:
                assert reqs[sub][0].timestamp_ms == ready
                ready = closes[sub].timestamp_ms
            assert lo <= b.timestamp_ms - ready <= hi


def test_concurrency_cap_holds_and_binds():
    for c in (cfg(), cfg(arrival_rate=math.inf, concurrency=3, num_sessions=8), cfg(concurrency=1)):
        w = AgenticWorkload(c)
        top = {p.session_id for p in w.sessions() if not p.is_subagent}
        active, peak, started = set(), 0, set()
        for r in w:
            if r.session_id not in top:
                continue
            if isinstance(r, AgenticClose):
                active.remove(r.session_id)
            elif r.session_id not in started:
                started.add(r.session_id)
                active.add(r.session_id)
                peak = max(peak, len(active))
                assert len(active) <= c.concurrency
        assert not active and started == top
        if math.isinf(c.arrival_rate):
            assert peak == c.concurrency  # everyone arrives at 0: the cap is what limits


def test_sessions_start_in_arrival_order_fifo():
    w = AgenticWorkload(cfg(concurrency=1))
    starts = [p.request_ms[0] for p in w.sessions() if not p.is_subagent]
    closes = [p.close_ms for p in w.sessions() if not p.is_subagent]
    assert starts == sorted(starts)
    for k in range(1, len(starts)):  # one at a time: each starts no earlier than the last close
        assert starts[k] >= closes[k - 1]


# ---------------------------------------------------------------- determinism and trace
def test_same_seed_same_bytes_different_seed_differs(tmp_path):
    a, b, d = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "d.jsonl"
    na = AgenticWorkload(cfg()).write_trace(a)
    AgenticWorkload(cfg()).write_trace(b)
    AgenticWorkload(cfg(seed=8)).write_trace(d)
    assert na == a.stat().st_size
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != d.read_bytes()
    w = AgenticWorkload(cfg())
    first, second = list(w), list(w)  # iterating twice gives the same records
    assert len(first) == len(second)
    for x, y in zip(first, second):
        assert type(x) is type(y) and x.session_id == y.session_id and x.timestamp_ms == y.timestamp_ms
        if isinstance(x, AgenticRequest):
            assert np.array_equal(x.prompt, y.prompt) and np.array_equal(x.output, y.output)


def test_views_are_read_only():
    q = next(r for r in AgenticWorkload(cfg()) if isinstance(r, AgenticRequest))
    for a in (q.prompt, q.output):
        with pytest.raises(ValueError):
            a[:1] = 0


def test_write_trace_round_trips_through_jsonl_trace(tmp_path):
    c = cfg()
    path = tmp_path / "t.jsonl"
    AgenticWorkload(c).write_trace(path)
    text = path.read_text()
    assert ", " not in text and ": " not in text  # compact JSON
    recs = records(c)
    back = list(JsonlTrace(path))
    assert len(back) == len(recs)
    for r, t in zip(recs, back):
        if isinstance(r, AgenticClose):
            assert isinstance(t, TraceEvent)
            assert (t.kind, t.session_id, t.timestamp_ms) == ("close_session", r.session_id, r.timestamp_ms)
        else:
            assert isinstance(t, TraceRequest)
            assert (t.rid, t.session_id, t.timestamp_ms) == (r.rid, r.session_id, r.timestamp_ms)
            assert np.array_equal(t.prompt, r.prompt)
            assert np.array_equal(t.output_tokens, r.output)
            assert t.output_length == len(r.output)


def test_summary_counts_match_the_records(small):
    c, w, recs = small
    reqs = [r for r in recs if isinstance(r, AgenticRequest)]
    s = w.summary()
    assert s["sessions"] == c.num_sessions
    assert s["sub_agents"] == len({r.session_id for r in reqs}) - c.num_sessions
    assert s["requests"] == len(reqs)
    assert s["close_events"] == sum(isinstance(r, AgenticClose) for r in recs)
    assert s["total_prompt_tokens"] == sum(len(q.prompt) for q in reqs)
    assert s["output_tokens"] == sum(len(q.output) for q in reqs)
    assert s["max_prompt_tokens"] == max(len(q.prompt) for q in reqs)
    # unique = number of distinct prompt prefixes (token trie size): sorted, minus neighbour LCPs
    prompts = sorted(tuple(q.prompt.tolist()) for q in reqs)
    unique, prev = 0, ()
    for p in prompts:
        lcp = 0
        for x, y in zip(prev, p):
            if x != y:
                break
            lcp += 1
        unique += len(p) - lcp
        prev = p
    assert s["unique_prompt_tokens"] == unique
    assert s["reusable_tokens_upper_bound"] == s["total_prompt_tokens"] - unique


def test_no_subagents_when_probability_zero():
    w = AgenticWorkload(cfg(subagent_prob=0.0))
    assert not any(p.is_subagent for p in w.sessions())
    assert w.summary()["sub_agents"] == 0


def test_default_trace_size(tmp_path):
    w = AgenticWorkload()
    s = w.summary()
    assert s["sessions"] == 16 and s["requests"] <= 1500
    n = w.write_trace(tmp_path / "default.jsonl")
    assert n < 60e6


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("field, value", [
    ("seed", -1), ("seed", 1.5), ("num_sessions", 0), ("num_sessions", True), ("concurrency", 0),
    ("system_prompt_tokens", -1), ("repo_context_tokens", (5, 4)), ("repo_context_tokens", (-1, 4)),
    ("repo_context_tokens", 7), ("turns", (0, 3)), ("turns", (1, 2, 3)), ("turns", (1.0, 3)),
    ("tool_output_tokens", (0, 10)), ("output_tokens", (0, 10)), ("output_tokens", (10, 5)),
    ("think_time_s", (0, 5)), ("think_time_s", (2, 1)), ("think_time_s", (1, math.inf)),
    ("think_time_s", (1, math.nan)), ("subagent_prob", 1.5), ("subagent_prob", -0.1),
    ("subagent_prob", math.nan), ("subagent_turns", (0, 5)), ("arrival_rate", 0),
    ("arrival_rate", -1.0), ("arrival_rate", math.nan), ("service_base_s", -1),
    ("service_s_per_output_token", math.inf), ("vocab_size", 0), ("vocab_size", 2**62 + 1),
    ("vocab_size", 5),
])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"AgenticConfig.{field} "):
        cfg(**{field: value})


def test_config_accepts_lists_and_normalises_ranges():
    c = cfg(turns=[3, 3], think_time_s=(1, 2))
    assert c.turns == (3, 3) and c.think_time_s == (1.0, 2.0)
    w = AgenticWorkload(c)
    assert all(p.turns == 3 for p in w.sessions() if not p.is_subagent)


def test_vocab_too_small_for_subagents():
    with pytest.raises(ValueError, match="AgenticConfig.vocab_size .* too small"):
        AgenticWorkload(cfg(vocab_size=7, subagent_prob=1.0)).summary()


def test_prompt_limit_and_type_errors():
    with pytest.raises(ValueError, match="AgenticConfig.turns"):
        cfg(turns=(1, 10**6), tool_output_tokens=(1, 10**3))
    with pytest.raises(TypeError):
        AgenticWorkload(object())


def test_swe_agent_lengths_follow_the_published_fit():
    """`lengths: lognormal` with the SWE_AGENT fit: turns median ~36 (published p50 36, p95 87),
    deepest prompt median ~26k tokens (published p50 max-ISL 23,840); exact for this seed."""
    from scenarios.agentic import SWE_AGENT

    w = AgenticWorkload(AgenticConfig(num_sessions=400, concurrency=400, subagent_prob=0.0, **SWE_AGENT))
    ss = w.sessions()
    turns = np.array([s.turns for s in ss])
    tool = np.concatenate([s.tool for s in ss])
    assert (turns.min(), turns.max(), float(np.median(turns))) == (12, 105, 35.0)
    assert (tool.min(), tool.max(), float(np.median(tool))) == (40, 2000, 285.0)
    assert float(np.median([int(s.prompt_end[-1]) for s in ss])) == 25942.5
    assert float(np.median(np.concatenate([s.think_ms for s in ss]))) == 1714.5
    uniform = AgenticWorkload(AgenticConfig(num_sessions=400, concurrency=400, subagent_prob=0.0,
                                            **{**SWE_AGENT, "lengths": "uniform"})).sessions()
    assert float(np.median([s.turns for s in uniform])) != 35.0  # the switch changes the draws


def test_lengths_must_be_a_known_shape():
    with pytest.raises(ValueError, match=r"AgenticConfig.lengths must be one of uniform, lognormal, got 'pareto'"):
        AgenticConfig(lengths="pareto")


def test_the_scenario_key_lengths_takes_its_shapes_from_agentic():
    """One source: workload.lengths (scenarios/schema.py) is AgenticConfig's LENGTHS and default."""
    from scenarios.agentic import LENGTHS
    from scenarios.schema import WORKLOAD_SCHEMAS

    default, (_, shapes), expected = WORKLOAD_SCHEMAS["agentic"]["lengths"]
    assert shapes is LENGTHS and (default, expected) == (AgenticConfig().lengths, "uniform or lognormal")
