"""The fitted step-time model (``TableCostModel``): a small table of measured step times (from
``gpu_backend``), interpolated. It replaces the roofline once measurements exist.

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
from typing import Sequence

import numpy as np
import yaml

from scenarios.presets import HardwarePreset, get_hardware
from sim.cost_base import is_number, parse_batch, parse_contexts, transfer_time_s


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
        if not (isinstance(r, (list, tuple)) and len(r) == 3 and all(is_number(v) for v in r)):
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
