"""`engine.kind: vllm` with `cache.l2_tokens`: vLLM's CPU KV offloading connector
(cache_core/vllm_offload.py) as the engine's L2, its transfers on the PCIe links.

A cross-check against the exact replay core (`radixsim replay --engine vllm --l2-tokens`: one
request at a time the engine must give the same GPU and CPU hits per request and move the same
tokens), a hand-timed load on a link of known bandwidth, and bad input (one line, nothing written).
"""
import csv
import json
import random

import numpy as np
import pytest
import simpy
import yaml

from cache_core.actions import L1, L2
from cache_core.engine_types import EngineRequest
from cache_core.records import TokenSeq
from cache_core.vllm_engine import VllmEngine
from cache_core.vllm_offload import VllmCpuOffload, VllmOffloadConnector
from cache_core.vllm_sched import VllmConfig
from helpers import assert_run_refused, run_main
from sim.links import Link, LinkSet
from sim.simulator import CostExecutor, SimClock, SimDataPlane


def write_trace(path, n=60, seed=5):
    """Branchy hash_ids requests (3 system prefixes, follow-ups extending an earlier prompt, fresh
    tails), 1000 s apart: each finishes (and its stores land) long before the next arrives."""
    rnd = random.Random(seed)
    nxt = [1000]
    systems = [list(range(s * 100, s * 100 + k)) for s, k in ((1, 6), (2, 9), (3, 3))]
    prompts, lines = [], []

    def fresh(k):
        nxt[0] += k
        return list(range(nxt[0] - k, nxt[0]))

    for i in range(n):
        base = rnd.choice(prompts) if prompts and rnd.random() < 0.4 else rnd.choice(systems)
        ids = base + fresh(rnd.randint(1, 10))
        prompts.append(ids)
        lines.append(json.dumps({"timestamp": i * 1_000_000, "hash_ids": ids, "input_length": 16 * len(ids) - i % 7,
                                 "output_length": 1 + i % 9, "block_size": 16}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _rows(d):
    with open(d / "requests.csv") as f:
        return [(int(r["prompt_tokens"]), int(r["cached_device"]), int(r["cached_host"]), int(r["evicted_tokens"]))
                for r in csv.DictReader(f)]


@pytest.mark.parametrize("l1, l2, tpc, policy", [(1024, 2048, None, "lru"), (1024, 1536, 32, "lru"),
                                                 (1024, 1536, 32, "arc"), (10**6, 1024, None, "lru")])
def test_one_request_at_a_time_gives_the_replay_cores_gpu_and_cpu_hits(tmp_path, capsys, l1, l2, tpc, policy):
    """The engine and `radixsim replay --engine vllm --l2-tokens` (vllm_offload.py, exact to vLLM
    0.33.0's OffloadingConnectorScheduler per request: tests/test_vllm_offload_reference.py) on the
    same trace and sizes: equal rows (prompt, GPU hit, CPU hit, GPU-evicted tokens) and equal tokens
    per link; the CPU evicts in all; an L1 that never evicts has no CPU hit."""
    trace = write_trace(tmp_path / "t.jsonl")
    extra = [] if tpc is None else ["--offload-block-size", str(tpc)]
    rc, _, err = run_main(capsys, ["replay", str(trace), "--engine", "vllm", "--page-size", "16", "--block-size", "16",
                                   "--capacity-tokens", str(l1), "--l2-tokens", str(l2), "--policy", policy, *extra,
                                   "--out", str(tmp_path / "rep"), "--no-progress"])
    assert rc == 0, err
    engine = {"kind": "vllm", "offload_eviction_policy": policy, **({} if tpc is None else {"offload_block_size": tpc})}
    sc = {"model": "qwen3-32b", "hardware": "h200x1", "cache": {"l1_tokens": l1, "l2_tokens": l2}, "engine": engine,
          "workload": {"kind": "trace", "path": str(trace), "block_size": 16}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    rc, _, err = run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "sim"), "--no-plots",
                                   "--no-progress"])
    assert rc == 0, err
    rep, sim = _rows(tmp_path / "rep"), _rows(tmp_path / "sim")
    assert len(sim) == 60 and sim == rep
    s_rep, s_sim = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("rep", "sim"))
    assert s_sim["tokens_per_link"] == s_rep["tokens_per_link"]
    assert s_sim["cache"]["l2_evicted_chunks"] == s_rep["cache"]["cpu_chunks_evicted"]
    assert s_sim["cache"]["l2_chunks"] == l2 // (tpc or 16)
    assert s_sim["evictions"]["full"]["L2"] == s_rep["cache"]["cpu_chunks_evicted"] * (tpc or 16)
    hits = sum(h for _, _, h, _ in sim)
    assert (hits > 0) == (l1 == 1024) and s_sim["cache"]["l2_evicted_chunks"] > 0
    kvb = 64 * 8 * 128 * 2 * 2  # Qwen3-32B: layers x KV heads x head dim x (K, V) x bf16 bytes
    assert s_sim["bytes_per_link"] == {k: v * kvb for k, v in s_sim["tokens_per_link"].items()}
    cfg = yaml.safe_load((tmp_path / "sim" / "config.yaml").read_text())
    assert (cfg["engine"]["offload_block_size"], cfg["engine"]["offload_eviction_policy"]) == (tpc or 16, policy)


class StepCost:
    """A cost model whose every step lasts 1 s."""

    def step_time_s(self, prefill, decode):
        return 1.0


def _req(rid, prompt, arrival):
    p = np.array(list(prompt), dtype=np.int64)
    return EngineRequest(rid=rid, session_id=None, prompt=p, output_length=1, arrival_s=arrival, seq=TokenSeq(p))


def test_a_cpu_hit_delays_the_first_token_by_its_load_time_on_the_link_by_hand():
    """B=4, 3 usable GPU blocks, 1 s steps, PCIe 100 B/s and 0.5 s latency each way, 10 B per token.
    A (8 tokens) at 0 s: one step, done at 1 s; its 2 chunks stored (80 B: lands at 1 + 0.5 + 0.8 =
    2.3 s). B (8 other tokens) at 10 s, the same (evicts A's block 2). C = A's prompt + 1 token at
    20 s: GPU hit 4 tokens, CPU hit 4 (A's second chunk): its load (40 B) lands at 20 + 0.5 + 0.4 =
    20.9 s, C then computes its last token in one step: first token at 21.9 s, TTFT 1.9 s of which
    0.9 s (the transfer) waiting; without the load it would be 1 s (A's and B's TTFT)."""
    env = simpy.Environment()
    links = LinkSet({(L2, L1): Link(env, "L2->L1", 100.0, 0.5), (L1, L2): Link(env, "L1->L2", 100.0, 0.5)})
    conn = VllmOffloadConnector(VllmCpuOffload(8), 4, 1, 10)
    eng = VllmEngine(VllmConfig(block_size=4, max_num_seqs=1), 4, SimClock(env), SimDataPlane(links),
                     CostExecutor(env, StepCost()), offload=conn)
    reqs = [_req("A", range(1, 9), 0.0), _req("B", range(20, 28), 10.0), _req("C", range(1, 10), 20.0)]

    def arrivals():
        for r in reqs:
            yield env.timeout(r.arrival_s - env.now)
            eng.arrive(r)
        eng.close_input()

    env.process(arrivals())
    env.process(eng.loop())
    env.run()
    eng.check_finished(3)
    got = {r.rid: (r.cached_device, r.cached_host, r.first_token_s - r.arrival_s, r.queue_s) for r in eng.finished}
    assert got["A"] == (0, 0, 1.0, 0.0) and got["B"] == (0, 0, 1.0, 0.0)
    assert got["C"][:2] == (4, 4)
    assert got["C"][2:] == (pytest.approx(1.9, abs=1e-12), pytest.approx(0.9, abs=1e-12))
    assert eng.finished[2].first_token_s == pytest.approx(21.9, abs=1e-12)
    assert eng.tokens_moved == {"L1->L2": 16, "L2->L1": 4}
    assert (links.get(L1, L2).bytes_done, links.get(L2, L1).bytes_done) == (160, 40)


BASE = {"model": "qwen3-32b", "hardware": "h200x1", "cache": {"l1_tokens": 20000, "l2_tokens": 40000},
        "engine": {"kind": "vllm"},
        "workload": {"num_clients": 2, "num_rounds": 2, "request_length": 100, "output_length": 4, "max_parallel": 2}}


def _with(**sections):
    doc = json.loads(json.dumps(BASE))
    for k, v in sections.items():
        doc[k].update(v)
    return doc


@pytest.mark.parametrize("doc, needle", [
    (_with(cache={"l3_tokens": "unbounded"}), "cache.l3_tokens: not modelled with engine.kind vllm"),
    (_with(cache={"hicache_size_gb": 40}),
     "cache.hicache_size_gb: not modelled with engine.kind vllm (its L2, vLLM's CPU offloading, is sized by "
     "cache.l2_tokens); expected it unset"),
    (_with(cache={"write_policy": "write_back"}), "cache.write_policy: not modelled with engine.kind vllm"),
    (_with(engine={"offload_eviction_policy": "fifo"}),
     "engine.offload_eviction_policy: got 'fifo'; expected null (vLLM's lru), lru or arc"),
    (_with(engine={"offload_block_size": 24}),
     "engine.offload_block_size: 24 is not a multiple of engine.block_size (16); expected a multiple"),
    (_with(engine={"offload_block_size": 128}, cache={"l2_tokens": 64}),
     "cache.l2_tokens: 64 tokens hold no whole CPU chunk of 128 tokens (engine.offload_block_size)"),
    (_with(engine={"offload_block_size": 32}, cache={"l2_tokens": None}),
     "engine.offload_block_size: sets vLLM's CPU offloading, which needs an L2; expected cache.l2_tokens too"),
    (_with(engine={"kind": "sglang", "offload_eviction_policy": "arc"}),
     "engine.offload_eviction_policy: a vLLM scheduler key; expected it unset with engine.kind sglang"),
])
def test_bad_l2_input_under_vllm_is_one_line_and_writes_nothing(tmp_path, capsys, doc, needle):
    assert_run_refused(capsys, tmp_path, doc, needle)


def test_a_multiturn_round_hits_the_previous_rounds_whole_blocks_under_vllm(tmp_path, capsys):
    """The multiturn workload keys its pages at cache.page_size (64); vLLM's blocks are 16 tokens, so
    the engine must hash the sequence at 16 (scenarios/workloads.py `sequence_keys`). One client,
    64 new tokens and 4 output tokens a round, by hand: round 1's sequence (67 tokens) caches 4
    full blocks, which round 2 hits (64 tokens); round 2's (135) 8 blocks: round 3 hits 128;
    round 4 192 (as the SGLang-like engine with 16-token pages). Before the fix: 16, 32, 48."""
    doc = {"model": "qwen3-32b", "hardware": "h200x1", "cache": {"l1_tokens": 100000, "l2_tokens": 200000},
           "engine": {"kind": "vllm"}, "workload": {"num_clients": 1, "num_rounds": 4, "request_length": 64,
                                                    "output_length": 4, "max_parallel": 1}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    rc, _, err = run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-plots",
                                   "--no-progress"])
    assert rc == 0, err
    with open(tmp_path / "o" / "requests.csv") as f:
        got = [(int(r["prompt_tokens"]), int(r["cached_device"]), int(r["cached_host"])) for r in csv.DictReader(f)]
    assert got == [(64, 0, 0), (132, 64, 0), (200, 128, 0), (268, 192, 0)]


def test_the_report_shows_the_l2_links_and_evictions(tmp_path, capsys):
    """`radixsim run` with plots on a vllm scenario with an L2: report.html has the bytes moved on
    both PCIe links and the CPU's evictions (summary.json's figures), timeline.csv the CPU's tokens."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_with(cache={"l1_tokens": 1024, "l2_tokens": 2048},
                                         workload={"num_clients": 6, "num_rounds": 3, "request_length": 200})))
    rc, _, err = run_main(capsys, ["run", str(path), "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 0, err
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    html = (tmp_path / "o" / "report.html").read_text()
    b = s["bytes_per_link"]
    assert b["L2->L1"] > 0 and b["L1->L2"] > 0 and s["evictions"]["full"]["L2"] > 0
    for cell in (f"L2-&gt;L1</td><td>{b['L2->L1']:,}", f"L1-&gt;L2</td><td>{b['L1->L2']:,}",
                 f"L2</td><td>{s['evictions']['full']['L2']:,}"):
        assert cell in html, cell
    with open(tmp_path / "o" / "timeline.csv") as f:
        l2 = [int(r["l2_used_tokens"]) for r in csv.DictReader(f)]
    assert max(l2) == 2048 and l2[-1] == 2048  # the CPU's 128 chunks, full
