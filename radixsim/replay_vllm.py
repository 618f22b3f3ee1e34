"""`radixsim replay --engine vllm`: the trace through vLLM v1's prefix cache
(cache_core/vllm_blocks.py), one request at a time, with the result files of every replay.

With `--l2-tokens` the L2 is vLLM's CPU KV offloading connector (cache_core/vllm_offload.py):
`--l2-tokens` // the offload block size CPU chunks (vLLM's cpu_bytes_to_use / bytes per chunk),
`--offload-block-size` its kv_connector_extra_config block_size, `--policy lru|arc` its
eviction_policy; a row's cached_device / cached_host are the GPU-hit / CPU-loaded tokens.
vLLM's GPU cache has one eviction order (its free queue), no storage tier and no SWA/MAMBA
components in this flavour: `vllm_option_errors` names the option that asks for one.
Session close events are skipped (vLLM has no sessions)."""
from __future__ import annotations

from pathlib import Path

from cache_core.vllm_blocks import VllmBlockCache
from cache_core.vllm_offload import VllmOffloadCache
from cache_core.vllm_offload_policies import POLICIES

from . import results

VLLM_BLOCK_SIZE = 16  # vllm 0.33.0 vllm/config/cache.py: CacheConfig.DEFAULT_BLOCK_SIZE


def vllm_option_errors(policy: str, tiers, components: str | None, model: str | None, capacities,
                       engine: str = "vllm", offload_block_size: int | None = None,
                       block_size: int = VLLM_BLOCK_SIZE) -> str | None:
    """The first replay option the vLLM flavour does not model, as one line, or None."""
    if engine != "vllm" or (offload_block_size is not None and tiers is None):
        return (f"--offload-block-size {offload_block_size}: only --engine vllm with --l2-tokens has a CPU "
                "offload block; expected it with both or not at all")
    if tiers is not None and (tiers.hicache_ratio is not None or tiers.l3):
        return ("--hicache-ratio/--l3-tokens: --engine vllm's L2 is vLLM's CPU offloading connector sized by "
                "--l2-tokens, with no storage tier; expected --l2-tokens only")
    if tiers is None and policy != "lru":
        return f"--policy {policy}: --engine vllm evicts in vLLM's free-queue order only; expected lru (the default)"
    if policy not in POLICIES:
        return (f"--policy {policy}: --engine vllm's CPU offload evicts by vLLM's cache policies only; "
                f"expected one of {', '.join(POLICIES)}")
    if offload_block_size is not None and offload_block_size % block_size:
        return (f"--offload-block-size {offload_block_size}: --engine vllm's offload block is a whole number of GPU "
                f"blocks; expected a multiple of --page-size {block_size}")
    if tiers is not None and tiers.l2_tokens < (offload_block_size or block_size):
        return (f"--l2-tokens {tiers.l2_tokens}: --engine vllm's CPU holds whole offload blocks; expected at "
                f"least one ({offload_block_size or block_size} tokens)")
    if components not in (None, "full"):
        return f"--components {components}: --engine vllm models full attention only; expected full"
    if model is not None:
        from .replay import model_components

        if model_components(model) != "full":
            return f"--model {model}: --engine vllm models full attention only; expected a full-attention preset"
    if len(capacities) > 1:
        return "--capacity-tokens: --engine vllm takes one capacity; expected a single value"
    return None


def num_blocks(capacity_tokens: int | None, block_size: int) -> int | None:
    """vLLM's num_gpu_blocks for a KV capacity in tokens: whole blocks, plus the null block 0."""
    return None if capacity_tokens is None else capacity_tokens // block_size + 1


def run_replay_vllm(opts, out_dir, command: str | None = None) -> dict:
    """`radixsim replay --engine vllm` into result directory `out_dir` (as `replay.run_replay`)."""
    from .outputs import result_dir

    with result_dir(out_dir) as out:
        return replay_vllm(opts, out, command)


def replay_vllm(opts, out: Path, command: str | None) -> dict:
    from .replay import replay_requests

    B = opts.page_size
    if opts.tiers is not None:
        return replay_vllm_offload(opts, out, command)
    cache = VllmBlockCache(B, num_blocks(opts.capacity_tokens, B))
    rows = []
    for it in replay_requests(opts):
        r = cache.step(it.prompt, it.output)
        if opts.check_invariants:
            cache.check()
        rows.append({"rid": it.rid, "session_id": it.session_id, "round": it.round,
                     "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                     "cached_tokens": r.cached_tokens, "cached_device": -1, "cached_host": 0, "cached_storage": 0,
                     "evicted_tokens": r.evicted_tokens, "rejected": r.rejected,
                     "cold_tokens": None, "evicted_miss_tokens": None})
    summary = {**_write_rows(opts, out, rows, cache), "bytes_per_link": {},
               "cache": {"blocks_cached": len(cache.hash_of), "free_blocks_hashed": len(cache.hashed)}}
    results.write_summary(out, summary)
    src = {"trace": str(opts.trace)} if opts.trace else {"workload": opts.workload}
    results.write_config(out, {"mode": "replay", **src, "cache": {
        "engine": "vllm", "block_size": B, "capacity_tokens": opts.capacity_tokens,
        "num_blocks": cache.num_blocks}}, command=command)
    return summary


def replay_vllm_offload(opts, out: Path, command: str | None) -> dict:
    """The replay with vLLM's CPU offloading connector as the L2."""
    from cache_core.actions import L1, L2

    from .replay import replay_requests

    B, t = opts.page_size, opts.tiers
    tpc = opts.offload_block_size or B
    cache = VllmOffloadCache(B, num_blocks(opts.capacity_tokens, B), t.l2_tokens // tpc, tpc // B, opts.policy,
                             t.kv_bytes_per_token)
    rows = []
    moved = {f"{L1}->{L2}": [0, 0], f"{L2}->{L1}": [0, 0]}  # link -> [tokens, bytes]
    for it in replay_requests(opts):
        r = cache.step(it.prompt, it.output)
        for x in r.transfers:
            m = moved[x.link]
            m[0] += len(x.gpu_blocks) * B
            m[1] += x.nbytes
        if opts.check_invariants:
            cache.check()
        rows.append({"rid": it.rid, "session_id": it.session_id, "round": it.round,
                     "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                     "cached_tokens": r.gpu_hit + r.cpu_hit, "cached_device": r.gpu_hit, "cached_host": r.cpu_hit,
                     "cached_storage": 0, "evicted_tokens": len(r.gpu_evicted) * B, "rejected": r.rejected,
                     "cold_tokens": None, "evicted_miss_tokens": None})
    cpu = cache.cpu
    summary = {**_write_rows(opts, out, rows, cache),
               "tokens_per_link": {k: v[0] for k, v in moved.items()},
               "bytes_per_link": {k: v[1] for k, v in moved.items()},
               "cache": {"blocks_cached": len(cache.gpu.hash_of), "free_blocks_hashed": len(cache.gpu.hashed),
                         "cpu_chunks_cached": len(cpu), "cpu_chunks_stored": cpu.stored_chunks,
                         "cpu_chunks_evicted": cpu.evicted_chunks}}
    results.write_summary(out, summary)
    src = {"trace": str(opts.trace)} if opts.trace else {"workload": opts.workload}
    results.write_config(out, {"mode": "replay", **src, "cache": {
        "engine": "vllm", "block_size": B, "capacity_tokens": opts.capacity_tokens,
        "num_blocks": cache.gpu.num_blocks, "offload": {
            "connector": "OffloadingConnector (CPU)", "l2_tokens": t.l2_tokens, "block_size": tpc,
            "num_chunks": cpu.num_chunks, "eviction_policy": opts.policy, "offload_prompt_only": True,
            "kv_bytes_per_token": t.kv_bytes_per_token}}}, command=command)
    return summary


def _write_rows(opts, out: Path, rows: list, cache) -> dict:
    """requests.csv and rounds.csv of a vLLM replay (bad input if there are no rows; the cache's
    invariants checked first); the summary's totals."""
    from .replay import no_requests

    if not rows:
        raise no_requests(opts)
    cache.check()
    results.write_requests(out, rows)
    rounds = results.round_table(rows)
    if rounds:
        results.write_rounds(out, rounds)
    return {"mode": "replay", "engine": "vllm", **results.totals(rows, rounds),
            "rejected": sum(r["rejected"] for r in rows), "evicted_tokens": sum(r["evicted_tokens"] for r in rows)}
