"""L1 sizing (``l1_tokens: auto``): how many tokens of a model fit one GPU's pools, and the
tensor-parallel split of KV, state and host <-> device transfers (SGLang's rules; assumptions in
`l1_plan`: SWA/sidecar shares charged per FULL token, MAMBA share 0.9 by default, activations in
the 1 - mem_fraction_static remainder, MLA and DeepSeek-V4 KV replicated on every TP rank)."""
from __future__ import annotations

from dataclasses import dataclass

from .preset_data import get_hardware, get_model
from .preset_hardware import HardwarePreset
from .preset_models import GB, ModelPreset, bytes_per_token, is_number, nonneg_int


def host_pool_tokens(model: ModelPreset, tp: int, size_gb: float) -> int:
    """Tokens in an L2 (host) pool of `size_gb` GB per rank, SGLang's ``--hicache-size``: each
    rank's host pool holds ``int(size_gb x 1e9 // size_per_token)`` tokens, size_per_token being
    that rank's share of a token (HostKVCache.__init__, python/sglang/srt/mem_cache/
    memory_pool_host.py); here the FULL KV with its sidecars over `kv_shards` (MLA: replicated)."""
    return int(size_gb * 1e9 // (bytes_per_token(model, "full") / kv_shards(model, tp)))


# ------------------------------------------------------------------------------------------
# L1 sizing: l1_tokens: auto
# ------------------------------------------------------------------------------------------



DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9


@dataclass(frozen=True, kw_only=True)
class L1Plan:
    """How `l1_plan` split one GPU's memory. Tokens are FULL-pool tokens (the cache's
    ``capacity_tokens``); ``swa_tokens``/``mamba_slots`` are None when the model lacks them."""

    full_tokens: int
    swa_tokens: int | None
    mamba_slots: int | None
    budget_bytes_per_gpu: float
    cell_bytes_per_gpu: float
    kv_shards: int
    state_shards: int
    uncapped_full_tokens: int


def kv_shards(model: ModelPreset, tp: int) -> int:
    """How many ways tensor parallelism splits the KV (and its sidecars): GQA splits KV heads
    (a head is replicated once tp exceeds them: min(tp, kv_heads)); MLA and DeepSeek-V4 keep
    one shared latent per token, replicated on every rank (assumption: no DP attention)."""
    return min(tp, model.num_kv_heads) if model.attention == "gqa" else 1


def transfer_shards(model: ModelPreset, tp: int) -> dict:
    """Per component, how many ways a host <-> device transfer splits over the tp ranks: each
    rank copies its own shard between its host pool and its GPU over its own PCIe link, all at
    once, so a transfer lasts (bytes / ways) / one GPU's bandwidth. FULL and SWA (with their
    sidecars): `kv_shards` (GQA heads; MLA and DeepSeek-V4 latents are replicated: every rank
    copies the whole latent, as each rank's SGLang host pool holds it:
    ``MLATokenToKVPoolHost.get_size_per_token`` = (kv_lora_rank + qk_rope_head_dim) x dtype
    bytes x layers, python/sglang/srt/mem_cache/memory_pool_host.py); MAMBA state: tp (as
    `l1_plan` splits it)."""
    k = kv_shards(model, tp)
    return {"full": k, "swa": k, "mamba": tp}


def _check_plan(hardware: HardwarePreset, tp, mem_fraction_static, page_size, max_total_tokens) -> None:
    """ValueError for an `l1_plan` argument out of range (those that need no model)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= hardware.num_gpus:
        raise ValueError(f"tp must be an integer in 1..{hardware.num_gpus} on {hardware.name}, got {tp!r}")
    if not (is_number(mem_fraction_static) and 0 < mem_fraction_static <= 1):
        raise ValueError(f"mem_fraction_static must be in (0, 1], got {mem_fraction_static!r}")
    nonneg_int("l1_plan", "page_size", page_size, 1)
    if max_total_tokens is not None:
        nonneg_int("l1_plan", "max_total_tokens", max_total_tokens, page_size)


def _check_ratios(model: ModelPreset, ratio, mamba_full_memory_ratio) -> bool:
    """ValueError for a pool ratio out of range; whether the model has a MAMBA state."""
    if model.swa_layers and not (is_number(ratio) and ratio > 0):
        raise ValueError(f"swa_full_tokens_ratio must be > 0, got {ratio!r}")
    has_mamba = model.state_bytes > 0
    if has_mamba and not (is_number(mamba_full_memory_ratio) and mamba_full_memory_ratio > 0):
        raise ValueError(f"mamba_full_memory_ratio must be > 0, got {mamba_full_memory_ratio!r}")
    return has_mamba


def l1_plan(model, hardware, tp: int, mem_fraction_static: float, *,
            swa_full_tokens_ratio: float | None = None,
            mamba_full_memory_ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO,
            page_size: int = 1, max_total_tokens: int | None = None,
            reserve_bytes_per_gpu: float = 0) -> L1Plan:
    """Size the GPU (L1) pools of `model` served at tensor parallelism `tp` on `hardware`.

    Per GPU (every rank holds the same number of tokens, so the smallest rank decides):

        budget = hbm_bytes_per_gpu x mem_fraction_static - weight_bytes / tp - reserve
        cell   = (FULL KV + FULL sidecars) / kv_shards
                 + swa_full_tokens_ratio x (SWA KV + SWA sidecars) / kv_shards
        cell  *= 1 + mamba_full_memory_ratio            (only for a model with a MAMBA state)
        full_tokens = floor(budget / cell), down to a page multiple, capped by max_total_tokens
        swa_tokens  = int(full_tokens x swa_full_tokens_ratio)
        mamba_slots = floor(mamba_full_memory_ratio x full_tokens x attention cell
                            / (state_bytes / tp))

    Assumptions (each also in the module docs):
    - activations, CUDA graphs and communication buffers live in the (1 - mem_fraction_static)
      remainder, as in SGLang; `reserve_bytes_per_gpu` (default 0) takes more off;
    - weights split evenly over the tp ranks (replicated embeddings etc. ignored);
    - the SWA pool holds swa_full_tokens_ratio x the FULL tokens (SGLang's rule; default the
      preset's ratio: 0.1 for DeepSeek-V4 and Inkling, 0.8 otherwise), so its bytes, and those
      of the sidecars that follow it, are charged to each FULL token at that ratio;
    - the MAMBA pool gets mamba_full_memory_ratio x the attention pools' memory (default 0.9,
      SGLang's server default; the seed's Inkling run passes 0.1); recurrent state splits over
      tp ranks (heads / conv channels divide evenly);
    - with max_total_tokens (SGLang's --max-total-tokens) the FULL pool is capped and the SWA
      and MAMBA pools follow the capped count.
    """
    model = model if isinstance(model, ModelPreset) else get_model(model)
    hardware = hardware if isinstance(hardware, HardwarePreset) else get_hardware(hardware)
    _check_plan(hardware, tp, mem_fraction_static, page_size, max_total_tokens)
    ratio = model.swa_full_tokens_ratio if swa_full_tokens_ratio is None else swa_full_tokens_ratio
    has_mamba = _check_ratios(model, ratio, mamba_full_memory_ratio)

    budget = hardware.hbm_bytes_per_gpu * mem_fraction_static - model.weight_bytes / tp - reserve_bytes_per_gpu
    if budget <= 0:
        raise ValueError(f"{model.name} on {hardware.name} at tp={tp}: weights "
                         f"{model.weight_bytes / tp / GB:,.1f} GB per GPU (+ reserve) exceed "
                         f"{hardware.hbm_bytes_per_gpu * mem_fraction_static / GB:,.1f} GB "
                         f"(HBM x mem_fraction_static {mem_fraction_static})")
    shards = kv_shards(model, tp)
    attn_cell = bytes_per_token(model, "full") / shards
    if model.swa_layers:
        attn_cell += ratio * bytes_per_token(model, "swa") / shards
    mamba_r = mamba_full_memory_ratio if has_mamba else 0.0
    cell = attn_cell * (1 + mamba_r)
    if cell <= 0:
        raise ValueError(f"{model.name}: no per-token L1 bytes to size the pool by")
    uncapped = int(budget // cell) // page_size * page_size
    full = uncapped if max_total_tokens is None else min(uncapped, max_total_tokens // page_size * page_size)
    swa = int(full * ratio) if model.swa_layers else None
    slots = int(mamba_r * full * attn_cell // (model.state_bytes / tp)) if has_mamba else None
    return L1Plan(full_tokens=full, swa_tokens=swa, mamba_slots=slots, budget_bytes_per_gpu=budget,
                  cell_bytes_per_gpu=cell, kv_shards=shards, state_shards=tp if has_mamba else 1,
                  uncapped_full_tokens=uncapped)


def l1_tokens_auto(model, hardware, tp: int, mem_fraction_static: float, **kw) -> int:
    """``l1_tokens: auto``: the FULL-pool tokens of `l1_plan` (same arguments)."""
    return l1_plan(model, hardware, tp, mem_fraction_static, **kw).full_tokens
