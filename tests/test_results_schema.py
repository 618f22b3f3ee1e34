"""The result schema of `radixsim replay` (DESIGN.md "Result schema") on tiny hand-written
traces whose per-request cached tokens are worked out by hand from the replay rules a-e in
cache_core/replay.py; and the hash_ids expansion of the trace reader (DESIGN.md "Trace format").
"""
import csv
import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import radixsim
from radixsim.cli import main
from scenarios.traces import DEFAULT_BLOCK_SIZE, JsonlTrace, TraceEvent, TraceRequest

ROOT = Path(__file__).resolve().parent.parent

# DESIGN.md, "Result schema", verbatim order
DESIGN_REQUEST_COLUMNS = [
    "rid", "session_id", "round", "arrival_s", "start_s", "first_token_s", "finish_s", "ttft_s",
    "queue_s", "load_s", "compute_s", "prompt_tokens", "output_tokens", "cached_tokens",
    "cached_device", "cached_host", "cached_storage", "evicted_tokens", "rejected",
]
# beyond DESIGN.md: the miss split (issue "policy research kit"): cold + evicted_miss + cached = prompt
MISS_COLUMNS = ["cold_tokens", "evicted_miss_tokens"]
TIME_COLUMNS = ["round", "arrival_s", "start_s", "first_token_s", "finish_s", "ttft_s", "queue_s",
                "load_s", "compute_s"]
DESIGN_SUMMARY_KEYS = [
    "requests", "total_prompt_tokens", "total_cached_tokens", "hit_rate", "hit_rate_device",
    "hit_rate_host", "hit_rate_storage", "hit_rate_last10", "effective_input_tps", "duration_s",
    "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s", "e2e_p50_s", "rejected",
]
CLOCK_SUMMARY_KEYS = ["hit_rate_last10", "effective_input_tps", "duration_s", "ttft_mean_s", "ttft_p50_s",
                      "ttft_p90_s", "ttft_p99_s", "tpot_mean_s", "e2e_p50_s"]

# Four requests, an event and a blank line.
#   A: tokens 0..9, output [100, 101, 102]       -> S = 0..9,100,101 (12 tokens)
#   B: hash_ids [0, 1], B=4, input_length 7      -> prompt 0..6; output_length 2 -> S = 0..6,f1 (8)
#   C: tokens 0..9,100,101,55, session "s"       -> S = prompt (13)
#   D: hash_ids [0, 1, 2] (block 4 from line 2)  -> prompt 0..11; output_length 1 -> S = prompt (12)
TRACE = """\
{"tokens": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "output_tokens": [100, 101, 102]}
{"hash_ids": [0, 1], "block_size": 4, "input_length": 7, "output_length": 2}

{"tokens": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 101, 55], "session_id": "s"}
{"event": "close_session", "session_id": "s"}
{"hash_ids": [0, 1, 2], "output_length": 1}
"""
PROMPT = [10, 7, 13, 12]
OUTPUT = [3, 2, 0, 1]

# Page 1, unbounded. (a) match limit = len(prompt) - 1.
#   A: empty tree -> 0. Inserts S (12) and splits at the prompt end (10).
#   B: limit 6; 0..5 matched -> 6. Inserts 0..6,f1 (new leaf f1 after 0..6).
#   C: limit 12; 0..9 then 100,101 -> 12. Inserts leaf 55.
#   D: limit 11; 0..9 then 10 differs from 100 -> 10. Inserts leaf 10,11.
CACHED_P1 = [0, 6, 12, 10]
# Tree at the end holds 0..9 (10) + 100,101 + f1 + 55 + 10,11 = 16 tokens, in 7 nodes + root:
# [0..5] (split by B's match at 6), [6] (split by B's insert at 7), [7,8,9], [100,101], [f1], [55],
# [10,11].
TREE_TOKENS_P1, NODES_P1 = 16, 8
# Page 4, unbounded. (a) match limit = floor((len(prompt) - 1) / 4) * 4.
#   A: limit 8, empty -> 0. Inserts 12 (3 pages), prompt cut 8 < 12 -> split at 8.
#   B: limit 4 -> [0..3] -> 4. S = 0..6,f1 (8): page 4..6,f1 differs from 4..7 -> new leaf.
#   C: limit 12 -> [0..3],[4..7],[8,9,100,101] -> 12. S cut to 12 pages: nothing new (55 is a
#      partial tail page).
#   D: limit 8 -> 8. Inserts page [8,9,10,11].
CACHED_P4 = [0, 4, 12, 8]
# Tree: [0..3], [4..7], [8,9,100,101], [4,5,6,f1], [8,9,10,11] = 20 tokens, 5 nodes + root.
TREE_TOKENS_P4, NODES_P4 = 20, 6


def write_trace(tmp_path, text=TRACE, name="trace.jsonl"):
    p = tmp_path / name
    p.write_text(text)
    return p


def replay(tmp_path, trace, out_name, *extra):
    out = tmp_path / out_name
    rc = main(["replay", str(trace), "--out", str(out), "--no-progress", *extra])
    assert rc == 0
    return out


def read_csv(out):
    with open(out / "requests.csv", newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]], rows


# -- requests.csv ----------------------------------------------------------------------------
def test_request_columns_match_design(tmp_path):
    out = replay(tmp_path, write_trace(tmp_path), "o")
    header, _, _ = read_csv(out)
    assert header == DESIGN_REQUEST_COLUMNS + MISS_COLUMNS
    assert radixsim.results.REQUEST_COLUMNS == DESIGN_REQUEST_COLUMNS + MISS_COLUMNS
    assert (out / "requests.csv").read_text().splitlines()[0] == ",".join(DESIGN_REQUEST_COLUMNS + MISS_COLUMNS)


@pytest.mark.parametrize("page,cached", [(1, CACHED_P1), (4, CACHED_P4)])
def test_requests_rows_exact(tmp_path, page, cached):
    out = replay(tmp_path, write_trace(tmp_path), "o", "--page-size", str(page))
    _, rows, raw = read_csv(out)
    assert len(raw) == 1 + 4
    assert all(len(r) == len(DESIGN_REQUEST_COLUMNS) + len(MISS_COLUMNS) for r in raw)
    assert [r["rid"] for r in rows] == ["0", "1", "2", "3"]
    assert [r["session_id"] for r in rows] == ["", "", "s", ""]
    for r in rows:
        assert [r[c] for c in TIME_COLUMNS] == [""] * len(TIME_COLUMNS)
    assert [int(r["prompt_tokens"]) for r in rows] == PROMPT
    assert [int(r["output_tokens"]) for r in rows] == OUTPUT
    assert [int(r["cached_tokens"]) for r in rows] == cached
    assert [int(r["cached_device"]) for r in rows] == cached
    assert [r["cached_host"] for r in rows] == ["0"] * 4
    assert [r["cached_storage"] for r in rows] == ["0"] * 4
    assert [r["evicted_tokens"] for r in rows] == ["0"] * 4
    assert [r["rejected"] for r in rows] == ["0"] * 4
    # unbounded: nothing was ever evicted, so every miss is cold
    assert [int(r["cold_tokens"]) for r in rows] == [p - c for p, c in zip(PROMPT, cached)]
    assert [r["evicted_miss_tokens"] for r in rows] == ["0"] * 4


def test_requests_csv_exact_text_page4(tmp_path):
    out = replay(tmp_path, write_trace(tmp_path), "o", "--page-size", "4")
    empty = "," * (len(TIME_COLUMNS) + 1)  # the comma after session_id and after each time column
    assert (out / "requests.csv").read_text() == (
        ",".join(DESIGN_REQUEST_COLUMNS + MISS_COLUMNS) + "\n"
        f"0,{empty}10,3,0,0,0,0,0,0,10,0\n"
        f"1,{empty}7,2,4,4,0,0,0,0,3,0\n"
        f"2,s{empty}13,0,12,12,0,0,0,0,1,0\n"
        f"3,{empty}12,1,8,8,0,0,0,0,4,0\n"
    )


# Capacity 10 tokens, page 1, LRU: eviction and locking, worked by hand.
#   A 0..5: 0 cached; free 10 -> 4.
#   B 10..15: 0 cached; free 4 < 6 -> evict A's leaf (6). free 10 -> 4.
#   C 10,11,12,0: limit 3 -> 3 cached (B's node split at 3); n = 1, free 4. Leaf [0]. free 3.
#   D 0..5: 0 cached (evicted); free 3 < 6 -> evict 3: LRU leaf is [13,14,15] (B's lower half,
#      older than C's leaf [0]) -> 3. free 6 -> 0.
#   E 10,11,12,0,7: limit 4 -> 4 cached (path locked); free 0 < 1 -> evict 1: the only
#      unlocked leaf is D's 0..5 -> 6. free 6 -> 5.
CAP_TRACE = """\
{"tokens": [0, 1, 2, 3, 4, 5]}
{"tokens": [10, 11, 12, 13, 14, 15]}
{"tokens": [10, 11, 12, 0]}
{"tokens": [0, 1, 2, 3, 4, 5]}
{"tokens": [10, 11, 12, 0, 7]}
"""


def test_bounded_capacity_rows_and_summary(tmp_path):
    out = replay(tmp_path, write_trace(tmp_path, CAP_TRACE), "o", "--capacity-tokens", "10")
    _, rows, _ = read_csv(out)
    assert [int(r["prompt_tokens"]) for r in rows] == [6, 6, 4, 6, 5]
    assert [int(r["cached_tokens"]) for r in rows] == [0, 0, 3, 0, 4]
    assert [int(r["evicted_tokens"]) for r in rows] == [0, 6, 0, 3, 6]
    assert [r["rejected"] for r in rows] == ["0"] * 5
    # "ever cached" = an unbounded replay's match: A 0, B 0, C 3 (B's 10,11,12), D 5 (A's 0..4,
    # evicted since: 5 evicted-miss tokens), E 4 (C's 10,11,12,0, still cached)
    assert [int(r["cold_tokens"]) for r in rows] == [6, 6, 1, 1, 1]
    assert [int(r["evicted_miss_tokens"]) for r in rows] == [0, 0, 0, 5, 0]
    s = json.loads((out / "summary.json").read_text())
    assert (s["cold_miss_tokens"], s["evicted_miss_tokens"]) == (15, 5)
    assert s["requests"] == 5
    assert s["total_prompt_tokens"] == 27
    assert s["total_cached_tokens"] == 7
    assert s["hit_rate"] == 7 / 27
    assert s["evicted_tokens"] == 15
    assert s["evictions"] == {"full": {"L1": 15}}
    assert s["rejected"] == 0
    assert s["cache"]["full"] == {"capacity_tokens": 10, "free_tokens": 5, "evictable_tokens": 5,
                                  "protected_tokens": 0, "evicted_tokens": 15, "evicted_nodes": 3}


def test_capacity_zero_is_refused_like_run(tmp_path, capsys):
    # below one page no request can ever be cached: replay refuses it as `radixsim run` does
    # (it used to accept it and reject every request; tests/test_input_checks.py has the cases)
    trace = write_trace(tmp_path, CAP_TRACE)
    assert main(["replay", str(trace), "--out", str(tmp_path / "o"), "--no-progress", "--capacity-tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "radixsim replay: --capacity-tokens: 0 tokens is less than one page (1); expected more\n"
    assert not (tmp_path / "o").exists()


# -- summary.json ----------------------------------------------------------------------------
@pytest.mark.parametrize("page,cached,tree_tokens,nodes", [(1, CACHED_P1, TREE_TOKENS_P1, NODES_P1),
                                                          (4, CACHED_P4, TREE_TOKENS_P4, NODES_P4)])
def test_summary_exact(tmp_path, page, cached, tree_tokens, nodes):
    out = replay(tmp_path, write_trace(tmp_path), "o", "--page-size", str(page))
    s = json.loads((out / "summary.json").read_text())
    keys = list(s)
    assert keys[: len(DESIGN_SUMMARY_KEYS)] == DESIGN_SUMMARY_KEYS
    assert set(keys[len(DESIGN_SUMMARY_KEYS):]) == {"mode", "evicted_tokens", "evictions", "bytes_per_link",
                                                   "cache", "cold_miss_tokens", "evicted_miss_tokens"}
    total_cached = sum(cached)
    assert s["mode"] == "replay"
    assert s["requests"] == 4
    assert s["total_prompt_tokens"] == 42
    assert s["total_cached_tokens"] == total_cached
    assert s["hit_rate"] == total_cached / 42
    assert s["hit_rate_device"] == total_cached / 42
    assert s["hit_rate_host"] == 0.0
    assert s["hit_rate_storage"] == 0.0
    for k in CLOCK_SUMMARY_KEYS:
        assert s[k] is None, k
    assert s["rejected"] == 0
    assert s["evicted_tokens"] == 0
    assert s["evictions"] == {"full": {"L1": 0}}
    assert s["bytes_per_link"] == {}
    assert s["cache"] == {
        "nodes": nodes, "page_size": page, "policy": "lru",
        "full": {"capacity_tokens": None, "free_tokens": None, "evictable_tokens": tree_tokens,
                 "protected_tokens": 0, "evicted_tokens": 0, "evicted_nodes": 0},
    }


def test_summary_of_no_requests_has_null_rates():
    """A summary of no requests has null rates, not 0/0 (a replay of an empty trace is refused
    before it writes anything: tests/test_tracebacks.py)."""
    from sim.recorder import totals

    s = totals([], [])
    assert (s["requests"], s["total_prompt_tokens"], s["total_cached_tokens"]) == (0, 0, 0)
    assert [s["hit_rate"], s["hit_rate_device"], s["hit_rate_host"], s["hit_rate_storage"]] == [None] * 4


def test_replay_of_an_events_only_trace_is_refused(tmp_path, capsys):
    trace = write_trace(tmp_path, '{"event": "close_session", "session_id": 1}\n')
    assert main(["replay", str(trace), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "no requests in the trace" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# -- config.yaml -----------------------------------------------------------------------------
def _git_head():
    if not (ROOT / ".git").exists():
        return None
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None if r.returncode == 0 else None


def test_config_yaml(tmp_path):
    trace = write_trace(tmp_path)
    out = replay(tmp_path, trace, "o", "--page-size", "4", "--capacity-tokens", "30", "--policy", "fifo",
                 "--block-size", "4")
    doc = yaml.safe_load((out / "config.yaml").read_text())
    assert doc["mode"] == "replay"
    assert doc["trace"] == str(trace)
    assert doc["trace_block_size"] == 4
    assert doc["cache"] == {"page_size": 4, "capacity_tokens": 30, "usable_tokens": 28, "policy": "fifo",
                            "components": ["full"]}
    prov = doc["provenance"]
    assert set(prov) == {"radixsim_version", "git_commit", "versions", "command", "seed"}
    assert prov["radixsim_version"] == radixsim.__version__
    assert prov["git_commit"] == _git_head()
    assert prov["versions"]["python"] == platform.python_version()
    assert prov["versions"]["numpy"] == np.__version__
    assert set(prov["versions"]) == {"python", "numpy", "simpy", "torch"}
    assert prov["seed"] is None


def test_config_yaml_command_subprocess(tmp_path):
    trace = write_trace(tmp_path)
    out = tmp_path / "o"
    args = ["replay", str(trace), "--page-size", "4", "--out", str(out), "--no-progress"]
    r = subprocess.run([sys.executable, "-m", "radixsim", *args], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout.startswith("4 requests, 42 prompt tokens, 24 cached (hit rate 0.571429), 0 evicted, "
                               "0 rejected in ")
    prov = yaml.safe_load((out / "config.yaml").read_text())["provenance"]
    assert prov["command"].endswith(" " + " ".join(args))


def test_config_yaml_command_inprocess(tmp_path):
    trace = write_trace(tmp_path)
    out = replay(tmp_path, trace, "o", "--page-size", "4")
    prov = yaml.safe_load((out / "config.yaml").read_text())["provenance"]
    assert prov["command"].endswith(f"replay {trace} --out {out} --no-progress --page-size 4")


# -- determinism -----------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--page-size", "4"], ["--capacity-tokens", "10", "--policy", "lfu"]])
def test_two_runs_byte_identical(tmp_path, extra):
    trace = write_trace(tmp_path, TRACE + CAP_TRACE)
    a = replay(tmp_path, trace, "a", *extra)
    b = replay(tmp_path, trace, "b", *extra)
    for name in ("summary.json", "requests.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


# -- hash_ids expansion (scenarios.traces.JsonlTrace) -----------------------------------------
def records(tmp_path, text, block_size=None):
    return list(JsonlTrace(write_trace(tmp_path, text, "h.jsonl"), block_size))


def test_hash_ids_expand_to_blocks_cut_to_input_length(tmp_path):
    (r,) = records(tmp_path, '{"hash_ids": [3, 0, 7], "block_size": 4, "input_length": 10}\n')
    assert isinstance(r, TraceRequest)
    assert r.prompt.dtype == np.int64
    assert r.prompt.tolist() == [12, 13, 14, 15, 0, 1, 2, 3, 28, 29]


def test_hash_ids_without_input_length_use_whole_blocks(tmp_path):
    (r,) = records(tmp_path, '{"hash_ids": [2, 2], "block_size": 3}\n')
    assert r.prompt.tolist() == [6, 7, 8, 6, 7, 8]


def test_hash_ids_default_block_size_512(tmp_path):
    assert DEFAULT_BLOCK_SIZE == 512
    (r,) = records(tmp_path, '{"hash_ids": [1, 0], "input_length": 514}\n')
    assert r.prompt.tolist() == list(range(512, 1024)) + [0, 1]


def test_hash_ids_block_size_from_constructor_and_carried_across_lines(tmp_path):
    text = '{"hash_ids": [1]}\n{"hash_ids": [5], "block_size": 2}\n{"hash_ids": [0, 9]}\n'
    rs = records(tmp_path, text, block_size=2)
    assert [r.prompt.tolist() for r in rs] == [[2, 3], [10, 11], [0, 1, 18, 19]]
    # without a constructor block size, the first line's block size holds for later lines
    rs = records(tmp_path, '{"hash_ids": [1], "block_size": 3}\n{"hash_ids": [1]}\n')
    assert [r.prompt.tolist() for r in rs] == [[3, 4, 5], [3, 4, 5]]


def test_trace_fields_and_aliases(tmp_path):
    text = (
        '{"input_ids": [5, 6], "output_ids": [7, 8, 9], "rid": "x", "session_id": 3, "timestamp": 1.5,'
        ' "priority": 2}\n'
        '{"event": "close_session", "session_id": 3, "timestamp": 4}\n'
        '{"tokens": [1], "output_len": 4}\n'
        '{"tokens": [2], "output_length": 0}\n'
        '{"tokens": [3]}\n'
    )
    a, ev, b, c, d = records(tmp_path, text)
    assert (a.rid, a.prompt.tolist(), a.output_tokens.tolist(), a.output_length) == ("x", [5, 6], [7, 8, 9], 3)
    assert (a.session_id, a.timestamp_ms, a.priority) == (3, 1.5, 2)
    assert ev == TraceEvent("close_session", 3, 4)
    assert (b.rid, b.output_tokens, b.output_length, b.session_id, b.timestamp_ms, b.priority) == (
        1, None, 4, None, None, None)
    assert (c.rid, c.output_tokens, c.output_length) == (2, None, 0)
    assert (d.rid, d.output_tokens, d.output_length) == (3, None, 0)
