"""The roofline's parameters (sim/roofline.py): MoE routing and DeepSeek-V4 indexer facts per
model preset, and the efficiency factors with their sources. The operator model
(sim/operators.py) reads the same ones."""
from __future__ import annotations

import math
from dataclasses import dataclass

from sim.cost_base import is_number

ACTIVATION_DTYPE_BYTES = 2  # assumption: bf16 activations, so all-reduce messages are bf16

# Recurrent state update, FLOPs per state element per token (sim/roofline.py's docstring).
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
            if not (is_number(v) and 0 < v <= 1):
                raise ValueError(f"Efficiency.{name} must be in (0, 1], got {v!r}")
        for name in ("allreduce_latency_s", "per_step_overhead_s", "per_layer_overhead_s"):
            v = getattr(self, name)
            if not (is_number(v) and 0 <= v and math.isfinite(v)):
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
