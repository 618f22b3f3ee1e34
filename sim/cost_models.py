"""Step-time models by the scenario's `cost.kind`: a registry, as eviction policies have.
A builder takes the resolved scenario and returns the model (sim/operators.py, sim/cost.py)."""
from __future__ import annotations

from cache_core.options import NoOptions, build
from cache_core.registry import Registry
from scenarios.cost_kinds import CostKind, cost_kind, register_cost_kind, unregister_cost_kind

_MODELS = Registry("cost model")


def register_cost_model(name: str, config: type | None = None):
    """Decorator: `builder(sc) -> cost model` is what `cost: {kind: name}` builds. A name the
    scenario floor does not know yet is declared there (scenarios/cost_kinds.py) as reading
    every efficiency field, without a table or expert parallelism, with `config` its options
    dataclass (cache_core/options.py: its fields are `cost:` keys; the builder reads them as
    `cost_options(sc)`)."""
    if cost_kind(name) is None:
        register_cost_kind(CostKind(name, config=config or NoOptions))
    return _MODELS.register(name, config)


def cost_options(sc):
    """The scenario's cost model options (its kind's options dataclass, from the `cost:` section)."""
    return build(cost_kind(sc.doc["cost"]["kind"]).config, sc.doc["cost"])


def unregister_cost_model(name: str) -> None:
    """Drop a builder and its scenario-floor declaration (a test's toy, once the test is done)."""
    _MODELS.unregister(name)
    unregister_cost_kind(name)


def cost_model_names() -> list[str]:
    return _MODELS.names()


def make_cost(sc):
    """The scenario's step-time model (its `cost.kind`'s builder)."""
    return _MODELS.make(sc.doc["cost"]["kind"], sc=sc)


@register_cost_model("operators")
def operator_cost_model(sc):
    """The operator-level model (sim/operators.py) for a resolved scenario (also what
    `radixsim calibrate --kind operators` measures)."""
    from .cost import Efficiency
    from .operators import OperatorCostModel

    return OperatorCostModel(sc.model, sc.hardware, sc.tp, Efficiency(**sc.efficiency), ep=sc.doc["engine"]["ep_size"],
                             attention_backend=sc.doc["engine"]["attention_backend"])


@register_cost_model("roofline")
def _roofline(sc):
    from .cost import Efficiency, RooflineCostModel

    return RooflineCostModel(sc.model, sc.hardware, sc.tp, Efficiency(**sc.efficiency))


@register_cost_model("table")
def _table(sc):
    from .cost import Efficiency
    from .optable import load_cost_table

    return load_cost_table(sc.cost_table, sc.model, sc.hardware, sc.tp, Efficiency(**sc.efficiency),
                           ep=sc.doc["engine"]["ep_size"])
