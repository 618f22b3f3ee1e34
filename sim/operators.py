"""Operator-level step-time model (``cost.kind: operators``, the default).

Same interface as sim/cost.py's models (``CostModel``); the work of a step (attention
(query, key) pairs, KV rows, recurrent state, MoE weight coverage) is counted exactly as
``RooflineCostModel`` counts it (its docstring states those formulas; this class inherits
them). What changes is the time: instead of one roofline scaled by a flat MFU, every
operator is timed on its own, at an efficiency that depends on its shape, and the times add.

Per step, with T = all tokens (prefill chunks + one per decode request), tp the TP degree,
P = the linear peak (fp8 when the weights are fp8, else bf16), H = HBM bytes/s, L = layers:

- GEMM, per GPU, (M x K) @ (K x N) with weights of W bytes:
  ``gemm(M, N, K) = max(2 M N K / (P e), (W + M (K + N) x 2 B) / (H e_bw)) + t0`` with
  ``e = e_max M/(M + m_half) N/(N + n_half) K/(K + k_half)``; (e_max, m_half, n_half, k_half,
  e_bw, t0) fitted to Vidur's A100/H100 GEMM profiles (sim/opdata/vidur_fit.json, regenerated
  by benchmarks/fit_operators.py; the JSON holds the residuals and the shape ranges fitted).
- weight groups: a layer's weights of p parameters per GPU run as an up/down GEMM pair through
  the inner width I = p / (2 hidden): gemm(M, I, hidden) + gemm(M, hidden, I), each reading
  half the bytes (a gated MLP's gate+up is one fused GEMM, as in Vidur's profiles; attention
  projections are folded into the same pair). Dense/shared weights: p = shared_params / (L tp),
  M = T, bytes ``weight_read_bytes(T) / L`` (shared bytes for a routed MoE). Routed experts
  (MoE, ``MOE_ROUTING``): per layer one grouped GEMM pair (SGLang's fused MoE kernel) over the
  touched experts, p = params of one expert / (L tp): each touched expert's M = T k / (E
  coverage) rows (coverage = 1 - (1 - k/E)^T) is padded up to whole blocks of ``moe_block_m``
  rows (16 when T <= E, else 64), the padded rows are scaled by ``MOE_IMBALANCE`` and run at the
  efficiency of whole tiles (M factor 1); bytes = the touched experts' weights (routed bytes x
  coverage / (L tp)). The Vidur fit has no grouped GEMMs: the padding stands in for its small-M
  curve there.
- MLA prefill (non-absorbed): the latent of every row a new token attends to is decompressed
  to K(nope) and V: per full layer gemm(M = sum over requests of (c + n), N = q_heads x
  (qk_nope + v_head) / tp, K = kv_lora_rank), bf16 weights.
- attention (full, sliding-window, DSV4 compressed, decode and prefill alike): FLOPs and
  KV bytes from ``RooflineCostModel.request_work``; time ``max(flops / (tp x bf16_peak x
  e_fa(Lk)), kv_bytes / (H x hbm_efficiency)) + attention_layers x t0`` where Lk = keys per
  query (FLOP-weighted, per part) and ``e_fa(Lk) = FA_E_MAX x Lk / (Lk + FA_L_HALF)``. The DSV4
  indexer runs at the fp8 peak, same efficiency. Prefill and decode parts are timed apart.
- attention backend (engine.attention_backend; None: the line above): each prefill request's attention
  at the backend's measured efficiency by (new, prefix) (sim/attention_backends.py); decode keeps ``e_fa``.
- recurrent state (GDN/KDA/short conv): ``max(flops / (tp x bf16_peak x e_max), state_bytes
  / (H x hbm_efficiency))``.
- elementwise (norms, rope, activation, residual adds; replicated under TP):
  ``L x (kernels x t0_elem + T x hidden x bytes_per_token_hidden / H)`` (fitted, Vidur).
- kernel factor: the operator times above (GEMMs, attention, state updates, elementwise) are
  multiplied by the model preset's ``kernel_factor`` (1.0: the fitted kernels as they are; a
  number only where a source gives a day-0 factor for the model; scenario key model.kernel_factor).
- TP all-reduce, two per layer of T x hidden bf16 values (ring over NVLink):
  ``2 L x (2 (tp-1)/tp x msg / (nvlink x e_ar) + 2 (tp-1) x lat_step)`` (fitted, Vidur
  ``network/<device>_dgx/all_reduce.csv``); 0 at tp = 1. With expert parallelism one per layer:
  SGLang scatters the tokens over the ranks for the MoE (a reduce-scatter after attention and an
  all-gather before the next, together one all-reduce's ring traffic) and the combine returns
  each rank's tokens, so the all-reduce after the MoE goes.
- expert parallelism (``ep`` = SGLang's ``--ep-size``; 1 = off, else ep = tp): every rank holds
  E/ep whole experts, so the grouped GEMM runs 1/ep of the padded rows through ep-times wider
  experts (same FLOPs and bytes per rank), and every MoE layer adds a dispatch and a combine
  all-to-all over NVLink. Each rank sends its T/ep tokens' hidden states to the top-k experts'
  ranks, (ep-1)/ep of them remote: ``x = T/ep x hidden x top_k x (ep-1)/ep`` elements each way
  (top_k: an upper bound, DeepEP sends a token once per rank); time per layer
  ``x b_d / (nvlink e_d) + x 2 B / (nvlink e_c) + 2 lat_step``, b_d = 1 B (fp8 dispatch) for fp8
  weights else 2, combine bf16 (DeepEP's benchmark setting). e_d = 153/160, e_c = 158/160:
  DeepEP's intranode EP8 normal kernels on H800 reach 153 GB/s dispatching and 158 GB/s combining
  of its ~160 GB/s NVLink (deepseek-ai/DeepEP docs/legacy.md, "Normal kernels with NVLink and
  RDMA forwarding"). lat_step = the Vidur-fitted NVLink step latency above, one per collective
  (DeepEP's low-latency EP8 dispatch, 77 us for 128 tokens x top-8 x 7,168 B = 7.3 MB at 98
  GB/s, leaves <= 2 us of fixed cost, the same order).
- overhead: ``per_step_overhead_s`` (CPU scheduler, ``Efficiency``) plus, unless the step
  runs as a CUDA graph, ``L x per_layer_overhead_s`` (launch gaps). A decode-only step of at
  most ``cuda_graph_max_bs`` requests is a graph replay (SGLang captures decode batches).

Device fits: the hardware preset's ``operator_fit`` names the fit: the A100 presets the ``a100``
fit, the others (H100, H800, H200, B200) the ``h100`` fit (Hopper-class kernels; B200 is an assumption, Vidur did
not profile it: B200 times are the H100 curves at B200's peaks, docs/sources/hardware.md). Efficiencies are fractions of the preset's own peak and bandwidth, so an
A100-40GB uses the A100-80GB efficiencies at its lower bandwidth.

Not modelled: EP with ep < tp (experts also TP-sharded) or across nodes (RDMA), DP attention,
overlap of the all-to-alls with compute (two-batch overlap), speculative decoding, FP8
GEMM efficiency apart from bf16's (fp8 GEMMs use the bf16 curve at the fp8 peak), overlap of
communication with compute, the LM head as a separate GEMM (inside shared params).
"""
from __future__ import annotations

import functools
import json
import math
import pathlib
from typing import Sequence

import numpy as np

from scenarios.presets import HardwarePreset, ModelPreset
from sim.attention_backends import backend_prefill_s, model_curve
from sim.cost import (ACTIVATION_DTYPE_BYTES, Efficiency, MOE_ROUTING, RooflineCostModel, StepCost,
                      parse_batch, parse_contexts)

FIT_FILE = pathlib.Path(__file__).with_name("opdata") / "vidur_fit.json"
# FlashAttention efficiency by keys per query. FA2 (Dao 2023, arXiv:2307.08691, abstract):
# "50-73% of the theoretical maximum FLOPs/s on A100"; FA3 (Shah et al. 2024,
# arXiv:2407.08608, abstract): "up to 740 TFLOPs/s (75% utilization)" on H100. Assumption: the
# low end (0.5) is the papers' shortest benchmarked length (512), so L_half = 512 (0.73/0.5 - 1).
FA_E_MAX = 0.73
FA_L_HALF = 512 * (0.73 / 0.5 - 1)
# Assumption: the busiest routed expert gets 1.25x the mean load (Fedus et al. 2021, Switch
# Transformers, arXiv:2101.03961, capacity factor 1.25 in its experiments); one number for all MoEs.
MOE_IMBALANCE = 1.25
# SGLang's default --cuda-graph-max-bs for large GPUs (server_args.py: 160 at TP<4 on >=80 GB
# GPUs in 2025 releases); assumption: the same for every preset.
CUDA_GRAPH_MAX_BS = 160
# DeepEP intranode EP8 normal kernels on H800: 153 GB/s dispatch, 158 GB/s combine of ~160 GB/s
# NVLink (deepseek-ai/DeepEP docs/legacy.md, Performance); fractions of the preset's NVLink.
A2A_DISPATCH_EFFICIENCY = 153 / 160
A2A_COMBINE_EFFICIENCY = 158 / 160
# `OperatorCostModel.breakdown`'s parts of a step's time, in print order.
OPERATOR_PARTS = ("gemm", "moe", "attn_prefix", "attn_new", "attn_decode", "state", "elementwise", "hbm_excess",
                  "allreduce", "alltoall", "overhead")
# The sim/cost.py Efficiency fields this model reads (the rest are replaced by the fits).
EFFICIENCY_FIELDS = ("hbm_efficiency", "per_step_overhead_s", "per_layer_overhead_s")


@functools.lru_cache(maxsize=None)
def load_fits(path: str = str(FIT_FILE)) -> dict:
    """The fitted tables (sim/opdata/vidur_fit.json), keyed by device ("a100", "h100")."""
    return json.loads(pathlib.Path(path).read_text())["devices"]


def device_fit(hw: HardwarePreset) -> dict:
    """The Vidur fit a hardware preset names in its ``operator_fit`` field (see the module
    docstring); a preset without one (a new GPU family) is refused, not given another GPU's fit."""
    fits = load_fits()
    if hw.operator_fit not in fits:
        raise ValueError(f"hardware {hw.name}: operator_fit {hw.operator_fit!r}: expected one of "
                         f"{', '.join(sorted(fits))} (the fits of sim/opdata/vidur_fit.json; a scenario may set "
                         "hardware.operator_fit), or cost.kind roofline or table")
    return fits[hw.operator_fit]


def gemm_efficiency(fit: dict, m, n, k):
    """e = e_max M/(M + m_half) N/(N + n_half) K/(K + k_half): the fraction of the peak an
    (M x K) @ (K x N) GEMM reaches; `m` None: whole tiles, M factor 1."""
    e = fit["e_max"] * n / (n + fit["n_half"]) * k / (k + fit["k_half"])
    return e if m is None else e * m / (m + fit["m_half"])


def moe_block_m(tokens: int, experts: int) -> int:
    """Rows per block of the fused MoE kernel: 16 when tokens <= experts, else 64 (SGLang's
    and vLLM's fused_moe_triton ``get_default_config``)."""
    return 16 if tokens <= experts else 64


def fa_efficiency(keys_per_query: float) -> float:
    """FlashAttention efficiency at `keys_per_query` keys per query (module constants)."""
    return FA_E_MAX * keys_per_query / (keys_per_query + FA_L_HALF)


class OperatorCostModel(RooflineCostModel):
    """Per-operator step times for `model` at TP `tp` on `hw` (see the module docstring).
    Uses from `eff`: hbm_efficiency (KV and state reads), per_step_overhead_s,
    per_layer_overhead_s; the MFUs and the all-reduce knobs are replaced by the fits."""

    def __init__(self, model: ModelPreset | str, hw: HardwarePreset | str, tp: int,
                 eff: Efficiency | None = None, *, cuda_graph_max_bs: int = CUDA_GRAPH_MAX_BS, ep: int = 1,
                 attention_backend: str | None = None):
        super().__init__(model, hw, tp, eff)
        if isinstance(cuda_graph_max_bs, bool) or not isinstance(cuda_graph_max_bs, int) or cuda_graph_max_bs < 0:
            raise ValueError(f"cuda_graph_max_bs must be an integer >= 0, got {cuda_graph_max_bs!r}")
        if isinstance(ep, bool) or ep != 1 and (ep != tp or MOE_ROUTING.get(self.model.name) is None):
            raise ValueError(f"ep must be 1, or tp ({tp}) for an MoE model with routing, got {ep!r}")
        self.ep = ep
        fit = device_fit(self.hw)
        self.gemm_fit, self.elem_fit, self.ar_fit = fit["gemm"], fit["elementwise"], fit["allreduce"]
        self.cuda_graph_max_bs = cuda_graph_max_bs
        m = self.model
        self.dispatch_bytes = 1 if "fp8" in m.weight_dtype else ACTIVATION_DTYPE_BYTES
        routing = MOE_ROUTING.get(m.name)
        self.routing, self.expert_params, self.shared_params = None, 0.0, float(m.active_params)
        if routing is not None and m.active_params < m.total_params:  # else: all active params dense
            routed = (m.total_params - m.active_params) / (1 - routing.top_k / routing.routed_experts)
            self.routing, self.expert_params = routing, routed / routing.routed_experts
            self.shared_params = m.total_params - routed
        self.attn_layers = m.full_layers + m.swa_layers + sum(n for _, n in m.compressed_layers)
        self.mla_decompress_nk = None  # (N, K) of the latent -> K(nope), V GEMM, per GPU
        if m.attention == "mla":
            d_v = m.head_dim if m.v_head_dim is None else m.v_head_dim
            nope = m.head_dim - m.qk_rope_head_dim
            self.mla_decompress_nk = (m.num_q_heads * (nope + d_v) / tp, m.kv_lora_rank)
        self._token_memo: dict = {}  # tokens -> token_terms(tokens): they depend on nothing else
        self.attention_backend = attention_backend
        self.attn_curve = model_curve(self.model, self.hw, tp, attention_backend) if attention_backend else None

    def __repr__(self) -> str:
        backend = "" if self.attention_backend is None else f", attention_backend={self.attention_backend!r}"
        return f"OperatorCostModel({self.model.name!r}, {self.hw.name!r}, tp={self.tp}, ep={self.ep}{backend})"

    # --- operators ------------------------------------------------------------------------

    def gemm_s(self, rows: float, n: float, k: float, weight_bytes: float, *, full_tiles: bool = False) -> float:
        """One GPU's time for a (rows x K) @ (K x N) GEMM whose weights take `weight_bytes`;
        `full_tiles`: the rows are already padded to whole tiles (grouped MoE GEMM), so the
        efficiency's M factor is 1."""
        f = self.gemm_fit
        e = gemm_efficiency(f, None if full_tiles else rows, n, k)
        act = rows * (k + n) * ACTIVATION_DTYPE_BYTES
        return (max(2.0 * rows * n * k / (self.linear_peak_flops * e),
                    (weight_bytes + act) / (self.hw.hbm_bytes_per_s * f["e_bw"])) + f["t0_s"])

    def pair_s(self, rows: float, params: float, weight_bytes: float, *, full_tiles: bool = False) -> float:
        """A weight group of `params` parameters (one layer, one GPU; of one expert for a grouped
        GEMM) as an up/down GEMM pair through the inner width I = params / (2 hidden):
        (rows, I, hidden) then (rows, hidden, I), each reading half of `weight_bytes`."""
        if rows <= 0 or params <= 0:
            return 0.0
        h = self.model.hidden_size
        inner = params / (2.0 * h)
        return (self.gemm_s(rows, inner, h, weight_bytes / 2, full_tiles=full_tiles)
                + self.gemm_s(rows, h, inner, weight_bytes / 2, full_tiles=full_tiles))

    def routed_rows(self, tokens: int) -> tuple[float, float]:
        """(padded rows x MOE_IMBALANCE, coverage) of one layer's grouped expert GEMM: each
        touched expert's M = T k / (E coverage) rows rounded up to the kernel's block of
        ``moe_block_m(T, E)`` rows."""
        r = self.routing
        coverage = 1.0 - (1.0 - r.top_k / r.routed_experts) ** tokens
        touched = r.routed_experts * coverage
        block = moe_block_m(tokens, r.routed_experts)
        per_expert = tokens * r.top_k / touched
        return touched * block * math.ceil(per_expert / block) * MOE_IMBALANCE, coverage

    def linear_s(self, tokens: int) -> float:
        """All layers' GEMMs for a step of `tokens` tokens (shared weights, routed experts)."""
        shared, routed = self.linear_parts(tokens)
        return shared + routed

    def linear_parts(self, tokens: int) -> tuple[float, float]:
        """`linear_s` in its two parts: (the dense/shared weights' GEMMs, the routed experts'
        grouped GEMMs; 0.0 without routing)."""
        L, tp = self.model.num_layers, self.tp
        shared_bytes = self.shared_weight_bytes / tp if self.routing else self.weight_read_bytes(tokens)
        shared = L * self.pair_s(tokens, self.shared_params / (L * tp), shared_bytes / L)
        if not self.routing:
            return shared, 0.0
        rows, coverage = self.routed_rows(tokens)  # per layer, the touched experts as one grouped GEMM pair
        touched_bytes = self.routed_weight_bytes * coverage / (L * tp)
        ep = self.ep  # EP: 1/ep of the experts per rank, whole instead of 1/tp of each
        return shared, L * self.pair_s(rows / ep, self.expert_params * ep / (L * tp), touched_bytes, full_tiles=True)

    def attention_s(self, w: dict, queries: int) -> float:
        """Attention (+ indexer) and recurrent-state time of one part (prefill or decode)."""
        if queries <= 0:
            return 0.0
        return self.attention_core_s(w, queries) + self.recurrent_s(w)

    def attention_core_s(self, w: dict, queries: int) -> float:
        """`attention_s` without the recurrent-state time (0 for no queries); with an attention
        backend, a prefill part on its curve (sim/attention_backends.py `backend_prefill_s`)."""
        if queries <= 0:
            return 0.0
        if self.attn_curve is not None and not w["decode"]:
            return backend_prefill_s(self, w)
        hw, eff, tp = self.hw, self.eff, self.tp
        keys = w["attention_flops"] / (self.pair_flops_decode if w["decode"] else self.pair_flops_prefill)
        e_fa = fa_efficiency(max(keys / (queries * max(self.attn_layers, 1)), 1.0))
        compute = (w["attention_flops"] / hw.bf16_flops + w["indexer_flops"] / hw.fp8_flops) / (tp * e_fa)
        t = max(compute, w["kv_bytes"] / (hw.hbm_bytes_per_s * eff.hbm_efficiency))
        t += self.attn_layers * self.gemm_fit["t0_s"]
        return t

    def recurrent_s(self, w: dict) -> float:
        """Recurrent-state time of one part (`request_work`'s dict); 0 without state layers."""
        if not (w["recurrent_flops"] or w["state_bytes"]):
            return 0.0
        hw = self.hw
        return max(w["recurrent_flops"] / (self.tp * hw.bf16_flops * self.gemm_fit["e_max"]),
                   w["state_bytes"] / (hw.hbm_bytes_per_s * self.eff.hbm_efficiency))

    def elementwise_s(self, tokens: int) -> float:
        f = self.elem_fit
        return self.model.num_layers * (f["kernels_per_layer"] * f["t0_s"] + tokens * self.model.hidden_size
                                        * f["bytes_per_token_hidden"] / self.hw.hbm_bytes_per_s)

    def allreduce_s(self, tokens: int) -> float:
        tp = self.tp
        if tp == 1:
            return 0.0
        f = self.ar_fit
        msg = tokens * self.model.hidden_size * ACTIVATION_DTYPE_BYTES
        one = (2 * (tp - 1) / tp * msg / (self.hw.nvlink_bytes_per_s * f["e_ar"])
               + 2 * (tp - 1) * f["latency_per_step_s"])
        return self.allreduces_per_layer * self.model.num_layers * one

    @property
    def allreduces_per_layer(self) -> int:
        return 2 if self.ep == 1 else 1

    def alltoall_s(self, tokens: int) -> float:
        """The EP dispatch and combine of every MoE layer (0 without expert parallelism)."""
        ep = self.ep
        if ep == 1 or tokens <= 0:
            return 0.0
        elems = tokens / ep * self.model.hidden_size * self.routing.top_k * (ep - 1) / ep
        nvlink = self.hw.nvlink_bytes_per_s
        one = (elems * self.dispatch_bytes / (nvlink * A2A_DISPATCH_EFFICIENCY)
               + elems * ACTIVATION_DTYPE_BYTES / (nvlink * A2A_COMBINE_EFFICIENCY)
               + 2 * self.ar_fit["latency_per_step_s"])
        return self.model.num_layers * one

    # --- step -----------------------------------------------------------------------------

    def token_terms(self, tokens: int) -> tuple:
        """The terms of a step that depend only on its token count: (weight bytes, linear_s,
        elementwise_s, allreduce_s, alltoall_s), computed once per count (the same values)."""
        terms = self._token_memo.get(tokens)
        if terms is None:
            terms = self._token_memo[tokens] = (
                self.weight_read_bytes(tokens), self.linear_s(tokens), self.elementwise_s(tokens),
                self.allreduce_s(tokens), self.alltoall_s(tokens))
        return terms

    def cost(self, prefill_batch: Sequence[tuple[int, int]] = (),
             decode_contexts: Sequence[int] = ()) -> StepCost:
        """The work and time terms of one (possibly mixed) step; compute_s is the sum of the
        operator times, memory_s the HBM lower bound (bytes / peak bandwidth)."""
        new, cached = parse_batch(prefill_batch)
        ctx = parse_contexts(decode_contexts)
        n_prefill, n_decode = int(np.sum(new)), int(ctx.size)
        tokens = n_prefill + n_decode
        p = {**self.request_work(new, cached, decode=False), "decode": False, "new": new, "cached": cached}
        d = {**self.request_work(np.ones_like(ctx), ctx, decode=True), "decode": True}
        if not tokens:
            return StepCost(0, 0, *(0.0,) * 12)
        weight_bytes, linear_s, elementwise_s, allreduce_s, alltoall_s = self.token_terms(tokens)
        kv_bytes, state_bytes = p["kv_bytes"] + d["kv_bytes"], p["state_bytes"] + d["state_bytes"]
        op_s = (linear_s + self.attention_s(p, n_prefill) + self.attention_s(d, n_decode)
                + elementwise_s)
        if self.mla_decompress_nk and n_prefill:
            n, k = self.mla_decompress_nk
            op_s += self.model.full_layers * self.gemm_s(float(np.sum(new + cached)), n, k,
                                                         n * k * ACTIVATION_DTYPE_BYTES)
        op_s *= self.model.kernel_factor
        graph = n_prefill == 0 and n_decode <= self.cuda_graph_max_bs
        overhead_s = self.eff.per_step_overhead_s + (0.0 if graph else self.model.num_layers
                                                     * self.eff.per_layer_overhead_s)
        return StepCost(
            prefill_tokens=n_prefill, decode_tokens=n_decode,
            linear_flops=2.0 * self.model.active_params * tokens,
            attention_flops=p["attention_flops"] + d["attention_flops"],
            indexer_flops=p["indexer_flops"] + d["indexer_flops"],
            recurrent_flops=p["recurrent_flops"] + d["recurrent_flops"],
            weight_bytes=weight_bytes, kv_bytes=kv_bytes, state_bytes=state_bytes,
            allreduce_bytes=self.allreduces_per_layer * self.model.num_layers * tokens * self.model.hidden_size
            * ACTIVATION_DTYPE_BYTES if self.tp > 1 else 0.0,
            compute_s=op_s, memory_s=(weight_bytes + kv_bytes + state_bytes) / self.hw.hbm_bytes_per_s,
            allreduce_s=allreduce_s, overhead_s=overhead_s, alltoall_s=alltoall_s)


    def breakdown(self, prefill_batch: Sequence[tuple[int, int]] = (),
                  decode_contexts: Sequence[int] = ()) -> dict:
        """The step's time by operator (`OPERATOR_PARTS`, seconds): it adds up to
        ``cost(...).total_s`` (to float round-off; `cost` itself is untouched by this).

        gemm: the dense/shared weights' GEMMs; moe: the routed experts' grouped GEMMs;
        attn_new: the prefill requests' attention (and MLA decompression) as it would take were
        their prefixes absent (cached = 0: the new tokens attending to each other);
        attn_prefix: the rest of their attention, i.e. what the context before each chunk adds
        (a cache hit, or the request's own earlier chunks under chunked prefill; the model is
        monotone in the keys, so >= 0); attn_decode: the decode requests' attention
        (a mixed step); state: recurrent-state updates; elementwise: norms, rope, activations;
        the operators are scaled by the preset's kernel_factor, as in `cost`; hbm_excess: what
        the HBM roofline adds when memory_s exceeds the operators' sum; allreduce, alltoall,
        overhead: the step's terms of those names."""
        out = dict.fromkeys(OPERATOR_PARTS, 0.0)
        total = self.cost(prefill_batch, decode_contexts)
        new, cached = parse_batch(prefill_batch)
        ctx = parse_contexts(decode_contexts)
        n_prefill, n_decode = int(np.sum(new)), int(ctx.size)
        tokens = n_prefill + n_decode
        if not tokens:
            return out
        zero = np.zeros_like(cached)
        p = {**self.request_work(new, cached, decode=False), "decode": False, "new": new, "cached": cached}
        p0 = {**self.request_work(new, zero, decode=False), "decode": False, "new": new, "cached": zero}
        d = {**self.request_work(np.ones_like(ctx), ctx, decode=True), "decode": True}
        out["gemm"], out["moe"] = self.linear_parts(tokens)
        attn, attn0 = self.attention_core_s(p, n_prefill), self.attention_core_s(p0, n_prefill)
        if self.mla_decompress_nk and n_prefill:
            n, k = self.mla_decompress_nk
            attn += self.model.full_layers * self.gemm_s(float(np.sum(new + cached)), n, k,
                                                         n * k * ACTIVATION_DTYPE_BYTES)
            attn0 += self.model.full_layers * self.gemm_s(float(np.sum(new)), n, k, n * k * ACTIVATION_DTYPE_BYTES)
        out["attn_new"], out["attn_prefix"] = attn0, max(attn - attn0, 0.0)
        out["attn_decode"] = self.attention_core_s(d, n_decode)
        out["state"] = (self.recurrent_s(p) if n_prefill else 0.0) + (self.recurrent_s(d) if n_decode else 0.0)
        out["elementwise"] = self.elementwise_s(tokens)
        for key in ("gemm", "moe", "attn_new", "attn_prefix", "attn_decode", "state", "elementwise"):
            out[key] *= self.model.kernel_factor
        out["hbm_excess"] = max(total.memory_s - total.compute_s, 0.0)
        out["allreduce"], out["alltoall"], out["overhead"] = total.allreduce_s, total.alltoall_s, total.overhead_s
        return out


__all__ = ["A2A_COMBINE_EFFICIENCY", "A2A_DISPATCH_EFFICIENCY", "CUDA_GRAPH_MAX_BS", "EFFICIENCY_FIELDS", "FA_E_MAX",
           "FA_L_HALF", "FIT_FILE", "MOE_IMBALANCE", "OPERATOR_PARTS", "OperatorCostModel", "device_fit",
           "fa_efficiency", "gemm_efficiency", "load_fits", "moe_block_m"]
