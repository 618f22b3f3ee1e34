"""`engine.kind: vllm`: vLLM v1's scheduler (cache_core/vllm_sched.py) over its prefix cache, in the
engine loop of cache_core/vllm_engine.py.

Two small traces with every step computed by hand from vLLM 0.33.0's rules (vllm_sched.py's
docstring), a cross-check against the exact replay core (`radixsim replay --engine vllm`: one
request at a time the engine must give the same cached and evicted tokens per request), the
defaults for the scenario's GPU, and bad input (one line naming the file and key, nothing written).
"""
import csv
import json
import random

import numpy as np
import pytest
import yaml

from cache_core.engine_types import EngineRequest, EngineStalled
from cache_core.records import TokenSeq
from cache_core.vllm_engine import VllmEngine
from cache_core.vllm_sched import VllmConfig, batch_defaults
from helpers import assert_run_refused, run_main
from scenarios import scenario


class Clock:
    """A logical clock: each step lasts 1 s (the executor below advances it)."""

    t = 0.0

    def now(self):
        return self.t

    def idle(self, until):
        return None

    def kick(self):
        pass


class Recorder:
    """A step executor that records each step: [(rid, new tokens, computed before)] in schedule
    order, the decodes' rids, and what the cost model would be given."""

    def __init__(self, clock):
        self.clock, self.busy_s, self.eng, self.log = clock, 0.0, None, []

    def execute(self, step):
        self.log.append(([(r.rid, n, c) for r, n, c in self.eng.scheduled], [r.rid for r in step.decode],
                         step.prefill_cost, step.decode_contexts))
        self.clock.t += 1.0
        return
        yield


def _req(rid, prompt, out):
    p = np.array(list(prompt), dtype=np.int64)
    o = -np.arange(1, out + 1, dtype=np.int64) - 1000 * (ord(rid) - ord("A") + 1)  # fresh outputs
    return EngineRequest(rid=rid, session_id=None, prompt=p, output_length=out, arrival_s=0.0,
                         seq=TokenSeq(np.concatenate([p, o[:-1]])))


def _run(config, num_blocks, reqs):
    clock = Clock()
    ex = Recorder(clock)
    eng = VllmEngine(config, num_blocks, clock, None, ex)
    ex.eng = eng
    eng.blocks.evicted_log = []
    for r in reqs:
        eng.arrive(r)
    eng.close_input()
    for _ in eng.loop():
        pass
    eng.cache.check()
    return eng, ex.log


def test_chunked_prefill_a_prefix_hit_max_num_seqs_and_the_free_order_by_hand():
    """B=4, 6 usable blocks (num_blocks 7), budget 8 tokens, max_num_seqs 2. A: 10 prompt tokens,
    3 out; B: A's first 8 tokens + 1, 2 out; C: 8 fresh tokens, 2 out.
    1: A gets 8 of its 10 (the budget; blocks 1, 2, both full: cached).
    2: A (running first) its last 2 (block 3); B hits blocks 1 and 2 (8 tokens: (9-1)//4 = 2 blocks)
       and computes 1 (block 4); C waits: 2 running = max_num_seqs. Both sample their first token.
    3: two decodes (contexts 10 and 9); B has its 2 tokens: finishes, frees [1,2,4] in reverse:
       4 (unhashed) to the queue's head, 1 and 2 still held by A.
    4: A decodes (token 12 fills block 3: cached); C admitted: 7 of 8 (budget 8 - 1), blocks 4
       (the head) and 5 (fresh). A finishes: frees 3, 2, 1 to the tail (hashed).
    5: C's last prompt token (block 5 full: cached). 6: C decodes into block 6, finishes: 6 to the
       head, 5 and 4 to the tail."""
    reqs = [_req("A", range(1, 11), 3), _req("B", [1, 2, 3, 4, 5, 6, 7, 8, 20], 2), _req("C", range(30, 38), 2)]
    eng, log = _run(VllmConfig(block_size=4, max_num_batched_tokens=8, max_num_seqs=2), 7, reqs)
    assert log == [
        ([("A", 8, 0)], [], ((8, 0),), ()),
        ([("A", 2, 8), ("B", 1, 8)], [], ((2, 8), (1, 8)), ()),
        ([("A", 1, 10), ("B", 1, 9)], ["A", "B"], (), (10, 9)),
        ([("A", 1, 11), ("C", 7, 0)], ["A"], ((7, 0),), (11,)),
        ([("C", 1, 7)], [], ((1, 7),), ()),
        ([("C", 1, 8)], ["C"], (), (8,)),
    ]
    got = {r.rid: (r.cached_tokens, r.admit_s, r.first_token_s, r.finish_s, r.queue_s) for r in eng.finished}
    assert got == {"A": (0, 0.0, 2.0, 4.0, 0.0), "B": (8, 1.0, 2.0, 3.0, 1.0), "C": (0, 3.0, 5.0, 6.0, 3.0)}
    assert eng.blocks.free_queue() == [(6, False), (3, True), (2, True), (1, True), (5, True), (4, True)]
    assert eng.blocks.evicted_log == [] and eng.counters["preemptions"] == 0
    assert [(t, run, wait) for t, run, wait, *_ in eng.timeline] == [
        (1.0, 1, 2), (2.0, 2, 1), (3.0, 1, 1), (4.0, 1, 0), (5.0, 1, 0), (6.0, 0, 0)]


def test_a_preemption_recomputes_the_last_running_request_and_evicts_in_free_queue_order_by_hand():
    """B=4, 4 usable blocks (num_blocks 5), X and Y: 4 prompt tokens, 6 out each.
    1: both prefill (blocks 1, 2, cached). 2: each decode needs a block (3, 4). 3-5: decodes in
    place; step 5 fills blocks 3 and 4 (cached). 6: X needs a 3rd block, none free: the LAST
    running request, Y, is preempted (frees 4 then 2, both to the tail), X takes the head:
    block 4 (Y's output block: evicted); no waiting request is admitted in a step that preempted.
    X finishes: 4 (unhashed now) to the head, 3 and 1 to the tail.
    7: Y (9 tokens: prompt + 5 generated) looks up again: block 2 hits (4 tokens), its output
    block was evicted; it recomputes 5 tokens into 4 (the head) and 3 (evicting X's output block),
    samples its 6th token and finishes. Its reported hit stays its first scheduling's: 0."""
    eng, log = _run(VllmConfig(block_size=4, max_num_batched_tokens=16, max_num_seqs=4), 5,
                    [_req("X", [1, 2, 3, 4], 6), _req("Y", [5, 6, 7, 8], 6)])
    assert [s[0] for s in log] == [
        [("X", 4, 0), ("Y", 4, 0)],
        [("X", 1, 4), ("Y", 1, 4)], [("X", 1, 5), ("Y", 1, 5)], [("X", 1, 6), ("Y", 1, 6)],
        [("X", 1, 7), ("Y", 1, 7)],
        [("X", 1, 8)],
        [("Y", 5, 4)],
    ]
    assert log[6][2:] == (((5, 4),), ())  # Y's recompute is priced as a prefill with 4 cached tokens
    assert eng.sched.preempted_log == ["Y"] and eng.counters["preemptions"] == 1
    assert eng.blocks.evicted_log == [4, 3]
    got = {r.rid: (r.cached_tokens, r.evicted_tokens, r.retracted, r.first_token_s, r.finish_s) for r in eng.finished}
    assert got == {"X": (0, 4, 0, 1.0, 6.0), "Y": (0, 4, 1, 1.0, 7.0)}
    assert eng.blocks.free_queue() == [(3, False), (1, True), (4, True), (2, True)]


def test_without_chunked_prefill_a_prompt_over_the_budget_waits_and_blocks_the_queue():
    """enable_chunked_prefill false: the head that does not fit the budget left stops the waiting
    loop (FCFS); with it on, the budget cuts it into a chunk. Without chunking a request longer
    than the budget (vLLM keeps it >= max_model_len) is rejected at arrival: D, 8 + 1 tokens."""
    reqs = lambda: [_req("A", range(1, 7), 2), _req("B", range(10, 17), 1), _req("C", [40], 2),  # noqa: E731
                    _req("D", range(60, 68), 1)]
    eng, log = _run(VllmConfig(block_size=4, max_num_batched_tokens=8, enable_chunked_prefill=False), None, reqs())
    assert [s[0] for s in log] == [[("A", 6, 0)], [("A", 1, 6), ("B", 7, 0)], [("C", 1, 0)], [("C", 1, 1)]]
    assert [r.rid for r in eng.finished if r.rejected] == ["D"]
    eng, log = _run(VllmConfig(block_size=4, max_num_batched_tokens=8), None, reqs())
    assert [s[0] for s in log][:2] == [[("A", 6, 0), ("B", 2, 0)], [("A", 1, 6), ("B", 5, 2), ("C", 1, 0), ("D", 1, 0)]]
    assert not any(r.rejected for r in eng.finished)


def test_a_request_longer_than_the_pool_is_rejected_at_arrival_and_a_stall_is_named():
    eng, log = _run(VllmConfig(block_size=4), 3, [_req("A", range(1, 8), 2), _req("B", [1], 1)])
    assert [(r.rid, r.rejected) for r in eng.finished] == [("A", True), ("B", False)]  # 9 tokens > 2 blocks
    assert log == [([("B", 1, 0)], [], ((1, 0),), ())]
    clock = Clock()
    eng = VllmEngine(VllmConfig(block_size=4), 3, clock, None, Recorder(clock))
    eng.arrived = 1
    with pytest.raises(EngineStalled, match="1 of 1 arrived requests unfinished"):
        eng.check_finished()


@pytest.mark.parametrize("memory, figures", [
    (80 * 2**30, (8192, 1024)), (141 * 2**30, (8192, 1024)), (192 * 2**30, (16384, 1024)),
    (40 * 2**30, (2048, 256))])
def test_batch_defaults_are_vllms_openai_server_ones_for_the_gpu(memory, figures):
    assert batch_defaults(memory, "NVIDIA H100") == figures
    assert batch_defaults(80 * 2**30, "NVIDIA A100-SXM4-80GB") == (2048, 256)


# -- scenarios --------------------------------------------------------------------------------------
def test_the_catalog_scenario_resolves_to_vllms_h200_defaults_and_sglang_config_is_unchanged():
    sc = scenario.from_file("vllm-quickstart")
    assert sc.engine == VllmConfig(block_size=16, max_num_seqs=1024, max_num_batched_tokens=8192,
                                   enable_chunked_prefill=True)
    assert {k: sc.doc["engine"][k] for k in ("block_size", "max_num_seqs", "max_num_batched_tokens",
                                             "enable_chunked_prefill")} == {
        "block_size": 16, "max_num_seqs": 1024, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True}
    assert "max_running_requests" not in sc.doc["engine"] and sc.doc["engine"]["kind"] == "vllm"
    a100 = scenario.from_file("vllm-quickstart", sets=["hardware=a100-80gbx1", "engine.max_num_seqs=8"])
    assert (a100.engine.max_num_batched_tokens, a100.engine.max_num_seqs) == (2048, 8)
    whole = scenario.from_file("vllm-quickstart", sets=["engine.enable_chunked_prefill=false"])
    assert whole.engine.max_num_batched_tokens == 40960  # raised to Qwen3-32B's context, as vLLM does
    sg = scenario.from_file("quickstart")
    assert sg.engine.kind == "sglang" and list(sg.doc["engine"]) == [
        "max_running_requests", "max_prefill_tokens", "chunked_prefill_tokens", "schedule_policy", "new_token_ratio",
        "mixed_chunk", "load_overlap", "ep_size", "tree_core", "overlap_schedule", "attention_backend", "frontend",
        "l3_get_batch_pages"]


def _trace(path, n=48, seed=3):
    """Branchy hash_ids requests (3 system prefixes, follow-ups that extend an earlier prompt,
    fresh tails), 1000 s apart: each finishes long before the next arrives."""
    rnd = random.Random(seed)
    nxt = [1000]
    systems = [list(range(s * 100, s * 100 + k)) for s, k in ((1, 6), (2, 9), (3, 3))]
    prompts = []

    def fresh(k):
        nxt[0] += k
        return list(range(nxt[0] - k, nxt[0]))

    lines = []
    for i in range(n):
        if prompts and rnd.random() < 0.4:
            ids = rnd.choice(prompts) + fresh(rnd.randint(1, 6))
        else:
            ids = rnd.choice(systems) + fresh(rnd.randint(1, 12))
        prompts.append(ids)
        lines.append(json.dumps({"timestamp": i * 1_000_000, "hash_ids": ids, "input_length": 16 * len(ids) - i % 7,
                                 "output_length": 1 + i % 9, "block_size": 16}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("l1", [4096, 10**7])
def test_one_request_at_a_time_gives_the_replay_cores_cached_and_evicted_tokens(tmp_path, capsys, l1):
    """The engine under engine.kind vllm and `radixsim replay --engine vllm` (vllm_blocks.py, exact
    to vLLM per request: tests/test_vllm_reference.py) on the same trace and capacity: equal rows
    (4,096 tokens evict; 10^7 never do)."""
    trace = _trace(tmp_path / "t.jsonl")
    rc, _, err = run_main(capsys, ["replay", str(trace), "--engine", "vllm", "--page-size", "16", "--block-size", "16",
                                   "--capacity-tokens", str(l1), "--out", str(tmp_path / "rep"), "--no-progress"])
    assert rc == 0, err
    sc = {"model": "qwen3-32b", "hardware": "h200x1", "cache": {"l1_tokens": l1}, "engine": {"kind": "vllm"},
          "workload": {"kind": "trace", "path": str(trace), "block_size": 16}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    rc, _, err = run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "sim"), "--no-plots",
                                   "--no-progress"])
    assert rc == 0, err

    def rows(d):
        with open(d / "requests.csv") as f:
            return [(int(r["prompt_tokens"]), int(r["cached_tokens"]), int(r["evicted_tokens"]))
                    for r in csv.DictReader(f)]

    rep, sim = rows(tmp_path / "rep"), rows(tmp_path / "sim")
    assert len(sim) == 48 and sim == rep
    assert sum(c for _, c, _ in sim) > 0 and (sum(e for *_, e in sim) > 0) == (l1 == 4096)
    assert not (tmp_path / "sim" / "tree.json").exists()


BASE = {"model": "qwen3-32b", "hardware": "h200x1", "cache": {"l1_tokens": 20000}, "engine": {"kind": "vllm"},
        "workload": {"num_clients": 2, "num_rounds": 2, "request_length": 100, "output_length": 4, "max_parallel": 2}}


def _with(**sections):
    doc = json.loads(json.dumps(BASE))
    for k, v in sections.items():
        if isinstance(v, dict) and isinstance(doc.get(k), dict):
            doc[k].update(v)
        else:
            doc[k] = v
    return doc


@pytest.mark.parametrize("doc, needle", [
    (_with(engine={"max_running_requests": 8}), "engine.max_running_requests: an SGLang engine key; expected it unset"),
    (_with(engine={"chunked_prefill_tokens": 256}), "engine.chunked_prefill_tokens: an SGLang engine key"),
    (_with(engine={"kind": "sglang", "max_num_seqs": 8}),
     "engine.max_num_seqs: a vLLM scheduler key; expected it unset"),
    (_with(engine={"kind": "trt"}), "engine.kind: got 'trt'; expected one of sglang, vllm"),
    (_with(engine={"max_num_batched_tokens": 0}), "engine.max_num_batched_tokens: got 0; expected null"),
    (_with(engine={"enable_chunked_prefill": "yes"}), "engine.enable_chunked_prefill: got 'yes'"),
    (_with(cache={"hicache_ratio": 2}), "cache.hicache_ratio: not modelled with engine.kind vllm"),
    (_with(cache={"l3_tokens": "unbounded"}), "cache.l3_tokens: not modelled with engine.kind vllm"),
    (_with(cache={"page_size": 16}), "cache.page_size: not modelled with engine.kind vllm (engine.block_size"),
    (_with(cache={"policy": "lfu"}), "cache.policy: 'lfu': engine.kind vllm evicts in vLLM's free-queue order only"),
    (_with(model="gpt-oss-20b"), "cache.components: ['full', 'swa']: engine.kind vllm models full attention only"),
    (_with(fleet={"engines": 2, "pd": {}, "groups": [{"count": 1, "role": "prefill"}, {"count": 1, "role": "decode"}]}),
     "fleet.pd: P/D is not built for engine.kind vllm; expected no fleet.pd"),
    (_with(fleet={"engines": 2, "dp": 2}, tp=2, hardware="h200x2"),
     "fleet.dp: 2: DP attention is not built for engine.kind vllm; expected dp: 1"),
    (_with(fleet={"engines": 2, "groups": [{"count": 1}, {"count": 1, "engine": {"kind": "sglang"}}]}),
     "fleet.groups: engines mix engine.kind sglang and vllm; expected one engine.kind"),
    (_with(fleet={"engines": 2, "groups": [{"count": 1}, {"count": 1, "engine": {"block_size": 32}}]}),
     "fleet.groups: engines differ in engine.block_size; expected one block size"),
    (_with(fleet={"engines": 2}, events=[{"at_s": 1, "kind": "engine_down", "engine": 0}]),
     "events: engine.kind vllm has no fault what-ifs yet"),
    (_with(engine={"enable_chunked_prefill": False, "max_num_batched_tokens": 4096}),
     "engine.max_num_batched_tokens: 4096 is below Qwen3-32B's context (40960) with enable_chunked_prefill false"),
])
def test_an_option_the_vllm_flavour_does_not_model_is_one_line_and_writes_nothing(tmp_path, capsys, doc, needle):
    assert_run_refused(capsys, tmp_path, doc, needle)


def test_the_torch_backend_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    rc, _, err = run_main(capsys, ["run", str(path), "--backend", "torch", "--out", str(tmp_path / "out"),
                                   "--no-plots", "--no-progress"])
    assert rc == 2 and err.count("\n") == 1 and "engine.kind vllm runs on the sim backend only" in err, err
    assert not (tmp_path / "out").exists()


# -- the L2 seam ------------------------------------------------------------------------------------
class FakeConnector:
    """The calls of cache_core/vllm_offload.py's VllmOffloadConnector, one block per chunk, an
    unbounded CPU: its lookup (a run of chunks past the GPU hit, over the prompt's full chunks) and
    store offers (the prompt's computed full blocks not offered yet), logging every call."""

    def __init__(self, B):
        self.B, self.cpu, self.log = B, set(), []
        self.tpc = B  # tokens per chunk: the timeline's L2 tokens are len(cpu) x tpc

    class T:
        def __init__(self, direction, keys, gpu_blocks, nbytes):
            self.direction, self.keys, self.gpu_blocks, self.nbytes = direction, keys, gpu_blocks, nbytes

    def new_request(self, keys, prompt_len):
        return {"keys": keys, "P": prompt_len, "next": 0, "local": 0}

    def matched_tokens(self, st, local):
        B, n = self.B, st["P"] // self.B
        st["next"], st["local"] = 0, local
        if n * B - local < B:
            return 0
        hits = 0
        for k in st["keys"][local // B:n]:
            if k not in self.cpu:
                break
            hits += 1
        return hits * B

    def load(self, st, blocks, ext):
        B, end = self.B, st["local"] + ext
        st["next"] = -(-end // B)
        return self.T("load", st["keys"][st["local"] // B:st["next"]], blocks[st["local"] // B:st["next"]], 10 * ext)

    def offer(self, st, computed, blocks):
        n = min(min(computed, st["P"]) // self.B, len(blocks), len(st["keys"]))
        if n <= st["next"]:
            return None
        keys, src = st["keys"][st["next"]:n], blocks[st["next"]:n]
        st["next"] = n
        return self.T("store", keys, src, 10 * self.B * len(keys))

    def finished(self, st, computed, blocks):
        return self.offer(st, computed, blocks)

    def complete(self, t):
        self.log.append((t.direction, list(t.gpu_blocks)))
        if t.direction == "store":
            self.cpu.update(t.keys)


class InstantPlane:
    """A data plane whose transfers land at once (in submit)."""

    def __init__(self):
        self.got = []

    def submit(self, t, on_done):
        self.got.append((t.kind, t.src_tier, t.dst_tier, t.tokens, t.bytes))
        on_done(t.id, True)


def test_an_l2_hit_is_loaded_before_the_request_computes_the_rest_by_hand():
    """B=4, 3 usable GPU blocks, one request at a time (max_num_seqs 1). A (8 tokens) and B (8 other
    tokens) each store their 2 prompt blocks to the CPU when they finish; B's admission evicts A's
    second block (2). C = A's prompt + 1 token: the GPU hits block 1 (4 tokens), the connector the
    next 4 (a1 in the CPU): C takes block 2 (the head: evicting b1) for the load, waits out of the
    queue until it lands, then computes its 1 last token (block 3, evicting b0) with 8 cached:
    cached_tokens 8 = 4 device + 4 host; nothing more to store (the load marked its chunks)."""
    conn, plane, clock = FakeConnector(4), InstantPlane(), Clock()
    ex = Recorder(clock)
    eng = VllmEngine(VllmConfig(block_size=4, max_num_seqs=1), 4, clock, plane, ex, offload=conn)
    ex.eng = eng
    eng.blocks.evicted_log = []
    for r in (_req("A", range(1, 9), 1), _req("B", range(20, 28), 1), _req("C", range(1, 10), 1)):
        eng.arrive(r)
    eng.close_input()
    for _ in eng.loop():
        pass
    eng.cache.check()
    assert [s[0] for s in ex.log] == [[("A", 8, 0)], [("B", 8, 0)], [("C", 1, 8)]]
    assert conn.log == [("store", [1, 2]), ("store", [3, 2]), ("load", [2])]
    assert plane.got == [("backup", "L1", "L2", 8, 80), ("backup", "L1", "L2", 8, 80), ("load", "L2", "L1", 4, 40)]
    got = {r.rid: (r.cached_tokens, r.cached_device, r.cached_host, r.evicted_tokens) for r in eng.finished}
    assert got == {"A": (0, 0, 0, 0), "B": (0, 0, 0, 4), "C": (8, 4, 4, 8)}
    assert eng.blocks.evicted_log == [2, 2, 3] and eng.counters["transfers"] == 3
    assert eng.blocks.free_queue() == [(3, False), (2, True), (1, True)]


class HeldPlane:
    """A data plane that holds every transfer until the test releases it."""

    def __init__(self):
        self.held = []

    def submit(self, t, on_done):
        self.held.append((t, on_done))

    def release(self):
        held, self.held = self.held, []
        for t, on_done in held:
            on_done(t.id, True)


def test_a_request_waits_out_of_the_queue_while_its_load_is_in_flight_and_the_next_one_runs():
    """The CPU holds C's 2 prompt blocks, the GPU nothing: C takes blocks 1 and 2 for its 8-token
    load and leaves the queue; D (behind it) runs in the same step (block 3). With the load still in
    flight nothing can run: the loop idles. Once it lands C computes its last token (block 3 again:
    D freed it to the head) with 8 cached, all from the host."""
    conn, plane, clock = FakeConnector(4), HeldPlane(), Clock()
    conn.cpu.update(TokenSeq(np.arange(1, 10, dtype=np.int64)).page_keys(4).tolist())
    ex = Recorder(clock)
    eng = VllmEngine(VllmConfig(block_size=4), None, clock, plane, ex, offload=conn)
    ex.eng = eng
    for r in (_req("C", range(1, 10), 1), _req("D", [50, 51, 52], 1)):
        eng.arrive(r)
    eng.close_input()
    idles = 0
    for _ in eng.loop():
        idles += 1
        assert [t.kind for t, _ in plane.held] == ["load"] and eng.inflight == 1
        plane.release()
    assert idles == 1 and [s[0] for s in ex.log] == [[("D", 3, 0)], [("C", 1, 8)]]
    got = {r.rid: (r.cached_tokens, r.cached_device, r.cached_host, r.admit_s, r.first_token_s, r.pages)
           for r in eng.finished}
    assert got == {"D": (0, 0, 0, 0.0, 1.0, []), "C": (8, 0, 8, 1.0, 2.0, [])}
    assert conn.log == [("load", [1, 2])] and eng.blocks.free_queue()[:1] == [(3, False)]
