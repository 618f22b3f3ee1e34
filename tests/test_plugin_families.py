"""One way to plug in (issue 30 item 1): per family, a toy defined in this file is registered
with one line and is usable at once. Families whose toy test already lives elsewhere are
referenced at the end of this docstring rather than duplicated:

- eviction policy: tests/test_cli_policies.py::test_every_registered_policy_is_accepted_and_in_help
- schedule policy: tests/test_scheduling.py::test_a_registered_schedule_policy_is_accepted_by_the_engine_config_and_scenarios
- component: tests/test_fourth_component.py (RING, `extra_components=(RingSpec(...),)`)
- workload kind: tests/test_workload_kinds.py::test_a_registered_kind_runs_through_scenario_and_simulation
- L3 store model: tests/test_l3_store.py::test_a_registered_l3_model_is_built_by_name
- cost model: tests/test_cost.py::test_a_registered_cost_model_is_built_by_cost_kind
- hardware / model preset: tests/test_preset_data.py::test_adding_a_gpu_is_one_file, ::test_adding_a_model_is_one_file
"""
from __future__ import annotations

import copy

import pytest

from fleet.routers import ROUTERS, make_router, parameters, register_router, router_keys, unregister_router
from fleet.routers.base import Router
from radixsim.fleet_run import fleet_rows, simulate_fleet
from scenarios.scenario import resolve

SMALL = {  # 4 clients x 2 rounds on one H200 (tests/test_fleet.py's fleet, smaller)
    "name": "plugin-test", "seed": 3, "model": "qwen3-32b", "hardware": "h200x1",
    "cache": {"page_size": 64, "l1_tokens": 200_000, "hicache_ratio": 2},
    "engine": {"max_running_requests": 8},
    "workload": {"kind": "multiturn", "num_clients": 4, "num_rounds": 2, "request_length": 256,
                 "output_length": 4, "max_parallel": 4, "request_rate": 32, "round_barrier": False},
}


class PinnedRouter(Router):
    """Every request to one engine (`engine`, a scenario key: fleet.router.engine)."""

    def __init__(self, n, *, engine: int = 0, **kw):
        super().__init__(n, **kw)
        self.engine = engine

    def pick(self, req, now):
        return self.engine


@pytest.fixture
def pinned():
    register_router("toy_pinned")(PinnedRouter)
    yield
    unregister_router("toy_pinned")


def test_a_registered_router_runs_a_fleet(pinned):
    raw = {**copy.deepcopy(SMALL), "fleet": {"engines": 3, "router": {"kind": "toy_pinned", "engine": 2}}}
    rows = fleet_rows(simulate_fleet(resolve(raw, "test"))[0])
    assert [r["engine"] for r in rows] == [2] * 8  # 4 clients x 2 rounds, all on engine 2
    assert list(ROUTERS)[-1] == "toy_pinned" and parameters(PinnedRouter) == ["engine"]
    with pytest.raises(ValueError, match=r"fleet.router.pin: unknown parameter of toy_pinned; expected one of engine$"):
        make_router({"kind": "toy_pinned", "pin": 1}, 2, page_size=64)


def test_a_router_s_keys_and_their_checks_come_from_its_signature(pinned):
    assert {k: (p.annotation, p.default) for k, p in router_keys(PinnedRouter).items()} == {"engine": ("int", 0)}
    with pytest.raises(ValueError, match=r"^fleet.router.engine: got '2'; expected an integer \(toy_pinned's default: 0\)$"):
        make_router({"kind": "toy_pinned", "engine": "2"}, 3, page_size=64)
    with pytest.raises(ValueError, match=r"^fleet.router.balance_abs_threshold: got 'x'; expected an integer "
                                         r"\(cache_aware's default: 64\)$"):  # accepted, then unusable, before
        make_router({"kind": "cache_aware", "balance_abs_threshold": "x"}, 2, page_size=64)
    with pytest.raises(ValueError, match=r"^fleet.router.cache_threshold: got True; expected a number"):
        make_router({"kind": "cache_aware_exact", "cache_threshold": True}, 2, page_size=64)
    assert make_router({"kind": "kv_overlap", "overlap_score_weight": 0}, 2, page_size=64).weight == 0.0  # an int is a number


def test_an_unregistered_router_is_refused_by_the_registry_s_names():
    with pytest.raises(ValueError, match=r"unknown router 'toy_pinned'; expected one of round_robin, least_load, "
                                         r"session_affinity, cache_aware, kv_overlap, cache_aware_exact, llm_d$"):
        make_router({"kind": "toy_pinned"}, 2, page_size=64)
    with pytest.raises(ValueError, match="router 'round_robin' is already registered"):
        register_router("round_robin")(PinnedRouter)
