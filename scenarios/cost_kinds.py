"""What a scenario's `cost:` section may say, per step-time model (`cost.kind`) (its checks:
scenarios/cost_section.py).

The models themselves live a floor up (sim/cost_models.py builds them, sim/operators.py and
sim/cost.py price steps); the scenario floor keeps each kind's scenario-facing facts, as it keeps
each workload kind's schema while sim/feeds.py drives it (docs/ARCHITECTURE.md, Layers):

- which `cost.efficiency` fields the model reads (the operator model replaces the rest by fits);
- whether it needs `cost.table` (a file of measured step times);
- whether it models expert parallelism (`engine.ep_size` = tp) and attention backends
  (`engine.attention_backend`).

`register_cost_model` (sim/cost_models.py) declares a kind here when it registers a builder
under a new name, so a cost model added from one file needs nothing on this floor.

Two facts are mirrored from sim/ and kept equal by tests/test_layering.py:
`OPERATOR_EFFICIENCY_FIELDS` (sim/operators.py EFFICIENCY_FIELDS) and `ROUTED_EXPERT_MODELS`
(the models sim/cost.py MOE_ROUTING gives routing to).
"""
from __future__ import annotations

from dataclasses import dataclass

from cache_core.options import NoOptions, option
from cache_core.registry import changed

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
    attention_backends: bool = False  # prices prefill attention on a backend's curve (engine.attention_backend)
    config: type = NoOptions  # its options dataclass (cache_core/options.py): its fields are `cost:` keys


@dataclass(frozen=True)
class TableOptions:
    """The `table` kind's key: the file it reads (scenarios/cost_section.py finds it)."""

    table: str | None = option(None, "str_or_none", "a file of measured step times (JSON or YAML)")


_KINDS: dict[str, CostKind] = {}


def register_cost_kind(kind: CostKind) -> CostKind:
    if kind.name in _KINDS:
        raise ValueError(f"cost kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    changed()
    return kind


def cost_kind(name: str) -> CostKind | None:
    return _KINDS.get(name)


def cost_kind_names() -> list[str]:
    return sorted(_KINDS)


def cost_kinds() -> list[CostKind]:
    """Every declared kind, in declaration order."""
    return list(_KINDS.values())


def unregister_cost_kind(name: str) -> None:
    """Drop a kind (a test's toy, once the test is done)."""
    _KINDS.pop(name, None)
    changed()


for _kind in (CostKind("operators", OPERATOR_EFFICIENCY_FIELDS, "its GEMM, attention and all-reduce curves are fitted",
                       expert_parallel=True, attention_backends=True),
              CostKind("roofline"), CostKind("table", needs_table=True, config=TableOptions)):
    register_cost_kind(_kind)


__all__ = ["CostKind", "TableOptions", "EFFICIENCY_FIELDS", "FRACTIONS", "OPERATOR_EFFICIENCY_FIELDS", "ROUTED_EXPERT_MODELS",
           "register_cost_kind", "cost_kind", "cost_kind_names", "cost_kinds", "unregister_cost_kind"]
