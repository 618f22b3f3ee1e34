"""Attention over a cached prefix, by backend (scenario key ``engine.attention_backend``).

A backend's curve is a table of measured prefill (extend) attention times for one head layout
on one GPU generation (sim/opdata/attention_backends.json, each point cited there and in
docs/sources/attention_backends.md): one layer, one sequence of n new tokens (the chunk) after a
prefix of c cached tokens (the KV before the chunk), causal.

Each point becomes an efficiency, the fraction of the GPU's bf16 peak P the kernel reached:

    pairs(n, c) = n c + n (n + 1) / 2            (query, key) pairs, causal
    flops(n, c) = 2 q_heads (head_dim + head_dim) pairs(n, c)      (QK^T and PV)
    e(n, c)     = flops(n, c) / (time(n, c) x P)

and a request's (n, c) is priced at the interpolated efficiency:
- along the prefix: linear in c between the points of the same chunk size, clamped at that
  chunk's first and last measured prefix (no extrapolation beyond the data: the efficiency is
  held, so the time keeps growing with the FLOPs);
- across chunk sizes: linear in log n between the two measured chunk sizes around n, clamped at
  the smallest and largest measured chunk.

`OperatorCostModel` (sim/operators.py) then times a step's prefill attention as
``sum over requests of flops_i / (tp x bf16_peak x e(n_i, c_i))`` (each request as its own
sequence: the profiles are batch-size-1 prefills), against the same HBM bound as without a
backend; the measured times include the kernel's fixed cost, so no per-layer t0 is added. Decode
attention keeps the model's own curve. A backend without its own measurements names
``proxy_of``: another backend's curve, with the source that makes the proxy explicit.

A curve applies only where its GPU generation (the hardware preset's ``operator_fit``) and per-GPU
head layout (query heads, KV heads, head dim at the scenario's TP) match; anything else is refused
(`curve_for` raises ValueError naming what exists), never given another layout's curve. Which
curve that is, and the data file's lookup, are the scenario floor's
(scenarios/attention_backend_data.py: the scenario checks a backend without importing sim/).
"""
from __future__ import annotations

import functools

import numpy as np

from scenarios.attention_backend_data import (BACKENDS_FILE, backend_curves, backend_names, curve_index,
                                              model_curve_index)


def pairs(n, c):
    """(query, key) pairs of n new tokens after c cached tokens, causal: n c + n (n + 1) / 2."""
    n = np.asarray(n, dtype=np.float64)
    return n * np.asarray(c, dtype=np.float64) + n * (n + 1) / 2


class AttentionCurve:
    """One backend's measured efficiency for one head layout on one GPU generation."""

    def __init__(self, backend: str, curve: dict):
        self.backend = backend
        self.operator_fit = curve["operator_fit"]
        self.layout = (curve["q_heads"], curve["kv_heads"], curve["head_dim"])
        q, _, d = self.layout
        peak = float(curve["peak_flops"])
        rows = sorted((int(n), sorted(pts)) for n, pts in curve["points_ms"].items())
        self.chunks = np.array([n for n, _ in rows], dtype=np.float64)
        self.log_chunks = np.log(self.chunks)
        self.kv = []   # per chunk: measured prefixes
        self.eff = []  # per chunk: efficiency at each prefix
        for n, pts in rows:
            kv = np.array([p[0] for p in pts], dtype=np.float64)
            ms = np.array([p[1] for p in pts], dtype=np.float64)
            self.kv.append(kv)
            self.eff.append(4.0 * q * d * pairs(n, kv) / (ms * 1e-3 * peak))

    def __repr__(self) -> str:
        return f"AttentionCurve({self.backend!r}, {self.operator_fit!r}, layout={self.layout})"

    def efficiency(self, new, cached) -> np.ndarray:
        """e(n, c) for arrays of new and cached tokens (see the module docstring)."""
        n = np.maximum(np.asarray(new, dtype=np.float64), 1.0)
        c = np.asarray(cached, dtype=np.float64)
        # efficiency of every chunk row at each request's prefix: rows x requests
        per_row = np.array([np.interp(c, kv, e) for kv, e in zip(self.kv, self.eff)])
        if len(self.chunks) == 1:
            return per_row[0]
        x = np.clip(np.log(n), self.log_chunks[0], self.log_chunks[-1])
        hi = np.clip(np.searchsorted(self.log_chunks, x, side="left"), 1, len(self.chunks) - 1)
        lo = hi - 1
        w = (x - self.log_chunks[lo]) / (self.log_chunks[hi] - self.log_chunks[lo])
        cols = np.arange(c.size)
        return per_row[lo, cols] * (1 - w) + per_row[hi, cols] * w


@functools.lru_cache(maxsize=None)
def _curves(backend: str) -> tuple:
    return tuple(AttentionCurve(backend, c) for c in backend_curves(backend))


def curve_for(backend: str, operator_fit: str | None, q_heads: float, kv_heads: float, head_dim: int,
              ) -> AttentionCurve:
    """The curve of `backend` for a GPU generation and per-GPU head layout, or ValueError naming
    what is measured (scenarios/attention_backend_data.py ``curve_index``)."""
    index = curve_index(backend, operator_fit, q_heads, kv_heads, head_dim)
    return _curves(backend)[index]


def model_curve(model, hw, tp: int, backend: str) -> AttentionCurve:
    """The backend's curve for `model`'s per-GPU head layout at TP `tp` on `hw`'s GPU generation;
    ValueError where none is measured or the model's attention is not plain full GQA
    (scenarios/attention_backend_data.py ``model_curve_index``)."""
    return _curves(backend)[model_curve_index(model, hw, tp, backend)]


def backend_prefill_s(op, w: dict) -> float:
    """Prefill attention of part `w` (`OperatorCostModel.request_work`'s dict with its requests'
    ``new`` and ``cached`` arrays) on `op`'s curve: the sum over requests of flops_i / (tp x bf16
    peak x e(new_i, cached_i)), flops_i = pair FLOPs x full layers x its causal pairs; at least
    the HBM time of the part's KV reads. No per-layer t0: the measured times include the
    kernel's fixed cost."""
    new = np.asarray(w["new"], dtype=np.float64)
    cached = np.asarray(w["cached"], dtype=np.float64)
    flops = op.pair_flops_prefill * op.model.full_layers * pairs(new, cached)
    compute = float(np.sum(flops / op.attn_curve.efficiency(new, cached))) / (op.tp * op.hw.bf16_flops)
    return max(compute, w["kv_bytes"] / (op.hw.hbm_bytes_per_s * op.eff.hbm_efficiency))


__all__ = ["AttentionCurve", "BACKENDS_FILE", "backend_names", "backend_prefill_s", "curve_for", "model_curve",
           "pairs"]
