"""The attention backends' data file, as the scenario floor reads it (``engine.attention_backend``):
which backends exist and which GPU generation and per-GPU head layout each has a measured curve
for. The curves' arithmetic (efficiencies, interpolation, pricing) is sim/attention_backends.py's,
which builds on the curve this module picks; the file and its sources are documented there and in
docs/sources/attention_backends.md.

A curve applies only where its GPU generation (the hardware preset's ``operator_fit``) and per-GPU
head layout (query heads, KV heads, head dim at the scenario's TP) match; anything else is refused
(`curve_index` raises ValueError naming what exists), never given another layout's curve.
"""
from __future__ import annotations

import functools
import json
import math
import pathlib

BACKENDS_FILE = pathlib.Path(__file__).resolve().parent.parent / "sim" / "opdata" / "attention_backends.json"


@functools.lru_cache(maxsize=None)
def load_backends(path: str = str(BACKENDS_FILE)) -> dict:
    """{backend: entry} of the data file (an entry has ``curves`` or names ``proxy_of``)."""
    return json.loads(pathlib.Path(path).read_text())["backends"]


def backend_names() -> tuple:
    """The backends of sim/opdata/attention_backends.json, sorted."""
    return tuple(sorted(load_backends()))


def backend_curves(backend: str) -> tuple:
    """The measured curves (the file's dicts) `backend` prices with: its own, or those of the
    backend its ``proxy_of`` names (followed until one has curves)."""
    data = load_backends()
    entry, seen = data[backend], {backend}
    while "proxy_of" in entry:  # a proxy uses the named backend's measurements
        name = entry["proxy_of"]
        if name in seen or name not in data:
            raise ValueError(f"sim/opdata/attention_backends.json: {backend}: proxy_of {name!r}: expected another "
                             "backend with curves")
        seen.add(name)
        entry = data[name]
    return tuple(entry["curves"])


def curve_layout(curve: dict) -> tuple:
    """(query heads, KV heads, head dim) per GPU of a measured curve."""
    return (curve["q_heads"], curve["kv_heads"], curve["head_dim"])


def curve_index(backend: str, operator_fit: str | None, q_heads: float, kv_heads: float, head_dim: int) -> int:
    """The position in `backend_curves(backend)` of the curve for a GPU generation and per-GPU
    head layout, or ValueError naming what is measured."""
    if backend not in load_backends():
        raise ValueError(f"attention backend {backend!r}: expected one of {', '.join(backend_names())}")
    layout = (q_heads, kv_heads, head_dim)
    curves = backend_curves(backend)
    for i, c in enumerate(curves):
        if c["operator_fit"] == operator_fit and all(math.isclose(a, b) for a, b in zip(curve_layout(c), layout)):
            return i
    have = "; ".join(f"{c['operator_fit']} with {c['q_heads']} query heads, {c['kv_heads']} KV heads, head dim "
                     f"{c['head_dim']} per GPU" for c in curves)
    raise ValueError(f"attention backend {backend}: no measured curve for {operator_fit} with {q_heads:g} query heads, "
                     f"{kv_heads:g} KV heads, head dim {head_dim} per GPU; measured: {have} "
                     "(sim/opdata/attention_backends.json)")


def model_curve_index(model, hw, tp: int, backend: str) -> int:
    """`curve_index` for `model`'s per-GPU head layout at TP `tp` on `hw`'s GPU generation;
    ValueError where none is measured or the model's attention is not plain full GQA
    (sliding-window, compressed or MLA layers have no such curve)."""
    from scenarios.presets import kv_shards

    m = model
    if m.attention != "gqa" or m.swa_layers or m.compressed_layers or not m.full_layers:
        raise ValueError(f"attention backend {backend}: {m.name} has {m.attention} attention"
                         f"{' with sliding-window or compressed layers' if m.attention == 'gqa' else ''}; "
                         "expected full GQA layers only (the backends' curves are measured on those)")
    return curve_index(backend, hw.operator_fit, m.num_q_heads / tp, m.num_kv_heads / kv_shards(m, tp), m.head_dim)
