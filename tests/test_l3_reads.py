"""SGLang's L3 read path (sim/l3_reads.py, issue 29 item 2c): one prefetch at a time, one store
get per batch of pages in series, SSD-only pages read first per batch; hand-computed times."""
from __future__ import annotations

import pytest
import simpy

from cache_core.actions import L1, L2, L3, Transfer
from cache_core.engine_types import EngineConfig
from scenarios.scenario import ScenarioError, apply_sets, load, resolve, scenario_path
from sim.l3_reads import SerialL3Reads, batches
from sim.links import DataPlane, Link, LinkSet


def _plane(env, ssd=True):
    links = {(L3, L2): Link(env, "L3->L2", 1000.0, 0.5, 0.01), (L2, L3): Link(env, "L2->L3", 1000.0, 0.5, 0.01),
             (L2, L1): Link(env, "L2->L1", 1000.0, 0.0), (L1, L2): Link(env, "L1->L2", 1000.0, 0.0)}
    return DataPlane(LinkSet(links, Link(env, "SSD->L3", 100.0, 0.25) if ssd else None))


def _prefetch(tid, pages, nbytes, ssd_pages=0):
    return Transfer(id=tid, kind="prefetch", src_tier=L3, dst_tier=L2, component="full", tokens=pages * 64, bytes=nbytes,
                    keys=[b"k%d" % i for i in range(pages)], ssd_pages=ssd_pages)


def test_batches_split_pages_bytes_and_ssd_pages_exactly():
    assert batches(300, 3000, 0, 128) == [(128, 1280, 0), (128, 1280, 0), (44, 440, 0)]
    assert batches(10, 1001, 5, 4) == [(4, 400, 2), (4, 400, 2), (2, 201, 1)]
    assert sum(b for _, b, _ in batches(7, 999, 3, 2)) == 999
    assert batches(0, 0, 0, 128) == []


def test_one_prefetch_is_one_get_per_batch_in_series():
    env = simpy.Environment()
    plane = _plane(env)
    reads = SerialL3Reads(env, plane, 128)
    ev = plane.submit(_prefetch(1, 300, 3000))
    env.run()
    # each batch: 0.5 s latency + pages x 0.01 s + bytes / 1000 B/s, one after another
    t = (0.5 + 1.28 + 1.28) * 2 + (0.5 + 0.44 + 0.44)
    assert ev.value == pytest.approx(t, abs=1e-12)
    assert (reads.prefetches, reads.gets) == (1, 3)
    assert plane.links.get(L3, L2).bytes_done == 3000


def test_prefetches_wait_for_each_other_in_order():
    env = simpy.Environment()
    plane = _plane(env)
    reads = SerialL3Reads(env, plane, 128)
    a = plane.submit(_prefetch(1, 100, 1000))  # 0.5 + 1.0 + 1.0 = 2.5
    b = plane.submit(_prefetch(2, 100, 1000))  # waits, then 2.5 more
    env.run()
    assert (a.value, b.value) == (pytest.approx(2.5), pytest.approx(5.0))
    assert reads.wait_s == pytest.approx(2.5)
    # without the serial path they share the link: both in 0.5 + 1.0 + 2000 / 1000 = 3.5
    env2 = simpy.Environment()
    plane2 = _plane(env2)
    a2, b2 = plane2.submit(_prefetch(1, 100, 1000)), plane2.submit(_prefetch(2, 100, 1000))
    env2.run()
    assert (a2.value, b2.value) == (pytest.approx(3.5), pytest.approx(3.5))


def test_ssd_only_pages_are_read_on_the_ssd_link_before_each_batch():
    env = simpy.Environment()
    plane = _plane(env)
    SerialL3Reads(env, plane, 4)
    ev = plane.submit(_prefetch(1, 8, 800, ssd_pages=4))
    env.run()
    # per batch of 4 pages (400 B, 2 on SSD): SSD 0.25 + 200 / 100 = 2.25, then 0.5 + 0.04 + 0.4 = 0.94
    assert ev.value == pytest.approx(2 * (2.25 + 0.94), abs=1e-12)
    assert plane.links.ssd.bytes_done == 400


def test_other_transfers_are_unchanged():
    env = simpy.Environment()
    plane = _plane(env)
    reads = SerialL3Reads(env, plane, 2)
    store = Transfer(id=3, kind="store", src_tier=L2, dst_tier=L3, component="full", tokens=192, bytes=1000,
                     keys=[b"a", b"b", b"c"])
    ev = plane.submit(store)
    env.run()
    assert ev.value == pytest.approx(0.5 + 0.03 + 1.0)  # one transfer, as without the module
    assert reads.gets == 0


def test_the_key_is_checked_and_off_by_default():
    assert EngineConfig().l3_get_batch_pages is None
    with pytest.raises(ValueError, match="engine.l3_get_batch_pages"):
        EngineConfig(l3_get_batch_pages=0)
    raw = apply_sets(load(scenario_path("quickstart")), ["engine.l3_get_batch_pages=0"])
    with pytest.raises(ScenarioError, match="engine.l3_get_batch_pages"):
        resolve(raw, "x.yaml")
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        SerialL3Reads(simpy.Environment(), _plane(simpy.Environment()), 0)
