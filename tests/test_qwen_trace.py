"""Alibaba's Qwen (Bailian) serving traces read by scenarios/traces.py: parsing and sessions
from the parent_chat_id chains (fixture tests/data/qwen_trace_sample.jsonl, written by hand in
the published schema: chat_id, parent_chat_id, timestamp in seconds, input_length,
output_length, type, turn, hash_ids of 16-token blocks)."""
import os

import numpy as np
import pytest

from scenarios.traces import JsonlTrace, TraceError

SAMPLE = os.path.join(os.path.dirname(__file__), "data", "qwen_trace_sample.jsonl")


def records():
    return list(JsonlTrace(SAMPLE))


def test_qwen_lines_become_requests_with_rids_times_and_lengths():
    recs = records()
    assert [(r.rid, r.timestamp_ms, len(r.prompt), r.output_length) for r in recs] == [
        (10, 500.0, 40, 8), (11, 1250.0, 20, 4), (14, 2000.0, 32, 16), (12, 3000.0, 70, 8), (15, 4500.0, 90, 2),
        (16, 5000.0, 48, 1)]
    first = recs[0].prompt
    assert np.array_equal(first, np.concatenate([np.arange(16, 32), np.arange(32, 48), np.arange(48, 56)]))
    assert np.array_equal(recs[3].prompt[:32], first[:32])  # hash ids 1, 2 shared: a 32-token prefix


def test_sessions_follow_the_parent_chain_to_the_first_turn():
    # 12 -> 10, 15 -> 12 -> 10; 14's parent 7 is not in the trace (before its start): 7 is the root
    assert [(r.rid, r.session_id) for r in records()] == [(10, 10), (11, 11), (14, 7), (12, 10), (15, 10), (16, 7)]


def test_a_qwen_trace_replays_with_sessions_known(tmp_path):
    from cache_core import CacheConfig, RadixCache, ReplayStepper

    cache = RadixCache(CacheConfig(page_size=16, capacity_tokens=4096, policy="session-next"))
    st = ReplayStepper(cache)
    hits = [st.step(r.prompt, session_id=r.session_id).cached_tokens for r in records()]
    # 11 shares block 1 with 10; 12 reuses 10's first two blocks (its third was cut at 40 tokens);
    # 15 reuses 12's first four; 16 reuses 14's 32 tokens (a 48-token prompt: the match stops a token short)
    assert hits == [0, 16, 0, 32, 64, 32]
    assert cache.policy.now == 6 and set(cache.sessions.sessions) == {10, 11, 7}


@pytest.mark.parametrize("line,problem", [
    ('{"chat_id": 1, "parent_chat_id": -2, "timestamp": 0, "turn": 1, "hash_ids": [1]}',
     "'parent_chat_id' must be >= -1, got -2"),
    ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "turn": 0, "hash_ids": [1]}',
     "'turn' must be >= 1, got 0"),
    ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": -1, "turn": 1, "hash_ids": [1]}',
     "'timestamp' must be a non-negative number of seconds, got -1"),
    ('{"chat_id": 1, "parent_chat_id": -1, "turn": 1, "hash_ids": [1]}',
     "'timestamp' must be a non-negative number of seconds, got null"),
    ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "turn": 1}', "Qwen trace line needs 'hash_ids'"),
    ('{"chat_id": "a", "parent_chat_id": -1, "timestamp": 0, "turn": 1, "hash_ids": [1]}',
     "'chat_id' must be an integer, got \"a\""),
    ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "turn": 1, "hash_ids": [1], "session_id": 3}',
     "'session_id' is not a field of a Qwen trace line (it has 'chat_id')"),
])
def test_bad_qwen_lines_name_the_file_line_and_field(tmp_path, line, problem):
    p = tmp_path / "t.jsonl"
    p.write_text('{"chat_id": 9, "parent_chat_id": -1, "timestamp": 0, "turn": 1, "hash_ids": [1]}\n' + line + "\n")
    with pytest.raises(TraceError) as e:
        list(JsonlTrace(p))
    assert str(e.value) == f"{p}:2: {problem}"
