"""vLLM v1's prefix cache (cache_core/vllm_blocks.py) on small constructed traces: cached tokens,
evicted blocks and the free queue, hand-computed from vLLM 0.33.0's rules (the module's
docstring). The same five requests run through vLLM itself in tests/test_vllm_reference.py.

Block size 4, 6 blocks (block 0 is the null block: ids 1..5 hold KV). Hn = the hash of the
prefix of n blocks.
"""
import pytest

from cache_core.vllm_blocks import VllmBlockCache

A = (list(range(1, 10)), [-1, -2, -3])      # 9 prompt tokens, 3 outputs
B = (list(range(1, 12)), [-4, -5])          # A's 8 first tokens, then 9, 10, 11
C = (list(range(1, 9)), [-6])               # exactly A's two first blocks
D = (list(range(100, 112)), [-7])           # 3 new blocks
E = (list(range(1, 10)), [])                # A's prompt again, no output
STEPS = [A, B, C, D, E]

# (cached tokens, evicted block ids in order, free queue head first: (id, holds a hash))
WANT = [
    # A: no hit; takes 1, 2, 3; caches 1=H1, 2=H2 (block 3 holds 9, o1, o2: never full);
    # free in reverse: 3 (unhashed) to the head, then 2, 1 to the tail.
    (0, [], [(3, False), (4, False), (5, False), (2, True), (1, True)]),
    # B: hits H1, H2 (8 tokens: (11 - 1) // 4 = 2 blocks looked up); takes 3 (head); the
    # first decode step fills block 3 (9, 10, 11, o1): H3. Freed 3, 2, 1 to the tail.
    (8, [], [(4, False), (5, False), (3, True), (2, True), (1, True)]),
    # C: 8 tokens, only (8 - 1) // 4 = 1 block looked up: hits block 1; recomputes its second
    # block into 4, cached as a second copy of H2. Freed 4, 1 to the tail.
    (4, [], [(5, False), (3, True), (2, True), (4, True), (1, True)]),
    # D: 3 new blocks: 5 (never used), then evicts from the head: 3 (H3), 2 (H2's first copy).
    (0, [3, 2], [(4, True), (1, True), (2, True), (3, True), (5, True)]),
    # E: H1 -> 1, H2 -> 4 (the surviving copy): 8 tokens; its third block evicts 2 (D's) and,
    # never full, goes back to the head unhashed.
    (8, [2], [(2, False), (3, True), (5, True), (4, True), (1, True)]),
]


def test_five_requests_give_vllm_cached_tokens_evictions_and_free_queue_order():
    c = VllmBlockCache(block_size=4, num_blocks=6)
    c.evicted_log = []
    for (prompt, out), (cached, evicted, queue) in zip(STEPS, WANT):
        first = len(c.evicted_log)
        r = c.step(prompt, out)
        c.check()
        assert (r.cached_tokens, c.evicted_log[first:], c.free_queue()) == (cached, evicted, queue)
        assert r.evicted_tokens == 4 * len(evicted) and not r.rejected


def test_a_prompt_that_does_not_fit_is_refused_and_changes_nothing():
    c = VllmBlockCache(block_size=4, num_blocks=4)  # 3 blocks of KV
    c.step(list(range(1, 9)), [-1])  # caches 1=H1, 2=H2; queue [3, 2, 1]
    before = c.free_queue()
    # 13 tokens: hits H1, H2 (both free, so they count against the 3 free blocks), needs 2 more.
    r = c.step(list(range(1, 14)), [-2])
    assert (r.cached_tokens, r.rejected, r.evicted_tokens) == (8, True, 0)
    assert c.free_queue() == before
    # 12 tokens: hits H1, H2, needs 1 more: fits exactly, and evicts nothing (3 is unhashed).
    r = c.step(list(range(1, 13)), [])
    assert (r.cached_tokens, r.rejected, r.evicted_tokens) == (8, False, 0)


def test_decode_stops_when_no_block_is_left_and_what_was_filled_stays_cached():
    c = VllmBlockCache(block_size=2, num_blocks=3)  # 2 blocks of KV
    # prompt 3 tokens: blocks 1, 2; decode t=1 fills block 2 (3, o1): H2; t=2 needs a third block.
    r = c.step([1, 2, 3], [-1, -2, -3])
    assert (r.cached_tokens, r.rejected) == (0, True)
    assert c.free_queue() == [(2, True), (1, True)]
    assert c.step([1, 2, 3, -1, 9], []).cached_tokens == 4


def test_the_last_prompt_token_is_always_recomputed_and_only_full_blocks_hit():
    c = VllmBlockCache(block_size=4, num_blocks=None)
    c.step(list(range(12)), [])
    assert [c.step(list(range(n)), []).cached_tokens for n in (3, 4, 5, 8, 9, 12, 13, 20)] == \
        [0, 0, 4, 4, 8, 8, 12, 12]


def test_a_hit_refreshes_the_blocks_position_in_the_lru_order():
    c = VllmBlockCache(block_size=2, num_blocks=5)  # 4 blocks
    c.step([1, 2, 9], [])     # 1=H(1,2), 2 unhashed -> queue [2, 3, 4, 1]
    c.step([5, 6, 9], [])     # takes 2 (H(5,6)) and 3 -> [3, 4, 1, 2]
    c.step([1, 2, 7], [])     # hits 1; takes 3 -> [3, 4, 2, 1]: block 1 now after block 2
    c.evicted_log = []
    c.step([8, 8, 8, 8, 8, 8, 8], [])  # 4 blocks: 3, 4 (unhashed), then evicts 2, then 1
    assert c.evicted_log == [2, 1]


@pytest.mark.parametrize("bad", [dict(block_size=0), dict(num_blocks=1)])
def test_bad_sizes_are_refused(bad):
    with pytest.raises(ValueError):
        VllmBlockCache(**bad)


def test_a_hash_held_by_two_blocks_hits_the_one_cached_first():
    c = VllmBlockCache(block_size=4, num_blocks=6)
    for prompt, out in (A, B, C):  # after C, H2 is held by block 2 (A's) and block 4 (C's copy)
        c.step(prompt, out)
    assert c.free_queue() == [(5, False), (3, True), (2, True), (4, True), (1, True)]
    r = c.step(list(range(1, 10)), [])  # hits 1 and 2 (not 4); its third block: 5, unhashed
    assert r.cached_tokens == 8
    assert c.free_queue() == [(5, False), (3, True), (4, True), (2, True), (1, True)]


def _trace(tmp_path):
    import json

    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"rid": r, "tokens": t, "output_length": len(o)}) + "\n"
                         for r, (t, o) in zip("abcde", STEPS)))
    return p


def test_radixsim_replay_engine_vllm_writes_vllms_cached_tokens_per_request(tmp_path):
    import csv

    from radixsim.cli import main

    out = tmp_path / "run"
    assert main(["replay", str(_trace(tmp_path)), "--engine", "vllm", "--page-size", "4",
                 "--capacity-tokens", "20", "--out", str(out), "--no-progress", "--check-invariants"]) == 0
    with open(out / "requests.csv") as f:
        rows = [(r["rid"], int(r["cached_tokens"]), int(r["evicted_tokens"])) for r in csv.DictReader(f)]
    assert rows == [("a", 0, 0), ("b", 8, 0), ("c", 4, 0), ("d", 0, 8), ("e", 8, 4)]


@pytest.mark.parametrize("args, option", [
    (["--policy", "lfu"], "--policy lfu"),
    (["--l2-tokens", "64", "--l3-tokens", "64"], "--hicache-ratio/--l3-tokens"),
    (["--hicache-ratio", "2"], "--hicache-ratio/--l3-tokens"),
    (["--l2-tokens", "64", "--policy", "lfu"], "--policy lfu"),
    (["--l2-tokens", "64", "--offload-block-size", "24"], "--offload-block-size 24"),
    (["--l2-tokens", "16", "--offload-block-size", "32"], "--l2-tokens 16"),
    (["--offload-block-size", "32"], "--offload-block-size 32"),
    (["--components", "full,swa:64"], "--components full,swa:64"),
    (["--capacity-tokens", "32,64"], "--capacity-tokens"),
    (["--model", "qwen3-next-80b"], "--model qwen3-next-80b"),
])
def test_a_replay_option_the_vllm_flavour_does_not_model_is_one_line_naming_it(tmp_path, capsys, args, option):
    from radixsim.cli import main

    out = tmp_path / "run"
    assert main(["replay", str(_trace(tmp_path)), "--engine", "vllm", "--out", str(out), "--no-progress", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"radixsim replay: {option}:") and "--engine vllm" in err
    assert not out.exists()
