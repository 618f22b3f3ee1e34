"""One way to plug in (issue 30 item 1): per family, a toy defined (or reused) in this file is
registered with one line and is usable at once: eviction policy, schedule policy, component,
workload kind, L3 store model, cost model, router, hardware preset and model preset. Each
family's fuller proof stays where it was (docs/ARCHITECTURE.md "Extension points"):

- eviction policy: tests/test_cli_policies.py (a toy in every --policy choice list and --help)
- schedule policy: tests/test_scheduling.py::test_a_registered_schedule_policy_is_accepted_by_the_engine_config_and_scenarios
- component: tests/test_fourth_component.py (RING votes, evicts, and moves between tiers)
- workload kind: tests/test_workload_kinds.py (the toy kind at smoke size and in `radixsim replay`)
- L3 store model: tests/test_l3_store.py::test_a_registered_l3_model_is_built_by_name
- cost model: tests/test_cost.py::test_a_registered_cost_model_is_built_by_cost_kind
- hardware / model preset: tests/test_preset_data.py (one data file from RADIXSIM_PRESET_DIRS)
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from cache_core import CacheConfig, Policy, RadixCache, ReplayStepper, register_policy
from cache_core.engine_types import EngineConfig
from cache_core.eviction import unregister_policy
from cache_core.scheduling import SchedulePolicy, make_schedule_policy, register_schedule_policy, unregister_schedule_policy
from cache_core.tiers.store import StorageIndex, register_l3_model, unregister_l3_model
from cache_core.tiers import TierConfig
from fleet.routers import ROUTERS, make_router, parameters, register_router, router_keys, unregister_router
from fleet.routers.base import Router
from helpers import shape, toks
from radixsim.fleet_run import fleet_rows, simulate_fleet
from radixsim.run import make_cost, request_rows, simulate
from scenarios import preset_data, presets
from scenarios.scenario import resolve
from scenarios.workload_kinds import register_workload_kind, unregister_workload_kind
from sim.cost_models import register_cost_model, unregister_cost_model
from sim.feeds import register_feed, unregister_feed
from test_fourth_component import RingSpec
from test_preset_data import TOY, x300_file
from test_workload_kinds import BURST_SCHEMA, Burst, build_burst, feed_burst


class MRU(Policy):
    """Most recently used first (a toy)."""

    reads_hits = reads_priority = False

    def key(self, node):
        return -node.tick


def test_eviction_policy():
    register_policy("toy-mru")(MRU)
    try:
        c = RadixCache(CacheConfig(page_size=4, capacity_tokens=32, policy="toy-mru"))
        st = ReplayStepper(c)
        assert [st.step(toks(s)).evicted_tokens for s in ("abcdefgh", "ijklmnop", "qrstuvwx", "ABCDEFGH")] == [0, 0, 0, 8]
        assert shape(c) == {"abcdefgh": {}, "ijklmnop": {}, "ABCDEFGH": {}}  # lru would have evicted abcdefgh
    finally:
        unregister_policy("toy-mru")


class Lifo(SchedulePolicy):
    """Last come, first served (a toy)."""

    def order(self, waiting, ctx=None):
        return list(reversed(waiting))


def test_schedule_policy():
    register_schedule_policy("toy-lifo")(Lifo)
    try:
        assert EngineConfig(schedule_policy="toy-lifo").schedule_policy == "toy-lifo"
        assert make_schedule_policy("toy-lifo").order(["a", "b", "c"]) == ["c", "b", "a"]
    finally:
        unregister_schedule_policy("toy-lifo")


def test_component():
    cache = RadixCache(CacheConfig(page_size=4, capacity_tokens=256, extra_components=(RingSpec(window=8, slots=2),)))
    assert [c.name for c in cache.components] == ["full", "ring"] and cache.config.components == ("full", "ring")


def test_workload_kind():
    register_workload_kind("toy-burst", {**BURST_SCHEMA}, build_burst)
    register_feed("toy-burst", feed_burst)
    try:
        sc = resolve({"seed": 1, "model": "qwen3-32b", "hardware": "h200x1", "cache": {"page_size": 64, "l1_tokens": 4096},
                      "workload": {"kind": "toy-burst", "requests": 3}})
        assert sc.workload == Burst(3, 256)
        assert [r["cached_tokens"] for r in request_rows(simulate(sc)[0])] == [0, 192, 192]
    finally:
        unregister_feed("toy-burst")
        unregister_workload_kind("toy-burst")


class HalfStore(StorageIndex):
    """A prefix index with half the capacity (a toy)."""


def test_l3_store_model():
    register_l3_model("toy-half")(lambda cfg, capacity_pages, page_size: HalfStore(capacity_pages // 2))
    try:
        c = RadixCache(CacheConfig(page_size=4, capacity_tokens=64, tiers=TierConfig(
            hicache_ratio=2, l3=True, l3_tokens=400, l3_model="toy-half")))
        assert type(c.hier.storage) is HalfStore and c.hier.storage.capacity_pages == 50  # 400 / 4 / 2
    finally:
        unregister_l3_model("toy-half")


class Flat:
    def __init__(self, s):
        self.s = s


def test_cost_model():
    register_cost_model("toy-flat")(lambda sc: Flat(0.001 * sc.tp))
    try:
        sc = resolve({"model": "qwen3-32b", "hardware": "h200x2", "tp": 2, "cache": {"l1_tokens": 4096},
                      "workload": {"num_rounds": 2, "request_length": 256, "output_length": 8},
                      "cost": {"kind": "toy-flat"}}, "s.yaml")
        assert type(make_cost(sc)) is Flat and make_cost(sc).s == 0.002
    finally:
        unregister_cost_model("toy-flat")


def test_hardware_preset(tmp_path, monkeypatch):
    x300_file(tmp_path)
    monkeypatch.setenv(preset_data.PATH_ENV, str(tmp_path))
    assert presets.get_hardware("x300x2").gpu_name == "NVIDIA X300"


def test_model_preset(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "toy.yaml").write_text(TOY)
    monkeypatch.setenv(preset_data.PATH_ENV, str(tmp_path))
    assert presets.get_model("Toy-1B").family == "toy"


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


def test_docs_fleet_md_has_one_row_per_registered_router_in_registry_order():
    text = (Path(__file__).resolve().parent.parent / "docs" / "fleet.md").read_text()
    table = text[text.index("| router | rule | source |"):]
    rows = re.findall(r"^\| `([a-z_]+)`", table[: table.index("\n\n")], re.M)
    assert rows == list(ROUTERS) == ["round_robin", "least_load", "session_affinity", "cache_aware", "kv_overlap",
                                     "cache_aware_exact", "llm_d"]
