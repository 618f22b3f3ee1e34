"""The torch executor is timed as SGLang's engine would be (issue 28 items 1 and 2): host time
once per step, only the layers' device time scaled to the preset's layers; every index tensor of
a forward built before layer 0 and sent in one upload; page indices checked before any kernel;
attention through unmasked SDPA calls where the shapes allow, equal to the masked reference."""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

import gpu_backend.executor as executor_mod  # noqa: E402
from gpu_backend import batch as batch_mod  # noqa: E402
from gpu_backend.model import PageIndexError, Segment, SyntheticHybridModel  # noqa: E402
from gpu_backend.pools import KVPools  # noqa: E402
from gpu_backend.spec import HybridSpec  # noqa: E402
from radixsim.run import simulate  # noqa: E402
from scenarios.scenario import resolve  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

P, W = 4, 8


def spec(kinds=("swa", "full", "swa", "full")):
    return HybridSpec(kinds=kinds, hidden=32, num_heads=2, head_dim=16, window=W, state_dim=16, vocab=97, page_size=P)


def toks(n, seed):
    return torch.randint(0, 97, (n,), generator=torch.Generator().manual_seed(seed))


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    thread_time = perf_counter


def constructed_clock(monkeypatch) -> FakeClock:
    """The executor's clock, advanced 0.25 s by each step's host part (the batch's page tables
    and index math) and 0.125 s by each layer's MLP; nothing else takes time."""
    clock = FakeClock()
    monkeypatch.setattr(executor_mod, "time", clock)
    batch_init, mlp = batch_mod.Batch.__init__, SyntheticHybridModel._mlp

    def host(self, *a, **k):
        clock.now += 0.25
        return batch_init(self, *a, **k)

    def layer(self, *a):
        clock.now += 0.125
        return mlp(self, *a)

    monkeypatch.setattr(batch_mod.Batch, "__init__", host)
    monkeypatch.setattr(SyntheticHybridModel, "_mlp", layer)
    return clock


def test_layer_scaling_leaves_host_time_unscaled(monkeypatch):
    """A constructed clock: the host part of every step (page tables and the batch's index
    math) takes 0.25 s, each of the 3 layers' MLP 0.125 s, nothing else takes time. With the
    preset's 64 layers (scale 64/3) a step lasts 0.25 + 3 x 0.125 x 64/3 = 8.25 s (scaling the
    whole step would give 0.625 x 64/3 = 13.33 s). The first step is preceded by an untimed
    warm-up forward without pools."""
    constructed_clock(monkeypatch)
    forwards = []
    fb = SyntheticHybridModel.forward_batch

    def forward(self, segs, pools=None, **k):
        forwards.append(pools is None)
        return fb(self, segs, pools, **k)

    monkeypatch.setattr(SyntheticHybridModel, "forward_batch", forward)
    sc = resolve({"seed": 5, "model": "qwen3-32b", "hardware": "h200x1",
                  "cache": {"page_size": 16, "l1_tokens": 2048, "mem_fraction_static": 0.9},
                  "engine": {"max_running_requests": 1, "chunked_prefill_tokens": 64},
                  "workload": {"kind": "multiturn", "num_clients": 1, "num_rounds": 1, "request_length": 96,
                               "output_length": 5, "max_parallel": 1, "request_rate": "inf"},
                  "torch": {"layers": 3, "hidden": 32, "num_heads": 2, "head_dim": 8, "vocab": 211,
                            "clock": "measured"}})
    eng, *_ = simulate(sc, backend="torch")
    ex = eng.executor
    assert ex.layer_scale == 64 / 3 and ex.steps == 6  # 2 chunks + 4 decodes
    assert [(t.host, t.ends, t.layers) for t in ex.times] == [(0.25, 0.0, 0.375)] * 6
    (r,) = eng.finished
    assert r.finish_s == pytest.approx(6 * 8.25, rel=1e-12)
    assert ex.busy_s == pytest.approx(6 * 0.625, rel=1e-12)  # measured, unscaled
    assert forwards == [True] + [False] * 6  # an untimed warm-up without pools, then the steps


def test_the_step_table_is_timed_as_the_executor_times_steps(monkeypatch):
    """`measure_table` (what `radixsim calibrate --kind steps` writes) times a step as the
    executor does: host 0.25 s once, 4 layers x 0.125 s times the scale 10: 5.25 s (the whole
    forward scaled would be 7.5 s)."""
    from gpu_backend.calibrate import measure_table

    constructed_clock(monkeypatch)
    model = SyntheticHybridModel(spec(), seed=3)
    got = measure_table(model, prefill_tokens=(4,), cached=(0, 4), batches=(2,), contexts=(8,), repeats=1, scale=10)
    assert got == {"prefill": [[4, 0, 5.25], [4, 4, 5.25]], "decode": [[2, 8, 5.25]]}


def test_the_step_table_takes_its_points_in_turns_each_after_a_forward_of_its_own(monkeypatch):
    """`measure_table`'s forwards: `repeats` rounds, each point once per round in order (prefill
    points, then decode points), each timed forward right after an untimed one of the same point;
    the point is the median of its rounds (constructed times 1, 5, 3 for the first point: 3)."""
    import gpu_backend.executor as ex
    from gpu_backend.calibrate import measure_table
    from gpu_backend.executor import StepTime

    calls: list = []
    seconds = iter([1.0, 5.0, 3.0])

    def timed(model, segs, pools, **k):
        calls.append((len(segs), segs[0].start, len(segs[0].tokens)))
        timed_call = len(calls) % 2 == 0
        t = next(seconds, 2.0) if timed_call and calls[-1] == (1, 0, 4) else 2.0
        return None, StepTime(0.0, 0.0, t)

    monkeypatch.setattr(ex, "timed_forward", timed)
    model = SyntheticHybridModel(spec(), seed=3)
    got = measure_table(model, prefill_tokens=(4,), cached=(0, 4), batches=(2,), contexts=(8,), repeats=3, scale=1)
    points = [(1, 0, 4), (1, 4, 4), (2, 8, 1)]  # (segments, start, new tokens)
    assert calls == [p for _ in range(3) for p in points for _ in range(2)]
    assert got == {"prefill": [[4, 0, 3.0], [4, 4, 2.0]], "decode": [[2, 8, 2.0]]}


def test_a_step_on_one_cpu_thread_is_timed_by_the_thread_s_cpu_time(one_torch_thread):
    """Other processes' time slices on a shared CPU are not the step's: one torch thread on CPU
    reads the thread's CPU time, more threads (or CUDA, for host time) the wall clock."""
    import time

    from gpu_backend.executor import step_clock

    assert step_clock("cpu") is time.thread_time
    torch.set_num_threads(2)
    try:
        assert step_clock("cpu") is time.perf_counter
    finally:
        torch.set_num_threads(1)


def pools_for(sp, pages=32, slots=4):
    return KVPools(sp, full_pages={"L1": pages}, swa_pages={"L1": pages}, state_slots={"L1": slots})


def test_every_index_tensor_is_built_before_layer_0_in_one_upload(monkeypatch):
    """`prepare` builds all of a forward's index tensors (both attention kinds, the state plan)
    as views of ONE int64 buffer; during the layers no tensor is moved to a device (`.to` with a
    device) and nothing is uploaded (the old `_rope` moved its frequencies every call)."""
    sp = spec(("swa", "full", "rec", "full"))
    model, pools = SyntheticHybridModel(sp, seed=3), pools_for(sp)
    segs = [Segment(toks(10, 1), 0, list(range(3)), list(range(3)), 0),
            Segment(toks(1, 2), 0, [5], [5], 1)]
    b = model.prepare(segs, pools)
    assert sorted(b.keys) == ["full", "swa"]
    buf = b.upload.host.untyped_storage().data_ptr()
    tensors = [b.tokens, b.pos, b.last, b.q_dst, b.resume, b.slots, b.save_rows, b.save_slots]
    for k in b.keys.values():
        tensors.append(k.q_dst)
        for s in k.sources.values():
            tensors += [s.pre_pages, s.pre_rows, s.dst_pre, s.new_sel, s.new_pages, s.new_rows, s.dst_new]
    assert {t.untyped_storage().data_ptr() for t in tensors} == {buf}
    moved, in_layers = [], []
    to = torch.Tensor.to

    def spy(self, *a, **k):
        if in_layers and ("device" in k or any(isinstance(x, (str, torch.device, torch.Tensor)) for x in a)):
            moved.append((a, k))
        return to(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    model.forward_batch(b, pools, wait_layer=lambda layer: in_layers.append(layer))
    assert in_layers == [0, 1, 2, 3] and moved == []
    assert model._inv_freq.device == model.device


@pytest.mark.parametrize("seg,message", [
    (Segment([1, 2, 3, 4, 5], 0, [0, 32], [0, 1], None), "FULL page 32 is out of range [0, 32)"),
    (Segment([1, 2, 3], 0, [2], [40], None), "SWA page 40 is out of range [0, 32)"),
    (Segment([1, 2, 3], 0, [2], [-2], None), "SWA page -2 is out of range [0, 32)"),
])
def test_out_of_range_pages_raise_index_error_before_anything_is_written(seg, message):
    sp = spec()
    model, pools = SyntheticHybridModel(sp, seed=3), pools_for(sp)
    before = {c: pools.tensor("L1", c).clone() for c in ("full", "swa")}
    with pytest.raises(IndexError, match=re.escape(message)):
        model.forward_batch([seg], pools)
    assert all(torch.equal(pools.tensor("L1", c), t) for c, t in before.items())


def test_an_out_of_range_state_slot_is_an_index_error():
    sp = spec(("rec", "full"))
    model, pools = SyntheticHybridModel(sp, seed=3), pools_for(sp, slots=4)
    with pytest.raises(PageIndexError, match=r"state slot 4 is out of range \[0, 4\)"):
        model.forward_batch([Segment([1, 2], 0, [0], None, 4)], pools)
    with pytest.raises(IndexError, match=r"state slot 9 is out of range \[0, 4\)"):
        model.forward_batch([Segment([1, 2], 0, [0], None, 1, saves=((1, 9),))], pools)


def test_calibrate_times_prefill_with_last_token_logits_only(monkeypatch):
    from gpu_backend.calibrate import prefill_seconds

    sp = spec()
    model = SyntheticHybridModel(sp, seed=3)
    seen = []
    fb = SyntheticHybridModel.forward_batch

    def spy(self, segs, *a, logits="last", **k):
        seen.append(logits)
        return fb(self, segs, *a, logits=logits, **k)

    monkeypatch.setattr(SyntheticHybridModel, "forward_batch", spy)
    assert prefill_seconds(model, 8, 8, repeats=1) > 0
    assert seen == ["last"] * 3  # the cached prefix, the warm-up, one timed forward


# -- attention ------------------------------------------------------------------------------
def mixed_batch(sp, model, pools):
    """Prefill the prefixes, then one batch: two 6-token chunks after 4 cached tokens (same
    shape: one unmasked call), a 5-token chunk at position 0, and three decodes at contexts
    3, 9 and 9."""
    runs = [(4, 6), (4, 6), (0, 5), (3, 1), (9, 1), (9, 1)]
    segs = []
    for i, (start, n) in enumerate(runs):
        pages = list(range(i * 5, i * 5 + 5))
        t = toks(start + n, 10 + i)
        if start:
            model.forward_batch([Segment(t[:start], 0, pages, pages, None)], pools)
        segs.append(Segment(t[start:], start, pages, pages, None))
    return segs


def calls(model, segs, pools, kind, masked=False):
    b = model.prepare(segs, pools, masked=masked)
    return [(c.segs, c.q, c.k, c.masked, type(c.mask).__name__) for c in b.keys[kind].calls]


def test_the_unmasked_calls_give_the_masked_reference_s_logits():
    """fp32: every segment's logits within 1e-5 of one padded, masked call per layer (the old
    path), and the calls are exactly: equal (new, keys) shapes together without a boolean mask
    (a lower-right causal bias for chunks, none for one token), the decodes of different lengths
    and the windowed chunks that a window cuts in one padded, masked call."""
    sp = spec()
    model = SyntheticHybridModel(sp, seed=4)
    pools = pools_for(sp)
    segs = mixed_batch(sp, model, pools)
    assert calls(model, segs, pools, "full") == [
        ([0, 1], 6, 10, False, "CausalBias"), ([2], 5, 5, False, "CausalBias"), ([3, 4, 5], 1, 10, True, "Tensor")]
    # window 8: the chunks at 4..9 span 10 > 8 positions (masked); 0..4 fits (unmasked)
    assert calls(model, segs, pools, "swa") == [([2], 5, 5, False, "CausalBias"), ([0, 1, 3, 4, 5], 6, 10, True, "Tensor")]
    assert calls(model, segs, pools, "full", masked=True) == [([0, 1, 2, 3, 4, 5], 6, 10, True, "Tensor")]
    snap = {c: pools.tensor("L1", c).clone() for c in ("full", "swa")}
    model.sdpa_calls.clear()
    ref = model.forward_batch(segs, pools, logits="all", masked=True)
    for c, t in snap.items():
        pools.tensor("L1", c).copy_(t)
    got = model.forward_batch(segs, pools, logits="all")
    assert [g.shape[0] for g in got] == [6, 6, 5, 1, 1, 1]
    worst = max(float((a - b).abs().max()) for a, b in zip(got, ref))
    assert worst <= 1e-5, worst
    assert set(model.sdpa_calls) <= {"FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION",
                                     "FLASH_ATTENTION (mask materialised)", "MATH (mask materialised)"}
    # 2 full layers x 3 calls + 2 swa layers x 2 calls, twice (reference: 4 layers x 1 call)
    assert sum(model.sdpa_calls.values()) == 4 + 10


def test_decodes_of_one_length_run_in_one_unmasked_call():
    sp = spec(("full",))
    model = SyntheticHybridModel(sp, seed=4)
    pools = pools_for(sp)
    segs = [Segment([i + 1], 7, list(range(i * 2, i * 2 + 2)), None, None) for i in range(3)]
    assert calls(model, segs, pools, "full") == [([0, 1, 2], 1, 8, False, "NoneType")]


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_bf16_unmasked_attention_is_the_masked_reference_within_2e_2(device):
    """bf16 (the dtype on a GPU; the CUDA variant runs whenever CUDA exists): the unmasked calls'
    logits within 2e-2 of the masked reference's."""
    sp = spec()
    model = SyntheticHybridModel(sp, seed=4, device=device, dtype=torch.bfloat16)
    pools = KVPools(sp, full_pages={"L1": 32}, swa_pages={"L1": 32}, device=device, dtype=torch.bfloat16)
    segs = mixed_batch(sp, model, pools)
    snap = {c: pools.tensor("L1", c).clone() for c in ("full", "swa")}
    ref = model.forward_batch(segs, pools, masked=True)
    for c, t in snap.items():
        pools.tensor("L1", c).copy_(t)
    got = model.forward_batch(segs, pools)
    worst = max(float((a - b).abs().max()) for a, b in zip(got, ref))
    assert worst <= 2e-2, worst
    assert all(isinstance(k, str) and k for k in model.sdpa_calls)


def test_step_noise_is_each_repeated_shape_s_steps_against_their_median():
    """`validate_torch.step_noise`: shape A (one 4-token prefill) measured 1, 3, 2 s: median 2,
    errors 1, 1/3, 0; shape B (decodes at contexts 16-18: one block of 8) 1 and 2 s: median 1.5,
    errors 0.5, 0.25; a shape met once and a zero-time step are left out. Median 1/3, p90 0.8
    (numpy's linear percentile of 0, .25, 1/3, .5, 1), spread x3. The summary line says so."""
    from radixsim.validate_torch import step_noise, table_text

    a = (((4, 0),), ())
    steps = [(*a, 1.0), (*a, 3.0), (*a, 2.0), ((), (16, 17), 1.0), ((), (17, 18), 2.0), ((), (24,), 5.0),
             ((), (40,), 0.0)]
    got = step_noise(steps)
    assert got == {"steps": 5, "median_rel_err": pytest.approx(1 / 3), "p90_rel_err": pytest.approx(0.8),
                   "max_spread": 3.0}
    assert step_noise([(*a, 1.0)]) == {"steps": 0, "median_rel_err": None, "p90_rel_err": None, "max_spread": None}
    text = table_text([{"rounds": [], "requests": [], "summary": {}, "step_noise": got}])
    assert text.splitlines()[-1] == ("    torch steps against their own shape's median (5 steps of repeated shapes, "
                                     "the floor of any step-time model here): median 33%, p90 80%; up to x3.00 "
                                     "within a shape")
