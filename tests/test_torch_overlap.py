"""Layer-wise loads overlapped with compute on the torch backend (issue 19 item 3): with the
engine's ``load_overlap: layerwise`` (and the modelled clock) an L2 -> L1 load of a FULL-only
model is left in flight when submitted; the step's forward waits for each layer's pages just
before that layer (``page_first``: once, before layer 0), then for the rest. On CPU the copies
are synchronous, so the logits must be exactly those of waiting at submission."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_backend.dataplane import TorchDataPlane  # noqa: E402
from gpu_backend.model import Segment, SyntheticHybridModel  # noqa: E402
from gpu_backend.pools import KVPools  # noqa: E402
from gpu_backend.spec import HybridSpec  # noqa: E402
from gpu_backend.staging import StagedHandle  # noqa: E402
from radixsim.run import request_rows, simulate  # noqa: E402
from scenarios.scenario import resolve  # noqa: E402

LAYERS = 3


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def scenario(layout, overlap="layerwise", clock="modelled", device="cpu"):
    """A dense model, four clients at once, an L1 too small for their prefixes: L2 -> L1 loads."""
    return resolve({
        "seed": 3, "model": "qwen3-32b", "hardware": "h200x1",
        "cache": {"page_size": 16, "l1_tokens": 640, "l2_tokens": 1536, "mem_fraction_static": 0.9},
        "engine": {"max_running_requests": 4, "chunked_prefill_tokens": 64, "mixed_chunk": True,
                   "load_overlap": overlap},
        "workload": {"kind": "multiturn", "num_clients": 4, "num_rounds": 4, "request_length": 96,
                     "output_length": 4, "max_parallel": 4, "request_rate": "inf"},
        "torch": {"layers": LAYERS, "hidden": 32, "num_heads": 2, "head_dim": 8, "vocab": 211, "layout": layout,
                  "clock": clock, "device": device}})


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_overlapped_loads_give_exactly_the_logits_of_waiting_at_submission(layout):
    """The same engine decisions; the data plane leaves the loads in flight (overlap) or waits
    for each when submitted (as with ``load_overlap: none``): bit-identical logits."""
    sc = scenario(layout)
    eng, *_ = simulate(sc, backend="torch", record_logits=True)
    waited, *_ = simulate(sc, backend="torch", record_logits=True,
                          setup=lambda e: setattr(e.dataplane, "overlap", False))
    assert request_rows(eng) == request_rows(waited)
    assert eng.dataplane.overlapped == 44 and waited.dataplane.overlapped == 0
    assert not eng.dataplane.pending
    got, ref = eng.executor.positions, waited.executor.positions
    assert got.keys() == ref.keys() and len(got) == 16
    for rid in ref:
        assert [p for p, _ in got[rid]] == [p for p, _ in ref[rid]]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got[rid], ref[rid]))


def test_load_overlap_none_waits_at_submission():
    eng, *_ = simulate(scenario("layer_first", overlap="none"), backend="torch")
    assert eng.dataplane.overlap is False and eng.dataplane.overlapped == 0
    assert sum(r.cached_host for r in eng.finished) > 0  # loads ran


@pytest.mark.parametrize("layout,calls", [("layer_first", list(range(LAYERS))), ("page_first", [0])])
def test_the_forward_waits_for_every_pending_load_layer_by_layer_in_order(layout, calls, monkeypatch):
    """Every load left in flight is waited for by exactly one forward: layer_first, each layer
    once, in order, before that layer; page_first, once before layer 0. The 44 loads move in 9
    copies: before each forward, the pages of all its requests' loads in one."""
    log: dict = {}

    def wait_layer(self, layer):
        log.setdefault(id(self), (self, []))[1].append(layer)

    monkeypatch.setattr(StagedHandle, "wait_layer", wait_layer)
    eng, *_ = simulate(scenario(layout), backend="torch")
    assert eng.dataplane.overlapped == 44 and eng.dataplane.load_batches == 9
    assert [calls_ for _, calls_ in log.values()] == [calls] * 9


class _Handle:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def wait_layer(self, layer):
        self.log.append((self.name, layer))

    def synchronize(self):
        self.log.append((self.name, "sync"))


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_layer_waiter_runs_before_each_layer_reads_the_pools(layout, monkeypatch):
    """Two pending loads (fake handles): before layer l's attention, both are waited for
    (layer_first: every layer; page_first: layer 0 only); finish_loads then synchronizes both."""
    spec = HybridSpec(kinds=("full",) * LAYERS, hidden=16, num_heads=2, head_dim=8, window=None,
                      state_dim=4, vocab=31, page_size=4)
    pools = KVPools(spec, full_pages={"L1": 8, "L2": 8}, layout=layout)
    model = SyntheticHybridModel(spec, seed=1)
    plane = TorchDataPlane(None, pools, pace=object(), overlap="layerwise")
    assert plane.overlap
    log: list = []
    plane.pending = [_Handle(log, "a"), _Handle(log, "b")]
    attention = SyntheticHybridModel._attention

    def logged(self, lw, h, b, layer, *rest):
        log.append(("attention", layer))
        return attention(self, lw, h, b, layer, *rest)

    monkeypatch.setattr(SyntheticHybridModel, "_attention", logged)
    model.forward_batch([Segment([1, 2, 3, 4, 5], 0, [0, 1])], pools, wait_layer=plane.layer_waiter())
    plane.finish_loads()
    waits = range(LAYERS) if layout == "layer_first" else [0]
    want = []
    for layer in range(LAYERS):
        want += [("a", layer), ("b", layer)] if layer in waits else []
        want.append(("attention", layer))
    assert log == want + [("a", "sync"), ("b", "sync")]
    assert plane.pending == [] and plane.layer_waiter() is None


def test_the_deferred_loads_of_a_step_move_in_one_copy_per_pool(monkeypatch):
    """Two requests' loads queued for the next forward: one `StagedCopier.copy` with the pages of
    both (in submission order), issued when the forward asks for its waiter; an index out of
    range is refused at submission, before anything is queued."""
    from types import SimpleNamespace

    from gpu_backend.staging import PageIndexError

    spec = HybridSpec(kinds=("full",) * LAYERS, hidden=16, num_heads=2, head_dim=8, window=None,
                      state_dim=4, vocab=31, page_size=4)
    pools = KVPools(spec, full_pages={"L1": 8, "L2": 8})
    plane = TorchDataPlane(None, pools, pace=SimpleNamespace(submit=lambda t, cb: None), overlap="layerwise")
    copies = []
    copy = type(pools.staged).copy

    def spy(self, a, b, c, si, di):
        copies.append((a, b, c, list(si), list(di)))
        return copy(self, a, b, c, si, di)

    monkeypatch.setattr(type(pools.staged), "copy", spy)

    def load(tid, src, dst):
        return SimpleNamespace(id=tid, kind="load", component="full", src_tier="L2", dst_tier="L1", src=src, dst=dst,
                               bytes=len(src))

    plane.submit(load(1, [5, 6], [0, 1]), None)
    plane.submit(load(2, [2], [4]), None)
    with pytest.raises(PageIndexError, match="destination index 8 out of range"):
        plane.submit(load(3, [3], [8]), None)
    assert copies == [] and plane.overlapped == 2
    assert plane.layer_waiter() is not None
    assert copies == [("L2", "L1", "full", [5, 6, 2], [0, 1, 4])] and plane.load_batches == 1
    plane.finish_loads()
    assert plane.pending == [] and plane.layer_waiter() is None and len(copies) == 1


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_measured_clock_a_layer_never_reads_a_page_before_its_event(layout, device, monkeypatch):
    """On the measured clock loads overlap too (issue 28: `TorchExecutor.layers` was None there):
    each is issued at submission and left in flight, and in every forward each load pending at
    its start is waited for (its event, on a GPU; layer_first: one per layer) just before the
    layer that reads its pages, never after (page_first: all layers before layer 0)."""
    from gpu_backend.dataplane import TorchDataPlane as Plane

    log: list = []
    waiter = Plane.layer_waiter

    def logged_waiter(self):
        log.append(("forward", tuple(id(h) for h in self.pending)))
        return waiter(self)

    def wait_layer(self, layer):
        log.append(("wait", id(self), layer))

    attention = SyntheticHybridModel._attention

    def logged(self, lw, h, b, layer, *rest):
        log.append(("attention", layer))
        return attention(self, lw, h, b, layer, *rest)

    monkeypatch.setattr(Plane, "layer_waiter", logged_waiter)
    monkeypatch.setattr(StagedHandle, "wait_layer", wait_layer)
    monkeypatch.setattr(SyntheticHybridModel, "_attention", logged)
    eng, *_ = simulate(scenario(layout, clock="measured", device=device), backend="torch")
    plane = eng.dataplane
    assert plane.overlap and plane.overlapped > 0 and plane.pending == [] and plane._landing == {}
    assert eng.executor.layers == round(LAYERS * eng.executor.layer_scale) == 64  # Qwen3-32B's layers
    forwards = [i for i, e in enumerate(log) if e[0] == "forward"] + [len(log)]
    with_loads = 0
    for a, b in zip(forwards, forwards[1:]):
        pending = log[a][1]
        with_loads += bool(pending)
        want = []
        for layer in range(LAYERS):
            if layout == "layer_first" or layer == 0:
                want += [("wait", h, layer) for h in pending]
            want.append(("attention", layer))
        assert log[a + 1:b] == want
    assert with_loads > 0  # (9 here in 4 runs; how many depends on the measured timing)


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
    assert calls == [] and len(plane.pending) == 1 and plane.overlapped == 1  # issued, in flight
    due = plane._landing[7][0]
    assert due > 0
    plane.land([7, 8])  # 8: not a load of this plane
    assert calls == [(7, True, due)]
    env.run()
    assert calls == [(7, True, due)] and plane._landing == {}
    plane.finish_loads()
    for layer in range(LAYERS):
        assert torch.equal(pools.layer_view("L1", "full", layer)[:2], pools.layer_view("L2", "full", layer)[5:7])
