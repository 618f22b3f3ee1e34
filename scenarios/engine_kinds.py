"""``engine.kind``: ``sglang`` (default: `cache_core.engine.Engine`, EngineConfig) or ``vllm``
(`cache_core.vllm_engine.VllmEngine`, VllmConfig). Each kind's own keys are refused under the
other, and the vLLM flavour refuses what it does not model, each in one line naming the key.

The vLLM keys carry vLLM's names; unset, they take vllm 0.33.0's defaults for the scenario's GPU
as its OpenAI API server sets them (`cache_core.vllm_sched.batch_defaults`:
vllm/engine/arg_utils.py `EngineArgs.get_batch_defaults`), chunked prefill on
(`_set_default_chunked_prefill_and_prefix_caching_args`: a generate model supports it), block 16
(vllm/config/cache.py `CacheConfig.DEFAULT_BLOCK_SIZE`).

L2: ``cache.l2_tokens`` gives the engine vLLM's CPU KV offloading connector (cache_core/vllm_offload.py),
``cache.l2_tokens // engine.offload_block_size`` CPU chunks (vLLM: cpu_bytes_to_use // bytes per chunk,
vllm/v1/kv_offload/cpu/spec.py). Its keys are vLLM's kv_connector_extra_config ones, prefixed
``offload_``: ``block_size`` (tokens per chunk, a multiple of the GPU block:
distributed/kv_transfer/kv_connector/v1/offloading/config.py `build_offloading_config`; unset, one
block) and ``eviction_policy`` (lru | arc, default lru: kv_offload/cpu/spec.py). ``cache.policy``
stays the GPU free queue's (lru). SGLang's host-pool sizes are refused: ``hicache_ratio`` (host
pool = ratio x device pool) has no vLLM counterpart, and ``hicache_size_gb`` is SGLang's per-rank
10^9-byte pool where vLLM's ``kv_offloading_size`` is GiB summed over the TP ranks.
"""
from __future__ import annotations

from cache_core.vllm_sched import DEFAULT_BLOCK_SIZE, VllmConfig, batch_defaults

ENGINE_KINDS = ("sglang", "vllm")
VLLM_KEYS = ("block_size", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")
OFFLOAD_KEYS = ("offload_block_size", "offload_eviction_policy")  # vLLM's CPU offloading connector (an L2)
OFFLOAD_POLICIES = ("lru", "arc")  # cache_core/vllm_offload_policies.py POLICIES
SGLANG_KEYS = ("max_running_requests", "max_prefill_tokens", "chunked_prefill_tokens", "schedule_policy",
               "new_token_ratio", "mixed_chunk", "load_overlap", "tree_core", "overlap_schedule", "frontend",
               "l3_get_batch_pages")
# the schema's entries (scenarios/schema.py: key -> (default, checker, what is expected)) and sanity limits
_GPU = "null (vLLM 0.33.0's default for the GPU) or an integer >= 1 (engine.kind vllm)"
KIND_KEYS = {
    "kind": ("sglang", ("choice", ENGINE_KINDS), "one of " + ", ".join(ENGINE_KINDS) + " (the engine flavour; scenarios/engine_kinds.py)"),
    "block_size": (None, "int1_or_none", "null (vLLM's 16) or an integer >= 1 (engine.kind vllm)"),
    "max_num_seqs": (None, "int1_or_none", _GPU),
    "max_num_batched_tokens": (None, "int1_or_none", _GPU),
    "enable_chunked_prefill": (None, ("choice", (None, True, False)),
                               "null (vLLM's default: true), true or false (engine.kind vllm)"),
    "offload_block_size": (None, "int1_or_none", "null (engine.block_size) or an integer >= 1, tokens per CPU "
                           "chunk (engine.kind vllm with cache.l2_tokens)"),
    "offload_eviction_policy": (None, ("choice", (None, *OFFLOAD_POLICIES)),
                                "null (vLLM's lru), lru or arc (engine.kind vllm with cache.l2_tokens)"),
}
KIND_LIMITS = {"engine.block_size": 2**20, "engine.offload_block_size": 2**20, "engine.max_num_seqs": 10**5,
               "engine.max_num_batched_tokens": 2**30}
# cache keys the vLLM flavour does not model (its KV is one full-attention block pool, LRU free queue)
UNMODELLED_CACHE = ("page_size", "swa_full_tokens_ratio", "mamba_full_memory_ratio", "swa_tokens", "mamba_slots",
                    "mamba_every_tokens", "hicache_ratio", "hicache_size_gb", "l3_tokens",
                    "write_policy", "l3_write", "l3_model", "l3_eviction_high_watermark", "l3_eviction_ratio",
                    "l3_replicas", "l3_lease_ttl_s", "l3_eviction_shards", "l3_objects_per_page", "l3_ssd_tokens",
                    "prefetch_policy", "min_prefetch_tokens")


def engine_kind(doc: dict) -> str:
    return doc["engine"]["kind"]


def check_kind_keys(raw: dict, doc: dict, comps: list, where: str, error) -> None:
    """Refuse (`error`: the ScenarioError class) a key of the other kind, and under vllm what the
    flavour does not model (first problem only, one line)."""
    kind = engine_kind(doc)
    e_raw = raw.get("engine") or {}
    if kind == "sglang":
        for k in VLLM_KEYS + OFFLOAD_KEYS:
            if k in e_raw:
                raise error(f"{where}: engine.{k}: a vLLM scheduler key; expected it unset with engine.kind sglang "
                            f"(or engine.kind: vllm)")
        return
    for k in SGLANG_KEYS:
        if k in e_raw:
            raise error(f"{where}: engine.{k}: an SGLang engine key; expected it unset with engine.kind vllm "
                        f"(vLLM's: {', '.join('engine.' + v for v in VLLM_KEYS)})")
    c_raw = raw.get("cache") or {}
    for k in UNMODELLED_CACHE:
        if k in c_raw:
            hint = ("engine.block_size is vLLM's block" if k == "page_size" else "its L2, vLLM's CPU offloading, is "
                    "sized by cache.l2_tokens" if k in ("hicache_ratio", "hicache_size_gb")
                    else "the vLLM flavour has no such option")
            raise error(f"{where}: cache.{k}: not modelled with engine.kind vllm ({hint}); expected it unset")
    for k in OFFLOAD_KEYS:
        if k in e_raw and doc["cache"]["l2_tokens"] is None:
            raise error(f"{where}: engine.{k}: sets vLLM's CPU offloading, which needs an L2; expected "
                        "cache.l2_tokens too (or the key unset)")
    if doc["cache"]["policy"] != "lru":
        raise error(f"{where}: cache.policy: {doc['cache']['policy']!r}: engine.kind vllm evicts in vLLM's "
                    "free-queue order only; expected lru")
    if comps != ["full"]:
        raise error(f"{where}: cache.components: {comps}: engine.kind vllm models full attention only "
                    "(no swa/mamba); expected a full-attention model or components [full]")
    if doc.get("events"):
        raise error(f"{where}: events: engine.kind vllm has no fault what-ifs yet; expected no events")


def vllm_config(doc: dict, hw, model, where: str, error, l2_tokens: int | None = None) -> VllmConfig:
    """The VllmConfig of ``engine``: set keys as given, unset ones vLLM 0.33.0's defaults for the GPU.
    Without chunked prefill the budget must hold the model's whole context (vLLM's max_model_len):
    unset, it is raised to it (arg_utils `_set_default_max_num_seqs_and_batched_tokens_args`); set
    below it, refused (config/scheduler.py `SchedulerConfig.verify_max_model_len`). With an L2 of
    `l2_tokens` (resolved), the offload keys too (`offload`)."""
    e = doc["engine"]
    tokens, seqs = batch_defaults(hw.hbm_bytes_per_gpu, hw.gpu_name)
    chunked = e["enable_chunked_prefill"] is not False
    if not chunked:
        if e["max_num_batched_tokens"] is not None and e["max_num_batched_tokens"] < model.max_context_tokens:
            raise error(f"{where}: engine.max_num_batched_tokens: {e['max_num_batched_tokens']} is below "
                        f"{model.name}'s context ({model.max_context_tokens}) with enable_chunked_prefill false; "
                        "expected at least that (vLLM refuses it)")
        tokens = max(tokens, model.max_context_tokens)
    pick = {"block_size": DEFAULT_BLOCK_SIZE, "max_num_seqs": seqs, "max_num_batched_tokens": tokens,
            "enable_chunked_prefill": True}
    vals = {k: pick[k] if e[k] is None else e[k] for k in VLLM_KEYS}
    if l2_tokens is not None:
        vals.update(offload(e, vals["block_size"], l2_tokens, where, error))
    try:
        return VllmConfig(**vals)
    except ValueError as err:
        raise error(f"{where}: {err}") from None


def offload(e: dict, block_size: int, l2_tokens: int, where: str, error) -> dict:
    """The CPU offloading connector's keys: whole GPU blocks per chunk, at least one chunk."""
    tpc = block_size if e["offload_block_size"] is None else e["offload_block_size"]
    if tpc % block_size:
        raise error(f"{where}: engine.offload_block_size: {tpc} is not a multiple of engine.block_size "
                    f"({block_size}); expected a multiple (vLLM refuses it)")
    if l2_tokens < tpc:
        raise error(f"{where}: cache.l2_tokens: {l2_tokens} tokens hold no whole CPU chunk of {tpc} tokens "
                    "(engine.offload_block_size); expected at least one chunk")
    return {"offload_block_size": tpc, "offload_eviction_policy": e["offload_eviction_policy"] or "lru"}


def engine_doc(e: dict, config) -> dict:
    """The `engine` section config.yaml records: under sglang exactly as before (no vLLM keys),
    under vllm the resolved vLLM values and the keys both kinds share (the offload keys with an L2 only)."""
    if not isinstance(config, VllmConfig):
        return {k: v for k, v in e.items() if k != "kind" and k not in VLLM_KEYS + OFFLOAD_KEYS}
    shared = {k: v for k, v in e.items() if k not in SGLANG_KEYS + VLLM_KEYS + OFFLOAD_KEYS}
    keys = VLLM_KEYS + (OFFLOAD_KEYS if config.offload_block_size is not None else ())
    return {**shared, **{k: getattr(config, k) for k in keys}}


def num_blocks(l1_tokens: int, block_size: int) -> int:
    """vLLM's num_gpu_blocks for an L1 of `l1_tokens`: whole blocks plus the null block 0 (as
    `radixsim replay --engine vllm` counts them)."""
    return l1_tokens // block_size + 1


__all__ = ["ENGINE_KINDS", "KIND_KEYS", "KIND_LIMITS", "VLLM_KEYS", "OFFLOAD_KEYS", "SGLANG_KEYS", "check_kind_keys",
           "vllm_config", "engine_doc", "num_blocks", "offload"]
