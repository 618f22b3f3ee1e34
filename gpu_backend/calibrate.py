"""Measurements of the torch backend that the simulator can use: a per-operator table
(`sim.optable`'s format, what `radixsim calibrate` writes), a fitted step-time table
(`sim.cost.TableCostModel`'s format) and page-copy bandwidth.

- `measure_operators(plan, ...)`: the operators the simulator's step-time model prices
  (`sim.optable.OperatorTableCostModel`), each timed on this device at the shapes that model
  asks for (`plan` = `sim.optable.calibration_plan(cost)`, made by the caller: the torch backend
  never imports the simulator): the GEMMs of its `gemm_shapes` by rows M, one attention layer
  (scaled dot-product attention, the preset's heads per GPU, GQA) per (prefix, new) prefill
  and per decode KV length, and host -> device copies of pinned memory by size;
- `measure_table(model, ...)`: prefill seconds for (new tokens, cached tokens) pairs and decode
  seconds for (batch, mean context) pairs, each the median of `repeats` timed forwards over
  real pools (a cached prefix first written untimed; a decode step of b requests is one
  batched forward, as the torch executor runs it), the points' forwards taken in turns.
- `copy_bandwidth(pools, ...)`: bytes per second of batched, scattered page copies between
  the tiers as the data plane makes them (`gpu_backend.staging.StagedCopier`) against one
  plain copy of the same bytes (the baseline).

Times are CUDA-synchronised on a GPU; on CPU with one torch thread they are the thread's CPU
time (`executor.step_clock`). Everything is deterministic except the timings.
"""
from __future__ import annotations

import statistics

import torch

from .pools import KVPools


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, repeats: int, device) -> float:
    """Median seconds of `fn` (after one untimed call) by `executor.step_clock`: on CPU with one
    torch thread the thread's CPU time, else the wall clock."""
    from .executor import step_clock

    clock = step_clock(device)
    fn()  # warm-up (allocator, kernels, caches): not timed
    out = []
    for _ in range(repeats):
        _sync(device)
        t0 = clock()
        fn()
        _sync(device)
        out.append(clock() - t0)
    return statistics.median(out)


def _pools_for(model, tokens: int) -> tuple:
    spec = model.spec
    P = spec.page_size
    pages = -(-tokens // P) + 1
    pools = KVPools(spec, full_pages={"L1": pages}, swa_pages={"L1": pages}, state_slots={"L1": 2},
                    device=model.device, dtype=model.dtype)
    return pools, list(range(pages))


def _timed_steps(model, segs, pools, repeats: int, scale: float) -> float:
    """Median seconds of a step of `segs` as the torch executor times it
    (`executor.timed_forward`: host time once, the layers' device time times `scale`)."""
    return _interleaved([(model, segs, pools)], repeats, scale)[0]


def _interleaved(jobs: list, repeats: int, scale: float) -> list:
    """Per job (model, segments, pools: one step), the median seconds of `repeats` timed steps
    (`executor.timed_forward`), taken in turns: `repeats` times, every job once in order, each
    timed forward just after an untimed one of the same job. So each point's samples spread over
    the whole measurement, under the same mix of machine states as every other point (on a
    shared CPU a point timed in one burst of back-to-back forwards followed that moment's load:
    three tables measured one after the other differed by up to 2x at a point), and each is
    timed after a forward of its own kind, as an engine's consecutive steps of one phase run
    (timed right after another point's forward, a short decode followed a long prefill and
    was up to 2x slower than the run's decode steps of its shape)."""
    from .executor import timed_forward

    times: list = [[] for _ in jobs]
    for _ in range(repeats):
        for got, (model, segs, pools) in zip(times, jobs):
            timed_forward(model, segs, pools)  # not timed
            got.append(timed_forward(model, segs, pools)[1].scaled(scale))
    return [statistics.median(t) for t in times]


def _prefill_job(model, new: int, cached: int) -> tuple:
    """(model, segments, pools) of one forward of `new` tokens after `cached` cached tokens
    (their KV written first, untimed)."""
    from .model import Segment

    pools, pages = _pools_for(model, new + cached)
    gen = torch.Generator().manual_seed(new * 1_000_003 + cached)
    toks = torch.randint(0, model.spec.vocab, (new + cached,), generator=gen)

    def seg(a: int, b: int):
        return [Segment(toks[a:b], a, pages, pages, 0)]

    if cached:
        with torch.no_grad():
            model.forward_batch(seg(0, cached), pools)
    return model, seg(cached, new + cached), pools


def prefill_seconds(model, new: int, cached: int, repeats: int = 3, scale: float = 1.0) -> float:
    """Median seconds of one forward of `new` tokens after `cached` cached tokens (the logits of
    the last token only, as the torch executor computes them; the layers' time times `scale`)."""
    return _interleaved([_prefill_job(model, new, cached)], repeats, scale)[0]


def scenario_model(sc, opts) -> tuple:
    """(the synthetic model the torch backend runs for scenario `sc` with `TorchOptions`
    `opts`, its layer scale: `gpu_backend.backend.synthetic_model` of its preset and cache)."""
    from .backend import synthetic_model

    return synthetic_model(sc.model, sc.cache, opts)


def _decode_job(model, batch: int, context: int) -> tuple:
    """(model, segments, pools) of one batched decode step: `batch` requests, one new token each
    after `context` tokens, each over its own pages and state slot. The prefix KV is left as
    zeros (the time does not depend on its values)."""
    from .model import Segment

    spec = model.spec
    per = -(-(context + 1) // spec.page_size)
    pools = KVPools(spec, full_pages={"L1": batch * per}, swa_pages={"L1": batch * per}, state_slots={"L1": batch},
                    device=model.device, dtype=model.dtype)
    segs = []
    for i in range(batch):
        pages = list(range(i * per, (i + 1) * per))
        segs.append(Segment(torch.tensor([i % spec.vocab]), start=context, full_pages=pages, swa_pages=pages,
                            state_slot=i))
    return model, segs, pools


def decode_seconds(model, batch: int, context: int, repeats: int = 3, scale: float = 1.0) -> float:
    """Median seconds of one batched decode step (`SyntheticHybridModel.forward_batch`, the
    layers' time times `scale`): `_decode_job`'s step."""
    return _interleaved([_decode_job(model, batch, context)], repeats, scale)[0]


def measure_table(model, *, prefill_tokens=(16, 64, 256, 1024), cached=(0, 256, 1024, 4096),
                  batches=(1, 4, 16), contexts=(64, 512, 2048), repeats: int = 3, scale: float = 1.0) -> dict:
    """{"prefill": [[new, cached, s], ...], "decode": [[batch, context, s], ...]}, each step's
    layers' time multiplied by `scale` (`scenario_model`'s: the preset's layers over the model's),
    its host time not, as the torch backend times its steps (`executor.StepTime`). Every point is
    the median of `repeats` steps taken in turns with the other points' (`_interleaved`)."""
    pre = [(n, c) for c in cached for n in prefill_tokens]
    dec = [(b, c) for c in contexts for b in batches]
    jobs = [_prefill_job(model, n, c) for n, c in pre] + [_decode_job(model, b, c) for b, c in dec]
    got = _interleaved(jobs, repeats, scale)
    return {"prefill": [[n, c, s] for (n, c), s in zip(pre, got)],
            "decode": [[b, c, s] for (b, c), s in zip(dec, got[len(pre):])]}


def copy_bandwidth(pools, component: str = "full", pages: int = 64, repeats: int = 5) -> dict:
    """GB/s of batched scattered page copies L1 -> L2 and L2 -> L1 (`pages` pages, random
    slots), and of one plain copy of as many bytes (between buffers written before: an untouched
    source reads the zero page), with the ratio; each repeat times the two back to back."""
    from .executor import step_clock

    n1, n2 = pools.size("L1", component), pools.size("L2", component)
    pages = min(pages, n1, n2)
    gen = torch.Generator().manual_seed(7)
    src = torch.randperm(n1, generator=gen)[:pages].tolist()
    dst = torch.randperm(n2, generator=gen)[:pages].tolist()
    nbytes = pages * pools.page_bytes(component)
    dev = pools.device
    out = {"pages": pages, "bytes": nbytes, "page_bytes": pools.page_bytes(component)}
    staged = pools.staged
    flat = nbytes // 4
    big_dev = torch.full((flat,), 1.0, dtype=torch.float32, device=dev)
    pin = dev.type == "cuda"
    big_host = torch.full((flat,), 2.0, dtype=torch.float32).pin_memory() if pin else \
        torch.full((flat,), 2.0, dtype=torch.float32)
    clock = step_clock(dev)

    def once(fn) -> float:
        _sync(dev)
        t0 = clock()
        fn()
        _sync(dev)
        return clock() - t0

    for name, a, b, si, di, plain in (
            ("d2h", "L1", "L2", src, dst, lambda: big_host.copy_(big_dev, non_blocking=pin)),
            ("h2d", "L2", "L1", dst, src, lambda: big_dev.copy_(big_host, non_blocking=pin))):
        def batched(a=a, b=b, si=si, di=di):
            staged.copy(a, b, component, si, di).synchronize()

        batched(), plain()  # warm-up: not timed
        tb, tp = [], []
        for _ in range(repeats):
            tb.append(once(batched))
            tp.append(once(plain))
        out[f"{name}_GBps"] = nbytes / statistics.median(tb) / 1e9
        out[f"baseline_{name}_GBps"] = nbytes / statistics.median(tp) / 1e9
    for d in ("d2h", "h2d"):
        out[f"{d}_pct_of_baseline"] = 100 * out[f"{d}_GBps"] / out[f"baseline_{d}_GBps"]
    return out


GEMM_ROWS = (1, 16, 64, 256, 1024, 4096)
PREFIXES = (0, 512, 2048, 8192)
NEW_TOKENS = (16, 128, 512, 2048)
KV_LENGTHS = (128, 1024, 4096, 16384)
COPY_BYTES = (1 << 20, 8 << 20, 64 << 20)
QUICK = {"rows": (1, 16), "prefixes": (0, 64), "new": (16, 64), "kv": (64, 256), "copy_bytes": (1 << 16, 1 << 20),
         "repeats": 1}


def gemm_seconds(m: int, n: int, k: int, *, device, dtype, repeats: int = 3, weight=None) -> float:
    """Median seconds of an (m x k) @ (k x n) GEMM (`weight`: a [k, n] tensor to reuse)."""
    w = torch.randn(k, n, device=device, dtype=dtype) if weight is None else weight
    x = torch.randn(m, k, device=device, dtype=dtype)
    return _timed(lambda: x @ w, repeats, device)


def attention_seconds(prefix: int, new: int, heads: dict, *, device, dtype, repeats: int = 3) -> float:
    """Median seconds of one attention layer: `new` queries over `prefix + new` keys (causal
    within the new tokens), `heads` as `sim.optable.attention_heads` gives them."""
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(prefix * 1_000_003 + new)
    hq, hk = heads["q_heads"], heads["kv_heads"]
    q = torch.randn(1, hq, new, heads["head_dim"], generator=gen).to(device, dtype)
    k = torch.randn(1, hk, prefix + new, heads["head_dim"], generator=gen).to(device, dtype)
    v = torch.randn(1, hk, prefix + new, heads["v_head_dim"], generator=gen).to(device, dtype)
    mask = None
    if new > 1:
        pos = torch.arange(prefix + new, device=device)
        mask = pos[None, :] <= (prefix + torch.arange(new, device=device))[:, None]
    gqa = hq != hk
    return _timed(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa), repeats, device)


def h2d_seconds(nbytes: int, *, device, repeats: int = 3) -> float:
    """Median seconds of one host -> device copy of `nbytes` (pinned on CUDA; memcpy on CPU)."""
    dev = torch.device(device)
    pin = dev.type == "cuda"
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    return _timed(lambda: dst.copy_(host, non_blocking=pin), repeats, dev)


def measure_operators(plan: dict, *, device="cpu", dtype=torch.bfloat16, rows=GEMM_ROWS, prefixes=PREFIXES,
                      new=NEW_TOKENS, kv=KV_LENGTHS, copy_bytes=COPY_BYTES, repeats: int = 3, progress=None) -> dict:
    """The operator table (`sim.optable` format) of `plan` (`sim.optable.calibration_plan(cost)`
    of an `OperatorCostModel`: its preset and TP name the shapes) timed on `device`.
    `progress(message)` is told each step."""
    say = progress or (lambda _m: None)
    kw = {"device": device, "dtype": dtype, "repeats": repeats}
    gemm = []
    for n, k in plan["gemm_shapes"]:
        say(f"GEMM N x K = {n} x {k}")
        w = torch.randn(k, n, device=device, dtype=dtype)
        gemm.append({"n": n, "k": k, "points": [[m, gemm_seconds(m, n, k, weight=w, **kw)] for m in rows]})
        del w
    heads = plan["heads"]
    say(f"attention ({heads['q_heads']} query / {heads['kv_heads']} KV heads x {heads['head_dim']})")
    prefill = [[c, n, attention_seconds(c, n, heads, **kw)] for c in prefixes for n in new]
    decode = [[c, attention_seconds(c, 1, heads, **kw)] for c in kv]
    say("copies")
    copies = [[b, h2d_seconds(b, device=device, repeats=repeats)] for b in copy_bytes]
    return {"format": plan["format"], "device": str(device), "dtype": str(dtype).replace("torch.", ""),
            "model": plan["model"], "tp": plan["tp"], "heads": heads, "gemm": gemm,
            "prefill_attention": prefill, "decode_attention": decode, "copy": copies}


__all__ = ["measure_table", "measure_operators", "scenario_model", "prefill_seconds", "decode_seconds", "copy_bandwidth", "gemm_seconds",
           "attention_seconds", "h2d_seconds", "GEMM_ROWS", "PREFIXES", "NEW_TOKENS", "KV_LENGTHS", "COPY_BYTES",
           "QUICK"]
