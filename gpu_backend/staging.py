"""Host <-> device page copies through persistent staging buffers, layer by layer on a side
stream (the data plane's path for "load" L2 -> L1 and "backup" L1 -> L2).

`StagedCopier(pools)` keeps, per component, one host staging buffer (pinned when CUDA is
available) and, on a GPU, one device staging buffer, both ``[layers, capacity, *page]``:
allocated at the first transfer and reused by every later one (grown, never shrunk, only
when a transfer holds more pages than any before; `allocations` counts them). Either pool
layout (``page_first``, ``layer_first``: `KVPools`) copies through the same buffers, so a
layer's pages sit contiguously in the staging buffer whatever the pool layout.

A transfer of n pages, per layer l (SGLang HiCache's layer-wise load: the forward of layer l
waits only for layer l's pages, so later layers copy while earlier ones compute; the
simulator's ``engine.load_overlap: layerwise`` model):

- host -> device: gather layer l's pages on the host into the pinned buffer, then on the side
  stream one H2D copy of that block and a scatter into the device pool; an event per layer;
- device -> host: on the side stream a gather into the device buffer and one D2H copy into the
  pinned buffer (an event per layer); the scatter into the host pool runs at
  `StagedHandle.synchronize`.

`StagedHandle.wait_layer(l)` makes the current stream wait for layer l only (a no-op on CPU);
`synchronize()` waits for the whole transfer. Without CUDA every step runs at once on the
CPU through the same host buffer (tests check bytes and buffer reuse there).
"""
from __future__ import annotations

import torch

from .pools import as_index


class StagedHandle:
    """One staged transfer: per-layer CUDA events (none on CPU) and the host-side scatter
    still to run after a device -> host copy."""

    def __init__(self, events=(), finish=None):
        self.events, self._finish = list(events), finish

    def query(self) -> bool:
        return all(e.query() for e in self.events)

    def wait_layer(self, layer: int) -> None:
        """The current CUDA stream waits until `layer`'s pages have arrived."""
        if self.events:
            torch.cuda.current_stream().wait_event(self.events[layer])

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
        cuda = pools.device.type == "cuda"
        self.stream = torch.cuda.Stream(pools.device) if cuda else None
        self.pin = cuda
        self.allocations = 0
        self._host: dict = {}
        self._dev: dict = {}
        self._last: StagedHandle | None = None  # the transfer still reading the buffers

    def layers(self, component: str) -> int:
        t = self.pools.tensor("L1", component)
        return t.shape[1 - self.pools.page_dim]

    def buffers(self, component: str, pages: int) -> tuple:
        """(host, device or None) staging buffers of `component` with room for `pages` pages."""
        host = self._host.get(component)
        if host is None or host.shape[1] < pages:
            t = self.pools.tensor("L1", component)
            shape = (self.layers(component), pages) + tuple(self.pools.layer_view("L1", component, 0).shape[1:])
            self._host[component] = host = torch.empty(shape, dtype=t.dtype, pin_memory=self.pin)
            self._dev[component] = torch.empty(shape, dtype=t.dtype, device=t.device) if self.pin else None
            self.allocations += 1
        return host, self._dev[component]

    def copy(self, src_tier: str, dst_tier: str, component: str, src_idx, dst_idx) -> StagedHandle:
        """dst pool[dst_idx[i]] = src pool[src_idx[i]], every layer, through the staging buffers."""
        si, di = as_index(src_idx), as_index(dst_idx)
        if si.numel() != di.numel():
            raise ValueError(f"staged copy: {si.numel()} source and {di.numel()} destination indices")
        if si.numel() == 0:
            return StagedHandle()
        if self._last is not None:  # the buffers are reused: the previous transfer must be done
            self._last.synchronize()
        host, dev = self.buffers(component, si.numel())
        host, dev = host[:, :si.numel()], None if dev is None else dev[:, :si.numel()]
        to_device = self.pools.tier_device[dst_tier].type != "cpu"
        self._last = (self._to_device if to_device else self._to_host)(src_tier, dst_tier, component, si, di,
                                                                        host, dev)
        return self._last

    def _views(self, tier: str, component: str):
        return [self.pools.layer_view(tier, component, layer) for layer in range(self.layers(component))]

    def _to_device(self, src_tier, dst_tier, comp, si, di, host, dev) -> StagedHandle:
        src, dst = self._views(src_tier, comp), self._views(dst_tier, comp)
        for layer, view in enumerate(src):  # gather on the host into the staging buffer
            torch.index_select(view, 0, si, out=host[layer])
        if dev is None:
            for layer, view in enumerate(dst):
                view.index_copy_(0, di, host[layer])
            return StagedHandle()
        events = []
        self.stream.wait_stream(torch.cuda.current_stream(self.pools.device))
        with torch.cuda.stream(self.stream):
            di_dev = di.to(dev.device, non_blocking=True)
            for layer, view in enumerate(dst):
                dev[layer].copy_(host[layer], non_blocking=True)
                view.index_copy_(0, di_dev, dev[layer])
                ev = torch.cuda.Event()
                ev.record(self.stream)
                events.append(ev)
        return StagedHandle(events)

    def _to_host(self, src_tier, dst_tier, comp, si, di, host, dev) -> StagedHandle:
        src, dst = self._views(src_tier, comp), self._views(dst_tier, comp)

        def scatter():
            for layer, view in enumerate(dst):
                view.index_copy_(0, di, host[layer])

        if dev is None:
            for layer, view in enumerate(src):
                torch.index_select(view, 0, si, out=host[layer])
            scatter()
            return StagedHandle()
        events = []
        self.stream.wait_stream(torch.cuda.current_stream(self.pools.device))
        with torch.cuda.stream(self.stream):
            si_dev = si.to(dev.device, non_blocking=True)
            for layer, view in enumerate(src):
                torch.index_select(view, 0, si_dev, out=dev[layer])
                host[layer].copy_(dev[layer], non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(self.stream)
                events.append(ev)
        return StagedHandle(events, scatter)


__all__ = ["StagedCopier", "StagedHandle"]
