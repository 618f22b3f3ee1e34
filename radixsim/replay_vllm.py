"""`radixsim replay --engine vllm`: the trace through vLLM v1's prefix cache
(cache_core/vllm_blocks.py), one request at a time, with the result files of every replay.

vLLM's cache has one eviction order (its free queue), no host or storage tier and no
SWA/MAMBA components in this flavour: `vllm_option_errors` names the option that asks for one.
Session close events are skipped (vLLM has no sessions)."""
from __future__ import annotations

from pathlib import Path

from cache_core.vllm_blocks import VllmBlockCache

from . import results

VLLM_BLOCK_SIZE = 16  # vllm 0.33.0 vllm/config/cache.py: CacheConfig.DEFAULT_BLOCK_SIZE


def vllm_option_errors(policy: str, tiers, components: str | None, model: str | None, capacities) -> str | None:
    """The first replay option the vLLM flavour does not model, as one line, or None."""
    if policy != "lru":
        return f"--policy {policy}: --engine vllm evicts in vLLM's free-queue order only; expected lru (the default)"
    if tiers is not None:
        return "--l2-tokens/--hicache-ratio/--l3-tokens: --engine vllm models no host or storage tier; expected none"
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
    from .replay import no_requests, replay_requests

    B = opts.page_size
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
    if not rows:
        raise no_requests(opts)
    cache.check()
    results.write_requests(out, rows)
    rounds = results.round_table(rows)
    if rounds:
        results.write_rounds(out, rounds)
    summary = {"mode": "replay", "engine": "vllm", **results.totals(rows, rounds),
               "rejected": sum(r["rejected"] for r in rows),
               "evicted_tokens": sum(r["evicted_tokens"] for r in rows), "bytes_per_link": {},
               "cache": {"blocks_cached": len(cache.hash_of), "free_blocks_hashed": len(cache.hashed)}}
    results.write_summary(out, summary)
    src = {"trace": str(opts.trace)} if opts.trace else {"workload": opts.workload}
    results.write_config(out, {"mode": "replay", **src, "cache": {
        "engine": "vllm", "block_size": B, "capacity_tokens": opts.capacity_tokens,
        "num_blocks": cache.num_blocks}}, command=command)
    return summary
