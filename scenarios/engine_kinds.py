"""``engine.kind``: ``sglang`` (default: `cache_core.engine.Engine`, EngineConfig) or ``vllm``
(`cache_core.vllm_engine.VllmEngine`, VllmConfig). Each kind's own keys are refused under the
other, and the vLLM flavour refuses what it does not model, each in one line naming the key.

The vLLM keys carry vLLM's names; unset, they take vllm 0.33.0's defaults for the scenario's GPU
as its OpenAI API server sets them (`cache_core.vllm_sched.batch_defaults`:
vllm/engine/arg_utils.py `EngineArgs.get_batch_defaults`), chunked prefill on
(`_set_default_chunked_prefill_and_prefix_caching_args`: a generate model supports it), block 16
(vllm/config/cache.py `CacheConfig.DEFAULT_BLOCK_SIZE`).
"""
from __future__ import annotations

from cache_core.vllm_sched import DEFAULT_BLOCK_SIZE, VllmConfig, batch_defaults

ENGINE_KINDS = ("sglang", "vllm")
VLLM_KEYS = ("block_size", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")
SGLANG_KEYS = ("max_running_requests", "max_prefill_tokens", "chunked_prefill_tokens", "schedule_policy",
               "new_token_ratio", "mixed_chunk", "load_overlap", "tree_core", "overlap_schedule", "frontend",
               "l3_get_batch_pages")
# the schema's entries (scenarios/schema.py: key -> (default, checker, what is expected)) and sanity limits
_GPU = "null (vLLM 0.33.0's default for the GPU) or an integer >= 1 (engine.kind vllm)"
KIND_KEYS = {
    "kind": ("sglang", ("choice", ENGINE_KINDS), "one of sglang, vllm (the engine flavour; scenarios/engine_kinds.py)"),
    "block_size": (None, "int1_or_none", "null (vLLM's 16) or an integer >= 1 (engine.kind vllm)"),
    "max_num_seqs": (None, "int1_or_none", _GPU),
    "max_num_batched_tokens": (None, "int1_or_none", _GPU),
    "enable_chunked_prefill": (None, ("choice", (None, True, False)),
                               "null (vLLM's default: true), true or false (engine.kind vllm)"),
}
KIND_LIMITS = {"engine.block_size": 2**20, "engine.max_num_seqs": 10**5, "engine.max_num_batched_tokens": 2**30}
# cache keys the vLLM flavour does not model (its KV is one full-attention block pool, LRU free queue)
UNMODELLED_CACHE = ("page_size", "swa_full_tokens_ratio", "mamba_full_memory_ratio", "swa_tokens", "mamba_slots",
                    "mamba_every_tokens", "l2_tokens", "hicache_ratio", "hicache_size_gb", "l3_tokens",
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
        for k in VLLM_KEYS:
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
            hint = "engine.block_size is vLLM's block" if k == "page_size" else "the vLLM flavour has no such option"
            raise error(f"{where}: cache.{k}: not modelled with engine.kind vllm ({hint}); expected it unset")
    if doc["cache"]["policy"] != "lru":
        raise error(f"{where}: cache.policy: {doc['cache']['policy']!r}: engine.kind vllm evicts in vLLM's "
                    "free-queue order only; expected lru")
    if comps != ["full"]:
        raise error(f"{where}: cache.components: {comps}: engine.kind vllm models full attention only "
                    "(no swa/mamba); expected a full-attention model or components [full]")
    if doc.get("fleet") is not None:
        raise error(f"{where}: fleet: engine.kind vllm runs a single engine so far; expected no fleet section")
    if doc.get("events"):
        raise error(f"{where}: events: engine.kind vllm has no fault what-ifs yet; expected no events")


def vllm_config(doc: dict, hw, model, where: str, error) -> VllmConfig:
    """The VllmConfig of ``engine``: set keys as given, unset ones vLLM 0.33.0's defaults for the GPU.
    Without chunked prefill the budget must hold the model's whole context (vLLM's max_model_len):
    unset, it is raised to it (arg_utils `_set_default_max_num_seqs_and_batched_tokens_args`); set
    below it, refused (config/scheduler.py `SchedulerConfig.verify_max_model_len`)."""
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
    try:
        return VllmConfig(**vals)
    except ValueError as err:
        raise error(f"{where}: {err}") from None


def engine_doc(e: dict, config) -> dict:
    """The `engine` section config.yaml records: under sglang exactly as before (no vLLM keys),
    under vllm the resolved vLLM values and the keys both kinds share."""
    if not isinstance(config, VllmConfig):
        return {k: v for k, v in e.items() if k != "kind" and k not in VLLM_KEYS}
    shared = {k: v for k, v in e.items() if k not in SGLANG_KEYS and k not in VLLM_KEYS}
    return {**shared, **{k: getattr(config, k) for k in VLLM_KEYS}}


def num_blocks(l1_tokens: int, block_size: int) -> int:
    """vLLM's num_gpu_blocks for an L1 of `l1_tokens`: whole blocks plus the null block 0 (as
    `radixsim replay --engine vllm` counts them)."""
    return l1_tokens // block_size + 1


__all__ = ["ENGINE_KINDS", "KIND_KEYS", "KIND_LIMITS", "VLLM_KEYS", "SGLANG_KEYS", "check_kind_keys", "vllm_config",
           "engine_doc", "num_blocks"]
