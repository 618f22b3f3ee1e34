"""The engine loop (cache_core/engine.py) under the SimPy plug-ins: exact admission, chunking,
retraction, prefix sharing and tier behaviour, and equality with replay when serial."""
from __future__ import annotations

import numpy as np
import pytest
import simpy

from cache_core import CacheConfig, RadixCache, ReplayStepper, invariants
from cache_core.config import MambaConfig, SwaConfig
from cache_core.engine import Engine
from cache_core.engine_types import EngineConfig, EngineRequest
from radixsim.run import request_rows
from cache_core.records import TokenSeq
from cache_core.tiers import TierConfig
from scenarios.presets import get_hardware
from sim.cost import RooflineCostModel
from sim.simulator import build, timed_arrivals

COST = RooflineCostModel("qwen3-32b", "h200x1", 1)
HW = get_hardware("h200x1")


def make(cfg: CacheConfig, layers: int = 1, **eng):
    env = simpy.Environment()
    cache = RadixCache(cfg, record_actions=True, auto_ack=cfg.tiers is None)
    e = build(env, cache, EngineConfig(**eng), COST, HW, layers=layers)
    steps = []
    orig = e.executor.execute

    def spy(step):
        steps.append(step)
        yield from orig(step)

    e.executor.execute = spy
    return env, cache, e, steps


def req(rid, prompt, out_len, session=None, output=None):
    prompt = np.asarray(prompt, dtype=np.int64)
    if output is None:
        output = -(np.arange(out_len, dtype=np.int64) + 1 + 1000 * rid)  # fresh tokens
    seq = TokenSeq(np.concatenate([prompt, output[: max(len(output) - 1, 0)]]))
    return EngineRequest(rid=rid, session_id=session, prompt=prompt, output_length=len(output), arrival_s=0.0,
                         seq=seq)


def run(env, e, timed):
    """Serve `timed` to the end; every request must finish (EngineStalled names the ones that
    did not), the cache keep its invariants and every result row's times add up."""
    env.process(timed_arrivals(env, e, timed))
    env.process(e.loop())
    env.run()
    e.check_finished()
    invariants.check(e.cache)
    check_times(e)
    return {r.rid: r for r in e.finished}


def check_times(e) -> None:
    """Each result row: queue_s + load_s + compute_s = ttft_s with every part >= 0 (compute
    > 0: a first token takes a step), and load time only where the request waited for a
    transfer (host or storage hits loaded, or held at the prefetch gate)."""
    reqs = {r.rid: r for r in e.finished}
    for row in request_rows(e):
        r = reqs[row["rid"]]
        if row["ttft_s"] is None:
            assert r.rejected and "queue_s" not in row, row
            continue
        q, ld, c = row["queue_s"], row["load_s"], row["compute_s"]
        assert q >= 0 and ld >= 0 and c > 0, row
        assert q + ld + c == pytest.approx(row["ttft_s"], rel=1e-12, abs=1e-12), row
        assert ld == 0 or r.cached_host + r.cached_storage > 0 or r.prefetch_wait_s > 0, row


# -- serial engine == replay -----------------------------------------------------------------------
def _conversation(seed, n_sessions=4, rounds=5, L=37, O=5):
    rng = np.random.default_rng(seed)
    hist = {s: np.empty(0, dtype=np.int64) for s in range(n_sessions)}
    items = []
    for r in range(rounds):
        for s in rng.permutation(n_sessions):
            new = rng.integers(0, 50, size=L) + 100 * s
            prompt = np.concatenate([hist[s], new])
            out = rng.integers(0, 50, size=O) + 100 * s + 10_000
            hist[s] = np.concatenate([prompt, out])
            items.append((int(s), prompt, out))
    return items


@pytest.mark.parametrize("kind", ["full", "swa", "mamba", "swa+mamba"])
@pytest.mark.parametrize("seed", [1, 2])
def test_serial_engine_caches_exactly_what_replay_caches(kind, seed):
    P = 4
    kw = {}
    if "swa" in kind:
        kw["swa"] = SwaConfig(window_tokens=16, capacity_tokens=160)
    if "mamba" in kind:
        kw["mamba"] = MambaConfig(slots=12)
    cfg = CacheConfig(page_size=P, capacity_tokens=600, **kw)
    items = _conversation(seed)
    rc = RadixCache(cfg)
    rs = ReplayStepper(rc)
    expect = [rs.step(p, o, session_id=s).cached_tokens for s, p, o in items]
    env, cache, e, _ = make(cfg, max_running_requests=1, chunked_prefill_tokens=None)
    timed = [(float(i), req(i, p, len(o), s, o)) for i, (s, p, o) in enumerate(items)]
    got = run(env, e, timed)
    assert [got[i].cached_tokens for i in range(len(items))] == expect
    assert sum(expect) > 0 and e.counters["retractions"] == 0


def test_serial_engine_equals_replay_on_exact_page_aligned_repeats():
    """The engine matches at most fill_len - 1 tokens (one token is always computed), cut to
    whole pages, as replay does. Prompts repeated exactly, of a page-aligned length (64: the
    cap floors to 48) and one token longer (65: the cap is exactly 64), tell a cap one token
    larger or smaller apart."""
    P = 16
    cfg = CacheConfig(page_size=P, capacity_tokens=2_000)
    out = np.array([-1], dtype=np.int64)  # one output token: the cached sequence is the prompt itself
    items = [(0, np.arange(64)), (0, np.arange(64)), (1, np.arange(65) + 100), (1, np.arange(65) + 100),
             (2, np.arange(128) + 300), (2, np.arange(129) + 300)]
    rs = ReplayStepper(RadixCache(cfg))
    expect = [rs.step(p, out, session_id=s).cached_tokens for s, p in items]
    assert expect == [0, 48, 0, 64, 0, 128]
    env, cache, e, _ = make(cfg, max_running_requests=1, chunked_prefill_tokens=None)
    got = run(env, e, [(float(i), req(i, p, 1, s, out)) for i, (s, p) in enumerate(items)])
    assert [got[i].cached_tokens for i in range(len(items))] == expect


def test_decode_retraction_after_the_first_token_keeps_its_times():
    """A request retracted while decoding re-prefills later; its TTFT parts are those of its
    first token (before the fix its load_s ran until the re-prefill: compute_s < 0)."""
    env, cache, e, steps = make(CacheConfig(page_size=4, capacity_tokens=200), max_running_requests=2,
                                chunked_prefill_tokens=None, new_token_ratio=0.0)
    got = run(env, e, [(0.0, req(0, np.arange(60), 60)), (0.0, req(1, np.arange(60) + 500, 60))])
    r = got[1]
    assert (r.retracted, got[0].retracted) == (1, 0)
    assert r.ready_s == r.admit_s == got[0].first_token_s > 0  # admitted when rid 0's prefill step ended
    row = {x["rid"]: x for x in request_rows(e)}[1]
    assert (row["queue_s"], row["load_s"]) == (r.admit_s, 0.0)
    assert row["compute_s"] == row["ttft_s"] - r.admit_s == r.first_token_s - r.admit_s


# -- chunked prefill -------------------------------------------------------------------------------
def test_chunked_prefill_splits_at_the_chunk_size_and_first_token_after_last_chunk():
    env, cache, e, steps = make(CacheConfig(page_size=16, capacity_tokens=10_000),
                                max_running_requests=4, chunked_prefill_tokens=256, max_prefill_tokens=4096)
    got = run(env, e, [(0.0, req(0, np.arange(1000), 3))])
    prefill = [[(r.rid, new, ctx) for r, new, ctx in s.prefill] for s in steps if s.prefill]
    assert prefill == [[(0, 256, 0)], [(0, 256, 256)], [(0, 256, 512)], [(0, 232, 768)]]
    assert [len(s.decode) for s in steps if not s.prefill] == [1, 1]  # 3 outputs: 1 from prefill + 2 decodes
    r = got[0]
    assert r.first_token_s == pytest.approx(sum(COST.step_time_s(s.prefill_cost, ()) for s in steps[:4]))
    assert r.generated_tokens == 3 and cache.cached_tokens_total == 1000 // 16 * 16


def test_max_running_requests_bounds_the_batch():
    env, cache, e, steps = make(CacheConfig(page_size=1, capacity_tokens=100_000), max_running_requests=2,
                                chunked_prefill_tokens=None)
    got = run(env, e, [(0.0, req(i, np.arange(50) + 1000 * i, 4)) for i in range(5)])
    assert len(got) == 5
    for s in steps:
        assert len(s.prefill) + len(s.decode) <= 2
    assert max(t[1] for t in e.timeline) <= 2
    # fcfs: admitted in rid order, two at a time
    firsts = sorted(got.values(), key=lambda r: r.admit_s)
    assert [r.rid for r in firsts] == [0, 1, 2, 3, 4]


def test_same_step_requests_compute_a_shared_prefix_once():
    env, cache, e, steps = make(CacheConfig(page_size=8, capacity_tokens=10_000), max_running_requests=4,
                                chunked_prefill_tokens=None)
    prompt = np.arange(200)
    run(env, e, [(0.0, req(0, prompt, 2)), (0.0, req(1, np.concatenate([prompt, [7, 7, 7]]), 2))])
    first = next(s for s in steps if s.prefill)
    assert [(r.rid, new) for r, new, _ in first.prefill] == [(0, 200), (1, 203)]
    # 200 // 8 = 25 shared pages: the second request is priced for its 3 extra tokens + the tail page
    assert first.prefill_cost == ((200, 0), (203 - 200, 200))
    assert e.counters["shared_prefill_tokens"] == 200


def test_decode_out_of_memory_retracts_and_everything_still_finishes():
    # two requests decode 60 tokens each; L1 cannot hold both full sequences
    env, cache, e, steps = make(CacheConfig(page_size=4, capacity_tokens=200), max_running_requests=2,
                                chunked_prefill_tokens=None, new_token_ratio=0.0)
    got = run(env, e, [(0.0, req(0, np.arange(60), 60)), (0.0, req(1, np.arange(60) + 500, 60))])
    assert e.counters["retractions"] >= 1
    assert sorted(got) == [0, 1] and all(r.generated_tokens == 60 for r in got.values())
    assert sum(r.retracted for r in got.values()) == e.counters["retractions"]


def test_request_that_can_never_fit_is_rejected_at_arrival():
    env, cache, e, _ = make(CacheConfig(page_size=4, capacity_tokens=64), max_running_requests=2,
                            chunked_prefill_tokens=None)
    got = run(env, e, [(0.0, req(0, np.arange(100), 2)), (0.0, req(1, np.arange(20), 2))])
    assert got[0].rejected and got[0].first_token_s is None
    assert not got[1].rejected and got[1].generated_tokens == 2


def test_lpm_admits_the_longest_cached_prefix_first():
    cfg = CacheConfig(page_size=4, capacity_tokens=10_000)
    env, cache, e, steps = make(cfg, max_running_requests=1, chunked_prefill_tokens=None, schedule_policy="lpm")
    warm = np.arange(400)
    timed = [(0.0, req(0, warm, 1))]
    # after the warm-up finishes, three arrive together; rid 3 shares the longest prefix
    timed += [(50.0, req(1, np.arange(40) + 9000, 1)), (50.0, req(2, np.concatenate([warm[:100], [1] * 8]), 1)),
              (50.0, req(3, np.concatenate([warm[:300], [2] * 8]), 1))]
    got = run(env, e, timed)
    order = [r.rid for r in sorted(got.values(), key=lambda r: r.admit_s) if r.rid]
    assert order == [3, 2, 1]
    assert got[3].cached_tokens == 300 and got[2].cached_tokens == 100


# -- tiers --------------------------------------------------------------------------------------------
def _tiered(prefetch):
    tiers = TierConfig(hicache_ratio=2, l3=True, kv_bytes_per_token=200_000, min_prefetch_tokens=16)
    return CacheConfig(page_size=16, capacity_tokens=2_000, tiers=tiers), prefetch


@pytest.mark.parametrize("prefetch,overlap", [("wait_complete", "none"), ("wait_complete", "layerwise"),
                                              ("best_effort", "layerwise")])
def test_l3_hit_after_l1_and_l2_lost_the_prefix(prefetch, overlap):
    cfg, _ = _tiered(prefetch)
    env, cache, e, _ = make(cfg, max_running_requests=1, chunked_prefill_tokens=None, prefetch_policy=prefetch,
                            load_overlap=overlap)
    base = np.arange(960)
    timed = [(0.0, req(0, base, 2))]
    # flood L1 (2k) and L2 (4k) with unrelated prompts, then come back to `base`
    timed += [(10.0 + i, req(1 + i, np.arange(960) + 10_000 * (i + 1), 2)) for i in range(8)]
    timed += [(100.0, req(99, np.concatenate([base, [5] * 40]), 2))]
    got = run(env, e, timed)
    back = got[99]
    if prefetch == "wait_complete":
        assert back.cached_storage == 960 and back.cached_tokens == 960
        assert back.prefetch_wait_s > 0  # L3 -> L2, then L2 -> L1: waited for (none) or overlapped
        if overlap == "none":
            assert back.ready_s > back.admit_s
        else:  # it computes while its L2 -> L1 loads land: the exposed part adds to load_s
            assert back.ready_s == back.admit_s and back.load_s > back.prefetch_wait_s
    else:  # scheduled at once: the prefetch had not landed, the request computes everything
        assert (back.cached_tokens, back.prefetch_wait_s, back.load_s) == (0, 0.0, 0.0)
        assert cache.hier.tokens_moved["L3->L2"] == 960  # the prefetch still ran, in the background
    assert e.inflight == 0


def test_host_hits_are_loaded_before_the_request_computes():
    """load_overlap none: the request waits in `loading` for its whole load, then computes."""
    tiers = TierConfig(hicache_ratio=4, kv_bytes_per_token=1_000_000)
    cfg = CacheConfig(page_size=16, capacity_tokens=1_024, tiers=tiers)
    env, cache, e, steps = make(cfg, max_running_requests=1, chunked_prefill_tokens=None, load_overlap="none")
    base = np.arange(640)
    timed = [(0.0, req(0, base, 2)), (5.0, req(1, np.arange(640) + 5000, 2)),
             (10.0, req(2, np.concatenate([base, [3] * 30]), 2))]
    got = run(env, e, timed)
    r = got[2]
    assert r.cached_host == 640 and r.cached_device == 0 and r.cached_tokens == 640
    assert r.ready_s - r.admit_s >= 640 * 1_000_000 / (HW.pcie_bytes_per_s) - 1e-9  # the load's bytes on PCIe
    step = next(s for s in steps if s.prefill and s.prefill[0][0].rid == 2)
    assert step.prefill[0][1:] == (30, 640)  # computes only the new tokens over the loaded context


@pytest.mark.parametrize("kv_bytes", [1_000_000, 10_000_000])  # load T < compute C, then T > C
@pytest.mark.parametrize("overlap", ["none", "layerwise"])
def test_host_hit_load_overlapped_with_compute_per_layer(overlap, kv_bytes):
    """A lone request with 640 host-hit tokens and 30 new ones, on qwen3-32b (L = 64 layers):
    `none` loads then computes, TTFT = T + C; `layerwise` computes while the load lands,
    TTFT = max(T/L + C, T + C/L) (engine.overlap_end_s), the exposed part being load_s."""
    L = COST.model.num_layers
    tiers = TierConfig(hicache_ratio=4, kv_bytes_per_token=kv_bytes)
    cfg = CacheConfig(page_size=16, capacity_tokens=1_024, tiers=tiers)
    env, cache, e, steps = make(cfg, layers=L, max_running_requests=1, chunked_prefill_tokens=None,
                                load_overlap=overlap)
    timed = [(0.0, req(0, np.arange(640), 2)), (5.0, req(1, np.arange(640) + 5000, 2)),
             (10.0, req(2, np.concatenate([np.arange(640), [3] * 30]), 2))]
    r = run(env, e, timed)[2]
    T = HW.pcie_latency_s + 640 * kv_bytes / HW.pcie_bytes_per_s
    C = COST.step_time_s(((30, 640),), ())
    assert (L, r.cached_host, r.admit_s, r.queue_s) == (64, 640, 10.0, 0.0)
    if overlap == "none":
        ttft, load = T + C, T
    else:
        ttft = max(T / L + C, T + C / L)
        load = ttft - C
        assert ttft < T + C and r.ready_s == r.admit_s
    assert r.first_token_s - r.arrival_s == pytest.approx(ttft, rel=1e-12)
    assert r.load_s == pytest.approx(load, rel=1e-9)
    step = next(s for s in steps if s.prefill and s.prefill[0][0].rid == 2)
    assert step.prefill[0][1:] == (30, 640)  # computes only the new tokens over the (loading) context


@pytest.mark.parametrize("l3", [False, True])
@pytest.mark.parametrize("comp", ["swa", "mamba", "swa+mamba"])
def test_hybrid_host_hit_is_cheaper_overlapped_than_loaded_then_computed(comp, l3):
    """The same lone host hit (640 tokens + 30 new) on a FULL+SWA or FULL+MAMBA cache: `none`
    waits for its loads (FULL pages and the SWA window's pages or the MAMBA state, round after
    round), T = ready - admit, then computes C; `layerwise` joins the step at once and the same
    loads, issued in one round (the payloads with the FULL pages: one link latency less,
    T1 = T - latency), land per layer: TTFT = max(T1/L + C, T1 + C/L) < T + C, the same
    prefix reused. With an L3 tier too (write-through stores on their own link): the same."""
    L = COST.model.num_layers
    extra = {}
    if "swa" in comp:
        extra["swa"] = SwaConfig(window_tokens=64, capacity_tokens=1_024)
    if "mamba" in comp:
        extra["mamba"] = MambaConfig(slots=8)
    tiers = TierConfig(hicache_ratio=4, kv_bytes_per_token=1_000_000, swa_bytes_per_token=200_000,
                       state_bytes=50_000_000, l3=l3)
    got = {}
    for overlap in ("none", "layerwise"):
        cfg = CacheConfig(page_size=16, capacity_tokens=1_024, tiers=tiers, **extra)
        env, cache, e, steps = make(cfg, layers=L, max_running_requests=1, chunked_prefill_tokens=None,
                                    load_overlap=overlap)
        timed = [(0.0, req(0, np.arange(640), 2)), (5.0, req(1, np.arange(640) + 5000, 2)),
                 (10.0, req(2, np.concatenate([np.arange(640), [3] * 30]), 2))]
        r = run(env, e, timed)[2]
        step = next(s for s in steps if s.prefill and s.prefill[0][0].rid == 2)
        copies = cache.mamba.copies if "mamba" in comp else None  # the checkpoint copied once loaded
        got[overlap] = (r, step.prefill[0][1:], cache.hier.tokens_moved["L2->L1"], copies)
    (slow, slow_step, moved, copies), (fast, fast_step, moved2, copies2) = got["none"], got["layerwise"]
    assert (slow.cached_host, fast.cached_host, slow_step, fast_step, moved) == (640, 640, (30, 640), (30, 640), moved2)
    assert copies == copies2 and (comp == "swa" or copies == 1)
    assert (slow.cached_storage, fast.cached_storage) == (0, 0)
    T = slow.ready_s - slow.admit_s
    C = slow.first_token_s - slow.ready_s
    assert T > 0 and C > 0 and fast.ready_s == fast.admit_s == slow.admit_s == 10.0
    T1 = T - HW.pcie_latency_s
    ttft = max(T1 / L + C, T1 + C / L)
    assert fast.first_token_s - fast.arrival_s == pytest.approx(ttft, rel=1e-9) and ttft < T + C
    assert fast.load_s == pytest.approx(ttft - C, rel=1e-9)


def test_overlapped_hybrid_load_with_l3_keeps_its_prefix_under_pool_pressure():
    """FULL+SWA+MAMBA with L2 and L3, a lone host hit (640 tokens + 30 new) overlapped with its
    compute. Right after it started (it took its own SWA pages and state slots), the pools are
    squeezed while its loads are in flight: L2 drops every SWA page / checkpoint copy L3 holds
    (l3_copies.py) and other requests take every L1 SWA page and state slot (evicting what is
    unlocked). The crash condition of the Inkling figure-4 L3 run: a window planned for a
    second round found no L1 room (or its L2 copy gone) once the request had started
    ("overlapped loads left 0 of its ... prefix tokens"). Now its window's pages and its
    checkpoint load with its FULL pages in one round (L1 slots taken at plan time) and its
    prefix stays locked until they land: it reuses all 640 tokens from L2, overlapped."""
    L = COST.model.num_layers
    tiers = TierConfig(hicache_ratio=4, kv_bytes_per_token=1_000_000, swa_bytes_per_token=200_000,
                       state_bytes=50_000_000, l3=True)
    cfg = CacheConfig(page_size=16, capacity_tokens=1_024, tiers=tiers,
                      swa=SwaConfig(window_tokens=64, capacity_tokens=1_024), mamba=MambaConfig(slots=8))
    env, cache, e, steps = make(cfg, layers=L, max_running_requests=1, chunked_prefill_tokens=None)
    taken = {}

    def squeeze():  # r started at 10.0; its FULL pages take 18.2 ms on the link, all its loads 19.9 ms
        yield env.timeout(10.001)
        swa, mamba = cache.swa, cache.mamba
        taken["dropped"] = swa.l3_copies.drop(swa.host_pool.capacity_pages) + mamba.l3_copies.drop(8)
        swa.evict(swa.pool.capacity_pages)
        mamba.evict(8)
        taken["swa"], taken["mamba"] = swa.pool.alloc(swa.pool.free_pages), mamba.pool.alloc(mamba.pool.free_pages)
        taken["inflight"] = [e.inflight]
        yield env.timeout(0.0175)  # past the FULL pages' landing (when a second round was planned)
        taken["inflight"].append(e.inflight)
        swa.pool.free(taken["swa"])
        mamba.pool.free(taken["mamba"])
        e.clock.kick()  # a request waiting for room may go on

    env.process(squeeze())
    timed = [(0.0, req(0, np.arange(640), 2)), (5.0, req(1, np.arange(640) + 5000, 2)),
             (10.0, req(2, np.concatenate([np.arange(640), [3] * 30]), 2))]
    r = run(env, e, timed)[2]
    # the squeeze dropped copies and took pages, and lasted while its loads were in flight
    assert taken["dropped"] > 0 and len(taken["swa"]) > 0 and min(taken["inflight"]) > 0
    assert (r.cached_tokens, r.cached_host, r.cached_storage, r.ready_s, r.admit_s) == (640, 640, 0, 10.0, 10.0)
    step = next(s for s in steps if s.prefill and s.prefill[0][0].rid == 2)
    assert step.prefill[0][1:] == (30, 640)
    # its FULL pages, its window's SWA pages and its checkpoint, each loaded once
    assert cache.hier.bytes_moved["L2->L1"] == 640 * 1_000_000 + 64 * 200_000 + 50_000_000


def test_overlap_end_s_two_loads():
    """Two loads in one step: the later first layer and the later last load decide."""
    from cache_core.engine import overlap_end_s
    assert overlap_end_s(1.0, 0.4, [(1.0, 1.8), (0.6, 1.2)], 4) == pytest.approx(max(1.4, 1.2 + 0.4, 1.8 + 0.1))
    assert overlap_end_s(1.0, 4.0, [(1.0, 1.8), (0.6, 1.2)], 4) == pytest.approx(1.0 + 0.2 + 4.0)
    assert overlap_end_s(1.0, 4.0, [(0.0, 0.5)], 64) == 5.0  # landed before the step: no stall


def test_engine_requires_recorded_actions():
    cache = RadixCache(CacheConfig(page_size=1, capacity_tokens=10))
    with pytest.raises(ValueError, match="record_actions"):
        Engine(cache, EngineConfig(), None, None, None)


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "dfs-weight", "random"])
def test_every_schedule_policy_serves_a_shared_prefix_workload(policy):
    """Few-shot shape: 12 requests share a 256-token prefix; max running 3. Every policy
    finishes all of them, keeps the invariants and reuses the prefix (the first request
    computes it; the ones admitted after it finished reuse all 256 tokens)."""
    env, cache, e, steps = make(CacheConfig(page_size=16, capacity_tokens=4_000), max_running_requests=3,
                                chunked_prefill_tokens=None, schedule_policy=policy, seed=7)
    shared = np.arange(256)
    timed = [(0.01 * i, req(i, np.concatenate([shared, np.arange(40) + 1000 * (i + 1)]), 3)) for i in range(12)]
    got = run(env, e, timed)
    assert len(got) == 12 and all(r.generated_tokens == 3 for r in got.values())
    assert sum(r.cached_tokens == 256 for r in got.values()) >= 9
    assert max(len(s.prefill) + len(s.decode) for s in steps) <= 3


def test_hybrid_l3_scenario_is_byte_identical_across_runs(tmp_path):
    """FULL+SWA+MAMBA with L2 and L3 (the figure-4 Inkling scenario, reduced): two runs with
    the same seed write identical requests, rounds, timeline and summary files."""
    from radixsim.cli import main

    # L2 = L1: with the default ratio 2 the reduced working set fits L2 (SWA/MAMBA L2 pools drop
    # copies L3 holds), and L3 would never be read
    sets = ["--set", "workload.num_clients=8", "--set", "workload.num_rounds=6", "--set", "cache.l1_tokens=40000",
            "--set", "cache.max_total_tokens=null", "--set", "cache.l3_tokens=200000", "--set", "cache.hicache_ratio=1"]
    for d in ("a", "b"):
        assert main(["run", "fig4-inkling-small-l3", *sets, "--out", str(tmp_path / d), "--no-plots",
                     "--no-progress"]) == 0
    for f in ("requests.csv", "rounds.csv", "timeline.csv", "summary.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    import json

    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert s["requests"] == 48 and s["hit_rate_storage"] > 0 and s["bytes_per_link"]["L2->L3"] > 0


def test_prefill_budget_is_typed_and_charges_whole_pages():
    from types import SimpleNamespace

    from cache_core.engine_steps import PrefillBudget

    b = PrefillBudget(tokens=100, chunk=40, page_size=16)
    r = SimpleNamespace(fill_len=90, computed_tokens=0)
    assert b.room() == 40 and b.portion(r) == 32  # chunked: whole pages of the room
    b.take(r, 32)
    assert (b.tokens, b.chunk, b.room(), b.entries) == (68, 8, 8, [(r, 32)])
    r2 = SimpleNamespace(fill_len=5, computed_tokens=0)
    b.take(r2, 5)  # 5 new tokens are charged as one page
    assert (b.tokens, b.chunk, b.room()) == (52, -8, -8)
    nb = PrefillBudget(tokens=100, chunk=None, page_size=16)
    assert nb.portion(SimpleNamespace(fill_len=500, computed_tokens=0)) == 500 and nb.room() == 100


def test_step_builder_and_loader_do_not_hold_the_engine():
    """They get narrow collaborators (cache, config, queues, clock, ...); the only ways back
    into the engine are two bound methods: a finished request, and the stall check."""
    _, cache, e, _ = make(CacheConfig(page_size=4, capacity_tokens=256))
    held = {type(part).__name__: sorted(k for k, v in vars(part).items() if v is e) for part in (e.builder, e.loader)}
    assert held == {"StepBuilder": [], "Loader": []}
    callbacks = {type(part).__name__: sorted(k for k, v in vars(part).items() if getattr(v, "__self__", None) is e)
                 for part in (e.builder, e.loader)}
    assert callbacks == {"StepBuilder": ["on_nothing_to_run"], "Loader": ["on_done"]}
    assert (e.builder.cache, e.loader.cache, e.builder.q, e.loader.q) == (cache, cache, e.queues, e.queues)
