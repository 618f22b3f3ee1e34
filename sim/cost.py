"""Step-time cost model: how long one engine step takes on the modelled hardware.

Two interchangeable models share one interface (``CostModel``):

- ``RooflineCostModel``: analytic, from the model preset (layers, heads, parameters, KV and
  state bytes), the hardware preset (FLOP/s, HBM and NVLink bandwidth) and a handful of
  efficiency factors (``Efficiency``). Every formula is in sim/roofline.py.
- ``TableCostModel``: a small fitted table of measured step times (from ``gpu_backend``),
  interpolated. It replaces the roofline once measurements exist.

Where each part lives (this module re-exports them all: ``from sim.cost import X``):

- sim/cost_base.py: the interface (``CostModel``), the batch and context parsers and
  ``transfer_time_s``;
- sim/cost_params.py: ``Efficiency``, ``MOE_ROUTING``, ``DSV4_INDEXER`` and their sources;
- sim/roofline.py: ``RooflineCostModel`` and ``StepCost``, with every formula;
- sim/cost_table.py: ``TableCostModel`` and its ``Surface``, with the interpolation rules.
"""
from __future__ import annotations

from sim.cost_base import LINKS, NVLINK_LATENCY_S, CostModel, parse_batch, parse_contexts, transfer_time_s
from sim.cost_params import ACTIVATION_DTYPE_BYTES, DSV4_INDEXER, EFFICIENCY_SOURCES, MOE_ROUTING, Efficiency
from sim.cost_table import Surface, TableCostModel
from sim.roofline import RooflineCostModel, StepCost, causal_keys, compressed_rows, topk_rows, window_keys

__all__ = [
    "ACTIVATION_DTYPE_BYTES", "CostModel", "DSV4_INDEXER", "EFFICIENCY_SOURCES", "Efficiency",
    "LINKS", "MOE_ROUTING", "NVLINK_LATENCY_S", "RooflineCostModel", "StepCost", "Surface", "TableCostModel",
    "causal_keys", "compressed_rows", "parse_batch", "parse_contexts", "topk_rows", "transfer_time_s", "window_keys",
]
