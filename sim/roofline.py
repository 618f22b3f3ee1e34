"""The analytic step-time model (``RooflineCostModel``), from the model preset (layers, heads,
parameters, KV and state bytes), the hardware preset (FLOP/s, HBM and NVLink bandwidth) and
the efficiency factors (sim/cost_params.py ``Efficiency``). Every formula is below.

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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from scenarios.presets import HardwarePreset, ModelPreset, get_hardware, get_model, kv_shards
from sim.cost_base import parse_batch, parse_contexts, transfer_time_s
from sim.cost_params import (ACTIVATION_DTYPE_BYTES, CONV_FLOPS_PER_ELEMENT, DSV4_INDEXER, MOE_ROUTING,
                             SSM_FLOPS_PER_ELEMENT, Efficiency)


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
        """See sim/cost_base.py ``transfer_time_s``."""
        return transfer_time_s(self.hw, nbytes, link, blocks=blocks)
