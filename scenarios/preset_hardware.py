"""The hardware preset: one serving node's GPUs, links and host, each number tied to its source
(the values live in scenarios/data/presets/hardware/*.yaml, one file per GPU, read by
scenarios/preset_data.py).

Assumptions (the full text is in each preset's ``sources``):
- H200: 140 GiB usable HBM per GPU; 10 us per PCIe transfer; 100 us per L3 transfer.
- A100-40GB/80GB, H100, H800, B200, H20 (docs/sources/hardware.md): the same per-transfer costs; host
  link at the SM-kernel copy rate (SGLang's default ``--hicache-io-backend kernel``); L3 at the
  H200 node's 190 GB/s scaled to the node's NICs; device copy and measured matmul rates scaled
  from the H200's measured/peak ratios; node fields (DRAM, NICs) of the 8-GPU node.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from .preset_models import check_sources, is_number, nonneg_int

@dataclass(frozen=True, kw_only=True)
class HardwarePreset:
    """One serving node with `num_gpus` GPUs in use. Per-GPU fields say so; the host DRAM,
    NICs and L3 link belong to the node. Bandwidths are per direction unless noted;
    FLOP/s are dense (no sparsity). Calibration overrides any of them.

    The host link's rate in use, ``pcie_bytes_per_s``, is that of SGLang's io backend
    ``pcie_io_backend`` (``--hicache-io-backend``: ``kernel``, SM copy kernels, or ``direct``,
    copy-engine ``cudaMemcpyAsync``); the L3 link's, ``l3_bytes_per_s``, that of the transfer
    protocol ``l3_protocol`` (Mooncake's ``rdma`` or ``tcp``). Both names are also scenario keys:
    they set the selected backend's (protocol's) field."""

    name: str
    gpu_name: str
    num_gpus: int
    hbm_bytes_per_gpu: int
    hbm_bytes_per_s: float
    bf16_flops: float
    fp8_flops: float
    bf16_matmul_measured_flops: float
    d2d_copy_bytes_per_s: float
    nvlink_bytes_per_s: float
    pcie_kernel_bytes_per_s: float
    pcie_direct_bytes_per_s: float
    pcie_io_backend: str = "kernel"
    pcie_peak_bytes_per_s: float
    pcie_latency_s: float
    host_dram_bytes: int
    host_dram_bytes_per_s: float
    nic_bytes_per_s: float
    l3_rdma_bytes_per_s: float
    l3_tcp_bytes_per_s: float
    l3_protocol: str = "rdma"
    l3_latency_s: float
    l3_block_overhead_s: float
    ssd_bytes_per_s: float
    ssd_latency_s: float
    host_cpu_speed: float = 1.0  # the scheduler CPU's single-thread speed / sim/opdata/tree_cpu.json's machine's
    operator_fit: str | None = None  # the GEMM fit of sim/opdata/vidur_fit.json the operator cost model uses
    sources: dict = field(default_factory=dict, compare=False)

    RATES_IN_USE = ("pcie_bytes_per_s", "l3_bytes_per_s")  # properties, also scenario keys

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name and isinstance(self.gpu_name, str) and self.gpu_name):
            raise ValueError("hardware name and gpu_name must be non-empty strings")
        nonneg_int(self.name, "num_gpus", self.num_gpus, 1)
        nonneg_int(self.name, "hbm_bytes_per_gpu", self.hbm_bytes_per_gpu, 1)
        nonneg_int(self.name, "host_dram_bytes", self.host_dram_bytes, 1)
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type == "float" and not (is_number(v) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{self.name}: {f.name} must be a finite number > 0, got {v!r}")
        for key, choices in CHOICES.items():
            if getattr(self, key) not in choices:
                raise ValueError(f"{self.name}: {key} must be one of {', '.join(choices)}, got {getattr(self, key)!r}")
        if max(self.pcie_kernel_bytes_per_s, self.pcie_direct_bytes_per_s) > self.pcie_peak_bytes_per_s:
            raise ValueError(f"{self.name}: realistic PCIe bandwidth exceeds the peak")
        if self.operator_fit is not None and not (isinstance(self.operator_fit, str) and self.operator_fit):
            raise ValueError(f"{self.name}: operator_fit must be a fit's name or None, got {self.operator_fit!r}")
        check_sources(self, [] if self.operator_fit is None else ["operator_fit"])

    @property
    def pcie_bytes_per_s(self) -> float:
        """One GPU's host link rate with the io backend in use (per direction)."""
        return getattr(self, rate_field("pcie_bytes_per_s", self.pcie_io_backend))

    @property
    def l3_bytes_per_s(self) -> float:
        """The node's L3 link rate with the transfer protocol in use."""
        return getattr(self, rate_field("l3_bytes_per_s", self.l3_protocol))

    @property
    def hbm_bytes(self) -> int:
        """HBM of all GPUs in use."""
        return self.hbm_bytes_per_gpu * self.num_gpus



CHOICES = {"pcie_io_backend": ("kernel", "direct"), "l3_protocol": ("rdma", "tcp")}
SELECTOR = {"pcie_bytes_per_s": "pcie_io_backend", "l3_bytes_per_s": "l3_protocol"}


def rate_field(rate: str, choice: str) -> str:
    """The field behind a rate in use: ("pcie_bytes_per_s", "kernel") -> "pcie_kernel_bytes_per_s"."""
    head, tail = rate.split("_", 1)
    return f"{head}_{choice}_{tail}"

