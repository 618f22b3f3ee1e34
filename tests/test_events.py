"""Fault what-ifs (issue 32 item 5): the `events:` timeline (link_slow, engine_down, l3_outage,
store_restart), its one-line refusals, each event's effect computed exactly on constructed
cases, and on runs: every request ends, invariants hold, no hit from a dead engine or store."""
import json
import types

import numpy as np
import pytest
import simpy

from helpers import run_main
from scenarios.events import Event, parse_events
from scenarios.scenario import ScenarioError, resolve
from sim.events import _links, check_within_run, event_table, start_events
from sim.links import Link, LinkSet


def test_a_slowed_link_finishes_a_transfer_exactly_when_hand_computed():
    env = simpy.Environment()
    ln = Link(env, "L3->L2", 100.0, 0.0)
    done = ln.transfer(1000)

    def slow():
        yield env.timeout(4.0)  # 400 bytes moved at 100 B/s; the other 600 at 25 B/s: 24 s more
        ln.set_bandwidth(25.0)
        yield env.timeout(8.0)  # 200 more at 25 B/s; the last 400 at 100 B/s: 4 s more
        ln.set_bandwidth(100.0)

    env.process(slow())
    env.run()
    assert done.value == pytest.approx(4.0 + 8.0 + 4.0)
    assert ln.bytes_done == 1000


def test_shared_links_are_slowed_once():
    env = simpy.Environment()
    shared = Link(env, "L3->L2", 100.0, 0.0)
    own = [LinkSet({("L2", "L1"): Link(env, "L2->L1", 50.0, 0.0), ("L3", "L2"): shared}) for _ in range(2)]
    engines = [types.SimpleNamespace(links=ls) for ls in own]
    ev = Event(1.0, "link_slow", "L3->L2", 4.0, 2.0, None)
    assert _links(engines, ev) == [shared]
    assert [ln.name for ln in _links(engines, Event(1.0, "link_slow", "L2->L1", 4.0, 2.0, 1))] == ["L2->L1"]
    assert _links(engines, Event(1.0, "link_slow", "L2->L1", 4.0, 2.0, 1))[0] is own[1].links[("L2", "L1")]
    stats = start_events(env, engines, [ev])
    env.run(until=2.0)
    assert shared.bandwidth_Bps == 25.0
    env.run()
    assert shared.bandwidth_Bps == 100.0 and stats == {0: {"started_s": 1.0, "links_slowed": 1, "ended_s": 3.0}}


BASE = {"model": "qwen3-32b", "hardware": "h200x1", "cache": {"page_size": 64, "l1_tokens": 60000, "hicache_ratio": 2},
        "workload": {"num_clients": 2, "num_rounds": 2, "request_length": 256, "output_length": 8}}
OK = {"at_s": 1, "kind": "link_slow", "link": "L2->L1", "factor": 4}


@pytest.mark.parametrize("event, message", [
    ({**OK, "kind": "store_restart"}, "events[0].link: unknown key of store_restart; expected at_s, kind"),
    ({**OK, "kind": "meteor"}, "events[0].kind: got 'meteor'; expected one of link_slow, engine_down, l3_outage, store_restart"),
    ({**OK, "at_s": -1}, "events[0].at_s: got -1; expected seconds >= 0"),
    ({**OK, "link": "PCIe"}, "events[0].link: got 'PCIe'; expected one of L2->L1, L1->L2, L3->L2, L2->L3, SSD->L3"),
    ({**OK, "factor": 0}, "events[0].factor: got 0; expected a number > 0"),
    ({**OK, "duration_s": -2}, "events[0].duration_s: got -2; expected seconds > 0 or null"),
    ({**OK, "engine": 1}, "events[0].engine: 1 names no engine; the run has 1 (expected 0..0 or null)"),
    ({**OK, "when": 3}, "events[0].when: unknown key of link_slow"),
])
def test_bad_events_are_refused_in_one_line(event, message):
    with pytest.raises(ScenarioError) as e:
        resolve({**BASE, "events": [OK, event][1:]}, "s.yaml")
    assert str(e.value).startswith("s.yaml: " + message)


def test_a_fleet_checks_the_engine_index_against_its_engines():
    raw = {**BASE, "fleet": {"engines": 2, "router": "round_robin"}}
    assert resolve({**raw, "events": [{**OK, "engine": 1}]}, "f.yaml").events[0].engine == 1
    with pytest.raises(ScenarioError, match=r"^f.yaml: events\[0\].engine: 2 names no engine; the run has 2"):
        resolve({**raw, "events": [{**OK, "engine": 2}]}, "f.yaml")


def test_no_events_leaves_config_and_summary_as_before():
    sc = resolve(dict(BASE), "s.yaml")
    assert sc.events == () and "events" not in sc.doc


def test_event_outside_the_run_is_refused_and_nothing_is_written(tmp_path, capsys):
    import yaml

    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**BASE, "events": [{**OK, "at_s": 5000}]}))
    rc, out, err = run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-progress",
                                     "--no-plots"])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "events[0].at_s: 5000 s is after the run (its last request finished at" in err
    assert not (tmp_path / "o").exists() and [p.name for p in tmp_path.iterdir()] == ["s.yaml"]


def test_check_within_run_and_the_table_hand_computed():
    rows = [{"arrival_s": a, "ttft_s": t, "finish_s": f} for a, t, f in
            [(0.0, 1.0, 2.0), (2.0, 3.0, 6.0), (3.0, 5.0, 9.0), (6.0, 1.0, 10.0)]]
    ev = Event(2.0, "link_slow", "L2->L1", 4.0, 3.0, None)
    check_within_run([ev], rows)
    with pytest.raises(ValueError, match=r"events\[0\].duration_s: the window 2-12 s ends after the run"):
        check_within_run([Event(2.0, "link_slow", "L2->L1", 4.0, 10.0, None)], rows)
    t = event_table([ev], rows, slo_ttft_s=2.0)[0]
    assert (t["before_requests"], t["during_requests"], t["after_requests"]) == (1, 2, 1)
    assert t["during_ttft_mean_s"] == 4.0 and t["during_slo_ttft"] == 0.0 and t["after_slo_ttft"] == 1.0
    assert t["end_s"] == 5.0 and t["label"] == "link_slow L2->L1 x4 on every engine, 2 s to 5 s"


def test_a_slowed_pcie_link_lengthens_the_loads_of_the_run(tmp_path, capsys):
    import yaml

    raw = {**BASE, "workload": {"num_clients": 16, "num_rounds": 6, "request_length": 2000, "output_length": 50,
                                "max_parallel": 8}}
    for name, extra in (("a", {}), ("b", {"events": [{**OK, "at_s": 5, "factor": 20, "duration_s": 10}]})):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**raw, **extra}))
        assert run_main(capsys, ["run", str(tmp_path / f"{name}.yaml"), "--out", str(tmp_path / name),
                                 "--no-progress", "--no-plots"])[0] == 0
    a, b = (json.loads((tmp_path / n / "summary.json").read_text()) for n in "ab")
    assert "events" not in a and len(b["events"]) == 1
    assert b["load_mean_s"] > 10 * a["load_mean_s"]
    ev = b["events"][0]
    assert ev["before_requests"] + ev["during_requests"] + ev["after_requests"] == b["requests"] == 96


# -- engine_down ---------------------------------------------------------------------------------
DOWN = """\
model: qwen3-32b
hardware: h200x1
cache: {page_size: 16, l1_tokens: 200000%s}
workload:
  kind: shared_prefix
  num_groups: 8
  num_prompts_per_group: 10
  system_prompt_len: 2000
  question_len: 200
  output_len: 100
  stages: [{rate: 8, duration: 30}]
fleet: {engines: 4, router: %s, slo_ttft_s: 0.5, slo_tpot_s: 0.1%s}
events:
  - {at_s: 10, kind: engine_down, engine: 1, duration_s: 8}
"""


@pytest.mark.parametrize("router, tiers, shared", [("round_robin", "", ""), ("cache_aware", "", ""), ("llm_d", "", ""),
                                                   ("least_load", ", l2_tokens: 400000, l3_tokens: 4000000",
                                                    ", shared_l3: true")])
def test_engine_down_retries_its_requests_and_comes_back_empty(tmp_path, capsys, router, tiers, shared):
    import csv

    (tmp_path / "s.yaml").write_text(DOWN % (tiers, router, shared))
    rc, _, err = run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-progress",
                                   "--no-plots"])
    assert rc == 0, err  # every request ended (check_finished) and invariants held on every engine
    rows = list(csv.DictReader(open(tmp_path / "o" / "requests.csv")))
    assert len(rows) == 240 and sorted(int(r["rid"]) for r in rows) == list(range(240))
    ev = json.loads((tmp_path / "o" / "fleet.json").read_text())["events"][0]
    retried = [r for r in rows if r["retries"] != "0"]
    assert ev["requests_retried"] == len(retried) > 0
    for r in retried:  # lost on engine 1 at 10 s: they arrived before, finished elsewhere after
        assert r["engine"] != "1" and float(r["arrival_s"]) < 10 < float(r["finish_s"])
    on1 = [r for r in rows if r["engine"] == "1"]
    # nothing finishes on engine 1 while it is down; after it is back only new arrivals reach it
    assert all(float(r["finish_s"]) <= 10 or float(r["arrival_s"]) >= 18 for r in on1)
    back = sorted((r for r in on1 if float(r["arrival_s"]) >= 18), key=lambda r: float(r["arrival_s"]))
    if router == "round_robin":
        assert back and int(back[0]["cached_device"]) == 0 and int(back[0]["cached_host"]) == 0  # empty caches
    assert ev["before_requests"] + ev["during_requests"] + ev["after_requests"] == 240
    assert ev["tokens_recomputed"] > 0 and ev["cache_tokens_lost"] > 0


def test_routers_never_pick_a_down_engine_and_forget_it_when_back():
    from types import SimpleNamespace

    import numpy as np

    from cache_core.records import TokenSeq
    from fleet.routers import make_router

    def req(rid, tokens):
        p = np.arange(tokens, dtype=np.int64)
        return SimpleNamespace(rid=rid, session_id=rid, prompt_tokens=tokens, output_length=4, seq=TokenSeq(p),
                               limit=None)

    for kind in ("round_robin", "least_load", "cache_aware", "kv_overlap", "session_affinity", "llm_d"):
        r = make_router({"kind": kind}, 3, page_size=4)
        if hasattr(r, "capacity_pages"):
            r.capacity_pages = [100] * 3
        if kind == "llm_d":  # its load scorers read the engines' queues and pools
            r = make_router({"kind": kind, "scorers": [{"type": "prefix-cache-scorer", "weight": 1}]}, 3, page_size=4)
        r.down = {1}
        picks = []
        for k in range(12):
            q = req(k, 16 + k)
            i = r.pick(q, float(k))
            r.routed(q, i, float(k))
            picks.append(i)
        assert 1 not in picks, kind
        if kind == "cache_aware":
            assert len(r.trees[0]) + len(r.trees[2]) > 0 and len(r.trees[1]) == 0
            r.trees[1].touch([1, 2])
            r.forget(1)
            assert len(r.trees[1]) == 0
    rr = make_router({"kind": "round_robin"}, 3, page_size=4)
    rr.down = {1}
    assert [rr.pick(None, 0.0) for _ in range(4)] == [0, 2, 0, 2]
    ll = make_router({"kind": "least_load"}, 3, page_size=4)
    q = req(0, 10)
    ll.routed(q, 2, 0.0)
    ll.failed(q, 2, 0.0)
    assert ll.outstanding == [0, 0, 0] and ll.outstanding_tokens == [0, 0, 0]


@pytest.mark.parametrize("fleet, events, message", [
    (None, [{"at_s": 1, "kind": "engine_down", "engine": 0}], "events[0].kind: engine_down needs a fleet"),
    ({"engines": 2, "router": "round_robin"}, [{"at_s": 1, "kind": "engine_down"}],
     "events[0].engine: got None; expected the index of the engine that goes down"),
    ({"engines": 2, "router": "round_robin"},
     [{"at_s": 1, "kind": "engine_down", "engine": 0, "duration_s": 5}, {"at_s": 3, "kind": "engine_down", "engine": 1}],
     "events[1]: at 3 s every engine would be down; expected at least one engine up"),
    ({"engines": 2, "router": "round_robin"}, [{"at_s": 1, "kind": "engine_down", "engine": 0, "factor": 2}],
     "events[0].factor: unknown key of engine_down"),
])
def test_bad_engine_down_events_are_refused(fleet, events, message):
    raw = {**BASE, "events": events, **({"fleet": fleet} if fleet else {})}
    with pytest.raises(ScenarioError) as e:
        resolve(raw, "s.yaml")
    assert str(e.value).startswith("s.yaml: " + message)


def test_engine_down_tells_the_router_each_lost_request_and_the_restart(tmp_path, capsys, monkeypatch):
    import csv

    from fleet.routers.base import Router
    from fleet.routers.cache_aware import CacheAware

    calls = []
    monkeypatch.setattr(Router, "failed", lambda self, req, i, now: calls.append(("failed", req.rid, i, now))
                        or Router.finished(self, req, i, now))
    forget = CacheAware.forget
    monkeypatch.setattr(CacheAware, "forget", lambda self, i: calls.append(("forget", i, len(self.trees[i])))
                        or forget(self, i))
    (tmp_path / "s.yaml").write_text(DOWN % ("", "cache_aware", ""))
    assert run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-progress",
                             "--no-plots"])[0] == 0
    rows = list(csv.DictReader(open(tmp_path / "o" / "requests.csv")))
    lost = sorted(int(r["rid"]) for r in rows if r["retries"] != "0")
    assert sorted(c[1] for c in calls if c[0] == "failed") == lost
    assert {(c[2], c[3]) for c in calls if c[0] == "failed"} == {(1, 10.0)}
    forgets = [c for c in calls if c[0] == "forget"]
    assert len(forgets) == 1 and forgets[0][1] == 1 and forgets[0][2] > 0  # it had learnt engine 1's prompts


# -- l3_outage and store_restart -----------------------------------------------------------------
def test_an_l3_transfer_fails_at_once_during_an_outage_and_moves_nothing():
    from cache_core.actions import Transfer
    from sim.simulator import SimDataPlane

    env = simpy.Environment()
    hw = types.SimpleNamespace(pcie_bytes_per_s=1e9, pcie_latency_s=0.0, l3_bytes_per_s=1e8, l3_latency_s=0.0,
                               l3_block_overhead_s=0.0, ssd_bytes_per_s=1e8, ssd_latency_s=0.0)
    plane = SimDataPlane(LinkSet.from_hardware(env, hw))
    acks = []
    read = Transfer(id=1, kind="prefetch", component="full", src_tier="L3", dst_tier="L2", tokens=64, bytes=1000,
                    src=None, dst=[0],
                    keys=np.array([5], dtype=np.int64))
    load = Transfer(id=2, kind="load", component="full", src_tier="L2", dst_tier="L1", tokens=64, bytes=1000,
                    src=[0], dst=[0])
    plane.l3_down = True
    plane.submit(read, lambda tid, ok: acks.append((env.now, tid, ok)))
    plane.submit(load, lambda tid, ok: acks.append((env.now, tid, ok)))
    env.run()
    assert acks == [(0.0, 1, False), (pytest.approx(1e-6), 2, True)]
    assert plane.l3_failed == {"read": 1, "write": 0}
    assert plane.links.links[("L3", "L2")].bytes_done == 0


def test_the_outage_rebuilds_the_index_and_a_restart_loses_it():
    from cache_core.tiers.store import MooncakeStore, StorageIndex
    from sim.events import _l3_outage, _store_restart

    env = simpy.Environment()
    store = StorageIndex(None)
    store.put_many([1, 2, 3, 4])
    eng = types.SimpleNamespace(cache=types.SimpleNamespace(hier=types.SimpleNamespace(storage=store)),
                                dataplane=types.SimpleNamespace(l3_down=False, l3_failed={"read": 0, "write": 0}))
    stats = {}
    env.process(_l3_outage(env, [eng, eng], Event(1.0, "l3_outage", None, 1.0, 2.0, None), stats))

    def fail_reads():
        yield env.timeout(2.0)
        assert eng.dataplane.l3_down
        store.discard([2, 3])  # two pages whose reads failed in the outage
        eng.dataplane.l3_failed["read"] += 1

    env.process(fail_reads())
    env.run()
    assert not eng.dataplane.l3_down and sorted(store.pages()) == [1, 2, 3, 4]
    assert stats == {"started_s": 1.0, "ended_s": 3.0, "l3_reads_failed": 2, "l3_writes_dropped": 0,
                     "l3_pages_restored": 2}  # one plane, listed twice: counted twice
    env.process(_store_restart(env, [eng], Event(4.0, "store_restart", None, 1.0, None, None), stats))
    env.run()
    assert len(store) == 0 and stats["l3_pages_lost"] == 4
    mc = MooncakeStore(100, objects_per_page=2)
    mc.put_many([7, 8])
    assert sorted(mc.pages()) == [7, 8]
    mc.clear()
    assert len(mc) == 0 and 7 not in mc


L3 = {**BASE, "cache": {"page_size": 64, "l1_tokens": 60000, "l2_tokens": 120000, "l3_tokens": 4000000},
      "workload": {"num_clients": 24, "num_rounds": 6, "request_length": 2000, "output_length": 50,
                   "max_parallel": 8}}


@pytest.mark.parametrize("raw, message", [
    ({**BASE, "events": [{"at_s": 1, "kind": "l3_outage", "duration_s": 3}]},
     "events[0].kind: l3_outage needs an L3 tier; expected a scenario with cache.l3_tokens"),
    ({**L3, "events": [{"at_s": 1, "kind": "l3_outage"}]}, "events[0].duration_s: missing; expected the outage's"),
    ({**L3, "events": [{"at_s": 1, "kind": "store_restart", "duration_s": 2}]},
     "events[0].duration_s: unknown key of store_restart"),
])
def test_bad_l3_events_are_refused(raw, message):
    with pytest.raises(ScenarioError) as e:
        resolve(raw, "s.yaml")
    assert str(e.value).startswith("s.yaml: " + message)


def test_l3_outage_and_restart_cost_storage_hits_and_every_request_ends(tmp_path, capsys):
    import yaml

    runs = {}
    for name, events in (("none", []), ("outage", [{"at_s": 20, "kind": "l3_outage", "duration_s": 15}]),
                         ("restart", [{"at_s": 20, "kind": "store_restart"}])):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**L3, **({"events": events} if events else {})}))
        assert run_main(capsys, ["run", str(tmp_path / f"{name}.yaml"), "--out", str(tmp_path / name),
                                 "--no-progress", "--no-plots"])[0] == 0  # every request ended, invariants held
        runs[name] = json.loads((tmp_path / name / "summary.json").read_text())
    assert all(s["requests"] == 144 for s in runs.values())
    assert runs["outage"]["hit_rate_storage"] < runs["none"]["hit_rate_storage"]
    assert runs["restart"]["hit_rate_storage"] < runs["none"]["hit_rate_storage"]
    out = runs["outage"]["events"][0]
    assert out["l3_reads_failed"] > 0 and out["l3_writes_dropped"] > 0 and out["l3_pages_restored"] > 0
    assert runs["restart"]["events"][0]["l3_pages_lost"] > 0


def test_timeline_and_report_show_each_event(tmp_path, capsys):
    import csv

    (tmp_path / "s.yaml").write_text(DOWN % ("", "round_robin", "") + "  - {at_s: 5, kind: link_slow, link: \"L2->L1\", "
                                     "factor: 2, duration_s: 10}\n")
    assert run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-progress"])[0] == 0
    rows = list(csv.DictReader(open(tmp_path / "o" / "timeline.csv")))
    for r in rows:
        t = float(r["t_s"])
        want = [str(i) for i, (a, b) in enumerate(((10, 18), (5, 15))) if a <= t < b]
        assert r["events"] == ";".join(want), t
    assert {r["events"] for r in rows} >= {"", "1", "0;1", "0"}
    html = (tmp_path / "o" / "report.html").read_text()
    assert "Fault events (before / during / after each window, by arrival)" in html
    assert "engine_down engine 1, 10 s to 18 s" in html and "link_slow L2-&gt;L1 x2 on every engine, 5 s to 15 s" in html
