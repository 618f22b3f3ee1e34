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

The toy eviction policy, schedule policy, L3 store model, cost model and torch page store each
bring an options dataclass (cache_core/options.py `option` fields) on their one registration
line: its key shows up in the scenario schema (a default applied, a bad value refused in one line).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from cache_core import CacheConfig, Policy, RadixCache, ReplayStepper, register_policy
from cache_core.engine_types import EngineConfig
from cache_core.options import option
from cache_core.eviction import make_policy, unregister_policy
from cache_core.scheduling import SchedulePolicy, make_schedule_policy, register_schedule_policy, unregister_schedule_policy
from cache_core.tiers.store import StorageIndex, l3_options, register_l3_model, unregister_l3_model
from cache_core.tiers import TierConfig
from fleet.routers import ROUTERS, make_router, parameters, register_router, router_keys, unregister_router
from fleet.routers.base import Router
from helpers import shape, toks
from radixsim.fleet_run import fleet_rows, simulate_fleet
from radixsim.run import make_cost, request_rows, simulate
from scenarios import preset_data, presets
from scenarios.scenario import ScenarioError, apply_sets, resolve
from scenarios.schema import SCHEMA
from scenarios.workload_kinds import register_workload_kind, unregister_workload_kind
from sim.cost_models import cost_options, register_cost_model, unregister_cost_model
from sim.feeds import register_feed, unregister_feed
from test_fourth_component import RingSpec
from test_preset_data import TOY, x300_file
from test_workload_kinds import BURST_SCHEMA, Burst, build_burst, feed_burst


class MRU(Policy):
    """Most recently used first (a toy)."""

    reads_hits = reads_priority = False

    def key(self, node):
        return -node.tick


@dataclass(frozen=True)
class MruOptions:
    toy_mru_depth: int = option(2, "int1", "an integer >= 1 (a toy's knob)")


BASE = {"model": "qwen3-32b", "hardware": "h200x1", "cache": {"page_size": 64, "l1_tokens": 4096},
        "workload": {"num_clients": 2, "num_rounds": 2, "request_length": 256, "output_length": 8}}


def scenario(section: str, **keys):
    """A small scenario with `keys` set in `section` (resolved as s.yaml)."""
    raw = copy.deepcopy(BASE)
    raw.setdefault(section, {}).update(keys)
    return resolve(raw, "s.yaml")


def test_eviction_policy():
    register_policy("toy-mru", MruOptions)(MRU)
    try:
        c = RadixCache(CacheConfig(page_size=4, capacity_tokens=32, policy="toy-mru"))
        st = ReplayStepper(c)
        assert [st.step(toks(s)).evicted_tokens for s in ("abcdefgh", "ijklmnop", "qrstuvwx", "ABCDEFGH")] == [0, 0, 0, 8]
        assert shape(c) == {"abcdefgh": {}, "ijklmnop": {}, "ABCDEFGH": {}}  # lru would have evicted abcdefgh
        assert c.policy.options == MruOptions(2) and make_policy("toy-mru", MruOptions(5)).options.toy_mru_depth == 5
        assert scenario("cache", policy="toy-mru").doc["cache"]["toy_mru_depth"] == 2  # the default applied
        keys = list(SCHEMA["cache"])  # (rebuilt by the first validation after a registration)
        assert keys[keys.index("policy") + 1] == "toy_mru_depth"  # beside the key that names the policy
        sc = resolve(apply_sets(BASE, ["cache.policy=toy-mru", "cache.toy_mru_depth=3"]), "s.yaml")
        assert sc.doc["cache"]["toy_mru_depth"] == 3
        assert RadixCache(sc.cache).policy.options == MruOptions(3)  # the value reaches the running cache
        with pytest.raises(ScenarioError, match=r"^s\.yaml: cache\.toy_mru_depth: got 0; expected an integer >= 1 "
                                                r"\(a toy's knob\)$"):
            scenario("cache", policy="toy-mru", toy_mru_depth=0)
    finally:
        unregister_policy("toy-mru")
    assert "toy_mru_depth" not in scenario("cache").doc["cache"]  # gone with the policy


class Lifo(SchedulePolicy):
    """Last come, first served (a toy)."""

    def order(self, waiting, ctx=None):
        return list(reversed(waiting))


@dataclass(frozen=True)
class LifoOptions:
    toy_lifo_skip: int = option(0, "int0", "an integer >= 0 (requests passed over first)")


def test_schedule_policy():
    register_schedule_policy("toy-lifo", LifoOptions)(Lifo)
    try:
        assert EngineConfig(schedule_policy="toy-lifo").schedule_policy == "toy-lifo"
        assert make_schedule_policy("toy-lifo").order(["a", "b", "c"]) == ["c", "b", "a"]
        assert make_schedule_policy("toy-lifo").options == LifoOptions(0)
        sc = scenario("engine", schedule_policy="toy-lifo", toy_lifo_skip=3)
        assert sc.doc["engine"]["toy_lifo_skip"] == 3 and sc.engine.schedule_options == LifoOptions(3)
        # what the engine builds from its config (cache_core/engine.py)
        assert make_schedule_policy("toy-lifo", sc.engine.schedule_options).options.toy_lifo_skip == 3
        assert scenario("engine", schedule_policy="toy-lifo").doc["engine"]["toy_lifo_skip"] == 0
        with pytest.raises(ScenarioError, match=r"^s\.yaml: engine\.toy_lifo_skip: got -1; expected an integer >= 0"):
            scenario("engine", schedule_policy="toy-lifo", toy_lifo_skip=-1)
    finally:
        unregister_schedule_policy("toy-lifo")
    assert "toy_lifo_skip" not in scenario("engine").doc["engine"]


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


@dataclass(frozen=True)
class HalfOptions:
    toy_l3_divisor: int = option(2, "int1", "an integer >= 1 (the capacity is divided by it)")


def test_l3_store_model():
    register_l3_model("toy-half", HalfOptions)(lambda cfg, capacity_pages, page_size: HalfStore(
        capacity_pages // l3_options(cfg).toy_l3_divisor))
    try:
        c = RadixCache(CacheConfig(page_size=4, capacity_tokens=64, tiers=TierConfig(
            hicache_ratio=2, l3=True, l3_tokens=400, l3_model="toy-half")))
        assert type(c.hier.storage) is HalfStore and c.hier.storage.capacity_pages == 50  # 400 / 4 / 2 (the default)
        sc = scenario("cache", hicache_ratio=2, l3_tokens=6400, l3_model="toy-half", toy_l3_divisor=4)
        assert sc.doc["cache"]["toy_l3_divisor"] == 4 and sc.cache.tiers.l3_options == HalfOptions(4)
        assert RadixCache(sc.cache).hier.storage.capacity_pages == 25  # 6400 / 64 / 4
        assert scenario("cache", l3_model="toy-half").doc["cache"]["toy_l3_divisor"] == 2
        with pytest.raises(ScenarioError, match=r"^s\.yaml: cache\.toy_l3_divisor: got 'two'; expected an integer >= 1"):
            scenario("cache", toy_l3_divisor="two")
    finally:
        unregister_l3_model("toy-half")


class Flat:
    def __init__(self, s):
        self.s = s


@dataclass(frozen=True)
class FlatOptions:
    toy_step_s: float = option(0.001, "pos", "a number > 0 (seconds per step per TP rank)")


def test_cost_model():
    register_cost_model("toy-flat", FlatOptions)(lambda sc: Flat(cost_options(sc).toy_step_s * sc.tp))
    try:
        raw = {"model": "qwen3-32b", "hardware": "h200x2", "tp": 2, "cache": {"l1_tokens": 4096},
               "workload": {"num_rounds": 2, "request_length": 256, "output_length": 8}, "cost": {"kind": "toy-flat"}}
        sc = resolve(raw, "s.yaml")
        assert sc.doc["cost"] == {"kind": "toy-flat", "table": None, "toy_step_s": 0.001, "efficiency": {}}
        assert type(make_cost(sc)) is Flat and make_cost(sc).s == 0.002
        raw["cost"]["toy_step_s"] = 0.25
        assert make_cost(resolve(raw, "s.yaml")).s == 0.5
        raw["cost"]["toy_step_s"] = 0
        with pytest.raises(ScenarioError, match=r"^s\.yaml: cost\.toy_step_s: got 0; expected a number > 0 \(seconds"):
            resolve(raw, "s.yaml")
    finally:
        unregister_cost_model("toy-flat")
    assert list(scenario("cost").doc["cost"]) == ["kind", "table", "efficiency"]  # gone with the model


class MemStore:
    """A torch page store in a dict (a toy)."""

    def __init__(self, opts):
        self.opts = opts


def test_torch_page_store():
    from gpu_backend.backend import TorchOptions, make_page_store, register_page_store, unregister_page_store

    register_page_store("toy-mem", "a dict")(MemStore)
    try:
        sc = scenario("torch", store="toy-mem")
        assert sc.doc["torch"]["store"] == "toy-mem" and type(make_page_store(TorchOptions(**sc.doc["torch"]))) is MemStore
    finally:
        unregister_page_store("toy-mem")
    with pytest.raises(ScenarioError, match=r"^s\.yaml: torch\.store: got 'toy-mem'; expected local \(a directory\) "
                                         r"or mooncake \(Mooncake Store\)$"):
        scenario("torch", store="toy-mem")
    with pytest.raises(ValueError, match=r"^torch\.store 'toy-mem': expected local or mooncake$"):
        make_page_store(TorchOptions(store="toy-mem"))


def test_an_option_key_that_is_already_a_key_is_refused():
    @dataclass(frozen=True)
    class Clash:
        page_size: int = option(1, "int1", "an integer >= 1")

    register_policy("toy-clash", Clash)(MRU)
    try:
        with pytest.raises(ValueError, match=r"^Clash\.page_size: already a key of this scenario section; expected a new name$"):
            scenario("cache")
    finally:
        unregister_policy("toy-clash")
    with pytest.raises(ValueError, match=r"option check 'integer': expected one of str, str_or_none, int0"):
        option(1, "integer", "an integer")


def test_every_option_check_is_a_schema_check():
    from cache_core.options import CHECKS
    from scenarios.schema import _ok

    assert [_ok(check, 3) for check in CHECKS] == [False, False, True, True, True, False, True, True, True, False,
                                                   False, True, False]


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


def test_cli_name_lists_are_the_registries():
    """Every CLI choice list of a family's names is the registry itself (read when used); two stay
    literal because argparse formats them when the parser is built and the core's names would
    import numpy into `radixsim --help` (write policies, L3 writes, engine flavours): they must
    equal the core's tuples."""
    import argparse

    from cache_core.tiers import L3_WRITES, WRITE_POLICIES
    from radixsim.args import POLICIES, REPLAY_WORKLOADS
    from radixsim.cli import build_parser

    def actions(parser, path=()):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from actions(sub, path + (name,))
            elif a.choices is not None and a.option_strings:
                yield " ".join(path + (a.option_strings[0],)), a.choices

    choices = dict(actions(build_parser()))
    assert {k for k, v in choices.items() if v is POLICIES} == {"replay --policy", "curve --policy",
                                                                 "leaderboard --policy"}
    assert {k for k, v in choices.items() if v is REPLAY_WORKLOADS} == {"replay --workload", "curve --workload"}
    assert list(choices["replay --write-policy"]) == list(WRITE_POLICIES)
    assert list(choices["replay --l3-write"]) == list(L3_WRITES)
    from scenarios.engine_kinds import ENGINE_KINDS, KIND_KEYS  # engine flavours: replay's --engine, engine.kind

    assert list(choices["replay --engine"]) == list(ENGINE_KINDS) == list(KIND_KEYS["kind"][1][1])
