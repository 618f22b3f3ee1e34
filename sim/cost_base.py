"""What every step-time model shares: the interface the engine calls, its inputs' parsers and
the transfer helper (sim/cost.py lists the models).

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

Transfer times (``transfer_time_s``): ``latency_s + nbytes / bandwidth`` with, from the
hardware preset, pcie: ``pcie_latency_s`` + ``pcie_bytes_per_s`` (per GPU per direction), l3:
``l3_latency_s`` + ``l3_bytes_per_s`` (+ ``blocks x l3_block_overhead_s``), nvlink:
``NVLINK_LATENCY_S`` + ``nvlink_bytes_per_s`` (per GPU per direction). Zero bytes cost 0.
"""
from __future__ import annotations

import math
from typing import Protocol, Sequence

import numpy as np

from scenarios.presets import HardwarePreset

NVLINK_LATENCY_S = 5e-6  # assumption: one peer copy launch + NVSwitch hop; HARDWARE.md gives none
LINKS = ("pcie", "l3", "nvlink")


def is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


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
    if not (is_number(nbytes) and nbytes >= 0 and math.isfinite(nbytes)):
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
