"""Step-time cost model: how long one engine step takes on the modelled hardware.

Two interchangeable models share one interface (``CostModel``):

- ``RooflineCostModel``: analytic, from the model preset (layers, heads, parameters, KV and
  state bytes), the hardware preset (FLOP/s, HBM and NVLink bandwidth) and a handful of
  efficiency factors (``Efficiency``). Every formula is below.
- ``TableCostModel``: a small fitted table of measured step times (from ``gpu_backend``),
  interpolated. It replaces the roofline once measurements exist.

Interface (all times in seconds):
- ``prefill_time_s(batch)``: one prefill (extend) step; ``batch`` = [(new_tokens,
  cached_tokens), ...], one pair per request: the tokens computed in this step (a chunk, under
  chunked prefill) and the context already present (a cache hit or earlier chunks). Cached
  tokens are never recomputed: they cost only as keys that new tokens attend to.
- ``decode_time_s(contexts)``: one decode step, one new token per running request;
  ``contexts`` = the tokens each request already holds.
- ``step_time_s(prefill_batch, decode_contexts)``: a mixed step (SGLang's mixed chunked
  prefill): ONE roofline over the summed FLOPs and bytes, so the weights are read once.
- ``transfer_time_s(nbytes, link)``: a copy over "pcie" (GPU<->host, per GPU), "l3" (host<->L3
  store, per node) or "nvlink" (GPU<->GPU, per GPU): latency + bytes / bandwidth.

Roofline formulas
=================
Notation: n = new tokens of a request in this step, c = its cached tokens, so its new tokens
sit at positions c .. c+n-1 and the token at position p (0-based) sees p+1 keys (itself
included). A decode token of a request with context c is the case n = 1. T = all tokens of
the step (sum of n, plus one per decode request). tp = tensor-parallel degree.

FLOPs (whole model; divided by tp in the time, since heads and weight shards split evenly):

- linear: ``linear_flops = 2 x active_params x T``. A multiply-add per active parameter per
  token (for MoE, ``active_params`` already counts only the routed top-k experts). It
  over-counts the embedding lookup and the LM head on non-last prefill tokens (<= 13% for
  Llama-3.1-8B, a few % for the large models); calibration absorbs it.
- attention, per attention layer and per (query, key) pair: ``pair_flops = 2 x q_heads x
  (d_qk + d_v)`` (QK^T and PV). GQA and DeepSeek-V4: d_qk = head_dim, d_v = v_head_dim (or
  head_dim; DeepSeek-V4 shares one 512-wide latent as K and V), so for d_v = d_qk this is the
  familiar 4 x d_attn with d_attn = q_heads x head_dim. MLA prefill runs the decompressed
  (non-absorbed) form: d_qk = head_dim (nope + rope), d_v = v_head_dim; MLA decode runs the
  absorbed form: d_qk = kv_lora_rank + rope, d_v = kv_lora_rank.
  Keys summed over the step's new tokens, with F(m) = the sum over q = 1..m of the keys seen
  by the q-th token of the sequence, and keys = F(c + n) - F(c):
  - full-attention layer: F(m) = m(m+1)/2, so keys = n c + n(n+1)/2 ~ n (c + n/2) (causal);
  - sliding-window layer (window W, self included): F(m) = sum min(q, W) = m(m+1)/2 for
    m <= W, else W(W+1)/2 + (m - W) W; a token past the window sees exactly W keys, so the
    cost stops growing with c once c >= W;
  - DeepSeek-V4 compressed layers (ratio r; every such layer is also a window layer above):
    the token at position p sees floor((p+1)/r) compressed rows. C128 layers attend to all:
    F(m) = sum floor(q/r) = r k(k-1)/2 + k (m mod r + 1) with k = floor(m/r). C4 layers attend
    to the top-K rows an indexer picks: F(m) = sum min(floor(q/r), K); and the indexer scores
    every row: ``indexer_flops = 2 x idx_heads x idx_dim x (sum floor(q/r))`` per C4 layer
    (fp8, run at the fp8 peak).
  ``attention_flops = pair_flops x sum over layers of keys``.
- recurrent state update (every layer that keeps a state: GDN/KDA recurrent layers, Inkling's
  short conv): linear in new tokens, ``recurrent_flops = state_layers x (6 x ssm_elements +
  2 x conv_elements) x n``: the gated delta rule reads (S k), updates (rank-1) and reads out
  (S^T q) every element of the d x d state once per token, two FLOPs each; the short conv is
  one multiply-add per stored conv element per token. The projections feeding the state are
  weights, already in ``linear_flops``.

Bytes read from HBM, per GPU (the busiest rank; every rank reads the same amount):

- weights, once per step: ``weight_bytes = (shared_bytes + routed_bytes x (1 - (1 - k/E)^T))
  / tp``. Dense: routed = 0, all weights. MoE (``MOE_ROUTING``: E routed experts, top-k):
  routed params R = (total - active) / (1 - k/E) (then shared S = total - R), routed_bytes =
  R x expert bytes per param, shared_bytes = weight_bytes - routed_bytes; 1 - (1 - k/E)^T is
  the expected share of a layer's experts that T tokens touch under uniform, independent
  routing (an upper bound: real routing is correlated). One token reads the active weights;
  a few hundred read them all. An MoE preset without a routing entry falls back to S = 0 and
  k/E = active/total.
- KV, per request and attention layer, rows read once (attention kernels stream each K/V
  tile once per layer; the n new rows written are counted as read): full layer c + n rows;
  window layer min(c, W - 1) + n; C128 layer floor((c+n)/r) rows; C4 layer min(floor((c+n)/r),
  n K) selected rows plus floor((c+n)/r) indexer rows (``DSV4_INDEXER`` row bytes). Row bytes
  = ``model.kv_row_bytes``. Divided by ``kv_shards(model, tp)``: GQA splits KV heads (up to
  kv_heads ways); MLA and DeepSeek-V4 latents are replicated on every rank.
- recurrent state, per request: written once, read once unless c = 0 (a fresh request starts
  from zeros): ``state_bytes x (1 + [c > 0]) / tp`` (heads/channels split over tp ranks).

Time:

    compute_s = sum over prefill and decode parts of
                (linear_flops / linear_peak + (attention_flops + recurrent_flops) / bf16_peak
                 + indexer_flops / fp8_peak) / (tp x mfu)      (mfu_prefill or mfu_decode)
                x kernel_factor                                  (the model preset's; 1.0 by default)
    memory_s  = (weight_bytes + kv_bytes + state_bytes) / (hbm_bytes_per_s x hbm_efficiency)
    allreduce_s = 2 (tp-1)/tp x allreduce_bytes / (nvlink_bytes_per_s x allreduce_efficiency)
                  + 2 x num_layers x allreduce_latency_s                   (0 when tp = 1)
        allreduce_bytes = 2 x num_layers x T x hidden_size x 2 B (two all-reduces per layer,
        after attention and after the MLP/MoE, of the bf16 activations; ring algorithm: each
        GPU sends and receives 2 (tp-1)/tp of the message)
    overhead_s = per_step_overhead_s + num_layers x per_layer_overhead_s
    total_s = max(compute_s, memory_s) + allreduce_s + overhead_s      (0 for an empty step)
              (+ alltoall_s, the EP all-to-alls, in sim/operators.py)

``linear_peak`` is the fp8 peak when the preset's ``weight_dtype`` names fp8 (DeepSeek-V4:
fp8 GEMMs; 4-bit experts there are computed in fp8), else the bf16 peak (bf16 weights, and
INT4/MXFP4 experts, which H200 upcasts to bf16). Attention and state updates run in bf16. The
all-reduce is not overlapped with compute (SGLang's TP all-reduces sit between layers).

Assumptions (also in the docstrings where they bite):
- pure tensor parallelism (no expert or data-parallel attention; sim/operators.py prices expert
  parallelism, `engine.ep_size`); tp divides heads evenly;
- no speculative decoding (no MTP layers); DeepSeek-V4's hyper-connections and compressor
  rings are not costed (small next to the listed terms);
- each request's new tokens follow its cached tokens contiguously (one chunk per request);
- the step's weights are read once however many requests share it (continuous batching);
- efficiencies are constants (no dependence on batch shape); calibrate them, or measure a
  ``TableCostModel``.

Transfer times (``transfer_time_s``): ``latency_s + nbytes / bandwidth`` with, from the
hardware preset, pcie: ``pcie_latency_s`` + ``pcie_bytes_per_s`` (per GPU per direction), l3:
``l3_latency_s`` + ``l3_bytes_per_s`` (+ ``blocks x l3_block_overhead_s``), nvlink:
``NVLINK_LATENCY_S`` + ``nvlink_bytes_per_s`` (per GPU per direction). Zero bytes cost 0.

Table model
===========
``TableCostModel`` reads {"prefill": [[tokens, cached, seconds], ...], "decode": [[batch,
mean_context, seconds], ...]} (JSON, or YAML for any other suffix). Per table, the rows are
grouped by their second column; within a group, time is piecewise linear in the first column
(tokens or batch) through the group's points and extrapolated linearly from the end segments
(a one-point group is constant); across groups it is linear between the two groups that
bracket the query's second column and equal to the nearest group beyond them. Results are
floored at 0. A prefill batch is looked up at tokens = sum of new tokens and cached =
new-token-weighted mean of the cached tokens (attention work scales as sum n x c); a decode
step at batch = number of requests and mean_context = their mean context; a mixed step as one
prefill batch in which every decode request is a 1-token extend (what SGLang's mixed chunked
prefill runs).
"""
from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import yaml

from scenarios.presets import HardwarePreset, ModelPreset, get_hardware, get_model, kv_shards

ACTIVATION_DTYPE_BYTES = 2  # assumption: bf16 activations, so all-reduce messages are bf16
NVLINK_LATENCY_S = 5e-6  # assumption: one peer copy launch + NVSwitch hop; HARDWARE.md gives none
LINKS = ("pcie", "l3", "nvlink")

# Recurrent state update, FLOPs per state element per token (see the module docstring).
SSM_FLOPS_PER_ELEMENT = 6
CONV_FLOPS_PER_ELEMENT = 2


@dataclass(frozen=True)
class MoeRouting:
    """Routed experts E, top-k per token, and bytes per routed-expert parameter."""

    routed_experts: int
    top_k: int
    expert_bytes_per_param: float
    source: str


# Keyed by ModelPreset.name. Expert counts and top-k from MODELS.md's MoE rows; bytes per
# expert parameter from the preset's weight_bytes assumption.
MOE_ROUTING: dict[str, MoeRouting] = {
    "DeepSeek-V4-Flash": MoeRouting(256, 6, 1.0, "MODELS.md DeepSeek-V4-Flash MoE: 256 routed, top-6; "
                                    "fp8 weights (preset)"),
    "DeepSeek-V4-Pro": MoeRouting(384, 6, 0.5, "MODELS.md DeepSeek-V4-Pro MoE: 384 routed, top-6; "
                                  "4-bit experts (preset)"),
    "Inkling-Small": MoeRouting(256, 6, 2.0, "MODELS.md Inkling-Small MoE: 256 routed, top-6; bf16 (preset)"),
    "Kimi-K3": MoeRouting(896, 16, 0.5, "MODELS.md Kimi-K3 MoE: 896 routed, top-16; INT4 experts (preset)"),
    "Qwen3.5-397B-A17B": MoeRouting(512, 10, 2.0, "MODELS.md Qwen3.5-397B-A17B MoE: 512 routed, top-10; bf16"),
    "Qwen3-Next-80B-A3B": MoeRouting(512, 10, 2.0, "MODELS.md Qwen3-Next-80B-A3B MoE: 512 routed, top-10; bf16"),
    "gpt-oss-20b": MoeRouting(32, 4, 17 / 32, "MODELS.md gpt-oss-20b MoE: 32 experts, top-4; MXFP4 "
                              "4.25 bits/param (preset)"),
    "gpt-oss-120b": MoeRouting(128, 4, 17 / 32, "docs/sources/models.md gpt-oss-120b: 128 experts, top-4; "
                               "MXFP4 4.25 bits/param (preset)"),
    "Qwen3-235B-A22B": MoeRouting(128, 8, 2.0, "docs/sources/models.md Qwen3-235B-A22B: 128 experts, top-8; bf16"),
    "DeepSeek-V3": MoeRouting(256, 8, 1.0, "docs/sources/models.md DeepSeek-V3: 256 routed, top-8; fp8 (preset)"),
    "GLM-4.5-Air": MoeRouting(128, 8, 2.0, "docs/sources/models.md GLM-4.5-Air: 128 routed, top-8; bf16"),
}


@dataclass(frozen=True)
class Dsv4Indexer:
    """DeepSeek-V4's lightning indexer on compressed layers of ratio ``ratio``."""

    ratio: int
    heads: int
    head_dim: int
    top_k: int
    row_bytes: int
    source: str


# Keyed by ModelPreset.name; a "dsv4" model not listed uses the Flash entry.
DSV4_INDEXER: dict[str, Dsv4Indexer] = {
    "DeepSeek-V4-Flash": Dsv4Indexer(4, 64, 128, 512, 132, "MODELS.md DeepSeek-V4-Flash Indexer: 64 heads "
                                     "x 128 dims, top-512, on C4 layers only; row 128 fp8 + 4 B scale"),
    "DeepSeek-V4-Pro": Dsv4Indexer(4, 64, 128, 1024, 132, "MODELS.md DeepSeek-V4-Pro Indexer: 64 heads "
                                   "x 128 dims, top-1024; row as Flash"),
}


# ------------------------------------------------------------------------------------------
# Efficiency factors
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """Fractions of peak the hardware reaches, and fixed per-step costs. Calibrate these
    (``dataclasses.replace``) against gpu_backend measurements; ``EFFICIENCY_SOURCES`` says
    where each default comes from."""

    # Large-M GEMMs reach ~0.8 of the bf16 peak (HARDWARE.md: 790 of 989 TFLOP/s measured on
    # an 8192^3 matmul); a whole forward pass (attention, norms, MoE routing, tails) less.
    mfu_prefill: float = 0.5
    # assumption: small-M GEMMs and decode attention kernels use the tensor cores poorly.
    mfu_decode: float = 0.3
    # HARDWARE.md: achievable HBM bandwidth is a fraction of 4.8 TB/s; paged-KV reads far below.
    hbm_efficiency: float = 0.6
    # assumption: NCCL / custom all-reduce bus bandwidth ~0.7-0.8 of NVLink's 450 GB/s per way.
    allreduce_efficiency: float = 0.7
    # assumption: small-message all-reduce latency on NVSwitch (launch + sync), ~10 us each.
    allreduce_latency_s: float = 10e-6
    # assumption: SGLang scheduler (batch building, radix match, sampling) + launch, per step.
    per_step_overhead_s: float = 3e-3
    # assumption: kernel-boundary gaps not hidden by the GPU queue, a few kernels x ~2-3 us.
    per_layer_overhead_s: float = 10e-6

    def __post_init__(self):
        for name in ("mfu_prefill", "mfu_decode", "hbm_efficiency", "allreduce_efficiency"):
            v = getattr(self, name)
            if not (_is_number(v) and 0 < v <= 1):
                raise ValueError(f"Efficiency.{name} must be in (0, 1], got {v!r}")
        for name in ("allreduce_latency_s", "per_step_overhead_s", "per_layer_overhead_s"):
            v = getattr(self, name)
            if not (_is_number(v) and 0 <= v and math.isfinite(v)):
                raise ValueError(f"Efficiency.{name} must be a finite number >= 0, got {v!r}")


EFFICIENCY_SOURCES = {
    "mfu_prefill": "assumption: 0.5 of the dense peak for a whole prefill forward; HARDWARE.md "
                   "measured ~790/989 = 0.8 on a large bf16 matmul alone",
    "mfu_decode": "assumption: 0.3, small-M GEMMs and decode attention (decode is usually "
                  "memory-bound, so this rarely binds)",
    "hbm_efficiency": "HARDWARE.md HBM bandwidth: achievable a fraction of 4.8 TB/s, paged-KV reads far "
                      "below peak; assumption: 0.6 blended over weights (near peak) and paged KV",
    "allreduce_efficiency": "assumption: all-reduce bus bandwidth ~0.7 of HARDWARE.md NVLink 450 GB/s/way",
    "allreduce_latency_s": "assumption: ~10 us per small all-reduce on NVSwitch",
    "per_step_overhead_s": "assumption: 3 ms scheduler + launch per step (SGLang without overlap)",
    "per_layer_overhead_s": "assumption: 10 us of unhidden kernel-boundary gaps per layer",
}


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


# ------------------------------------------------------------------------------------------
# Interface, inputs, transfer helper
# ------------------------------------------------------------------------------------------

class CostModel(Protocol):
    """What the engine's step executor needs from a cost model."""

    def prefill_time_s(self, batch: Sequence[tuple[int, int]]) -> float: ...
    def decode_time_s(self, contexts: Sequence[int]) -> float: ...
    def step_time_s(self, prefill_batch: Sequence[tuple[int, int]] = (),
                    decode_contexts: Sequence[int] = ()) -> float: ...
    def transfer_time_s(self, nbytes: float, link: str, *, blocks: int = 0) -> float: ...


_EXACT_INT = 2 ** 53  # plain ints up to this survive the float64 checks below unchanged


def _plain_counts(values) -> bool:
    """`values` are plain ints in [0, 2**53]: the checks below would pass them unchanged,
    so the parsers may build their int64 array directly (same values, less work per step)."""
    return all(type(v) is int and 0 <= v <= _EXACT_INT for v in values)


def parse_batch(batch) -> tuple[np.ndarray, np.ndarray]:
    """[(new_tokens, cached_tokens), ...] -> two int64 arrays; new >= 1, cached >= 0."""
    if all(type(pair) is tuple and len(pair) == 2 for pair in batch):
        new, cached = [pair[0] for pair in batch], [pair[1] for pair in batch]
        if _plain_counts(new) and _plain_counts(cached) and 0 not in new:
            return np.array(new, dtype=np.int64), np.array(cached, dtype=np.int64)
    arr = np.asarray(batch if len(batch) else np.empty((0, 2)), dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"a prefill batch is a list of (new_tokens, cached_tokens) pairs, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
        raise ValueError("prefill batch: token counts must be integers")
    if np.any(arr[:, 0] < 1) or np.any(arr[:, 1] < 0):
        raise ValueError("prefill batch: new_tokens must be >= 1 and cached_tokens >= 0")
    return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64)


def parse_contexts(contexts) -> np.ndarray:
    if _plain_counts(contexts):
        return np.array(contexts, dtype=np.int64)
    arr = np.asarray(contexts if len(contexts) else np.empty(0), dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"decode contexts are a flat list of token counts, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)) or np.any(arr < 0):
        raise ValueError("decode contexts must be integers >= 0")
    return arr.astype(np.int64)


def transfer_time_s(hw: HardwarePreset, nbytes: float, link: str, *, blocks: int = 0) -> float:
    """Seconds to move `nbytes` over `link` of `hw`: latency + nbytes / bandwidth.

    "pcie": one GPU's host link (``pcie_latency_s``, ``pcie_bytes_per_s``); "l3": the node's
    link to the L3 store (``l3_latency_s``, ``l3_bytes_per_s``, plus ``blocks`` x
    ``l3_block_overhead_s`` for a transfer made of that many blocks); "nvlink": one GPU's
    NVLink (``NVLINK_LATENCY_S``, ``nvlink_bytes_per_s``). Zero bytes cost nothing. No
    contention: the SimPy link processes queue transfers."""
    if link not in LINKS:
        raise ValueError(f"unknown link {link!r}; expected one of {', '.join(LINKS)}")
    if not (_is_number(nbytes) and nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"transfer bytes must be a finite number >= 0, got {nbytes!r}")
    if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 0:
        raise ValueError(f"blocks must be an integer >= 0, got {blocks!r}")
    if blocks and link != "l3":
        raise ValueError("a per-block overhead is modelled on the l3 link only")
    if nbytes == 0:
        return 0.0
    if link == "pcie":
        return hw.pcie_latency_s + nbytes / hw.pcie_bytes_per_s
    if link == "l3":
        return hw.l3_latency_s + blocks * hw.l3_block_overhead_s + nbytes / hw.l3_bytes_per_s
    return NVLINK_LATENCY_S + nbytes / hw.nvlink_bytes_per_s


# ------------------------------------------------------------------------------------------
# Roofline
# ------------------------------------------------------------------------------------------

def causal_keys(m: np.ndarray) -> np.ndarray:
    """Sum over q = 1..m of q: keys seen by the first m tokens under causal attention."""
    m = np.asarray(m, dtype=np.float64)
    return m * (m + 1) / 2


def window_keys(m: np.ndarray, window: int) -> np.ndarray:
    """Sum over q = 1..m of min(q, W): keys seen by the first m tokens with a window of W."""
    m = np.asarray(m, dtype=np.float64)
    w = float(window)
    return np.where(m <= w, m * (m + 1) / 2, w * (w + 1) / 2 + (m - w) * w)


def compressed_rows(m: np.ndarray, ratio: int) -> np.ndarray:
    """Sum over q = 1..m of floor(q / r): compressed rows seen by the first m tokens."""
    m = np.asarray(m, dtype=np.int64)
    k, rem = np.divmod(m, ratio)
    k = k.astype(np.float64)
    return ratio * k * (k - 1) / 2 + k * (rem + 1)


def topk_rows(m: np.ndarray, ratio: int, top_k: int) -> np.ndarray:
    """Sum over q = 1..m of min(floor(q / r), K): rows attended under a top-K selection."""
    m = np.asarray(m, dtype=np.int64)
    cap = top_k * ratio - 1  # the last q with floor(q / r) < K
    return np.where(m <= cap, compressed_rows(np.minimum(m, cap), ratio),
                    compressed_rows(np.int64(cap), ratio) + (m - cap).astype(np.float64) * top_k)


@dataclass(frozen=True)
class StepCost:
    """The work of one step and its time terms. FLOPs are whole-model; bytes are per GPU."""

    prefill_tokens: int
    decode_tokens: int
    linear_flops: float
    attention_flops: float
    indexer_flops: float
    recurrent_flops: float
    weight_bytes: float
    kv_bytes: float
    state_bytes: float
    allreduce_bytes: float
    compute_s: float
    memory_s: float
    allreduce_s: float
    overhead_s: float
    alltoall_s: float = 0.0  # EP dispatch + combine (sim/operators.py)

    @property
    def flops(self) -> float:
        return self.linear_flops + self.attention_flops + self.indexer_flops + self.recurrent_flops

    @property
    def hbm_bytes(self) -> float:
        """HBM bytes one GPU reads in the step."""
        return self.weight_bytes + self.kv_bytes + self.state_bytes

    @property
    def total_s(self) -> float:
        if self.prefill_tokens + self.decode_tokens == 0:
            return 0.0
        return max(self.compute_s, self.memory_s) + self.allreduce_s + self.alltoall_s + self.overhead_s

    @property
    def bound(self) -> str:
        """"compute" or "memory": which roofline side sets the step."""
        return "compute" if self.compute_s >= self.memory_s else "memory"


class RooflineCostModel:
    """Analytic step times for `model` at tensor parallelism `tp` on `hw` (formulas in the
    module docstring). `model` and `hw` may be presets or preset names."""

    def __init__(self, model: ModelPreset | str, hw: HardwarePreset | str, tp: int,
                 eff: Efficiency | None = None):
        self.model = model if isinstance(model, ModelPreset) else get_model(model)
        self.hw = hw if isinstance(hw, HardwarePreset) else get_hardware(hw)
        if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= self.hw.num_gpus:
            raise ValueError(f"tp must be an integer in 1..{self.hw.num_gpus} on {self.hw.name}, got {tp!r}")
        self.tp = tp
        self.eff = Efficiency() if eff is None else eff
        if not isinstance(self.eff, Efficiency):
            raise ValueError(f"eff must be an Efficiency, got {type(self.eff).__name__}")
        m = self.model
        self.kv_shards = kv_shards(m, tp)
        self.linear_peak_flops = self.hw.fp8_flops if "fp8" in m.weight_dtype else self.hw.bf16_flops
        d_v = m.head_dim if m.v_head_dim is None else m.v_head_dim
        self.pair_flops_prefill = 2 * m.num_q_heads * (m.head_dim + d_v)
        if m.attention == "mla":  # absorbed MLA in decode: scores on the latent + rope, output on the latent
            self.pair_flops_decode = 2 * m.num_q_heads * (m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank)
        else:
            self.pair_flops_decode = self.pair_flops_prefill
        self.recurrent_flops_per_token = m.state_layers * (
            SSM_FLOPS_PER_ELEMENT * m.ssm_state_elements_per_layer
            + CONV_FLOPS_PER_ELEMENT * m.conv_state_elements_per_layer)
        self.indexer = None
        if m.attention == "dsv4" and m.compressed_layers:
            self.indexer = DSV4_INDEXER.get(m.name, DSV4_INDEXER["DeepSeek-V4-Flash"])
        # weights: shared bytes always read; routed bytes read in proportion to expert coverage
        routing = MOE_ROUTING.get(m.name)
        if m.active_params >= m.total_params:
            self.routed_fraction, self.routed_weight_bytes = 1.0, 0.0
        elif routing is not None:
            f = routing.top_k / routing.routed_experts
            routed_params = (m.total_params - m.active_params) / (1 - f)
            self.routed_fraction = f
            self.routed_weight_bytes = min(float(m.weight_bytes), routed_params * routing.expert_bytes_per_param)
        else:  # unknown routing: every parameter routed, with the active share per token
            self.routed_fraction = m.active_params / m.total_params
            self.routed_weight_bytes = float(m.weight_bytes)
        self.shared_weight_bytes = m.weight_bytes - self.routed_weight_bytes

    def __repr__(self) -> str:
        return f"RooflineCostModel({self.model.name!r}, {self.hw.name!r}, tp={self.tp}, {self.eff!r})"

    # --- work -----------------------------------------------------------------------------

    def weight_read_bytes(self, tokens: int) -> float:
        """Weight bytes one GPU reads in a step of `tokens` tokens (0 for an empty step)."""
        if tokens <= 0:
            return 0.0
        coverage = 1.0 - (1.0 - self.routed_fraction) ** tokens
        return (self.shared_weight_bytes + self.routed_weight_bytes * coverage) / self.tp

    def request_work(self, new: np.ndarray, cached: np.ndarray, *, decode: bool) -> dict:
        """Summed attention/indexer/recurrent FLOPs and KV/state bytes (per GPU) of requests."""
        m = self.model
        if new.size == 0:
            return dict.fromkeys(("attention_flops", "indexer_flops", "recurrent_flops", "kv_bytes",
                                  "state_bytes"), 0.0)
        end = cached + new
        pair = self.pair_flops_decode if decode else self.pair_flops_prefill
        row = m.kv_row_bytes

        def span(total, term, *args) -> float:
            """Sum over requests of F(end) - F(cached); for decode (n = 1) that is the single
            term at q = end, computed directly (same value, fewer operations)."""
            if decode:
                return float(np.sum(term(end, *args)))
            return float(np.sum(total(end, *args) - total(cached, *args)))

        keys = 0.0   # (query, key) pairs summed over layers
        rows = 0.0   # KV rows read summed over layers
        if m.full_layers:
            keys += m.full_layers * span(causal_keys, lambda q: q)
            rows += m.full_layers * float(np.sum(end))
        if m.swa_layers:
            w = m.swa_window_tokens
            keys += m.swa_layers * span(window_keys, np.minimum, w)
            rows += m.swa_layers * float(np.sum(np.minimum(cached, w - 1) + new))
        idx_flops, idx_bytes = 0.0, 0.0
        for ratio, layers in m.compressed_layers:
            total_rows = end // ratio
            ix = self.indexer
            if ix is not None and ratio == ix.ratio:
                keys += layers * span(topk_rows, lambda q, r, k: np.minimum(q // r, k), ratio, ix.top_k)
                rows += layers * float(np.sum(np.minimum(total_rows, new * ix.top_k)))
                scored = span(compressed_rows, np.floor_divide, ratio)
                idx_flops += layers * 2 * ix.heads * ix.head_dim * scored
                idx_bytes += layers * ix.row_bytes * float(np.sum(total_rows))
            else:
                keys += layers * span(compressed_rows, np.floor_divide, ratio)
                rows += layers * float(np.sum(total_rows))
        state_reads = float(np.sum(1 + (cached > 0))) if m.state_bytes else 0.0
        return {
            "attention_flops": pair * keys,
            "indexer_flops": idx_flops,
            "recurrent_flops": self.recurrent_flops_per_token * float(np.sum(new)),
            "kv_bytes": (rows * row + idx_bytes) / self.kv_shards,
            "state_bytes": m.state_bytes * state_reads / self.tp,
        }

    def cost(self, prefill_batch: Sequence[tuple[int, int]] = (),
             decode_contexts: Sequence[int] = ()) -> StepCost:
        """The work and time terms of one (possibly mixed) step."""
        new, cached = parse_batch(prefill_batch)
        ctx = parse_contexts(decode_contexts)
        m, hw, eff, tp = self.model, self.hw, self.eff, self.tp
        p = self.request_work(new, cached, decode=False)
        d = self.request_work(np.ones_like(ctx), ctx, decode=True)
        n_prefill, n_decode = int(np.sum(new)), int(ctx.size)
        tokens = n_prefill + n_decode

        def peak_seconds(linear_flops: float, w: dict) -> float:
            return (linear_flops / self.linear_peak_flops
                    + (w["attention_flops"] + w["recurrent_flops"]) / hw.bf16_flops
                    + w["indexer_flops"] / hw.fp8_flops)

        lin_p = 2.0 * m.active_params * n_prefill
        lin_d = 2.0 * m.active_params * n_decode
        compute_s = (peak_seconds(lin_p, p) / (tp * eff.mfu_prefill)
                     + peak_seconds(lin_d, d) / (tp * eff.mfu_decode)) * m.kernel_factor
        weight_bytes = self.weight_read_bytes(tokens)
        kv_bytes = p["kv_bytes"] + d["kv_bytes"]
        state_bytes = p["state_bytes"] + d["state_bytes"]
        memory_s = (weight_bytes + kv_bytes + state_bytes) / (hw.hbm_bytes_per_s * eff.hbm_efficiency)
        allreduce_bytes = 2.0 * m.num_layers * tokens * m.hidden_size * ACTIVATION_DTYPE_BYTES
        if tp > 1 and tokens:
            allreduce_s = (2 * (tp - 1) / tp * allreduce_bytes / (hw.nvlink_bytes_per_s * eff.allreduce_efficiency)
                           + 2 * m.num_layers * eff.allreduce_latency_s)
        else:
            allreduce_s = 0.0
        overhead_s = eff.per_step_overhead_s + m.num_layers * eff.per_layer_overhead_s if tokens else 0.0
        return StepCost(
            prefill_tokens=n_prefill, decode_tokens=n_decode, linear_flops=lin_p + lin_d,
            attention_flops=p["attention_flops"] + d["attention_flops"],
            indexer_flops=p["indexer_flops"] + d["indexer_flops"],
            recurrent_flops=p["recurrent_flops"] + d["recurrent_flops"],
            weight_bytes=weight_bytes, kv_bytes=kv_bytes, state_bytes=state_bytes,
            allreduce_bytes=allreduce_bytes if tp > 1 else 0.0, compute_s=compute_s,
            memory_s=memory_s, allreduce_s=allreduce_s, overhead_s=overhead_s)

    # --- interface ------------------------------------------------------------------------

    def prefill_time_s(self, batch: Sequence[tuple[int, int]]) -> float:
        """Seconds for one prefill step over `batch` = [(new_tokens, cached_tokens), ...]."""
        return self.cost(batch, ()).total_s

    def decode_time_s(self, contexts: Sequence[int]) -> float:
        """Seconds for one decode step: one token for each request of context `contexts[i]`."""
        return self.cost((), contexts).total_s

    def step_time_s(self, prefill_batch: Sequence[tuple[int, int]] = (),
                    decode_contexts: Sequence[int] = ()) -> float:
        """Seconds for a mixed step: prefill chunks and decode tokens in one forward."""
        return self.cost(prefill_batch, decode_contexts).total_s

    def transfer_time_s(self, nbytes: float, link: str, *, blocks: int = 0) -> float:
        """See the module-level ``transfer_time_s``."""
        return transfer_time_s(self.hw, nbytes, link, blocks=blocks)


# ------------------------------------------------------------------------------------------
# Fitted table
# ------------------------------------------------------------------------------------------

_COLUMNS = {"prefill": ("tokens", "cached", "seconds"), "decode": ("batch", "mean_context", "seconds")}


class Surface:
    """Seconds over (x, y): piecewise linear in x per distinct y (linear extrapolation from
    the end segments; constant for a single point), linear between bracketing y's, nearest
    beyond them; floored at 0."""

    def __init__(self, rows: np.ndarray):
        self.ys = np.unique(rows[:, 1])
        self.curves = []
        for y in self.ys:
            g = rows[rows[:, 1] == y]
            g = g[np.argsort(g[:, 0])]
            self.curves.append((g[:, 0].copy(), g[:, 2].copy()))

    @staticmethod
    def _curve(xs: np.ndarray, ss: np.ndarray, x: float) -> float:
        if xs.size == 1:
            return float(ss[0])
        if x < xs[0]:
            i = 0
        elif x > xs[-1]:
            i = xs.size - 2
        else:
            return float(np.interp(x, xs, ss))
        slope = (ss[i + 1] - ss[i]) / (xs[i + 1] - xs[i])
        return float(ss[i] + slope * (x - xs[i]))

    def __call__(self, x: float, y: float) -> float:
        ys = self.ys
        if y <= ys[0]:
            v = self._curve(*self.curves[0], x)
        elif y >= ys[-1]:
            v = self._curve(*self.curves[-1], x)
        else:
            j = int(np.searchsorted(ys, y, side="right"))  # ys[j-1] <= y < ys[j]
            lo, hi = self._curve(*self.curves[j - 1], x), self._curve(*self.curves[j], x)
            t = (y - ys[j - 1]) / (ys[j] - ys[j - 1])
            v = lo + t * (hi - lo)
        return max(0.0, v)


def _table_rows(data, key: str, source: str) -> np.ndarray:
    cols = _COLUMNS[key]
    if key not in data:
        raise ValueError(f"{source}: key {key!r} is missing (expected a list of [{', '.join(cols)}] rows)")
    rows = data[key]
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{source}: key {key!r} must be a non-empty list of [{', '.join(cols)}] rows")
    out = []
    for i, r in enumerate(rows):
        where = f"{source}: key {key!r} row {i}"
        if not (isinstance(r, (list, tuple)) and len(r) == 3 and all(_is_number(v) for v in r)):
            raise ValueError(f"{where}: expected [{', '.join(cols)}] (3 numbers), got {r!r}")
        x, y, s = (float(v) for v in r)
        if not all(math.isfinite(v) for v in (x, y, s)):
            raise ValueError(f"{where}: values must be finite, got {r!r}")
        if x < 1 or y < 0 or s < 0:
            raise ValueError(f"{where}: need {cols[0]} >= 1, {cols[1]} >= 0, {cols[2]} >= 0, got {r!r}")
        out.append((x, y, s))
    arr = np.array(out, dtype=np.float64)
    _, counts = np.unique(arr[:, :2], axis=0, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"{source}: key {key!r} has duplicate ({cols[0]}, {cols[1]}) points")
    return arr


class TableCostModel:
    """Step times interpolated from a measured table (see the module docstring).

    ``TableCostModel.from_file(path)`` or ``from_dict({"prefill": [[tokens, cached, s], ...],
    "decode": [[batch, mean_context, s], ...]})``; `hw` (a preset or name) is needed only
    for ``transfer_time_s``."""

    def __init__(self, prefill_rows, decode_rows, *, hw: HardwarePreset | str | None = None,
                 source: str = "<table>"):
        data = {"prefill": [list(r) for r in prefill_rows], "decode": [list(r) for r in decode_rows]}
        self.source = source
        self.prefill_rows = _table_rows(data, "prefill", source)
        self.decode_rows = _table_rows(data, "decode", source)
        self._prefill = Surface(self.prefill_rows)
        self._decode = Surface(self.decode_rows)
        self.hw = hw if (hw is None or isinstance(hw, HardwarePreset)) else get_hardware(hw)

    @classmethod
    def from_dict(cls, data, *, hw=None, source: str = "<dict>") -> "TableCostModel":
        if not isinstance(data, dict):
            raise ValueError(f"{source}: a cost table is a mapping with keys 'prefill' and 'decode', "
                             f"got {type(data).__name__}")
        for key in ("prefill", "decode"):
            _table_rows(data, key, source)  # validates with the source named
        unknown = sorted(set(map(str, data)) - set(_COLUMNS))
        if unknown:
            raise ValueError(f"{source}: unknown key(s) {unknown}; expected 'prefill' and 'decode'")
        return cls(data["prefill"], data["decode"], hw=hw, source=source)

    @classmethod
    def from_file(cls, path, *, hw=None) -> "TableCostModel":
        """Read a JSON (``.json``) or YAML (any other suffix) table. Bad content raises
        ValueError naming the file and the key; a missing file raises OSError."""
        path = pathlib.Path(path)
        text = path.read_text()
        try:
            if path.suffix.lower() == ".json":
                data = json.loads(text)
            else:
                data = yaml.safe_load(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from None
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML: {e}") from None
        return cls.from_dict(data, hw=hw, source=str(path))

    def prefill_time_s(self, batch: Sequence[tuple[int, int]]) -> float:
        new, cached = parse_batch(batch)
        if new.size == 0:
            return 0.0
        tokens = float(np.sum(new))
        return self._prefill(tokens, float(np.sum(new * cached)) / tokens)

    def decode_time_s(self, contexts: Sequence[int]) -> float:
        ctx = parse_contexts(contexts)
        if ctx.size == 0:
            return 0.0
        return self._decode(float(ctx.size), float(np.mean(ctx)))

    def step_time_s(self, prefill_batch: Sequence[tuple[int, int]] = (),
                    decode_contexts: Sequence[int] = ()) -> float:
        new, cached = parse_batch(prefill_batch)
        ctx = parse_contexts(decode_contexts)
        if new.size == 0:
            return self.decode_time_s(ctx)
        merged = np.concatenate([np.stack([new, cached], axis=1),
                                 np.stack([np.ones_like(ctx), ctx], axis=1)])
        return self.prefill_time_s(merged)

    def transfer_time_s(self, nbytes: float, link: str, *, blocks: int = 0) -> float:
        if self.hw is None:
            raise ValueError(f"{self.source}: transfer_time_s needs a hardware preset (TableCostModel(..., hw=...))")
        return transfer_time_s(self.hw, nbytes, link, blocks=blocks)


__all__ = [
    "ACTIVATION_DTYPE_BYTES", "CostModel", "DSV4_INDEXER", "EFFICIENCY_SOURCES", "Efficiency",
    "LINKS", "MOE_ROUTING", "NVLINK_LATENCY_S", "RooflineCostModel", "StepCost", "Surface", "TableCostModel",
    "causal_keys", "compressed_rows", "parse_batch", "parse_contexts", "topk_rows", "transfer_time_s", "window_keys",
]
