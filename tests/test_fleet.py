"""Fleets (issue 17): a fleet of one is the single-engine run byte for byte; routers spread,
stick, bound and score exactly as stated; a shared L3 turns one engine's stores into another's
storage hits; every router is deterministic for a seed."""
from __future__ import annotations

import collections
import copy
import json

import numpy as np
import pytest

from fleet.routers import ROUTERS
from radixsim import results
from radixsim.fleet_run import fleet_rows, simulate_fleet
from radixsim.run import run_scenario
from scenarios.scenario import ScenarioError, apply_sets, load, resolve

from helpers import stub_cache

SMALL = {  # 8 clients x 3 rounds of a growing conversation on one H200 (well under a second)
    "name": "fleet-test", "seed": 3, "model": "qwen3-32b", "hardware": "h200x1",
    "cache": {"page_size": 64, "l1_tokens": 200_000, "hicache_ratio": 2},
    "engine": {"max_running_requests": 8},
    "workload": {"kind": "multiturn", "num_clients": 8, "num_rounds": 3, "request_length": 1024,
                 "output_length": 16, "max_parallel": 8, "request_rate": 32, "round_barrier": False},
}


def scenario(fleet=None, **sets):
    raw = copy.deepcopy(SMALL)
    if fleet is not None:
        raw["fleet"] = fleet
    raw = apply_sets(raw, [f"{k.replace('__', '.')}={v}" for k, v in sets.items()])
    return resolve(raw, "test")


def run(fleet, **sets):
    f, env, costs, store, wall = simulate_fleet(scenario(fleet, **sets))
    return f, fleet_rows(f)


def _drop_last_column(text: str) -> str:
    return "".join(line.rsplit(",", 1)[0] + "\n" for line in text.splitlines())


def test_fleet_of_one_equals_the_single_engine_run_byte_for_byte(tmp_path):
    """Every result file of a one-engine fleet equals the single run's, but for the engine
    column (last), summary.json's `fleet` key and config.yaml's `fleet` section."""
    raw = apply_sets(load("quickstart"), ["workload.num_clients=6", "workload.num_rounds=3",
                                          "cache.l3_tokens=unbounded"])
    single, one = tmp_path / "single", tmp_path / "one"
    run_scenario(resolve(raw, "quickstart"), single, progress=False, plots=False)
    run_scenario(resolve({**raw, "fleet": {"engines": 1}}, "quickstart"), one, progress=False, plots=False)
    for name in ("rounds.csv", "tree.json"):
        assert (one / name).read_bytes() == (single / name).read_bytes(), name
    for name in ("requests.csv", "timeline.csv"):
        text = (one / name).read_text()
        assert text.splitlines()[0].endswith(",engine")
        assert _drop_last_column(text) == (single / name).read_text(), name
    s = json.loads((one / "summary.json").read_text())
    fleet = s.pop("fleet")
    results.write_summary(tmp_path, s)
    assert (tmp_path / "summary.json").read_bytes() == (single / "summary.json").read_bytes()
    assert fleet["engines"] == 1 and fleet["requests"] == 18
    assert (single / "requests.csv").read_text().count("\n") == 19


def test_round_robin_on_identical_engines_spreads_exactly():
    f, rows = run({"engines": 4, "router": "round_robin"})
    assert len(rows) == 24
    assert [r["engine"] for r in rows] == [r["rid"] % 4 for r in rows]  # rid = arrival order
    assert collections.Counter(r["engine"] for r in rows) == {0: 6, 1: 6, 2: 6, 3: 6}


def test_session_affinity_keeps_every_turn_of_a_session_on_its_home_engine():
    f, rows = run({"engines": 4, "router": {"kind": "session_affinity", "epsilon": 100}})
    engines = collections.defaultdict(set)
    for r in rows:
        engines[r["session_id"]].add(r["engine"])
    assert all(len(e) == 1 for e in engines.values())
    assert {s: e.pop() for s, e in engines.items()} == {s: f.router.home(s) for s in range(8)}
    assert f.router.moves == []
    assert len({f.router.home(s) for s in range(8)}) > 1  # the sessions do spread


def test_session_affinity_moves_a_session_only_when_its_home_is_at_the_load_bound():
    f, rows = run({"engines": 4, "router": {"kind": "session_affinity", "epsilon": 0}})
    moved = {m[0]: m for m in f.router.moves}
    assert moved  # epsilon 0 forces some moves on this workload
    for r in rows:
        home = f.router.home(r["session_id"])
        if r["rid"] in moved:
            rid, h, chosen, load, cap = moved[r["rid"]]
            assert (h, chosen) == (home, r["engine"]) and home != chosen and load >= cap
        else:
            assert r["engine"] == home


def hit(rows) -> float:
    return sum(r["cached_tokens"] for r in rows) / sum(r["prompt_tokens"] for r in rows)


def test_routing_by_exact_caches_hits_more_than_round_robin():
    """cache_aware_exact is no upper bound (tests/test_routers_exact.py), but this workload
    rewards routing by reuse."""
    rates = {name: hit(run({"engines": 4, "router": name})[1]) for name in ("round_robin", "cache_aware_exact")}
    assert rates["cache_aware_exact"] > rates["round_robin"]


def _trace(tmp_path):
    """Two requests 20 s apart; the second's prompt starts with the first's 32 blocks."""
    path = tmp_path / "two.jsonl"
    lines = [{"timestamp": 0, "hash_ids": list(range(32)), "output_length": 4},
             {"timestamp": 20000, "hash_ids": list(range(32)) + [100, 101], "output_length": 4}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def _two_engines_on_the_trace(tmp_path, shared: bool, **raw_sets):
    """Two round-robin engines with an unbounded L3 (shared or each its own) on `_trace`:
    (the fleet, engine A's row, engine B's row, the shared store or None)."""
    raw = copy.deepcopy(SMALL)
    raw.update(raw_sets)
    raw["cache"].update(l3_tokens="unbounded")
    raw["workload"] = {"kind": "trace", "path": _trace(tmp_path), "block_size": 64}
    raw["fleet"] = {"engines": 2, "router": "round_robin", "shared_l3": shared}
    f, env, costs, store, wall = simulate_fleet(resolve(raw, "test"))
    a, b = fleet_rows(f)
    return f, a, b, store


@pytest.mark.parametrize("shared", [True, False])
def test_a_shared_l3_turns_engine_a_stored_prefix_into_engine_b_storage_hit(tmp_path, shared):
    _, a, b, store = _two_engines_on_the_trace(tmp_path, shared)
    assert (a["engine"], b["engine"]) == (0, 1)
    assert a["cached_tokens"] == 0
    assert (b["cached_storage"], b["cached_device"], b["cached_host"]) == ((32 * 64, 0, 0) if shared else (0, 0, 0))
    assert (store is not None) == shared


@pytest.mark.parametrize("model, voters", [("gpt-oss-20b", ["swa"]), ("qwen3-next-80b", ["mamba"]),
                                           ("inkling-small", ["swa", "mamba"])])
def test_a_shared_l3_serves_engine_a_swa_and_mamba_payloads_to_engine_b(tmp_path, model, voters):
    """The SWA window pages and MAMBA checkpoints engine A stored go to the shared store too (every
    component is wired to it from the start), so B's storage hit is A's whole 32-page history
    (with each engine's components on a store of its own, as before the fix: 0)."""
    f, a, b, store = _two_engines_on_the_trace(tmp_path, True, model=model)
    assert (a["engine"], a["cached_tokens"]) == (0, 0)
    assert (b["engine"], b["cached_storage"], b["cached_device"], b["cached_host"]) == (1, 32 * 64, 0, 0)
    for e in f.engines:
        comps = e.cache.voters
        assert [c.name for c in comps] == voters
        assert e.cache.hier.storage is store
        assert all(c.tiers.storage is store and c.l3_copies.storage is store for c in comps)


def test_a_shared_mooncake_store_reads_the_simulated_clock_and_its_ssd_link_is_shared(tmp_path):
    """Its leases expire on the fleet's clock (sim_clock sets it on the store each cache is built
    on; a store swapped in after the build kept no clock, so its leases never protected), and the
    engines read its SSD tier over one link (each engine had its own)."""
    raw = copy.deepcopy(SMALL)
    raw["cache"].update(l3_tokens="unbounded", l3_model="mooncake", l3_ssd_tokens=64_000)
    raw["workload"] = {"kind": "trace", "path": _trace(tmp_path), "block_size": 64}
    raw["fleet"] = {"engines": 2, "router": "round_robin", "shared_l3": True}
    f, env, costs, store, wall = simulate_fleet(resolve(raw, "test"))
    assert type(store).__name__ == "MooncakeStore"
    assert store.clock is not None and store.clock() == env.now > 20.0
    a, b = (e.links for e in f.engines)  # one L3 link pair and one SSD read link (the store's SSD tier)
    assert a.ssd is b.ssd and all(a.get(*p) is b.get(*p) for p in (("L3", "L2"), ("L2", "L3")))
    assert a.get("L2", "L1") is not b.get("L2", "L1")


def test_a_prebuilt_store_needs_an_l3_tier():
    from cache_core.cache import RadixCache
    from cache_core.config import CacheConfig

    with pytest.raises(ValueError, match="storage: a prebuilt L3 store needs a cache with an L3 tier"):
        RadixCache(CacheConfig(page_size=64), storage=object())


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_every_router_is_deterministic_for_a_seed(name):
    fleet = {"engines": 3, "router": name}
    first, second = run(fleet)[1], run(fleet)[1]
    assert first == second
    assert {r["engine"] for r in first} == {0, 1, 2}  # every router uses every engine here


def test_bad_fleet_sections_are_one_line_errors():
    for bad, text in [({"engines": 0}, "fleet.engines: got 0"), ({"routers": 1}, "fleet.routers: unknown key"),
                      ({"groups": [{"count": 1, "role": "prefill"}]}, "need fleet.pd"),
                      ({**PD, "pd": {"bootstrap_s": -1}}, "fleet.pd.bootstrap_s: got -1"),
                      ({**PD, "pd": {"decode_radix": "yes"}}, "fleet.pd.decode_radix: got 'yes'"),
                      ({"groups": [{"count": 1, "role": "prefill"}, {"count": 1, "role": "decode",
                                    "model": "qwen3-next-80b", "cache": {"components": ["full", "mamba"]}}],
                        "pd": {}}, "a decode engine cannot have a MAMBA component"),
                      ({"engines": 2, "shared_l3": True}, "every engine needs an L3 tier")]:
        with pytest.raises(ScenarioError, match=text):
            scenario(bad)
    with pytest.raises(ValueError, match="unknown router 'nope'"):
        simulate_fleet(scenario({"engines": 2, "router": "nope"}))
    with pytest.raises(ValueError, match="fleet.router.bogus: unknown parameter of cache_aware_exact; expected one of "
                                         "cache_threshold, balance_abs_threshold, balance_rel_threshold"):
        simulate_fleet(scenario({"engines": 2, "router": {"kind": "cache_aware_exact", "bogus": 1}}))


PD = {"groups": [{"count": 1, "role": "prefill"}, {"count": 2, "role": "decode"}],
      "pd": {"kv_bytes_per_s": 25e9, "kv_latency_s": 1e-3}}


def test_pd_decode_starts_no_earlier_than_its_kv_arrives_and_the_parts_add_up():
    from radixsim.run import request_rows
    from scenarios.presets import bytes_per_token

    sc = scenario(PD)
    f, env, costs, store, wall = simulate_fleet(sc)
    rows = fleet_rows(f)
    assert len(rows) == 24 and {r["engine"] for r in rows} == {0} and {r["decode_engine"] for r in rows} == {1, 2}
    decoded = {row["rid"]: row for i in (1, 2) for row in request_rows(f.engines[i])}
    assert sorted(decoded) == [r["rid"] for r in rows]
    for r in rows:
        part = f.parts[r["rid"]]
        assert decoded[r["rid"]]["start_s"] >= part["kv_done_s"] > part["kv_sent_s"] == r["first_token_s"]
        assert r["bootstrap_s"] + r["prealloc_wait_s"] + r["queue_s"] + r["load_s"] + r["compute_s"] == \
            pytest.approx(r["ttft_s"], abs=1e-12)
        assert r["ttft_s"] + r["kv_transfer_s"] + r["decode_queue_s"] + r["decode_s"] == \
            pytest.approx(r["finish_s"] - r["arrival_s"], abs=1e-9)
    assert [r["bootstrap_s"] for r in rows] == pytest.approx([1e-3] * 24, abs=1e-15)  # the default
    first = f.parts[rows[0]["rid"]]  # alone on the prefill engine's link: latency + bytes / bandwidth
    nbytes = 1024 * bytes_per_token(sc.fleet.engines[0].model, "full")
    assert first["kv_done_s"] - first["kv_sent_s"] == pytest.approx(1e-3 + nbytes / 25e9, rel=1e-12)


def test_dp_attention_ranks_have_their_own_trees_behind_the_dispatcher():
    """One engine with 4 DP ranks: the pool and running limit split over the ranks; a
    round-robin dispatcher spreads a session's turns over the ranks (each rank's tree misses
    the history the others hold), a session-affinity one keeps them on one rank."""
    tp4 = {"hardware": "h200x4"}  # dp divides tp (tests/test_hostile_inputs.py)
    one = run({"engines": 1}, **tp4)[1]
    f, spread = run({"engines": 1, "dp": 4}, **tp4)
    assert [e.cache.config.capacity_tokens for e in f.engines] == [49984] * 4  # 200,000 / 4, whole pages
    assert [e.config.max_running_requests for e in f.engines] == [2] * 4
    assert [(r["engine"], r["dp_rank"]) for r in spread] == [(0, r["rid"] % 4) for r in spread]
    sticky = run({"engines": 1, "dp": 4, "dp_router": {"kind": "session_affinity", "epsilon": 100}}, **tp4)[1]
    ranks = collections.defaultdict(set)
    for r in sticky:
        ranks[r["session_id"]].add(r["dp_rank"])
    assert all(len(x) == 1 for x in ranks.values())
    assert hit(spread) < hit(sticky) == hit(one)


def test_report_includes_the_fleet_figures(tmp_path):
    from analysis.load import load_runs
    from analysis.report import report_figures

    dirs = []
    for name, fleet in (("rr", {"engines": 2}), ("exact", {"engines": 2, "router": "cache_aware_exact"}), ("pd", PD)):
        run_scenario(scenario(fleet), tmp_path / name, progress=False, plots=False)
        dirs.append(tmp_path / name)
    names = [n for n, _, _ in report_figures(load_runs(dirs))]
    assert [n for n in names if n.startswith("fleet")] == ["fleet-load-1", "fleet-load-2", "fleet-load-3",
                                                          "fleet-pd-3", "fleet-routers"]
    assert not [n for n in names if n.startswith("timeline")]  # per engine, not one mixed timeline
    engines = (tmp_path / "pd" / "engines.csv").read_text().splitlines()
    assert [line.split(",")[:3] for line in engines[1:]] == [["0", "prefill", "24"], ["1", "decode", "12"],
                                                            ["2", "decode", "12"]]


def test_set_a_router_parameter_over_a_router_name():
    raw = {**copy.deepcopy(SMALL), "fleet": {"engines": 2, "router": "session_affinity"}}
    sc = resolve(apply_sets(raw, ["fleet.router.kind=cache_aware_exact", "fleet.router.cache_threshold=0.5"]), "test")
    assert sc.fleet.router == {"kind": "cache_aware_exact", "cache_threshold": 0.5}
    with pytest.raises(ScenarioError, match="fleet.router: got {'epsilon': 0}; expected a router name"):
        resolve(apply_sets(raw, ["fleet.router.epsilon=0"]), "test")


class _Match:
    def __init__(self, device):
        self.cached_tokens = self.device = device
        self.host_tokens = 0


class _Engine:
    def __init__(self, device):
        self.cache = stub_cache(_Match(device))  # tiered: cache_aware_exact reads device + host


class _Seq:
    def page_keys(self, page_size):
        return np.arange(1000)


class _Req:
    def __init__(self, rid, prompt=10_000):
        self.rid, self.prompt_tokens, self.output_length, self.seq, self.limit = rid, prompt, 10, _Seq(), None


def test_cache_aware_exact_spreads_requests_that_match_no_engine_well():
    """Engine 0 holds a 2,048-token shared prefix of every 10,000-token prompt (20%, under the
    0.3 threshold): requests go to the least loaded engine, not all to engine 0 (a greedy
    most-hit-tokens oracle overloads it); a request matching 60% of engine 1 goes there."""
    from fleet.routers import make_router

    r = make_router({"kind": "cache_aware_exact"}, 2, page_size=64)
    r.engines = [[_Engine(2048)], [_Engine(0)]]
    picks = []
    for rid in range(4):
        req = _Req(rid)
        picks.append(r.pick(req, 0.0))
        r.routed(req, picks[-1], 0.0)
    assert picks == [0, 1, 0, 1]
    r.engines = [[_Engine(2048)], [_Engine(6000)]]
    assert r.pick(_Req(9), 0.0) == 1


def test_a_heterogeneous_fleet_resolves_each_group_with_its_own_presets():
    groups = [{"count": 1, "hardware": "h100x1", "cache": {"l1_tokens": 100_000}},
              {"count": 2, "engine": {"max_running_requests": 4}}]
    f, rows = run({"groups": groups, "router": "least_load"})
    assert [e.cache.config.capacity_tokens for e in f.engines] == [99_968, 200_000, 200_000]
    assert [e.config.max_running_requests for e in f.engines] == [8, 4, 4]
    assert [sc.hardware.name for sc in scenario({"groups": groups}).fleet.engines] == ["h100x1", "h200x1", "h200x1"]
    assert len(rows) == 24 and {r["engine"] for r in rows} == {0, 1, 2}


def test_slo_attainment_and_goodput_count_exactly():
    from radixsim.fleet_run import slo_metrics

    def row(ttft, out, finish, rejected=False):
        return {"rejected": rejected, "ttft_s": ttft, "first_token_s": 1.0, "finish_s": finish,
                "output_tokens": out, "prompt_tokens": 100}

    rows = [row(0.5, 11, 1.5), row(0.5, 11, 3.0), row(3.0, 1, 1.0), row(0.2, 1, 1.0), row(None, 0, None, True)]
    m = slo_metrics(rows, ttft_s=1.0, tpot_s=0.1, duration=10.0)  # TPOTs 0.05 and 0.2; the last is rejected
    assert (m["slo_attainment"], m["goodput_rps"], m["goodput_tokens_per_s"]) == (0.4, 0.2, (111 + 101) / 10.0)
    assert (m["tpot_p50_s"], m["ttft_p50_s"]) == (pytest.approx(0.125), 0.5)


def test_kv_overlap_sees_a_stored_event_only_after_the_staleness_delay():
    from cache_core.engine_types import EngineRequest
    from cache_core.records import TokenSeq
    from fleet.routers import make_router

    def req(rid):
        toks = np.arange(1, 257, dtype=np.int64)
        return EngineRequest(rid=rid, session_id=None, prompt=toks[:256], output_length=1, arrival_s=0.0,
                             seq=TokenSeq(toks))

    r = make_router({"kind": "kv_overlap", "staleness_s": 0.5}, 2, page_size=64)
    first = req(0)
    r.routed(first, 1, 0.0)
    r.finished(first, 1, 1.0)  # engine 1 stored 4 blocks at t = 1
    assert r.pick(req(1), 1.4) == 0  # not seen yet: equal logits, the lowest index
    assert r.pick(req(2), 1.5) == 1  # seen: 4 blocks fewer to prefill on engine 1
    stale = run({"engines": 3, "router": {"kind": "kv_overlap", "staleness_s": 1e9}})[1]
    blind = run({"engines": 3, "router": {"kind": "kv_overlap", "overlap_score_weight": 0}})[1]
    fresh = run({"engines": 3, "router": "kv_overlap"})[1]
    assert [r["engine"] for r in stale] == [r["engine"] for r in blind] != [r["engine"] for r in fresh]


def test_the_fleet_summary_sums_engine_counters_but_not_settings(tmp_path):
    run_scenario(scenario({"engines": 2}), tmp_path / "two", progress=False, plots=False)
    s = json.loads((tmp_path / "two" / "summary.json").read_text())
    per = json.loads((tmp_path / "two" / "fleet.json").read_text())["per_engine"]
    assert s["cache"]["page_size"] == 64 and s["cache"]["full"]["capacity_tokens"] == 400_000
    last = max(float(line.split(",")[6]) for line in (tmp_path / "two" / "requests.csv").read_text().splitlines()[1:])
    assert last <= s["engine"]["simulated_end_s"] < last + 0.5  # the run's end (last backups too), not a sum of two
    assert s["engine"]["busy_s"] == pytest.approx(sum(e["busy_s"] for e in per), rel=1e-12)


PD_1P1D = {"groups": [{"count": 1, "role": "prefill"}, {"count": 1, "role": "decode"}], "pd": {"bootstrap_s": 0.005}}


def test_pd_bootstrap_delays_the_prefill_and_a_full_decode_pool_makes_the_next_request_wait():
    from radixsim.run import request_rows

    fleet = copy.deepcopy(PD_1P1D)  # the decode pool: 24 pages, one 16-page prompt at a time
    fleet["groups"][1]["cache"] = {"l1_tokens": 1536, "hicache_ratio": None}
    f, env, *_ = simulate_fleet(scenario(fleet, workload__num_clients=2, workload__num_rounds=1))
    first, second = fleet_rows(f)
    decoded = {row["rid"]: row for row in request_rows(f.engines[1])}
    assert [first["bootstrap_s"], second["bootstrap_s"]] == pytest.approx([0.005, 0.005], abs=1e-15)
    assert first["prealloc_wait_s"] == 0.0
    # the second request's pages come free when the first's decode ends; only then its prefill starts
    assert second["prealloc_wait_s"] == pytest.approx(first["finish_s"] - second["arrival_s"] - 0.005, abs=1e-12)
    assert second["prealloc_wait_s"] > 0.4
    assert f.parts[second["rid"]]["prealloc_done_s"] == decoded[first["rid"]]["finish_s"]
    for r in (first, second):
        assert r["bootstrap_s"] + r["prealloc_wait_s"] + r["queue_s"] + r["load_s"] + r["compute_s"] == \
            pytest.approx(r["ttft_s"], abs=1e-12)


@pytest.mark.parametrize("radix", [True, False])
def test_pd_decode_radix_transfers_only_the_missing_suffix(radix):
    from scenarios.presets import bytes_per_token

    fleet = copy.deepcopy(PD_1P1D)
    fleet["pd"]["decode_radix"] = radix
    sc = scenario(fleet, workload__num_clients=1, workload__num_rounds=3)
    f, env, *_ = simulate_fleet(sc)
    rows = fleet_rows(f)
    bpt = bytes_per_token(sc.fleet.engines[0].model, "full")
    assert [r["prompt_tokens"] for r in rows] == [1024, 2064, 3104]  # each turn: the last + 16 output + 1024
    # decode radix: the decode engine holds the last turn's prompt + output in whole pages (1024, 2048)
    missing = [1024, 2064 - 1024, 3104 - 2048] if radix else [1024, 2064, 3104]
    assert [r["kv_bytes"] for r in rows] == [m * bpt for m in missing]
    assert [r["decode_cached_tokens"] for r in rows] == [1024, 2048, 3072]


def test_sweep_csv_carries_the_fleet_slo_goodput_and_load_balance_figures(tmp_path):
    import csv

    from radixsim.sweep import FLEET_FIGURES, LocalExecutor, parse_grid, run_sweep

    raw = copy.deepcopy(SMALL)
    raw["fleet"] = {"engines": 2, "slo_ttft_s": 0.2, "slo_tpot_s": 0.05}
    run_sweep(raw, parse_grid(["fleet.router=round_robin,cache_aware_exact"]), tmp_path / "s", executor=LocalExecutor(1),
              progress=False)
    with open(tmp_path / "s" / "sweep_points.csv") as fh:
        points = list(csv.DictReader(fh))
    with open(tmp_path / "s" / "sweep.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["fleet.router"] for r in rows] == ["round_robin", "cache_aware_exact"]
    for point, row in zip(points, rows):
        fleet = json.loads((tmp_path / "s" / point["dir"] / "summary.json").read_text())["fleet"]
        want = [fleet["slo_attainment"], fleet["goodput_rps"], fleet["goodput_tokens_per_s"], fleet["tpot_p90_s"],
                fleet["load_balance"]["requests"]["max_over_mean"], fleet["load_balance"]["requests"]["cv"],
                fleet["load_balance"]["busy_s"]["max_over_mean"]]
        assert [float(row[k]) for k in FLEET_FIGURES] == pytest.approx(want, rel=1e-12)
    assert float(rows[0]["load_requests_max_over_mean"]) == 1.0  # round robin: 12 requests on each engine


def test_pd_hybrid_swa_decode_engine_lands_full_and_window_kv():
    from scenarios.presets import bytes_per_token

    sc = scenario(PD_1P1D, model="gpt-oss-20b", cache__components="[full, swa]", workload__num_clients=1,
                  workload__num_rounds=3)
    assert sc.fleet.engines[1].cache.swa is not None
    f, env, *_ = simulate_fleet(sc)  # invariants.check on every engine's cache at the end
    rows = fleet_rows(f)
    model = sc.fleet.engines[0].model
    full, swa = bytes_per_token(model, "full"), bytes_per_token(model, "swa")
    assert model.swa_window_tokens == 128
    # the missing tokens' FULL KV plus the SWA KV of their last 128-token window
    assert [r["kv_bytes"] for r in rows] == [m * full + 128 * swa for m in (1024, 2064 - 1024, 3104 - 2048)]
    assert [r["decode_cached_tokens"] for r in rows] == [1024, 2048, 3072]  # the decode engine reuses it all


def test_the_fleet_progress_bar_counts_each_user_request_and_shows_the_simulated_time(monkeypatch):
    """The fleet's bar is `radixsim run`'s (run.progress_listener): one update per finished
    request, after the simulated time reached."""
    from radixsim import fleet_run

    calls = []
    bar = type("Bar", (), {"set_postfix_str": lambda self, text, refresh=True: calls.append(text[:10]),
                           "update": lambda self, n=1: calls.append(n), "close": lambda self: None})()
    monkeypatch.setattr(fleet_run, "progress_bar", lambda total, enabled, desc: bar if enabled else None)
    f, env, *_ = fleet_run.simulate_fleet(scenario(PD_1P1D, workload__num_clients=2, workload__num_rounds=2),
                                          progress=True)
    assert f.completed == 4 and calls == ["simulated ", 1] * 4


def test_recent_keys_touch_puts_a_prefix_leaf_first_and_trim_drops_the_least_recent():
    from fleet.routers.base import RecentKeys

    keys = RecentKeys()
    keys.touch([1, 2, 3])
    keys.touch([4, 2])
    assert list(keys) == [3, 1, 2, 4]  # least recently used first; a prefix's first key last
    keys.trim(None)
    assert list(keys) == [3, 1, 2, 4]
    keys.trim(2)
    assert list(keys) == [2, 4]



def test_pd_pre_allocation_locks_the_matched_prefix_before_it_evicts():
    """A 14-page decode pool with decode radix, two sessions of three turns: a later turn's
    pre-allocation, short of free pages, used to evict the very prefix it had matched (it
    locked the match only after evicting) and then lock a node no longer in the tree
    (AttributeError: 'NoneType' object has no attribute 'lock_ref'). The match is now locked
    first: what it holds is not evicted, and each turn sends only what the pool lacks."""
    from scenarios.presets import bytes_per_token

    fleet = copy.deepcopy(PD_1P1D)
    fleet["groups"][1]["cache"] = {"l1_tokens": 896, "hicache_ratio": None}
    sc = scenario(fleet, workload__num_clients=2, workload__num_rounds=3, workload__request_length=256)
    f, env, *_ = simulate_fleet(sc)  # invariants.check on every engine's cache at the end
    rows = fleet_rows(f)
    bpt = bytes_per_token(sc.fleet.engines[0].model, "full")
    assert [r["prompt_tokens"] for r in rows] == [256, 256, 528, 528, 800, 800]
    assert [r["kv_bytes"] / bpt for r in rows] == [256, 256, 272, 272, 544, 800]
    assert [r["decode_cached_tokens"] for r in rows] == [256, 256, 512, 512, 768, 768]


@pytest.mark.parametrize("pool_tokens, clients", [(2048, 2), (3072, 3)])
def test_pd_pre_allocation_keeps_room_for_the_decode_of_the_requests_it_holds(pool_tokens, clients):
    """16-page prompts on a decode pool of exactly `clients` x 16 pages: every request used to
    reserve its pages and land, and then none could be admitted for its first decode token (no
    page free or evictable; the run stopped with EngineStalled: 0 of N decoded). Pre-allocation
    now keeps the decode room of the requests holding KV there (pd.decode_room), so the last
    request waits until the first one's decode ends, and every request completes."""
    from radixsim.run import request_rows

    fleet = copy.deepcopy(PD_1P1D)
    fleet["groups"][1]["cache"] = {"l1_tokens": pool_tokens, "hicache_ratio": None}
    f, env, *_ = simulate_fleet(scenario(fleet, workload__num_clients=clients, workload__num_rounds=1))
    rows = fleet_rows(f)
    decoded = {row["rid"]: row for row in request_rows(f.engines[1])}
    assert f.completed == clients and sorted(decoded) == [r["rid"] for r in rows]
    assert [r["prealloc_wait_s"] == 0.0 for r in rows] == [True] * (clients - 1) + [False]
    assert f.parts[rows[-1]["rid"]]["prealloc_done_s"] == min(decoded[r["rid"]]["finish_s"] for r in rows[:-1])
    assert [r["decode_cached_tokens"] for r in rows] == [1024] * clients
    assert f.engines[1].counters["retractions"] == 0


def test_pd_reserve_keeps_the_room_asked_for_or_goes_alone_when_no_pool_could_keep_it():
    from cache_core.records import TokenSeq
    from fleet.pd import reserve

    fleet = copy.deepcopy(PD_1P1D)
    fleet["groups"][1]["cache"] = {"l1_tokens": 2048, "hicache_ratio": None}  # 32 pages
    f, env, *_ = simulate_fleet(scenario(fleet, workload__num_clients=1, workload__num_rounds=1))
    cache, seq = f.engines[1].cache, TokenSeq(np.arange(10**6, 10**6 + 1024, dtype=np.int64))
    first = reserve(cache, seq, 1024, False, keep=1024)  # 16 pages, 16 kept free: exactly the pool
    assert first is not None and len(first[1]) == 16
    assert cache.free_tokens + cache.full.evictable_tokens == 1024
    assert reserve(cache, seq, 1024, False, keep=1) is None  # its 16 pages would leave nothing
    # no pool keeps 10**9 tokens beside 16 pages: the request waits until it is alone there
    assert reserve(cache, seq, 1024, False, keep=10**9) is None
    cache.free(first[1])
    cache.unlock(first[0])
    alone = reserve(cache, seq, 1024, False, keep=10**9)
    assert alone is not None and len(alone[1]) == 16


def test_pd_timed_arrivals_finish_after_the_input_closes(tmp_path):
    """A timed trace closes its input right after the last arrival; a P/D request still on its
    way (bootstrap, pre-allocation, KV transfer) reaches the prefill and decode engines later,
    so they stay open until every user request is done (they used to close at once: the idle
    engines' loops ended and the last request stalled, 'the fleet finished 1 of 2')."""
    raw = copy.deepcopy(SMALL)
    raw["workload"] = {"kind": "trace", "path": _trace(tmp_path), "block_size": 64}
    raw["fleet"] = copy.deepcopy(PD_1P1D)
    f, env, *_ = simulate_fleet(resolve(raw, "test"))
    a, b = fleet_rows(f)
    assert f.completed == 2 and (a["rejected"], b["rejected"]) == (False, False)
    assert b["arrival_s"] == 20.0 and b["bootstrap_s"] == pytest.approx(0.005, abs=1e-12)
    assert b["decode_cached_tokens"] == 34 * 64 and b["finish_s"] > b["first_token_s"] > 20.005


def test_a_fleet_run_replaces_an_earlier_fleet_run_in_its_directory(tmp_path):
    """engines.csv and fleet.json are a run's files (outputs.RUN_FILES): running a fleet again
    into its directory replaces it (it used to refuse: 'holds files that are not radixsim
    results (engines.csv, fleet.json)')."""
    sc = scenario({"engines": 2})
    first = run_scenario(sc, tmp_path / "out", progress=False, plots=False)
    again = run_scenario(sc, tmp_path / "out", progress=False, plots=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.yaml", "engines.csv", "fleet.json", "requests.csv", "rounds.csv", "summary.json", "timeline.csv",
        "tree.json"]
    assert again["fleet"] == first["fleet"] and again["requests"] == 24
