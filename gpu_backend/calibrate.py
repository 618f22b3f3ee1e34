"""Measurements of the torch backend that the simulator can use: a fitted step-time table
(`sim.cost.TableCostModel`'s format) and page-copy bandwidth.

- `measure_table(model, ...)`: prefill seconds for (new tokens, cached tokens) pairs and decode
  seconds for (batch, mean context) pairs, each the median of `repeats` timed forwards over
  real pools (a cached prefix first written untimed). The torch executor runs a step's entries
  one forward each, so a decode step of b requests is timed as b single-token forwards.
- `copy_bandwidth(pools, ...)`: bytes per second of batched, scattered page copies between
  the tiers (`KVPools.copy_pages`) against one plain copy of the same bytes (the baseline).

Times are CUDA-synchronised on a GPU. Everything is deterministic except the timings.
"""
from __future__ import annotations

import statistics
import time

import torch

from .pools import KVPools


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, repeats: int, device) -> float:
    fn()  # warm-up (allocator, kernels, caches): not timed
    out = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _pools_for(model, tokens: int) -> tuple:
    spec = model.spec
    P = spec.page_size
    pages = -(-tokens // P) + 1
    pools = KVPools(spec, full_pages={"L1": pages}, swa_pages={"L1": pages}, state_slots={"L1": 2},
                    device=model.device, dtype=model.dtype)
    return pools, list(range(pages))


def prefill_seconds(model, new: int, cached: int, repeats: int = 3) -> float:
    """Median seconds of one forward of `new` tokens after `cached` cached tokens."""
    pools, pages = _pools_for(model, new + cached)
    gen = torch.Generator().manual_seed(new * 1_000_003 + cached)
    toks = torch.randint(0, model.spec.vocab, (new + cached,), generator=gen)
    kw = {"full_pages": pages, "swa_pages": pages, "pools": pools, "state_slot": 0}
    with torch.no_grad():
        if cached:
            model.forward(toks[:cached], start=0, **kw)
        return _timed(lambda: model.forward(toks[cached:], start=cached, **kw), repeats, model.device)


def measure_table(model, *, prefill_tokens=(16, 64, 256, 1024), cached=(0, 256, 1024, 4096),
                  batches=(1, 4, 16), contexts=(64, 512, 2048), repeats: int = 3) -> dict:
    """{"prefill": [[new, cached, s], ...], "decode": [[batch, context, s], ...]}."""
    prefill = [[n, c, prefill_seconds(model, n, c, repeats)] for c in cached for n in prefill_tokens]
    decode = []
    for c in contexts:
        one = prefill_seconds(model, 1, c, repeats)
        decode += [[b, c, b * one] for b in batches]
    return {"prefill": prefill, "decode": decode}


def copy_bandwidth(pools, component: str = "full", pages: int = 64, repeats: int = 5) -> dict:
    """GB/s of batched scattered page copies L1 -> L2 and L2 -> L1 (`pages` pages, random
    slots), and of one plain copy of as many bytes, with the ratio."""
    n1, n2 = pools.size("L1", component), pools.size("L2", component)
    pages = min(pages, n1, n2)
    gen = torch.Generator().manual_seed(7)
    src = torch.randperm(n1, generator=gen)[:pages].tolist()
    dst = torch.randperm(n2, generator=gen)[:pages].tolist()
    nbytes = pages * pools.page_bytes(component)
    dev = pools.device
    out = {"pages": pages, "bytes": nbytes, "page_bytes": pools.page_bytes(component)}
    for name, a, b, si, di in (("d2h", "L1", "L2", src, dst), ("h2d", "L2", "L1", dst, src)):
        t = _timed(lambda: pools.copy_pages(a, b, component, si, di).synchronize(), repeats, dev)
        out[f"{name}_GBps"] = nbytes / t / 1e9
    flat = nbytes // 4
    big_dev = torch.empty(flat, dtype=torch.float32, device=dev)
    pin = dev.type == "cuda"
    big_host = torch.empty(flat, dtype=torch.float32, pin_memory=pin)
    out["baseline_d2h_GBps"] = nbytes / _timed(lambda: big_host.copy_(big_dev, non_blocking=pin), repeats, dev) / 1e9
    out["baseline_h2d_GBps"] = nbytes / _timed(lambda: big_dev.copy_(big_host, non_blocking=pin), repeats, dev) / 1e9
    for d in ("d2h", "h2d"):
        out[f"{d}_pct_of_baseline"] = 100 * out[f"{d}_GBps"] / out[f"baseline_{d}_GBps"]
    return out


__all__ = ["measure_table", "prefill_seconds", "copy_bandwidth"]
