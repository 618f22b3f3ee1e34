"""vLLM's CPU KV offloading connector as an L2 (cache_core/vllm_offload.py) on small constructed
traces, every figure hand-computed from vllm 0.33.0's rules (the module docstring). The same
requests run through vLLM's own OffloadingConnectorScheduler in
tests/test_vllm_offload_reference.py (CPU_HIT, LRU, REFUSED and the ARC case there)."""
import csv
import json

import pytest

from cache_core.vllm_offload import VllmOffloadCache
from cache_core.keys import page_keys

A = list(range(1, 9))  # two blocks of 4
B10 = list(range(11, 21))  # two full blocks and a partial one
# (prompt, output): A, then B evicts A from the GPU, then A + 1 token comes back from the CPU
CPU_HIT = [(A, [-1]), (B10, [-2]), (A + [9], [-3])]
# CPU of 3 chunks: r0 stores 2, r1 stores 2 (evicts r0's tail), r2 stores 2 (evicts r0's head, r1's tail),
# r3 reuses r1's head from the GPU (offered, present: reused), r4 stores 1
LRU = [(list(range(1, 11)), [-1]), (list(range(11, 20)), [-2]), (list(range(21, 30)), [-3]),
       ([11, 12, 13, 14, 99], [-4]), ([31, 32, 33, 34, 35], [-5])]
# CPU of 2 chunks: r1 offers 3 new chunks (more than the CPU), r2 offers 2 present + 1 new
REFUSED = [(A + [9], [-1]), (list(range(11, 23)), [-2]), (A + [50, 51, 52, 53], [-3])]


def _key(tokens, i, B=4):
    """The chunk key of block i of `tokens` (one block per chunk)."""
    return int(page_keys(tokens, B)[0][i])


def test_cpu_hit_after_the_gpu_evicted_the_prompt():
    c = VllmOffloadCache(4, 4, cpu_chunks=4, bytes_per_token=10)  # 3 GPU blocks, 4 CPU chunks
    r0, r1, r2 = (c.step(p, o) for p, o in CPU_HIT)
    assert (r0.gpu_hit, r0.cpu_hit, r0.stored, r0.gpu_evicted) == (0, 0, [_key(A, 0), _key(A, 1)], [])
    # B takes fresh block 3, then A's blocks 2 and 1 from the free queue's hashed tail (A's tail first)
    assert (r1.gpu_hit, r1.cpu_hit, r1.stored, r1.gpu_evicted) == (0, 0, [_key(B10, 0), _key(B10, 1)], [2, 1])
    assert r1.cpu_evicted == []  # 4 chunks hold both prompts
    # A + 1: no GPU hit; the CPU holds A's 2 chunks: 8 tokens loaded into 2 new blocks (block 1, B's
    # unhashed partial block, then block 2: B's second block evicted), then 1 more block (3: B's first)
    assert (r2.gpu_hit, r2.cpu_hit, r2.rejected, r2.stored, r2.gpu_evicted) == (0, 8, False, [], [2, 3])
    (load,) = r2.transfers
    assert (load.direction, load.keys, load.cpu_chunks, load.gpu_blocks, load.nbytes) == \
        ("load", [_key(A, 0), _key(A, 1)], [0, 1], [1, 2], 2 * 4 * 10)
    assert [(t.direction, t.cpu_chunks, t.gpu_blocks, t.nbytes) for t in r0.transfers + r1.transfers] == \
        [("store", [0, 1], [1, 2], 80), ("store", [2, 3], [3, 2], 80)]
    c.check()


def test_the_cpu_evicts_lru_the_tail_of_a_request_before_its_head_and_a_reuse_refreshes():
    c = VllmOffloadCache(4, None, cpu_chunks=3)
    rows = [c.step(p, o) for p, o in LRU]
    k = [_key(LRU[0][0], 0), _key(LRU[0][0], 1), _key(LRU[1][0], 0), _key(LRU[1][0], 1),
         _key(LRU[2][0], 0), _key(LRU[2][0], 1), _key(LRU[4][0], 0)]
    assert [(r.stored, r.cpu_evicted) for r in rows] == [
        ([k[0], k[1]], []),
        ([k[2], k[3]], [k[1]]),  # r0's tail chunk first
        ([k[4], k[5]], [k[0], k[3]]),  # then r0's head, older than r1's tail
        ([], []),  # r3: a GPU hit on r1's head; the chunk is offered again, present: reused
        ([k[6]], [k[5]]),  # r2's tail; not k[2], the oldest before r3 refreshed it
    ]
    assert [(r.gpu_hit, r.cpu_hit) for r in rows] == [(0, 0), (0, 0), (0, 0), (4, 0), (0, 0)]
    c.check()


def test_a_store_larger_than_what_the_cpu_can_free_is_refused_whole():
    c = VllmOffloadCache(4, None, cpu_chunks=2)
    r0, r1, r2 = (c.step(p, o) for p, o in REFUSED)
    assert (r0.stored, r0.cpu_evicted) == ([_key(A, 0), _key(A, 1)], [])
    assert (r1.stored, r1.cpu_evicted, r1.transfers) == ([], [], [])  # 3 chunks > 2: none stored, none evicted
    # r2: GPU hit 8; offer = A's 2 chunks (present: in the offer, so not evictable) + 1 new: nothing to evict
    assert (r2.gpu_hit, r2.cpu_hit, r2.stored, r2.cpu_evicted) == (8, 0, [], [])
    assert len(c.cpu) == 2 and c.cpu.stored_chunks == 2 and c.cpu.evicted_chunks == 0
    c.check()


def test_an_offload_block_of_two_gpu_blocks_hits_whole_chunks_only():
    c = VllmOffloadCache(4, 4, cpu_chunks=2, blocks_per_chunk=2)  # 8-token chunks
    r0 = c.step(list(range(1, 13)), [-1])  # 12 tokens: 1 full chunk stored (blocks 1, 2)
    assert [(t.cpu_chunks, t.gpu_blocks) for t in r0.transfers] == [([0], [1, 2])]
    c.step(list(range(31, 43)), [-2])  # evicts r0 from the GPU, stores its own chunk
    r2 = c.step(list(range(1, 12)), [-3])  # 11 tokens: chunk 0 (8 tokens) from the CPU
    assert (r2.gpu_hit, r2.cpu_hit) == (0, 8)
    c.check()


def _trace(tmp_path, reqs):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"rid": i, "tokens": t, "output_length": len(o)}) + "\n"
                         for i, (t, o) in enumerate(reqs)))
    return p


def test_radixsim_replay_engine_vllm_with_l2_writes_gpu_and_cpu_hits_per_request(tmp_path):
    from radixsim.cli import main

    out = tmp_path / "run"
    assert main(["replay", str(_trace(tmp_path, CPU_HIT)), "--engine", "vllm", "--page-size", "4",
                 "--capacity-tokens", "12", "--l2-tokens", "16", "--kv-bytes-per-token", "10",
                 "--out", str(out), "--no-progress", "--check-invariants"]) == 0
    with open(out / "requests.csv") as f:
        rows = [(int(r["cached_tokens"]), int(r["cached_device"]), int(r["cached_host"]), int(r["evicted_tokens"]))
                for r in csv.DictReader(f)]
    assert rows == [(0, 0, 0, 0), (0, 0, 0, 8), (8, 0, 8, 8)]
    s = json.loads((out / "summary.json").read_text())
    assert s["tokens_per_link"] == {"L1->L2": 16, "L2->L1": 8}
    assert s["bytes_per_link"] == {"L1->L2": 160, "L2->L1": 80}
    assert s["hit_rate_host"] == pytest.approx(8 / 27)
    assert s["cache"]["cpu_chunks_stored"] == 4 and s["cache"]["cpu_chunks_evicted"] == 0


def test_without_l2_the_vllm_replay_rows_are_unchanged(tmp_path):
    from radixsim.cli import main

    out = tmp_path / "run"
    assert main(["replay", str(_trace(tmp_path, CPU_HIT)), "--engine", "vllm", "--page-size", "4",
                 "--capacity-tokens", "12", "--out", str(out), "--no-progress"]) == 0
    with open(out / "requests.csv") as f:
        rows = [(r["cached_tokens"], r["cached_device"], r["cached_host"]) for r in csv.DictReader(f)]
    assert rows == [("0", "-1", "0"), ("0", "-1", "0"), ("0", "-1", "0")]


def test_an_engine_asking_while_a_hit_chunk_is_stored_or_loaded_is_delayed():
    """sched: a HIT_PENDING chunk (its store not completed) defers the lookup, and so does a hit
    chunk another request is loading (_chunks_being_loaded): matched_tokens is None until then."""
    from cache_core.vllm_offload import VllmCpuOffload, VllmOffloadConnector

    conn = VllmOffloadConnector(VllmCpuOffload(4), 4, bytes_per_token=2)
    keys = page_keys(A + [9], 4)[0].tolist()
    r0 = conn.new_request(keys[:2], 8)
    assert conn.matched_tokens(r0, 0) == 0
    store = conn.offer(r0, 8, [1, 2])
    assert (store.direction, store.cpu_chunks, store.gpu_blocks, store.nbytes) == ("store", [0, 1], [1, 2], 16)
    r1 = conn.new_request(keys, 9)
    assert conn.matched_tokens(r1, 0) is None  # being stored
    conn.complete(store)
    assert conn.matched_tokens(r1, 0) == 8
    load = conn.load(r1, [3, 4, 5], 8)
    assert (load.direction, load.cpu_chunks, load.gpu_blocks) == ("load", [0, 1], [3, 4])
    r2 = conn.new_request(keys, 9)
    assert conn.matched_tokens(r2, 0) is None  # being loaded by r1
    conn.complete(load)
    assert conn.matched_tokens(r2, 0) == 8
    assert conn.matched_tokens(r2, 4) == 4  # from the chunk holding the GPU hit's end


@pytest.mark.parametrize("policy, victim", [("lru", "x"), ("arc", "y")])
def test_arc_keeps_a_reused_chunk_that_lru_evicts(policy, victim):
    """x stored then reused (ARC: T1 -> T2 at finish), y stored once, then z needs a chunk: LRU
    evicts the least recent (x), ARC evicts from T1 (y, T1 at or above its target 0)."""
    X, Y, Z = [1, 2, 3, 4, 5], [11, 12, 13, 14, 15], [21, 22, 23, 24, 25]
    c = VllmOffloadCache(4, None, cpu_chunks=2, policy=policy)
    rows = [c.step(p, [-1]) for p in (X, X, Y, Z)]
    named = {_key(X, 0): "x", _key(Y, 0): "y", _key(Z, 0): "z"}
    assert [([named[k] for k in r.stored], [named[k] for k in r.cpu_evicted]) for r in rows] == [
        (["x"], []), ([], []), (["y"], []), (["z"], [victim])]
    c.check()
