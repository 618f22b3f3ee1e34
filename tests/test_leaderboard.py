"""`radixsim leaderboard` on a tiny corpus: an exact, deterministic table."""
import pytest

from radixsim.leaderboard import corpus, run_leaderboard, format_table, CORPUS
from radixsim.replay import ReplayOptions
from cache_core.eviction import policy_names

TINY = {
    "mt": ReplayOptions(workload="multiturn", page_size=16, progress=False,
                        workload_set=(("num_clients", 6), ("num_rounds", 6), ("request_length", 256),
                                      ("output_length", 8))),
    "ag": ReplayOptions(workload="agentic", page_size=16, progress=False,
                        workload_set=(("num_sessions", 3), ("concurrency", 2), ("turns", (3, 5)),
                                      ("repo_context_tokens", (500, 1000)), ("tool_output_tokens", (50, 200)),
                                      ("output_tokens", (10, 40)), ("system_prompt_tokens", 256))),
}

WANT = """\
trace                    capacity policy         hit %   gap %
--------------------------------------------------------------
mt                          2,352 belady-node+   21.74    61.9
mt                          2,352 lfu            13.97    36.1
mt                          2,352 lru             3.11     0.0
mt                          2,352 session         3.11     0.0
mt                          2,352 bound*         33.19   100.0
mt                          4,704 belady-node+   50.90    85.5
mt                          4,704 lfu            41.92    63.3
mt                          4,704 lru            16.30     0.0
mt                          4,704 session        16.30     0.0
mt                          4,704 bound*         56.77   100.0
ag                          1,184 belady-node+   29.81     0.0
ag                          1,184 lfu            29.81     0.0
ag                          1,184 lru            29.81     0.0
ag                          1,184 session        29.81     0.0
ag                          1,184 bound*         54.26   100.0
ag                          2,368 belady-node+   56.67     0.0
ag                          2,368 lfu            56.67     0.0
ag                          2,368 lru            56.67     0.0
ag                          2,368 session        56.67     0.0
ag                          2,368 bound*         75.62   100.0
gap % = share of the LRU -> bound gap closed; * bound = page-level upper bound (no policy can exceed it); + belady-node = offline heuristic, not a bound"""


def test_tiny_leaderboard_is_exact_and_deterministic(tmp_path):
    rows = run_leaderboard(TINY, policies=["session", "lru", "lfu", "belady-node"], fractions=(0.25, 0.5),
                           jobs=2, out_dir=tmp_path)
    assert format_table(rows, times=False) == WANT
    again = run_leaderboard(TINY, policies=["belady-node", "lfu", "lru", "session"], fractions=(0.25, 0.5), jobs=1)
    strip = [{k: v for k, v in r.items() if k != "replay_s"} for r in rows]
    assert strip == [{k: v for k, v in r.items() if k != "replay_s"} for r in again]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "leaderboard.csv", "leaderboard.json", "leaderboard.png", "leaderboard.svg", "leaderboard.txt"]


def test_default_corpus_and_policies(tmp_path, monkeypatch):
    import radixsim.leaderboard as lb

    monkeypatch.setattr(lb, "REAL_TRACE", tmp_path / "conversation_trace.jsonl")
    src = corpus([], 16)
    assert list(CORPUS) == ["mooncake_synthetic", "multiturn", "agentic", "agentic_swe"]
    assert list(src)[:4] == list(CORPUS)  # then the variants (tests/test_corpus_variants.py)
    assert dict(src["agentic_swe"].workload_set)["lengths"] == "lognormal"
    assert src["mooncake_synthetic"].trace.endswith("mooncake_synthetic_trace.jsonl")
    assert corpus(["a/x.jsonl"], 4)["x"].trace == "a/x.jsonl"
    (tmp_path / "conversation_trace.jsonl").write_text("")
    assert list(corpus([], 16))[-1] == "mooncake_conversation"
    assert "belady-node" in policy_names() and "lru" in policy_names()


@pytest.mark.parametrize("args,needle", [
    (["curve", "--out", "X"], "radixsim curve: give a TRACE file or --workload (one of them)"),
    (["curve", "--workload", "multiturn", "--set", "workload.bogus=1", "--out", "X"],
     "radixsim curve: unknown workload key 'workload.bogus'"),
    (["curve", "t.jsonl", "--capacities", "10,x", "--out", "X"], "argument --capacities: '10,x': expected"),
    (["leaderboard", "missing.jsonl", "--out", "X"], "radixsim leaderboard: missing.jsonl: no such file"),
    (["leaderboard", "--policy", "nope", "--out", "X"], "argument --policy: unknown policy 'nope'"),
])
def test_lab_commands_bad_input_is_one_line_exit_2(args, needle, capsys, tmp_path, monkeypatch):
    from helpers import run_main as run_inproc

    monkeypatch.chdir(tmp_path)
    rc, out, err = run_inproc(capsys, args)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "X").exists()


def test_best_online_leaves_out_lru_and_the_offline_rows():
    from radixsim.leaderboard import best_online

    rows = [{"trace": "t", "capacity_tokens": 1, "policy": p, "hit_rate": h, "gap_closed": g}
            for p, h, g in (("lru", 0.1, 0.0), ("bound", 0.5, 1.0), ("belady-node", 0.4, 0.75),
                            ("mru", 0.2, 0.25), ("sieve", 0.15, 0.125))]
    assert [r["policy"] for r in best_online(rows)] == ["mru"]


def test_policies_without_lru_are_one_line_naming_the_option(tmp_path, capsys):
    from helpers import run_main as run_inproc

    rc, out, err = run_inproc(capsys, ["leaderboard", "--policy", "lfu,fifo", "--out", str(tmp_path / "o"),
                                     str(tmp_path / "t.jsonl")])
    assert (rc, out) == (2, "")
    assert err == "radixsim leaderboard: --policy lfu,fifo: no lru; expected lru among the policies (gap % is " \
                  "measured from LRU)\n"
    assert not (tmp_path / "o").exists()
