"""Host <-> device page copies through persistent staging buffers, on a side stream, layer by
layer where the layout allows (the data plane's path for "load" L2 -> L1 and "backup" L1 -> L2).

`StagedCopier(pools)` keeps, per component, staging buffers shaped like the pools (same
layout, ``page_first`` or ``layer_first``): on a GPU one device buffer (the gather before a
device -> host copy, the scatter after a host -> device copy run there) and, where the host pool
is not pinned, one pinned host buffer (the CPU gathers into it so that one DMA moves the lot);
on CPU one host buffer (gather, then scatter: the same steps, synchronous). Every buffer is
allocated at the first transfer that needs it and reused by every later one (grown, never
shrunk, when a transfer holds more pages than any before; `allocations` counts them).

A transfer runs in units: one per layer with ``layer_first`` pools (a layer's pages are
contiguous, so layer l can be copied, and waited for, alone: SGLang HiCache's layer-wise load,
the simulator's ``engine.load_overlap: layerwise``), one for all layers with ``page_first``
(a page is contiguous across layers; one copy per run of consecutive pages). Per unit:

- host -> device: copy each run of consecutive source pages from the pinned host pool (or the
  pinned staging buffer the CPU gathered into) into the device buffer, scatter into the device
  pool, record an event;
- device -> host: gather into the device buffer, copy each run of consecutive destination pages
  into the pinned host pool (or into the pinned staging buffer, scattered on the CPU at
  `StagedHandle.synchronize`), record an event.

`StagedHandle.wait_layer(l)` makes the current stream wait for the unit holding layer l (a no-op
on CPU); `synchronize()` waits for the whole transfer.
"""
from __future__ import annotations

import numpy as np
import torch


class PageIndexError(IndexError, ValueError):
    """A page or state slot outside its pool, found on the host before any kernel reads it (on
    CUDA a bad index would be a device-side assert). A ValueError too: bad input."""


def as_index(idx) -> torch.Tensor:
    """`idx` (a tensor, an array, a sequence or one int) as a flat int64 CPU tensor."""
    if isinstance(idx, torch.Tensor):
        return idx.to(device="cpu", dtype=torch.int64).reshape(-1)
    return torch.as_tensor(np.asarray(idx, dtype=np.int64).reshape(-1))


def index_runs(idx: torch.Tensor) -> list:
    """(start, offset, length) of each run of consecutive indices in `idx`."""
    a = idx.numpy()
    if len(a) == 0:
        return []
    cut = np.flatnonzero(np.diff(a) != 1) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [len(a)]])
    return [(int(a[s]), int(s), int(e - s)) for s, e in zip(starts, ends)]


class StagedHandle:
    """One staged transfer: an event per unit (none on CPU), the unit of each layer, and the
    host-side scatter still to run after a device -> host copy into a staging buffer."""

    def __init__(self, events=(), unit_of_layer=None, finish=None):
        self.events, self.unit_of_layer, self._finish = list(events), unit_of_layer, finish

    def wait_layer(self, layer: int) -> None:
        """The current CUDA stream waits until `layer`'s pages have arrived."""
        if self.events:
            torch.cuda.current_stream().wait_event(self.events[self.unit_of_layer(layer)])

    def synchronize(self) -> None:
        for e in self.events:
            e.synchronize()
        if self._finish is not None:
            self._finish()
            self._finish = None


class StagedCopier:
    """Page copies between the tiers of `pools` through persistent staging buffers (module
    docstring)."""

    def __init__(self, pools):
        self.pools = pools
        self.cuda = pools.device.type == "cuda"
        self.stream = torch.cuda.Stream(pools.device) if self.cuda else None
        self.allocations = 0
        self._buf: dict = {}
        self._last: StagedHandle | None = None  # the transfer still using the buffers

    def buffer(self, where: str, component: str, pages: int) -> torch.Tensor:
        """The staging buffer ("host": pinned with CUDA, or "device") of `component`, in the
        pools' layout, narrowed to `pages` pages."""
        d = self.pools.page_dim
        buf = self._buf.get((where, component))
        if buf is None or buf.shape[d] < pages:
            t = self.pools.tensor("L1", component)
            shape = list(t.shape)
            shape[d] = pages
            host = where == "host"
            buf = torch.empty(shape, dtype=t.dtype, device="cpu" if host else t.device, pin_memory=host and self.cuda)
            self._buf[where, component] = buf
            self.allocations += 1
        return buf.narrow(d, 0, pages)

    def units(self, t: torch.Tensor) -> list:
        """`t` (a pool or a staging buffer) as its copy units, each with the pages along dim 0."""
        return [t] if self.pools.page_dim == 0 else list(t.unbind(0))

    def unit_of_layer(self, layer: int) -> int:
        return 0 if self.pools.page_dim == 0 else layer

    def copy(self, src_tier: str, dst_tier: str, component: str, src_idx, dst_idx) -> StagedHandle:
        """dst pool[dst_idx[i]] = src pool[src_idx[i]], every layer, through the staging buffers.
        ValueError (nothing moved) when the counts differ or an index is outside its pool."""
        si, di = as_index(src_idx), as_index(dst_idx)
        if si.numel() != di.numel():
            raise ValueError(f"staged copy: {si.numel()} source and {di.numel()} destination indices")
        if si.numel() == 0:
            return StagedHandle()
        for name, idx, tier in (("source", si, src_tier), ("destination", di, dst_tier)):
            self._check_range(f"copy {component} {src_tier} -> {dst_tier}", name, idx, tier, component)
        if self._last is not None:  # the buffers are reused: the previous transfer must be done
            self._last.synchronize()
        src, dst = self.pools.tensor(src_tier, component), self.pools.tensor(dst_tier, component)
        if not self.cuda or (src.device.type == "cpu" and dst.device.type == "cpu"):
            self._last = self._on_host(src, dst, component, si, di)
        elif dst.device.type == "cuda":
            self._last = self._to_device(src, dst, component, si, di)
        else:
            self._last = self._to_host(src, dst, component, si, di)
        return self._last

    def _check_range(self, what: str, name: str, idx: torch.Tensor, tier: str, component: str) -> None:
        """`PageIndexError` unless every index of `idx` is a page of pool (`tier`, `component`):
        checked on the CPU before anything moves (on CUDA a bad index is a device-side assert)."""
        n = self.pools.size(tier, component)
        bad = idx[(idx < 0) | (idx >= n)]
        if bad.numel():
            raise PageIndexError(f"{what}: {name} index {int(bad[0])} out of range [0, {n}) of pool {tier} {component}")

    def _on_host(self, src, dst, comp, si, di) -> StagedHandle:
        stage = self.units(self.buffer("host", comp, si.numel()))
        for s, b, d in zip(self.units(src), stage, self.units(dst)):
            torch.index_select(s, 0, si, out=b)
            d.index_copy_(0, di, b)
        return StagedHandle()

    def _events(self, unit, count: int) -> list:
        """Run `unit(u)` for u < `count` on the side stream (after the work already queued on
        the current stream), an event after each."""
        events = []
        self.stream.wait_stream(torch.cuda.current_stream(self.pools.device))
        with torch.cuda.stream(self.stream):
            for u in range(count):
                unit(u)
                ev = torch.cuda.Event()
                ev.record(self.stream)
                events.append(ev)
        return events

    def _plan(self, src, dst, comp, host_pool, idx, device) -> tuple:
        """A host <-> device transfer's units: the device buffer's, the source's and the
        destination's; whether `host_pool` (the host side) is pinned, else the host staging
        buffer's units; and the device side's index `idx` on `device`, recorded on the side
        stream (not reused before the work queued there is done)."""
        n = idx.numel()
        dev, s_units, d_units = self.units(self.buffer("device", comp, n)), self.units(src), self.units(dst)
        pinned = host_pool.is_pinned()
        host = None if pinned else self.units(self.buffer("host", comp, n))
        idx_dev = idx.to(device)
        idx_dev.record_stream(self.stream)
        return dev, s_units, d_units, pinned, host, idx_dev

    def _to_device(self, src, dst, comp, si, di) -> StagedHandle:
        dev, s_units, d_units, pinned, host, di_dev = self._plan(src, dst, comp, src, di, dst.device)

        def unit(u):
            if pinned:  # DMA straight from the pinned host pool, one copy per run of pages
                for lo, off, k in index_runs(si):
                    dev[u].narrow(0, off, k).copy_(s_units[u].narrow(0, lo, k), non_blocking=True)
            else:
                torch.index_select(s_units[u], 0, si, out=host[u])
                dev[u].copy_(host[u], non_blocking=True)
            d_units[u].index_copy_(0, di_dev, dev[u])

        return StagedHandle(self._events(unit, len(dev)), self.unit_of_layer)

    def _to_host(self, src, dst, comp, si, di) -> StagedHandle:
        dev, s_units, d_units, pinned, host, si_dev = self._plan(src, dst, comp, dst, si, src.device)

        def unit(u):
            torch.index_select(s_units[u], 0, si_dev, out=dev[u])
            if pinned:  # DMA straight into the pinned host pool, one copy per run of pages
                for lo, off, k in index_runs(di):
                    d_units[u].narrow(0, lo, k).copy_(dev[u].narrow(0, off, k), non_blocking=True)
            else:
                host[u].copy_(dev[u], non_blocking=True)

        def scatter():
            for d, h in zip(d_units, host):
                d.index_copy_(0, di, h)

        return StagedHandle(self._events(unit, len(dev)), self.unit_of_layer, None if pinned else scatter)


__all__ = ["StagedCopier", "StagedHandle", "PageIndexError", "as_index", "index_runs"]
