"""Layer-wise loads overlapped with compute on the torch backend (issue 19 item 3, issue 28
item 3): with the engine's ``load_overlap: layerwise`` an L2 -> L1 load (FULL, SWA or MAMBA) is
left in flight; its pages move in a round, layer by layer in the model's order, each layer's
event recorded after them (`staging.LayerEvents`, reused across steps); the step's forward
waits for layer l's event just before layer l, then for the rest. Without overlap the loads of
a step still move in one round. On CPU the copies are synchronous (events emulated), so the
logits must be exactly those of copying each load at its submission."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_backend.dataplane import TorchDataPlane  # noqa: E402
from gpu_backend.model import Segment, SyntheticHybridModel  # noqa: E402
from gpu_backend.pools import KVPools  # noqa: E402
from gpu_backend.spec import HybridSpec  # noqa: E402
from radixsim.run import request_rows, simulate  # noqa: E402
from scenarios.scenario import resolve  # noqa: E402

LAYERS = 3
# the CUDA variants: parametrized only where CUDA exists (never a skipped test on CPU)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


pytestmark = pytest.mark.usefixtures("one_torch_thread")


HYBRID_CACHE = {"swa_tokens": 4096, "mamba_slots": 64}


def scenario(layout, overlap="layerwise", clock="modelled", device="cpu", model="qwen3-32b"):
    """A model (dense unless named: inkling-small is SWA + MAMBA), four clients at once, an L1 too
    small for their prefixes: L2 -> L1 loads."""
    return resolve({
        "seed": 3, "model": model, "hardware": "h200x1",
        "cache": {"page_size": 16, "l1_tokens": 640, "l2_tokens": 1536, "mem_fraction_static": 0.9,
                  **(HYBRID_CACHE if model != "qwen3-32b" else {})},
        "engine": {"max_running_requests": 4, "chunked_prefill_tokens": 64, "mixed_chunk": True,
                   "load_overlap": overlap},
        "workload": {"kind": "multiturn", "num_clients": 4, "num_rounds": 4, "request_length": 96,
                     "output_length": 4, "max_parallel": 4, "request_rate": "inf"},
        "torch": {"layers": LAYERS, "hidden": 32, "num_heads": 2, "head_dim": 8, "state_dim": 16, "vocab": 211,
                  "layout": layout,
                  "clock": clock, "device": device}})


def one_by_one(eng) -> None:
    """Every load copied and waited for at submission (neither overlapped nor batched)."""
    eng.dataplane.overlap = eng.dataplane.batch_loads = False


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
@pytest.mark.parametrize("model,loads", [("qwen3-32b", 44), ("inkling-small", 54)])
def test_overlapped_loads_give_exactly_the_logits_of_waiting_at_submission(model, loads, layout):
    """The same engine decisions; the data plane leaves the loads in flight (overlap) or waits
    for each when submitted (as with ``load_overlap: none``): bit-identical logits, for a dense
    model and an SWA + MAMBA hybrid (FULL, SWA and MAMBA loads in the rounds)."""
    sc = scenario(layout, model=model)
    eng, *_ = simulate(sc, backend="torch", record_logits=True)
    waited, *_ = simulate(sc, backend="torch", record_logits=True, setup=one_by_one)
    assert request_rows(eng) == request_rows(waited)
    assert eng.dataplane.overlapped == loads and waited.dataplane.overlapped == waited.dataplane.batched == 0
    assert not eng.dataplane.pending
    got, ref = eng.executor.positions, waited.executor.positions
    assert got.keys() == ref.keys() and len(got) == 16
    for rid in ref:
        assert [p for p, _ in got[rid]] == [p for p, _ in ref[rid]]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got[rid], ref[rid]))


@pytest.mark.parametrize("clock", ["modelled", "measured"])
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_load_overlap_none_batches_the_loads_of_a_step_with_the_logits_of_copying_each(layout, clock):
    """Without layer-wise overlap the loads are not left in flight for a forward, but still move
    together (issue 28 item 3): with a pace, those queued before a forward in one round; on the
    measured clock, those submitted at one instant. Same decisions (modelled clock) and
    bit-identical logits as copying each load at its submission, in fewer rounds than loads."""
    sc = scenario(layout, overlap="none", clock=clock, model="inkling-small")
    eng, *_ = simulate(sc, backend="torch", record_logits=True)
    plane = eng.dataplane
    assert plane.overlap is False and plane.overlapped == 0 and plane.pending == [] and plane._acks == []
    assert sum(r.cached_host for r in eng.finished) > 0  # loads ran
    assert 0 < plane.load_batches < plane.batched
    if clock == "modelled":
        each, *_ = simulate(sc, backend="torch", record_logits=True, setup=one_by_one)
        assert request_rows(eng) == request_rows(each)
        assert (plane.batched, plane.load_batches, each.dataplane.batched) == (54, 9, 0)
        got, ref = eng.executor.positions, each.executor.positions
        assert got.keys() == ref.keys() and len(got) == 16
        for rid in ref:
            assert [p for p, _ in got[rid]] == [p for p, _ in ref[rid]]
            assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got[rid], ref[rid]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("overlap", ["none", "layerwise"])
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_measured_clock_loads_of_one_instant_move_in_one_round_and_land_together(layout, overlap, device):
    """Measured clock, with or without overlap: three requests' loads (FULL, SWA, MAMBA)
    submitted at one instant move in ONE round just after it, all acknowledged at once when its
    measured time has passed, and the pools then equal those of copying each load at its
    submission."""
    import simpy
    from types import SimpleNamespace

    spec = HybridSpec(kinds=HYBRID, hidden=16, num_heads=2, head_dim=8, window=8, state_dim=4, vocab=31,
                      page_size=4)
    loads = [("full", [5, 6], [0, 1]), ("full", [2], [4]), ("swa", [7, 3], [2, 6]), ("mamba", [3], [1])]
    result = []
    for batch in (True, False):
        pools = KVPools(spec, full_pages={"L1": 8, "L2": 8}, swa_pages={"L1": 8, "L2": 8},
                        state_slots={"L1": 4, "L2": 4}, layout=layout, device=device)
        gen = torch.Generator().manual_seed(0)
        for comp in ("full", "swa", "state"):
            t = pools.tensor("L2", comp)
            t.copy_(torch.randn(t.shape, generator=gen))
        env = simpy.Environment()
        plane = TorchDataPlane(env, pools, overlap=overlap if batch else "none")
        plane.batch_loads = batch
        calls: list = []
        for tid, (comp, src, dst) in enumerate(loads):
            plane.submit(SimpleNamespace(id=tid, kind="load", component=comp, src_tier="L2", dst_tier="L1", src=src,
                                         dst=dst, bytes=len(src)), lambda i, ok: calls.append((i, ok, env.now)))
        if batch:
            assert plane.load_batches == 0 and not pools.tensor("L1", "full").any()
            assert (plane.batched, plane.overlapped) == ((4, 0) if overlap == "none" else (0, 4))
        env.run()
        plane.finish_loads()
        if batch:
            assert plane.load_batches == 1 and plane._acks == [] and plane._queued == {} and plane._landing == {}
            assert [c[:2] for c in calls] == [(i, True) for i in range(4)] and len({c[2] for c in calls}) == 1
        result.append([pools.tensor("L1", c).cpu() for c in ("full", "swa", "state")])
    assert all(torch.equal(a, b) for a, b in zip(*result))
    assert result[0][0].any() and result[0][1].any() and result[0][2].any()


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_the_forward_waits_for_every_layer_of_the_latest_round_in_order(layout, monkeypatch):
    """Every forward with loads in flight waits for each layer's event of the round that moved
    them, in order, before that layer: the 44 loads move in 9 rounds (one per forward: the pages
    of all its requests), whose event sets are reused in turn (SGLang's three)."""
    from gpu_backend.staging import LayerEvents

    log: list = []
    wait_until = LayerEvents.wait_until

    def logged(self, layer):
        log.append((self.consumer, layer))
        return wait_until(self, layer)

    monkeypatch.setattr(LayerEvents, "wait_until", logged)
    eng, *_ = simulate(scenario(layout), backend="torch")
    assert eng.dataplane.overlapped == 44 and eng.dataplane.load_batches == 9
    assert log == [(k % 3, layer) for k in range(9) for layer in range(LAYERS)]


def trace_events(monkeypatch, log: list, pooled_only: bool = False) -> None:
    """Log every layer event recorded ("complete") and waited for ("wait") and every layer's read
    of its pages ("read", layer index; `pooled_only`: reads of batches on the pools only)."""
    from gpu_backend.staging import LayerEvents

    complete, wait_until = LayerEvents.complete, LayerEvents.wait_until
    attention, recurrence = SyntheticHybridModel._attention, SyntheticHybridModel._recurrence

    def logged_complete(self, layer, stream=None):
        log.append(("complete", self.producer, layer))
        return complete(self, layer, stream)

    def logged_wait(self, layer):
        log.append(("wait", self.consumer, layer))
        return wait_until(self, layer)

    def read_attention(self, lw, h, b, layer, *rest):
        if not pooled_only or b.pools is not None:
            log.append(("read", layer))
        return attention(self, lw, h, b, layer, *rest)

    def read_state(self, lw, h, b, gi):
        if not pooled_only or b.pools is not None:
            log.append(("read", [i for i, k in enumerate(self.spec.kinds) if k == "rec"][gi]))
        return recurrence(self, lw, h, b, gi)

    monkeypatch.setattr(LayerEvents, "complete", logged_complete)
    monkeypatch.setattr(LayerEvents, "wait_until", logged_wait)
    monkeypatch.setattr(SyntheticHybridModel, "_attention", read_attention)
    monkeypatch.setattr(SyntheticHybridModel, "_recurrence", read_state)


HYBRID = ("swa", "rec", "full", "swa")  # layer_first: swa unit 1 is read by layer 3 only


def _traced_forward(layout, monkeypatch, device="cpu"):
    """A 4-layer SWA/MAMBA/FULL model, three queued loads (FULL, SWA, MAMBA) issued as one round,
    then one forward: the log of unit copies, layer events recorded, waits and layer reads."""
    from types import SimpleNamespace

    spec = HybridSpec(kinds=HYBRID, hidden=16, num_heads=2, head_dim=8, window=8, state_dim=4, vocab=31,
                      page_size=4)
    pools = KVPools(spec, full_pages={"L1": 8, "L2": 8}, swa_pages={"L1": 8, "L2": 8},
                    state_slots={"L1": 4, "L2": 4}, layout=layout, device=device)
    for comp in ("full", "swa", "state"):
        pools.tensor("L2", comp).normal_()
    model = SyntheticHybridModel(spec, seed=1, device=device)
    plane = TorchDataPlane(None, pools, pace=SimpleNamespace(submit=lambda t, cb: None), overlap="layerwise")
    log: list = []
    pools.staged.trace = log
    trace_events(monkeypatch, log)

    def load(tid, comp, src, dst):
        return SimpleNamespace(id=tid, kind="load", component=comp, src_tier="L2", dst_tier="L1", src=src, dst=dst,
                               bytes=len(src))

    plane.submit(load(1, "full", [5, 6], [0, 1]), None)
    plane.submit(load(2, "swa", [5, 6], [0, 1]), None)
    plane.submit(load(3, "mamba", [3], [1]), None)
    assert log == [] and plane.overlapped == 3
    seg = Segment([1, 2, 3, 4, 5], 8, [0, 1, 2, 3], [0, 1, 2, 3], 0, (), 1)  # resumes from slot 1's state
    logits = model.forward_batch([seg], pools, wait_layer=plane.layer_waiter())
    plane.finish_loads()
    assert plane.pending == [] and plane.layer_waiter() is None and plane.load_batches == 1
    for comp, si, di in (("full", [5, 6], [0, 1]), ("swa", [5, 6], [0, 1]), ("state", [3], [1])):
        got = pools.tensor("L1", comp).cpu().index_select(pools.page_dim, torch.tensor(di))
        assert torch.equal(got, pools.tensor("L2", comp).index_select(pools.page_dim, torch.tensor(si)))
    return log, logits


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_a_hybrid_round_copies_layer_by_layer_and_each_layer_waits_for_its_event(layout, device, monkeypatch):
    """FULL, SWA and MAMBA loads of one round move in the model's layer order, each layer's event
    recorded after the pages that layer reads (page_first: a pool's one block before the first
    layer reading it), and the forward waits for layer l's event just before reading layer l."""
    log, _ = _traced_forward(layout, monkeypatch, device)
    copies = {"page_first": [[("copy", "swa", 0)], [("copy", "state", 0)], [("copy", "full", 0)], []],
              "layer_first": [[("copy", "swa", 0)], [("copy", "state", 0)], [("copy", "full", 0)],
                              [("copy", "swa", 1)]]}[layout]
    want = []
    for layer in range(len(HYBRID)):
        want += copies[layer] + [("complete", 0, layer)]
    for layer in range(len(HYBRID)):
        want += [("wait", 0, layer), ("read", layer)]
    assert log == want


def test_a_mamba_state_resumed_from_a_loaded_slot_is_read_at_its_layer():
    """The forward resumes a state from `Segment.seed_slot` at the rec layer (after its load)
    instead of a copy into the scratch slot before layer 0: the logits equal those of seeding the
    scratch slot by a copy first."""
    spec = HybridSpec(kinds=HYBRID, hidden=16, num_heads=2, head_dim=8, window=8, state_dim=4, vocab=31,
                      page_size=4)
    model = SyntheticHybridModel(spec, seed=1)
    outs = []
    for seeded in (True, False):
        pools = KVPools(spec, full_pages=8, swa_pages=8, state_slots=4)
        gen = torch.Generator().manual_seed(0)
        for comp in ("full", "swa", "state"):
            t = pools.tensor("L1", comp)
            t.copy_(torch.randn(t.shape, generator=gen))
        if seeded:
            seg = Segment([1, 2, 3, 4, 5], 8, [0, 1, 2, 3], [0, 1, 2, 3], 0, (), 1)
        else:
            pools.copy_state("L1", [1], [0])
            seg = Segment([1, 2, 3, 4, 5], 8, [0, 1, 2, 3], [0, 1, 2, 3], 0)
        outs.append((model.forward_batch([seg], pools)[0], pools.tensor("L1", "state")[0].clone()))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert not torch.equal(outs[0][1], KVPools(spec, full_pages=8, swa_pages=8, state_slots=4).tensor("L1", "state")[0])


def test_the_deferred_loads_of_a_step_move_in_one_round(monkeypatch):
    """Two requests' loads queued for the next forward: one `StagedCopier.copy_round` with the
    pages of both (in submission order), issued when the forward asks for its waiter; an index
    out of range is refused at submission, before anything is queued."""
    from types import SimpleNamespace

    from gpu_backend.staging import PageIndexError

    spec = HybridSpec(kinds=("full",) * LAYERS, hidden=16, num_heads=2, head_dim=8, window=None,
                      state_dim=4, vocab=31, page_size=4)
    pools = KVPools(spec, full_pages={"L1": 8, "L2": 8})
    plane = TorchDataPlane(None, pools, pace=SimpleNamespace(submit=lambda t, cb: None), overlap="layerwise")
    rounds = []
    copy_round = type(pools.staged).copy_round

    def spy(self, items, layer_pools, events):
        rounds.append([(a, b, c, si.tolist(), di.tolist()) for a, b, c, si, di in items])
        return copy_round(self, items, layer_pools, events)

    monkeypatch.setattr(type(pools.staged), "copy_round", spy)

    def load(tid, src, dst):
        return SimpleNamespace(id=tid, kind="load", component="full", src_tier="L2", dst_tier="L1", src=src, dst=dst,
                               bytes=len(src))

    plane.submit(load(1, [5, 6], [0, 1]), None)
    plane.submit(load(2, [2], [4]), None)
    with pytest.raises(PageIndexError, match="destination index 8 out of range"):
        plane.submit(load(3, [3], [8]), None)
    assert rounds == [] and plane.overlapped == 2
    assert plane.layer_waiter() is not None
    assert rounds == [[("L2", "L1", "full", [5, 6, 2], [0, 1, 4])]] and plane.load_batches == 1
    plane.finish_loads()
    assert plane.pending == [] and plane.layer_waiter() is None and len(rounds) == 1


def unread_copies(log: list, spec, layout: str) -> dict:
    """Walk a log of ("copy", pool, unit), ("complete", set, layer), ("wait", set, layer),
    ("sync",) (the host waited for every load in flight) and ("read", layer) as CUDA events
    behave (a wait waits for its event's latest record before it): assert that every read of a
    pool unit at layer l follows, since the unit's last copy, a record of layer l's event and a
    wait for that record, or a sync. Returns per pool the reads checked."""
    synced = -1
    last_copy: dict = {}
    last_complete: dict = {}
    waited: dict = {}  # layer -> the latest log index of a record some wait covered
    checked: dict = {}
    for i, e in enumerate(log):
        if e[0] == "copy":
            last_copy[e[1], e[2]] = i
        elif e[0] == "complete":
            last_complete[e[1], e[2]] = i
        elif e[0] == "wait":
            waited[e[2]] = max(waited.get(e[2], -1), last_complete.get((e[1], e[2]), -1))
        elif e[0] == "sync":
            synced = i
        elif e[0] == "read":
            for pool, j in spec.pools_of_layer(e[1]):
                c = last_copy.get((pool, 0 if layout == "page_first" else j))
                if c is not None:
                    assert max(waited.get(e[1], -1), synced) > c, \
                        f"layer {e[1]} read {pool} before its load's event (log {i})"
                    checked[pool] = checked.get(pool, 0) + 1
    return checked


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
@pytest.mark.parametrize("model,pools", [("qwen3-32b", {"full"}), ("inkling-small", {"full", "swa", "state"})])
def test_measured_clock_a_layer_never_reads_a_page_before_its_event(model, pools, layout, device, monkeypatch):
    """On the measured clock loads overlap too, FULL, SWA and MAMBA alike: each load is issued at
    submission as one round (its pools' units in the model's layer order, each layer's event
    recorded after them; CPU: emulated events), and every layer of a forward reads a loaded page
    only after waiting for an event recorded after that page's copy (`unread_copies`)."""
    log: list = []
    trace_events(monkeypatch, log, pooled_only=True)
    wait_pending = TorchDataPlane._wait_pending

    def logged_sync(self):
        if self.pending:
            log.append(("sync",))
        return wait_pending(self)

    monkeypatch.setattr(TorchDataPlane, "_wait_pending", logged_sync)

    def traced(e):
        e.dataplane.staged.trace = log

    eng, *_ = simulate(scenario(layout, clock="measured", device=device, model=model), backend="torch", setup=traced)
    plane = eng.dataplane
    assert plane.overlap and plane.overlapped > 0 and plane.pending == [] and plane._landing == {}
    assert eng.executor.layers == round(LAYERS * eng.executor.layer_scale)  # the preset's layers
    checked = unread_copies(log, eng.executor.model.spec, layout)
    assert set(checked) == pools  # loaded pages of every kind were read (how many: timing-dependent)


def test_measured_clock_load_acknowledged_early_carries_its_landing_time():
    """`land` acknowledges an overlapped load before its copy's time has passed on the clock,
    with that time (the engine's overlap model uses it); its own landing then does nothing."""
    import simpy
    from types import SimpleNamespace

    spec = HybridSpec(kinds=("full",) * LAYERS, hidden=16, num_heads=2, head_dim=8, window=None,
                      state_dim=4, vocab=31, page_size=4)
    pools = KVPools(spec, full_pages={"L1": 8, "L2": 8})
    env = simpy.Environment()
    plane = TorchDataPlane(env, pools, layer_scale=1000.0, overlap="layerwise")
    calls: list = []
    t = SimpleNamespace(id=7, kind="load", component="full", src_tier="L2", dst_tier="L1", src=[5, 6], dst=[0, 1],
                        bytes=2)
    plane.submit(t, lambda *a: calls.append(a))
    assert calls == [] and plane.pending == [] and plane.overlapped == 1  # queued for this instant's round
    plane.land([7, 8])  # 8: not a load of this plane; the round moves first and is left in flight
    assert len(plane.pending) == 1 and plane.load_batches == 1 and plane._landing == {}
    (tid, ok, due), = calls
    assert (tid, ok) == (7, True) and due > 0
    env.run()
    assert calls == [(7, True, due)] and plane._landing == {}
    plane.finish_loads()
    for layer in range(LAYERS):
        assert torch.equal(pools.layer_view("L1", "full", layer)[:2], pools.layer_view("L2", "full", layer)[5:7])
