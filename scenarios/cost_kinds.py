"""What a scenario's `cost:` section may say, per step-time model (`cost.kind`), and its checks.

The models themselves live a floor up (sim/cost_models.py builds them, sim/operators.py and
sim/cost.py price steps); the scenario floor keeps each kind's scenario-facing facts, as it keeps
each workload kind's schema while sim/feeds.py drives it (docs/ARCHITECTURE.md, Layers):

- which `cost.efficiency` fields the model reads (the operator model replaces the rest by fits);
- whether it needs `cost.table` (a file of measured step times);
- whether it models expert parallelism (`engine.ep_size` = tp).

`register_cost_model` (sim/cost_models.py) declares a kind here when it registers a builder
under a new name, so a cost model added from one file needs nothing on this floor.

Two facts are mirrored from sim/ and kept equal by tests/test_layering.py:
`OPERATOR_EFFICIENCY_FIELDS` (sim/operators.py EFFICIENCY_FIELDS) and `ROUTED_EXPERT_MODELS`
(the models sim/cost.py MOE_ROUTING gives routing to).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path

from .schema import ScenarioError, as_number

# sim/cost.py Efficiency's fields, in its order (mirrored; tests/test_scenario.py keeps them equal).
EFFICIENCY_FIELDS = ("mfu_prefill", "mfu_decode", "hbm_efficiency", "allreduce_efficiency", "allreduce_latency_s",
                     "per_step_overhead_s", "per_layer_overhead_s")
FRACTIONS = ("mfu_prefill", "mfu_decode", "hbm_efficiency", "allreduce_efficiency")
# The Efficiency fields the operator model reads (sim/operators.py EFFICIENCY_FIELDS).
OPERATOR_EFFICIENCY_FIELDS = ("hbm_efficiency", "per_step_overhead_s", "per_layer_overhead_s")
# ModelPreset names with routed experts (the keys of sim/cost.py MOE_ROUTING, its sources there).
ROUTED_EXPERT_MODELS = frozenset({
    "DeepSeek-V4-Flash", "DeepSeek-V4-Pro", "Inkling-Small", "Kimi-K3", "Qwen3.5-397B-A17B", "Qwen3-Next-80B-A3B",
    "gpt-oss-20b", "gpt-oss-120b", "Qwen3-235B-A22B", "DeepSeek-V3", "GLM-4.5-Air"})


@dataclass(frozen=True)
class CostKind:
    """A `cost.kind`'s scenario-facing facts (None: reads every Efficiency field)."""

    name: str
    efficiency_fields: tuple | None = None
    unused_why: str = ""  # why the other efficiency fields are not read (for the one-line refusal)
    needs_table: bool = False
    expert_parallel: bool = False


_KINDS: dict[str, CostKind] = {}


def register_cost_kind(kind: CostKind) -> CostKind:
    if kind.name in _KINDS:
        raise ValueError(f"cost kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def cost_kind(name: str) -> CostKind | None:
    return _KINDS.get(name)


def cost_kind_names() -> list[str]:
    return sorted(_KINDS)


def unregister_cost_kind(name: str) -> None:
    """Drop a kind (a test's toy, once the test is done)."""
    _KINDS.pop(name, None)


for _kind in (CostKind("operators", OPERATOR_EFFICIENCY_FIELDS, "its GEMM, attention and all-reduce curves are fitted",
                       expert_parallel=True),
              CostKind("roofline"), CostKind("table", needs_table=True)):
    register_cost_kind(_kind)


@dataclass(frozen=True)
class ResolvedCost:
    """The `cost:` section resolved: efficiency numbers, and the table's path (None unless used)."""

    efficiency: dict
    table: str | None


def resolve_cost(cost: dict, model, tp: int, ep: int, where: str) -> ResolvedCost:
    """Check a validated `cost:` section (and `engine.ep_size`) against its kind; the efficiency
    numbers as numbers (5e-1 reads as 0.5) and the table's path as the run opens it."""
    kind = cost_kind(cost["kind"]) or CostKind(cost["kind"])
    eff = {k: as_number(v) for k, v in cost["efficiency"].items()}
    _check_efficiency(eff, kind, where)
    _check_ep(ep, tp, model, kind, where)
    return ResolvedCost(eff, _table(cost["table"], kind, where))


def _check_efficiency(eff: dict, kind: CostKind, where: str) -> None:
    for k, v in eff.items():
        if k not in EFFICIENCY_FIELDS:
            raise ScenarioError(f"{where}: cost.efficiency.{k}: unknown key; expected one of "
                                f"{', '.join(EFFICIENCY_FIELDS)}")
        frac = k in FRACTIONS
        if (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)
                or (frac and not 0 < v <= 1) or v < 0):
            raise ScenarioError(f"{where}: cost.efficiency.{k}: got {v!r}; expected "
                                + ("a number in (0, 1]" if frac else "a finite number >= 0 (seconds)"))
    unused = sorted(set(eff) - set(kind.efficiency_fields)) if kind.efficiency_fields is not None else []
    if unused:
        raise ScenarioError(f"{where}: cost.efficiency.{unused[0]}: not used by cost.kind {kind.name} "
                            f"({kind.unused_why}); expected cost.kind: roofline to set it")


def _check_ep(ep: int, tp: int, model, kind: CostKind, where: str) -> None:
    """Expert parallelism as sim/operators.py models it: off (1), or every TP rank holding
    whole experts (ep = tp) of an MoE model, on a cost kind that models it."""
    if ep == 1:
        return
    if ep != tp:
        raise ScenarioError(f"{where}: engine.ep_size: {ep} with tp {tp}; expected 1 or {tp} (= tp)")
    if model.name not in ROUTED_EXPERT_MODELS:
        raise ScenarioError(f"{where}: engine.ep_size: {ep}, but {model.name} has no routed experts; expected 1")
    if not kind.expert_parallel:
        by = " or ".join(k.name for k in _KINDS.values() if k.expert_parallel)
        raise ScenarioError(f"{where}: engine.ep_size: {ep} is modelled by cost.kind {by} only; expected 1 "
                            f"with cost.kind {kind.name}")


def _table(table, kind: CostKind, where: str) -> str | None:
    if kind.needs_table and not table:
        raise ScenarioError(f"{where}: cost.table: missing; expected a file of measured step times with "
                            f"cost.kind: {kind.name}")
    if not kind.needs_table:
        return None
    if Path(table).is_file():
        return table
    beside = Path(where).parent / table
    if not beside.is_file():
        why = "is a directory" if Path(table).is_dir() else "no such file"
        raise ScenarioError(f"{where}: cost.table: {table}: {why}; expected a file of measured step "
                            "times (JSON or YAML), relative to the working directory or the scenario file")
    return str(beside)


__all__ = ["CostKind", "ResolvedCost", "EFFICIENCY_FIELDS", "OPERATOR_EFFICIENCY_FIELDS", "ROUTED_EXPERT_MODELS",
           "register_cost_kind", "cost_kind", "cost_kind_names", "unregister_cost_kind", "resolve_cost"]
