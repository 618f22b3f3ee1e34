"""Open-loop sources in the simulator: timed JSONL traces, Azure CSVs, the agentic generator."""
from __future__ import annotations

import csv
import json

import pytest

from radixsim.cli import main
from scenarios.azure import read_azure
from scenarios.traces import TraceError

BASE = """seed: 3
model: qwen3-32b
hardware: h200x1
cache: {page_size: 16, l1_tokens: 20000}
engine: {max_running_requests: 4, chunked_prefill_tokens: 256}
"""


def run(tmp_path, text, name="s.yaml", sets=()):
    p = tmp_path / name
    p.write_text(text)
    out = tmp_path / "out"
    rc = main(["run", str(p), "--out", str(out), "--no-plots", "--no-progress", *sum((["--set", s] for s in sets), [])])
    return rc, out


def rows(out):
    with open(out / "requests.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_trace_arrivals_follow_timestamps_and_speedup(tmp_path):
    lines = [{"timestamp": 0, "session_id": "a", "tokens": list(range(200)), "output_length": 4},
             {"timestamp": 1500, "session_id": "b", "tokens": list(range(1000, 1100)), "output_length": 2},
             {"event": "close_session", "session_id": "a", "timestamp": 1600},
             {"timestamp": 4000, "session_id": "a", "tokens": list(range(200)) + [7] * 40, "output_length": 3}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    text = BASE + "workload: {kind: trace, path: t.jsonl, speedup: 2}\n"  # path relative to the scenario
    rc, out = run(tmp_path, text)
    assert rc == 0
    r = rows(out)
    assert [float(x["arrival_s"]) for x in r] == [0.0, 0.75, 2.0]
    assert [x["session_id"] for x in r] == ["a", "b", "a"]
    assert [int(x["cached_tokens"]) for x in r] == [0, 0, 192]  # 200 // 16 * 16 of the first prompt
    assert [int(x["output_tokens"]) for x in r] == [4, 2, 3]


def test_trace_scenario_errors_name_the_key(tmp_path, capsys):
    rc, _ = run(tmp_path, BASE + "workload: {kind: trace, path: missing.jsonl}\n")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "workload.path: missing.jsonl: no such file" in err[0]
    rc, _ = run(tmp_path, BASE + "workload: {kind: trace, path: x.jsonl, num_clients: 3}\n")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "workload.num_clients: unknown key" in err[0]
    (tmp_path / "bad.jsonl").write_text('{"tokens": [1, 2, 3]}\n{"tokens": "x"}\n')
    rc, _ = run(tmp_path, BASE + "workload: {kind: trace, path: bad.jsonl}\n")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "bad.jsonl:2:" in err[0] and "Traceback" not in err[0]


AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,300,10
2023-11-16 18:15:46.9805900,120,0
2023-11-16 18:15:48.1805900,300,5
"""


def test_azure_csv_reader_and_unique_prompts(tmp_path):
    p = tmp_path / "az.csv"
    p.write_text(AZURE)
    recs = list(read_azure(p))
    assert [(r.rid, r.prompt_tokens, r.output_tokens) for r in recs] == [(0, 300, 10), (1, 120, 0), (2, 300, 5)]
    assert [r.arrival_s for r in recs] == pytest.approx([0.0, 0.3, 1.5])
    rc, out = run(tmp_path, BASE + "workload: {kind: azure, path: az.csv}\n")
    assert rc == 0
    r = rows(out)
    assert [int(x["cached_tokens"]) for x in r] == [0, 0, 0]  # no prefix information: nothing shared
    assert [float(x["arrival_s"]) for x in r] == pytest.approx([0.0, 0.3, 1.5])
    assert list(read_azure(p, max_requests=2))[-1].rid == 1


@pytest.mark.parametrize("text, where", [
    ("TIME,Context,Gen\n", ":1:"), ("TIMESTAMP,ContextTokens,GeneratedTokens\nx,1,1\n", ":2:"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,0,1\n", ":2:"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n5,1,1\n4,1,1\n", ":3:")])
def test_azure_csv_errors(tmp_path, text, where):
    p = tmp_path / "az.csv"
    p.write_text(text)
    with pytest.raises(TraceError, match=where):
        list(read_azure(p))


def test_agentic_in_the_simulator_sends_every_request_and_closes_sessions(tmp_path):
    from scenarios.agentic import AgenticConfig, AgenticWorkload

    knobs = "num_sessions: 3, concurrency: 2, repo_context_tokens: [500, 800], turns: [2, 3], " \
            "tool_output_tokens: [50, 100], output_tokens: [5, 10], system_prompt_tokens: 128, subagent_prob: 0"
    rc, out = run(tmp_path, BASE + f"workload: {{kind: agentic, {knobs}}}\n")
    assert rc == 0
    cfg = AgenticConfig(seed=3, num_sessions=3, concurrency=2, repo_context_tokens=(500, 800), turns=(2, 3),
                        tool_output_tokens=(50, 100), output_tokens=(5, 10), system_prompt_tokens=128,
                        subagent_prob=0)
    want = AgenticWorkload(cfg).summary()["requests"]
    r = rows(out)
    assert len(r) == want
    later = [x for x in r if int(x["round"]) > 1]
    assert later and all(int(x["cached_tokens"]) > 0 for x in later)  # each turn reuses its session
    s = json.loads((out / "summary.json").read_text())
    assert s["requests"] == want and s["rejected"] == 0
