"""Operator cost model priced from a measured per-operator table (``cost.kind: table`` with a
table that `radixsim calibrate` writes; ``cost.table: FILE``).

``OperatorTableCostModel`` is sim/operators.py's ``OperatorCostModel`` with its operator times
read from the table instead of the Vidur fits: the work of a step is split into the same
operators (same shapes, same counts per layer), and each operator's time is interpolated from
what was measured on the device:

- ``gemm``: per weight shape N x K (as ``OperatorCostModel.gemm_s`` names it, N and K rounded
  to integers), seconds by rows M: piecewise linear in M, linear extrapolation from the end
  segments (``sim.cost.Surface``);
- ``prefill_attention``: one attention layer's seconds for one request by (prefix, new):
  piecewise linear in new tokens per measured prefix, linear between prefixes; each request
  of a step is priced alone and the times add;
- ``decode_attention``: one attention layer's seconds for one decode request by KV length
  (the context it already holds), piecewise linear;
- ``copy``: seconds of one host<->device copy by bytes (``transfer_time_s(..., "pcie")``).

Attention layers: full layers at the request's (prefix, new), sliding-window layers at
(min(prefix, window - 1), new) (an approximation: a chunk longer than the window is priced as
causal over itself). DeepSeek-V4's compressed and indexer terms are not in the table (they
count as window layers). Elementwise kernels, the TP all-reduce, the EP all-to-all, recurrent
state updates and the per-step/per-layer overheads keep ``OperatorCostModel``'s terms, and the
preset's ``kernel_factor`` (1.0 unless a scenario sets it) still multiplies the kernel times.
So on grid points a step time is exactly the sum of the table's values times the layer counts
plus those terms (tests/test_optable.py).

Table file (JSON)::

    {"format": "radixsim-operators/1", "device": ..., "model": ..., "tp": ...,
     "gemm": [{"n": N, "k": K, "points": [[M, seconds], ...]}, ...],
     "prefill_attention": [[prefix, new, seconds], ...],
     "decode_attention": [[kv_tokens, seconds], ...],
     "copy": [[bytes, seconds], ...]}
"""
from __future__ import annotations

import json
import pathlib
import numpy as np

from sim.cost import Efficiency, Surface, TableCostModel, transfer_time_s
from sim.operators import OperatorCostModel

FORMAT = "radixsim-operators/1"


def _surface(rows, where: str, cols: int) -> Surface:
    """A Surface over rows of `cols` numbers ([x, s] rows get y = 0)."""
    arr = np.asarray(rows, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] != cols or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{where}: expected a non-empty list of rows of {cols} finite numbers >= 0")
    if cols == 2:
        arr = np.stack([arr[:, 0], np.zeros(len(arr)), arr[:, 1]], axis=1)
    if len(np.unique(arr[:, :2], axis=0)) != len(arr):
        raise ValueError(f"{where}: duplicate points")
    return Surface(arr)


class OperatorTable:
    """The measured operator curves of one table (module docstring); `source` names it in errors."""

    def __init__(self, data: dict, source: str = "<table>"):
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{source}: not an operator table (expected \"format\": \"{FORMAT}\")")
        self.source, self.data = source, data
        for key in ("gemm", "prefill_attention", "decode_attention", "copy"):
            if key not in data:
                raise ValueError(f"{source}: key {key!r} is missing")
        self._gemm = {}
        for i, g in enumerate(data["gemm"]):
            if not (isinstance(g, dict) and {"n", "k", "points"} <= set(g)):
                raise ValueError(f"{source}: gemm[{i}]: expected {{n, k, points}}, got {g!r}")
            self._gemm[round(g["n"]), round(g["k"])] = _surface(g["points"], f"{source}: gemm[{i}].points", 2)
        pre = data["prefill_attention"]  # [prefix, new, s] rows; interpolated in new per prefix
        self._prefill = _surface([r[1::-1] + r[2:] if isinstance(r, list) else r for r in pre],
                                 f"{source}: prefill_attention", 3)
        self._decode = _surface(data["decode_attention"], f"{source}: decode_attention", 2)
        self._copy = _surface(data["copy"], f"{source}: copy", 2)

    def gemm(self, m: float, n: float, k: float) -> float:
        curve = self._gemm.get((round(n), round(k)))
        if curve is None:
            have = ", ".join(f"{a}x{b}" for a, b in self._gemm)
            raise ValueError(f"{self.source}: no GEMM of shape N x K = {round(n)}x{round(k)} (has {have}); "
                             "expected a table calibrated for this model and TP")
        return curve(m, 0.0)

    def prefill_attention(self, prefix: float, new: float) -> float:
        return self._prefill(new, prefix)

    def decode_attention(self, kv: float) -> float:
        return self._decode(kv, 0.0)

    def copy(self, nbytes: float) -> float:
        return self._copy(nbytes, 0.0)


def gemm_shapes(cost: OperatorCostModel) -> list:
    """The distinct (N, K) weight shapes `cost` prices (integers, as the table keys them): the
    shared up/down pair, the routed experts' pair (MoE), the MLA latent decompression."""
    h = cost.model.hidden_size
    L, tp = cost.model.num_layers, cost.tp
    inners = [cost.shared_params / (L * tp)] + ([cost.expert_params * cost.ep / (L * tp)] if cost.routing else [])
    shapes = []
    for p in inners:
        if p > 0:
            shapes += [(p / (2.0 * h), h), (h, p / (2.0 * h))]
    if cost.mla_decompress_nk:
        shapes.append(cost.mla_decompress_nk)
    out = []
    for n, k in shapes:
        key = (round(n), round(k))
        if key not in out:
            out.append(key)
    return out


def attention_heads(cost: OperatorCostModel) -> dict:
    """Per-GPU attention geometry the calibration times: query heads, KV heads, head widths."""
    m = cost.model
    return {"q_heads": max(1, m.num_q_heads // cost.tp), "kv_heads": max(1, m.num_kv_heads // cost.tp),
            "head_dim": m.head_dim, "v_head_dim": m.v_head_dim or m.head_dim}


def calibration_plan(cost: OperatorCostModel) -> dict:
    """What `gpu_backend.calibrate.measure_operators` times for `cost` (the torch side may not
    import sim/): the table's format, model and TP, its GEMM shapes and attention heads."""
    return {"format": FORMAT, "model": cost.model.name, "tp": cost.tp, "gemm_shapes": gemm_shapes(cost),
            "heads": attention_heads(cost)}


class OperatorTableCostModel(OperatorCostModel):
    """``OperatorCostModel`` with GEMM, attention and copy times from an `OperatorTable`."""

    def __init__(self, table: OperatorTable, model, hw, tp: int, eff: Efficiency | None = None, *, ep: int = 1):
        super().__init__(model, hw, tp, eff, ep=ep)
        self.table = table

    def __repr__(self) -> str:
        return f"OperatorTableCostModel({self.table.source!r}, {self.model.name!r}, tp={self.tp})"

    def gemm_s(self, rows: float, n: float, k: float, weight_bytes: float, *, full_tiles: bool = False) -> float:
        return self.table.gemm(rows, n, k)

    def _layer_pairs(self, prefix: np.ndarray) -> list:
        """[(layers, prefix seen)] for the full and the window layers."""
        m = self.model
        out = [(m.full_layers, prefix)] if m.full_layers else []
        if m.swa_layers:
            out.append((m.swa_layers, np.minimum(prefix, m.swa_window_tokens - 1)))
        return out

    def request_work(self, new: np.ndarray, cached: np.ndarray, *, decode: bool) -> dict:
        """`OperatorCostModel`'s work of one part, with its requests (``new``, ``cached``: for
        decode the contexts) for `attention_s` to price each one from the table."""
        return {**super().request_work(new, cached, decode=decode), "new": new, "cached": cached}

    def attention_s(self, w: dict, queries: int) -> float:
        if queries <= 0:
            return 0.0
        t = 0.0
        if w["decode"]:
            for layers, kv in self._layer_pairs(w["cached"]):
                t += layers * sum(self.table.decode_attention(float(c)) for c in kv)
        else:
            for layers, pre in self._layer_pairs(w["cached"]):
                t += layers * sum(self.table.prefill_attention(float(c), float(n)) for c, n in zip(pre, w["new"]))
        return t + self.recurrent_s(w)

    def transfer_time_s(self, nbytes: float, link: str, *, blocks: int = 0) -> float:
        if link == "pcie" and nbytes > 0:
            return self.table.copy(nbytes)
        return transfer_time_s(self.hw, nbytes, link, blocks=blocks)


def load_cost_table(path, model, hw, tp: int, eff: Efficiency | None = None, *, ep: int = 1):
    """The cost model of `cost.table: FILE`: an `OperatorTableCostModel` for an operator table
    (`radixsim calibrate`'s format), else sim/cost.py's step-time `TableCostModel`."""
    p = pathlib.Path(path)
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}: not valid JSON: {e}") from None
        if isinstance(data, dict) and "format" in data:
            return OperatorTableCostModel(OperatorTable(data, str(p)), model, hw, tp, eff, ep=ep)
    return TableCostModel.from_file(p, hw=hw)


__all__ = ["FORMAT", "OperatorTable", "OperatorTableCostModel", "attention_heads", "calibration_plan", "gemm_shapes",
           "load_cost_table"]
