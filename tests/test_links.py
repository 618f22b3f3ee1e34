"""sim.links: processor-shared links, exact against hand-computed times."""
import pytest
import simpy

from cache_core.actions import Transfer
from scenarios.presets import get_hardware
from sim.cost import transfer_time_s
from sim.links import DataPlane, Link, LinkSet, transfer_pages

approx = lambda x: pytest.approx(x)  # noqa: E731


def schedule(env, link, jobs):
    """jobs: [(submit_time, nbytes, pages), ...] -> dict index -> completion time (after run)."""
    out = {}

    def one(i, t, nbytes, pages):
        yield env.timeout(t)
        out[i] = yield link.transfer(nbytes, pages)
        assert out[i] == env.now

    for i, (t, nbytes, pages) in enumerate(jobs):
        env.process(one(i, t, nbytes, pages))
    return out


def run(jobs, bw=1000.0, lat=0.0, per_page=0.0, until=None):
    env = simpy.Environment()
    link = Link(env, "L2->L1", bw, lat, per_page)
    out = schedule(env, link, jobs)
    env.run(until=until)
    return env, link, out


def test_single_transfer_is_latency_plus_bytes_over_bandwidth():
    env, link, out = run([(0.0, 3000, 1)], bw=2000.0, lat=0.25)
    assert out[0] == approx(0.25 + 3000 / 2000)
    assert link.bytes_done == 3000
    assert link.active == 0 and link.in_flight == 0


def test_single_transfer_submitted_later():
    env, link, out = run([(2.0, 1000, 1)], bw=1000.0, lat=0.5)
    assert out[0] == approx(2.0 + 0.5 + 1.0)


def test_two_simultaneous_equal_transfers_share_bandwidth():
    env, link, out = run([(0.0, 1000, 1), (0.0, 1000, 1)], bw=1000.0, lat=0.25)
    assert out[0] == approx(0.25 + 2 * 1000 / 1000)
    assert out[1] == out[0]  # equal virtual tags: the same instant exactly


def test_unequal_simultaneous_transfers():
    # both at 500 B/s: the 1000 B one ends at 2.0 with the 3000 B one 2000 B short; alone it
    # then needs 2.0 s more -> 4.0 (= total bytes / bandwidth: the link is work-conserving)
    env, link, out = run([(0.0, 1000, 1), (0.0, 3000, 1)], bw=1000.0)
    assert out[0] == approx(2.0)
    assert out[1] == approx(4.0)


def test_arrival_halfway_through_another():
    # bw 1000 B/s, latency 0.25. A: 1000 B submitted at 0, bandwidth phase from 0.25, alone
    # until 0.75 -> 500 B left (halfway). B: 1000 B submitted at 0.5, bandwidth phase from
    # 0.75. Both at 500 B/s: A's 500 B take 1.0 s -> A ends at 1.75, when B has moved 500 B;
    # B's last 500 B alone take 0.5 s -> 2.25.
    env, link, out = run([(0.0, 1000, 1), (0.5, 1000, 1)], bw=1000.0, lat=0.25)
    assert out[0] == approx(1.75)
    assert out[1] == approx(2.25)


def test_arrival_during_latency_of_first_shares_nothing_until_it_starts():
    # B (submitted 0.75) enters the bandwidth phase at 1.0 with A 250 B short:
    # A ends at 1.0 + 250/500 = 1.5, with B 750 B short -> B ends at 1.5 + 0.75 = 2.25
    env, link, out = run([(0.0, 1000, 1), (0.75, 1000, 1)], bw=1000.0, lat=0.25)
    assert out[0] == approx(1.5)
    assert out[1] == approx(2.25)


def test_three_staggered_transfers():
    # bw 1000, no latency. A 2000 B at 0, B 1000 B at 1, C 600 B at 1.5.
    # [0,1): A alone, A left 1000.  [1,1.5): 2 share, 500 B/s each -> A 750, B 750.
    # [1.5, ..): 3 share at 1000/3: C (600) ends first after 1.8 s -> t = 3.3, A 150, B 150.
    # then A and B at 500 B/s: both end 0.3 s later -> 3.6 (= 3600 B / 1000 B/s).
    env, link, out = run([(0.0, 2000, 1), (1.0, 1000, 1), (1.5, 600, 1)], bw=1000.0)
    assert out[2] == approx(3.3)
    assert out[0] == approx(3.6)
    assert out[1] == approx(3.6)
    assert link.bytes_done == 3600


def test_per_page_overhead_adds_pages_times_per_page():
    env, link, out = run([(0.0, 1000, 4)], bw=1000.0, lat=0.25, per_page=0.125)
    assert out[0] == approx(0.25 + 4 * 0.125 + 1.0)
    # the per-page part is a fixed delay: it does not share bandwidth with another transfer
    env, link, out = run([(0.0, 1000, 8), (0.0, 1000, 0)], bw=1000.0, lat=0.0, per_page=0.25)
    assert out[1] == approx(1.0)          # alone: the other is still in its 2.0 s delay
    assert out[0] == approx(2.0 + 1.0)


def test_zero_bytes_complete_at_once():
    env, link, out = run([(1.0, 0, 3)], bw=1000.0, lat=0.5, per_page=0.1)
    assert out[0] == 1.0
    assert link.timeline() == [(0.0, 0)]


def test_utilisation_busy_time_and_timeline():
    # same schedule as test_arrival_halfway_through_another, then idle until 3.0:
    # busy (>= 1 in the bandwidth phase) over [0.25, 2.25]
    env, link, out = run([(0.0, 1000, 1), (0.5, 1000, 1)], bw=1000.0, lat=0.25, until=3.0)
    tl = link.timeline()
    assert [n for _, n in tl] == [0, 1, 2, 1, 0]
    assert [t for t, _ in tl] == [0.0, 0.25, 0.75, approx(1.75), approx(2.25)]
    assert link.busy_time_s == approx(2.0)
    assert link.bytes_done == 2000
    assert link.utilisation(0.0, 3.0) == approx(2.0 / 3.0)
    assert link.utilisation(0.5, 1.5) == approx(1.0)
    assert link.utilisation(0.0, 0.25) == 0.0
    assert link.utilisation(0.0, 0.5) == approx(0.5)
    assert link.utilisation(2.0, 3.0) == approx(0.25)
    assert link.utilisation(2.5, 3.0) == 0.0
    with pytest.raises(ValueError):
        link.utilisation(0.0, 4.0)  # beyond now
    with pytest.raises(ValueError):
        link.utilisation(1.0, 1.0)


def test_timeline_idle_gap_and_busy_time_while_running():
    env = simpy.Environment()
    link = Link(env, "L1->L2", 1000.0, 0.0)
    schedule(env, link, [(0.0, 500, 1), (2.0, 1000, 1)])
    env.run(until=2.5)
    assert link.busy_time_s == approx(0.5 + 0.5)  # the open busy period counts up to now
    assert link.utilisation(0.0, 2.5) == approx(1.0 / 2.5)
    env.run()
    # a change at the creation instant replaces the creation point (0.0, 0)
    assert link.timeline() == [(0.0, 1), (0.5, 0), (2.0, 1), (3.0, 0)]
    assert link.busy_time_s == approx(1.5)


def test_deterministic():
    jobs = [(0.0, 4096, 2), (0.1, 1 << 20, 16), (0.1, 12345, 3), (0.37, 777, 1), (0.5, 1 << 18, 4),
            (0.5, 1 << 18, 4), (1.25, 99999, 7)]
    a = run(jobs, bw=3.3e6, lat=1e-3, per_page=1e-4)
    b = run(jobs, bw=3.3e6, lat=1e-3, per_page=1e-4)
    assert a[2] == b[2]
    assert a[1].timeline() == b[1].timeline()
    assert a[1].bytes_done == b[1].bytes_done == sum(n for _, n, _ in jobs)
    # work conservation: the link is busy until all bytes are moved
    assert max(a[2].values()) >= 1.25 + 1e-3 + 7e-4 + 99999 / 3.3e6


def test_link_rejects_bad_arguments():
    env = simpy.Environment()
    with pytest.raises(ValueError):
        Link(env, "x", 0, 0)
    with pytest.raises(ValueError):
        Link(env, "x", 1.0, -1)
    link = Link(env, "x", 1.0, 0)
    with pytest.raises(ValueError):
        link.transfer(-1)
    with pytest.raises(ValueError):
        link.transfer(10, pages=1.5)


# -- DataPlane / LinkSet ---------------------------------------------------------------------

def _links(env):
    # distinct numbers per direction, so the completion time tells which link carried it
    return LinkSet({("L2", "L1"): Link(env, "L2->L1", 1000.0, 0.0),
                    ("L1", "L2"): Link(env, "L1->L2", 500.0, 0.0),
                    ("L3", "L2"): Link(env, "L3->L2", 250.0, 0.0, 0.5),
                    ("L2", "L3"): Link(env, "L2->L3", 125.0, 0.0, 0.25)})


def _t(i, kind, src, dst, nbytes=1000, keys=None, s=None, d=None):
    return Transfer(i, kind, "full", src, dst, 16, nbytes, s, d, keys)


@pytest.mark.parametrize("kind,src,dst,expected", [
    ("load", "L2", "L1", 1.0),
    ("backup", "L1", "L2", 2.0),
    ("prefetch", "L3", "L2", 4.0 + 2 * 0.5),    # 2 keys -> 2 pages
    ("store", "L2", "L3", 8.0 + 2 * 0.25),
])
def test_dataplane_routes_each_kind(kind, src, dst, expected):
    env = simpy.Environment()
    links = _links(env)
    dp = DataPlane(links)
    t = _t(1, kind, src, dst, keys=(b"k1", b"k2") if "L3" in (src, dst) else None,
           s=None if src == "L3" else (3, 4), d=None if dst == "L3" else (5, 6))
    assert dp.link_for(t) is links.get(src, dst)
    ev = dp.submit(t)
    env.run()
    assert ev.value == approx(expected)
    assert links.get(src, dst).bytes_done == 1000
    assert sum(lk.bytes_done for lk in links) == 1000


def test_dataplane_rejects_unknown_pairs_and_mismatched_kinds():
    env = simpy.Environment()
    dp = DataPlane(_links(env))
    with pytest.raises(ValueError, match="no link L1->L3"):
        dp.submit(_t(1, "spill", "L1", "L3"))
    with pytest.raises(ValueError, match="no link L1->L1"):
        dp.submit(_t(2, "copy", "L1", "L1"))
    with pytest.raises(ValueError, match="kind 'load'"):
        dp.submit(_t(3, "load", "L1", "L2"))
    with pytest.raises(ValueError):
        _links(env).get("L3", "L1")


def test_transfer_pages():
    assert transfer_pages(_t(1, "store", "L2", "L3", keys=(1, 2, 3), s=(7, 8, 9))) == 3
    assert transfer_pages(_t(1, "load", "L2", "L1", s=(1, 2), d=(3, 4))) == 2
    assert transfer_pages(_t(1, "load", "L2", "L1", s=5, d=6)) == 1


def test_linkset_from_hardware_uses_preset_numbers():
    env = simpy.Environment()
    hw = get_hardware("h200x1")
    ls = LinkSet.from_hardware(env, hw)
    for pair in (("L2", "L1"), ("L1", "L2")):
        link = ls.get(*pair)
        assert link.bandwidth_Bps == hw.pcie_bytes_per_s == hw.pcie_kernel_bytes_per_s == 35.2e9  # SGLang's default
        assert link.latency_s == hw.pcie_latency_s == 10e-6
        assert link.per_page_s == 0.0
        assert link.name == f"{pair[0]}->{pair[1]}"
    for pair in (("L3", "L2"), ("L2", "L3")):
        link = ls.get(*pair)
        assert link.bandwidth_Bps == hw.l3_bytes_per_s == 190e9
        assert link.latency_s == hw.l3_latency_s == 100e-6
        assert link.per_page_s == hw.l3_block_overhead_s == 0.52e-6
    assert (ls.ssd.bandwidth_Bps, ls.ssd.latency_s) == (hw.ssd_bytes_per_s, hw.ssd_latency_s) == (27e9, 100e-6)
    hw8 = get_hardware("h200x8")  # the PCIe links are one GPU's (each rank moves its shard on its own)
    assert LinkSet.from_hardware(env, hw8).get("L2", "L1").bandwidth_Bps == hw8.pcie_bytes_per_s
    assert LinkSet.from_hardware(env, hw8).get("L3", "L2").bandwidth_Bps == hw8.l3_bytes_per_s


def _one_rank_time(model: str, tp: int, kind="load", src="L2", dst="L1", tokens=4096) -> tuple:
    """(completion time, bytes on the link) of one transfer of `tokens` FULL tokens of `model`
    (the whole model's bytes, as the cache emits them) served at `tp` on h200x8."""
    from scenarios.presets import bytes_per_token, get_model, transfer_shards
    m, hw = get_model(model), get_hardware("h200x8")
    env = simpy.Environment()
    links = LinkSet.from_hardware(env, hw)
    dp = DataPlane(links, transfer_shards(m, tp))
    ev = dp.submit(Transfer(1, kind, "full", src, dst, tokens, int(tokens * bytes_per_token(m, "full")),
                            (1,), (2,)))
    env.run()
    return ev.value, links.get(src, dst).bytes_done


def test_tp2_gqa_transfer_takes_half_of_tp1():
    """Qwen3-32B (8 KV heads): at TP2 each rank moves half the heads over its own PCIe link at
    once, so the same tokens take half the time (+ one latency), and a link moves a rank's half."""
    hw = get_hardware("h200x8")
    full = 4096 * 262144  # 64 layers x 8 heads x 128 dims x 2 (K, V) x 2 B per token
    for kind, src, dst in (("load", "L2", "L1"), ("backup", "L1", "L2")):
        t1, b1 = _one_rank_time("qwen3-32b", 1, kind, src, dst)
        t2, b2 = _one_rank_time("qwen3-32b", 2, kind, src, dst)
        assert (b1, b2) == (full, full / 2)
        assert t1 == approx(hw.pcie_latency_s + full / hw.pcie_bytes_per_s)
        assert t2 - hw.pcie_latency_s == approx((t1 - hw.pcie_latency_s) / 2)
    t8, b8 = _one_rank_time("qwen3-32b", 8)
    assert b8 == full / 8


@pytest.mark.parametrize("model", ["deepseek-v3", "dsv4-flash"])
def test_replicated_latent_transfer_takes_the_same_time_at_tp8(model):
    """MLA / DeepSeek-V4: every rank holds and copies the whole latent over its own link, so TP8
    is not 8x faster than TP1: the same time, and each link moves the whole bytes."""
    from scenarios.presets import bytes_per_token, get_model
    hw = get_hardware("h200x8")
    full = int(4096 * bytes_per_token(get_model(model), "full"))
    t1, b1 = _one_rank_time(model, 1)
    t8, b8 = _one_rank_time(model, 8)
    assert t8 == t1 == approx(hw.pcie_latency_s + full / hw.pcie_bytes_per_s)
    assert b8 == b1 == full


def test_l3_transfers_move_the_whole_bytes_and_bad_shards_fail():
    env = simpy.Environment()
    links = _links(env)
    ev = DataPlane(links, {"full": 4}).submit(_t(1, "store", "L2", "L3", keys=(b"k1",)))
    env.run()
    assert ev.value == approx(8.0 + 0.25) and links.get("L2", "L3").bytes_done == 1000
    with pytest.raises(ValueError, match=r"shards\['full'\] must be an integer >= 1, got 0"):
        DataPlane(links, {"full": 0})


def test_lone_transfer_matches_cost_transfer_time():
    hw = get_hardware("h200x1")
    env = simpy.Environment()
    ls = LinkSet.from_hardware(env, hw)
    nbytes, pages = 64 << 20, 32
    pcie = ls.get("L2", "L1").transfer(nbytes)
    l3 = ls.get("L3", "L2").transfer(nbytes, pages)
    env.run()
    assert pcie.value == approx(transfer_time_s(hw, nbytes, "pcie"))
    assert l3.value == approx(transfer_time_s(hw, nbytes, "l3", blocks=pages))


def test_transfer_checks_its_bytes_and_pages():
    """Plain ints and finite floats >= 0 are accepted (a PCIe shard's bytes are a float);
    anything else is a one-line ValueError."""
    env = simpy.Environment()
    link = Link(env, "L", 1e9, 0.0)
    for nbytes in (float("nan"), float("inf"), -1.0, -1, True, "8"):
        with pytest.raises(ValueError, match=r"^transfer bytes must be a finite number >= 0, got "):
            link.transfer(nbytes)
    for pages in (-1, 1.0, True):
        with pytest.raises(ValueError, match=r"^pages must be an integer >= 0, got "):
            link.transfer(8, pages=pages)
    done = [link.transfer(500_000_000), link.transfer(1e9 / 2, pages=2)]
    env.run()
    assert [ev.value for ev in done] == [1.0, 1.0] and link.bytes_done == 1e9
