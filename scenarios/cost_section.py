"""A scenario's `cost:` section (and `engine.ep_size`) checked against its `cost.kind`'s facts
(scenarios/cost_kinds.py): efficiency numbers, the fields the kind reads, expert parallelism,
the table file. `resolve_cost` returns what it resolved; it writes nothing into the section."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path

from .cost_kinds import EFFICIENCY_FIELDS, FRACTIONS, ROUTED_EXPERT_MODELS, CostKind, cost_kind, cost_kinds
from .schema import ScenarioError, as_number


@dataclass(frozen=True)
class ResolvedCost:
    """The `cost:` section resolved: efficiency numbers, and the table's path (None unless used)."""

    efficiency: dict
    table: str | None


def resolve_cost(cost: dict, model, tp: int, ep: int, where: str, attention_backend=None) -> ResolvedCost:
    """Check a validated `cost:` section (and `engine.ep_size`, `engine.attention_backend`) against
    its kind; the efficiency numbers as numbers (5e-1 reads as 0.5) and the table's path as the
    run opens it."""
    kind = cost_kind(cost["kind"]) or CostKind(cost["kind"])
    eff = {k: as_number(v) for k, v in cost["efficiency"].items()}
    _check_efficiency(eff, kind, where)
    _check_ep(ep, tp, model, kind, where)
    if attention_backend is not None and not kind.attention_backends:
        by = " or ".join(k.name for k in cost_kinds() if k.attention_backends)
        raise ScenarioError(f"{where}: engine.attention_backend: {attention_backend} is modelled by cost.kind {by} "
                            f"only; expected null with cost.kind {kind.name}")
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
        by = " or ".join(k.name for k in cost_kinds() if k.expert_parallel)
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


__all__ = ["ResolvedCost", "resolve_cost"]
