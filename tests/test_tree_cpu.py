"""The tree's CPU time (sim/tree_cpu.py, issue 31): operation counts on constructed trees, the
cost tables, where the time is placed around GPU steps, and that an unset engine.tree_core
changes nothing."""
from __future__ import annotations

import json

import numpy as np
import pytest
import simpy

from cache_core import CacheConfig, RadixCache, ReplayStepper
from cache_core.config import SwaConfig
from cache_core.engine_types import EngineConfig
from scenarios.presets import get_hardware
from scenarios.scenario import ScenarioError, apply_sets, load, resolve, scenario_path
from sim.simulator import CostExecutor, build
from sim.tree_cpu import KEYS, KINDS, TABLE, TreeCpuClock, TreeCpuModel, TreeOpCounter


def a(xs):
    return np.array(xs, dtype=np.int64)


def test_counts_on_a_constructed_tree_equal_the_hand_counts():
    c = RadixCache(CacheConfig(page_size=1, capacity_tokens=None))
    k = TreeOpCounter().attach(c)
    # [1,2,3,4] into the empty tree: one new leaf of 4 pages
    c.insert(a([1, 2, 3, 4]), 4, c.alloc(4))
    assert k.take() == {"insert.calls": 1, "insert.nodes": 1, "insert.pages": 4, "insert.new_pages": 4}
    # [1,2,5,6]: splits [1,2,3,4] into [1,2] + [3,4], new leaf [5,6]: path root-[1,2]-[5,6];
    # the key left after [1,2] is 2 tokens, after [5,6] none: 2 copy pages
    c.insert(a([1, 2, 5, 6]), 4, c.alloc(4))
    assert k.take() == {"insert.calls": 1, "insert.nodes": 2, "insert.pages": 4, "insert.copy_pages": 2,
                        "insert.new_pages": 2, "insert.splits": 1}
    s = a([1, 2, 3, 4, 9])
    m = c.match(s)  # root-[1,2]-[3,4]: 2 nodes, 4 pages; of the 5-token key 3 + 1 left after them
    assert m.cached_tokens == 4
    c.match(s)  # the same query again in the same pass (before take): counted once
    one = {"match.calls": 1, "match.key_pages": 5, "match.nodes": 2, "match.pages": 4, "match.copy_pages": 4}
    assert k.take() == one
    c.match(s)  # a new pass matches it again
    assert k.take() == one
    m3 = c.match(a([1, 2, 3]))  # ends inside [3,4]: splits it; root-[1,2]-[3]; 1 + 0 left
    assert k.take() == {"match.calls": 1, "match.key_pages": 3, "match.nodes": 2, "match.pages": 3,
                        "match.copy_pages": 1, "match.splits": 1}
    c.lock(m3)
    c.unlock(m3)  # each walks its 2 nodes up to the root
    assert k.take() == {"lock.calls": 2, "lock.nodes": 4}
    # tree: root, [1,2], [3], [4], [5,6] = 5 nodes; LRU pops [5,6] (2 tokens)
    assert c.tree.num_nodes == 5
    assert c.evict(2) == 2
    assert k.take() == {"evict.calls": 1, "evict.tree_nodes": 5, "evict.popped": 1}
    assert k.totals["match.calls"] == 3 and k.totals["insert.pages"] == 8


def test_swa_votes_and_tombstones_are_counted():
    c = RadixCache(CacheConfig(page_size=1, capacity_tokens=None,
                               swa=SwaConfig(window_tokens=2, capacity_tokens=4)))
    k = TreeOpCounter().attach(c)
    st = ReplayStepper(c)
    st.step(a([1, 2, 3, 4]), a([5, 6]))  # inserts [1..5], split at the prompt: [1,2,3,4] + [5]
    # the new leaf [1..5] is longer than the 2-token window: its part before the window starts
    # as tombstones (SGLang splits it off and frees it): one tombstone
    assert k.take()["vote.tombstones"] == 1
    r = st.step(a([1, 2, 3, 4, 5, 7]), a([8]))
    assert r.cached_tokens == 5
    got = k.take()
    # the match: root-[1,2,3,4]-[5], one SWA vote per node
    assert {key: got.get(key, 0) for key in ("match.nodes", "match.pages", "vote.votes")} == {
        "match.nodes": 2, "match.pages": 5, "vote.votes": 2}
    assert got.get("vote.tombstones", 0) == 0  # new leaf [7] (1 token): inside the window
    r = st.step(a([1, 2, 3, 4, 9, 9]), a([8]))
    got = k.take()
    # no window before [9,9] survives ([3] is a tombstone): nothing cached; the SWA pool (4
    # tokens) must drop one node's window to take the new request's (one tombstone), and the
    # new 6-token leaf is longer than the window (one more)
    assert r.cached_tokens == 0 and got["insert.new_pages"] == 6
    assert got["vote.tombstones"] == 2


def test_mamba_votes_and_tombstones_are_counted_apart_from_swa():
    from cache_core.config import MambaConfig

    c = RadixCache(CacheConfig(page_size=1, capacity_tokens=None, mamba=MambaConfig(slots=3)))
    k = TreeOpCounter().attach(c)
    st = ReplayStepper(c)
    st.step(a([1, 2, 3, 4]), a([5, 6]))  # [1..5], split at the prompt; a state at 5
    k.take()
    r = st.step(a([1, 2, 3, 4, 5, 7]), a([8]))
    got = k.take()
    # the match: root-[1,2,3,4]-[5] (state at 5), one MAMBA vote per node, none for SWA
    assert r.cached_tokens == 5 and got["vote.mamba_votes"] == 2 and "vote.votes" not in got
    st.step(a([1, 2, 3, 4, 9, 9]), a([8]))
    k.take()
    st.step(a([11, 12, 13]), a([8]))
    got = k.take()
    # 3 state slots: states at 5, 7 and 9 (the last request's) fill them; the new request's
    # private slot drops the least recent state from a node that stays: one MAMBA tombstone
    assert got["vote.mamba_tombstones"] == 1 and "vote.tombstones" not in got


def test_an_unchanged_cache_has_nothing_wrapped():
    c = RadixCache(CacheConfig(page_size=1, capacity_tokens=None))
    assert "match" not in vars(c) and "insert" not in vars(c)
    TreeOpCounter().attach(c)
    assert {"match", "insert", "lock", "unlock", "evict"} <= set(vars(c))
    other = TreeOpCounter().attach(RadixCache(CacheConfig(page_size=1, capacity_tokens=None)))
    with pytest.raises(ValueError, match="counts one cache"):
        other.attach(c)


class _Counts:
    """A counter whose take() returns the next prepared counts."""

    def __init__(self, seq):
        self.seq = list(seq)

    def take(self):
        return self.seq.pop(0)


def _clock(cpu_us, overlap):
    model = TreeCpuModel("t", {"match.calls": 1.0})
    return TreeCpuClock(_Counts({"match.calls": n} for n in cpu_us), model, overlap)


def test_overlap_hides_cpu_up_to_the_previous_gpu_step_and_exposes_the_excess():
    # GPU steps of 0.5 s; tree CPU 0.25 s, 0.25 s, 0.75 s, then 0.25 s after an idle gap
    cpu = [250_000, 250_000, 750_000, 250_000]
    ov = _clock(cpu, overlap=True)
    assert ov.step_time_s(0.5, 0.0) == 0.75  # nothing ran before: all 0.25 s shows
    assert ov.step_time_s(0.5, 0.75) == 0.5  # 0.25 s hides behind the previous 0.5 s step
    assert ov.step_time_s(0.5, 1.25) == 0.75  # 0.75 s: 0.5 hidden, the excess 0.25 shows
    assert ov.step_time_s(0.5, 3.0) == 0.75  # after an idle gap nothing hides it
    assert (ov.cpu_s, ov.exposed_s) == (1.5, 0.75)
    serial = _clock(cpu, overlap=False)
    assert [serial.step_time_s(0.5, t) for t in (0.0, 0.75, 1.5, 3.0)] == [0.75, 0.75, 1.25, 0.75]
    assert serial.exposed_s == serial.cpu_s == 1.5


def test_the_cost_executor_adds_only_the_shown_tree_time():
    class Cost:
        def step_time_s(self, prefill, decode):
            return 0.5

    class Step:
        prefill_cost = ()
        decode_contexts = ()

    env = simpy.Environment()
    ex = CostExecutor(env, Cost())
    ex.tree_cpu = _clock([250_000, 750_000], overlap=True)

    def run():
        yield from ex.execute(Step())
        yield from ex.execute(Step())
    env.process(run())
    env.run()
    assert env.now == 0.75 + 0.75  # step 1: 0.25 + 0.5; step 2: 0.5 + (0.75 - 0.5)
    assert ex.busy_s == 1.0  # GPU time only


def test_tree_core_unset_creates_no_counter_and_wraps_nothing():
    assert EngineConfig().tree_core is None and EngineConfig().overlap_schedule is True
    env = simpy.Environment()
    cache = RadixCache(CacheConfig(page_size=1, capacity_tokens=1000), record_actions="transfers")
    eng = build(env, cache, EngineConfig(), None, get_hardware("h200x2"))
    assert eng.executor.tree_cpu is None
    assert "match" not in vars(cache)
    cache2 = RadixCache(CacheConfig(page_size=1, capacity_tokens=1000), record_actions="transfers")
    eng2 = build(simpy.Environment(), cache2, EngineConfig(tree_core="sglang-rust"), None, get_hardware("h200x2"))
    assert eng2.executor.tree_cpu.model.core == "sglang-rust" and "match" in vars(cache2)


def test_tree_core_names_are_checked():
    raw = apply_sets(load(scenario_path("tree-core-200-qwen3-32b")), ["engine.tree_core=rust"])
    with pytest.raises(ScenarioError, match="engine.tree_core.*null or one of sglang-python, sglang-rust, radixsim"):
        resolve(raw, "x.yaml")
    raw = apply_sets(load(scenario_path("tree-core-200-qwen3-32b")), ["engine.tree_core=sglang-python"])
    assert resolve(raw, "x.yaml").engine.tree_core == "sglang-python"


def test_the_table_names_its_machine_and_every_core_and_feature():
    doc = json.loads(TABLE.read_text())
    assert set(doc["cores"]) == {"sglang-python", "sglang-rust", "radixsim"}
    assert doc["machine"]["cpu"] and doc["machine"]["date"]
    for core in doc["cores"].values():
        assert set(core["us_per_unit"]) == set(KEYS)
        assert all(v >= 0 for v in core["us_per_unit"].values())


def test_on_the_calibration_data_the_native_core_is_cheaper_for_every_operation_kind():
    doc = json.loads(TABLE.read_text())
    totals = doc["calibration"]["op_totals"]
    py, rs = (TreeCpuModel.load(c) for c in ("sglang-python", "sglang-rust"))
    kinds = [k for k in KINDS if any(totals.get(key, 0) for key in KEYS if key.startswith(k + "."))]
    assert {"match", "insert", "lock", "evict"} <= set(kinds)  # what the calibration exercised
    py_us, rs_us = py.by_kind_us(totals), rs.by_kind_us(totals)
    for kind in kinds:
        assert rs_us[kind] < py_us[kind], (kind, rs_us[kind], py_us[kind])
    # SWA / MAMBA: the votes and tombstones of the hybrid calibration (fit_tree_cpu.py --hybrid)
    hybrid = doc["calibration"]["hybrid"]["op_totals"]
    assert hybrid["vote.votes"] > 0 and hybrid["vote.tombstones"] > 0
    py_v, rs_v = py.by_kind_us(hybrid)["vote"], rs.by_kind_us(hybrid)["vote"]
    assert rs_v < py_v, (rs_v, py_v)


def test_host_cpu_speed_divides_the_time():
    m = TreeCpuModel("t", {"match.pages": 2.0}, host_cpu_speed=2.0)
    assert m.cost_us({"match.pages": 10}) == 10.0
    with pytest.raises(ValueError, match="unknown operation feature match.bogus"):
        TreeCpuModel("t", {"match.bogus": 1.0})


def test_post_work_delays_the_step_outputs_and_what_is_left_of_it_the_next_step():
    class R:
        first_token_s = finish_s = 2.0

    serial = _clock([250_000, 500_000], overlap=False)
    r1, r2 = R(), R()
    assert serial.post_s(2.0, [r1], [r2]) == 0.25  # the step's result processing: 0.25 s
    assert (r1.first_token_s, r2.finish_s) == (2.25, 2.25)  # its outputs go out after it
    assert serial.step_time_s(0.5, 2.0) == 1.25  # a step at once waits 0.25 left + 0.5 pre work
    ov = _clock([0, 250_000, 500_000], overlap=True)
    assert ov.step_time_s(0.5, 1.5) == 0.5  # a GPU step 1.5 .. 2.0
    assert ov.post_s(2.0, [], []) == 0.25
    assert ov.step_time_s(0.5, 2.0) == 0.75  # 0.25 + 0.5 of CPU, 0.5 hidden behind that step
    late = _clock([250_000, 0], overlap=False)
    late.post_s(2.0, [], [])
    assert late.step_time_s(0.5, 3.0) == 0.5  # the post work was over before this step
    assert (late.cpu_s, late.exposed_s) == (0.25, 0.0)


def test_a_closed_loop_client_hears_of_a_finish_after_the_post_work():
    from radixsim.run import simulate

    sets = ["engine.tree_core=sglang-python", "workload.num_rounds=2", "workload.num_clients=1",
            "workload.max_parallel=1"]
    sc = resolve(apply_sets(load(scenario_path("tree-core-200-qwen3-32b")), sets), "x.yaml")
    eng, *_ = simulate(sc, progress=False)
    r1, r2 = sorted(eng.finished, key=lambda r: r.round)
    posts = [(t, c) for t, c, shown in eng.executor.tree_cpu.log if shown == 0.0 and c > 0]
    # round 1's prefill completion (cache_unfinished_req) and its finish (cache_finished_req)
    (t_pre, c_pre), (t_fin, c_fin) = posts[0], [p for p in posts if p[0] < r2.arrival_s][-1]
    assert r1.first_token_s == t_pre + c_pre
    assert r1.finish_s == t_fin + c_fin == r2.arrival_s  # round 2 is sent once round 1's result is out
    assert c_fin > c_pre > 0


# sha256 (first 16 hex) of the sorted (round, arrival, first token, finish, cached tokens) of every
# request, computed with the code before engine.tree_core existed (commit 570f585), same sets
_BEFORE = {"tree-core-200-qwen3-32b": "20cf2f7e6d2dde8b", "tree-core-200-gpt-oss-20b": "4ffc0725d7c15bbb",
           "tree-core-200-qwen3-next-80b": "2b7b1b8783c37f98"}


def _figures_hash(name, extra=()):
    import hashlib

    from radixsim.run import simulate

    sets = ["workload.num_rounds=3", "workload.num_clients=2", "workload.max_parallel=2", *extra]
    eng, *_ = simulate(resolve(apply_sets(load(scenario_path(name)), sets), name), progress=False)
    rows = sorted((r.round, r.arrival_s, r.first_token_s, r.finish_s, r.cached_tokens) for r in eng.finished)
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(_BEFORE))
def test_tree_core_unset_gives_the_figures_of_the_code_before_it(name):
    assert _figures_hash(name) == _BEFORE[name]
    assert _figures_hash(name, ["engine.tree_core=sglang-python"]) != _BEFORE[name]  # the hash sees the tree time
