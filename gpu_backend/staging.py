"""Host <-> device page copies (the data plane's path for "load" L2 -> L1 and "backup" L1 -> L2),
layer by layer where the layout allows, as SGLang HiCache moves pages.

Two ways, chosen per copy:

- direct (the default wherever both pools are host memory or the host pool is pinned, as
  `KVPools` makes it on CUDA): every run of pages that is consecutive in both pools is ONE copy
  from pool to pool, no staging pass, no gather or scatter kernel: ``page_first`` (a page is
  one block across its layers) moves a run of pages in one block; ``layer_first`` moves a run
  of pages of every layer in one strided copy (on CUDA one copy per layer and run, so that a
  layer can be waited for alone). On CUDA the copies are DMAs on their direction's stream (one
  stream host -> device, one device -> host, after the work already queued on the current
  stream), an event per unit.
- staged (a host pool that is not pinned on CUDA; ``StagedCopier.staged = True`` forces it):
  through staging buffers of at most ``chunk_bytes`` each (`chunk_pages` pages, allocated once
  and reused, never grown past that): a transfer larger than a chunk moves chunk by chunk. On
  CPU: gather into the host buffer, scatter from it. On CUDA host -> device: the CPU gathers into
  the pinned host buffer, one DMA into the device buffer, a scatter into the device pool;
  device -> host: a gather into the device buffer, one DMA into the pinned host buffer, the CPU
  scatters (each chunk waited for before the buffers are reused).

A transfer runs in units: one per layer with ``layer_first`` pools on CUDA (the simulator's
``engine.load_overlap: layerwise``), one for all layers otherwise. `StagedHandle.wait_layer(l)`
makes the current stream wait for the unit holding layer l (a no-op on CPU); `synchronize()`
waits for the whole transfer.
"""
from __future__ import annotations

from contextlib import nullcontext as _nullcontext

import numpy as np
import torch

STAGING_CHUNK_BYTES = 64 << 20  # the most one staging buffer holds (per component and side)


class PageIndexError(IndexError, ValueError):
    """A page or state slot outside its pool, found on the host before any kernel reads it (on
    CUDA a bad index would be a device-side assert). A ValueError too: bad input."""


def check_in_range(what: str, idx: np.ndarray, size: int, allow_minus_one: bool = False) -> None:
    """`PageIndexError` unless every index is in [0, size) (-1 allowed with `allow_minus_one`)."""
    idx = np.asarray(idx, dtype=np.int64)
    bad = idx[(idx >= size) | (idx < (-1 if allow_minus_one else 0))]
    if bad.size:
        raise PageIndexError(f"{what} {int(bad[0])} is out of range [0, {size})")


def pages_array(pages) -> np.ndarray:
    """A page table as an int64 numpy array (the batch's index math runs on the host; the
    device gets each finished index tensor in one copy)."""
    if pages is None:
        return np.empty(0, dtype=np.int64)
    if isinstance(pages, torch.Tensor):
        pages = pages.cpu().numpy()
    return np.asarray(pages, dtype=np.int64).reshape(-1)


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


def pair_runs(si: torch.Tensor, di: torch.Tensor) -> list:
    """(source start, destination start, length) of each run that is consecutive in both."""
    a, b = si.numpy(), di.numpy()
    if len(a) == 0:
        return []
    cut = np.flatnonzero((np.diff(a) != 1) | (np.diff(b) != 1)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [len(a)]])
    return [(int(a[s]), int(b[s]), int(e - s)) for s, e in zip(starts, ends)]


class StagedHandle:
    """One transfer: an event per unit (none on CPU), the unit of each layer, and the host-side
    work still to run when it is waited for."""

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


class EmulatedEvent:
    """A CPU stand-in for a CUDA event (copies on CPU are synchronous): `record` marks it
    recorded (``records`` counts them), `wait` refuses an event never recorded."""

    def __init__(self):
        self.records = 0

    def record(self, stream=None) -> None:
        self.records += 1

    def wait(self) -> None:
        if not self.records:
            raise RuntimeError("waited for a layer event that was never recorded")

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class LayerEvents:
    """Per-layer completion events of layer-wise loads, allocated once and reused across steps,
    as SGLang's ``LayerDoneCounter`` (sglang 0.5.23 python/sglang/srt/managers/cache_controller.py:
    ``num_counters = 3`` sets of one event per layer, ``update_producer`` takes the next set for
    a load round, ``LayerLoadingEvent.complete(i)`` records layer i's event on the copy stream
    once layer i's pages are copied, ``set_consumer`` / ``wait_until(i)`` make the forward's
    stream wait for layer i of that round). CUDA events on a GPU, `EmulatedEvent` on CPU.

    All rounds go on one host -> device stream, in order, so layer i's event of the latest round
    also covers every earlier round (each records every layer's event): a forward waits on the
    latest round's events only. A set is reused only once its last event is done
    (`update_producer` waits for it: SGLang asserts it)."""

    NUM_COUNTERS = 3

    def __init__(self, num_layers: int, cuda: bool):
        self.num_layers = num_layers
        make = torch.cuda.Event if cuda else EmulatedEvent
        self.events = [[make() for _ in range(num_layers)] for _ in range(self.NUM_COUNTERS)]
        self.producer = -1
        self.consumer = -1
        self.cuda = cuda

    def update_producer(self) -> int:
        self.producer = (self.producer + 1) % self.NUM_COUNTERS
        done = self.events[self.producer][-1]
        if not done.query():
            done.synchronize()
        return self.producer

    def complete(self, layer: int, stream=None) -> None:
        """Record `layer`'s event of the current round (on `stream`: the copies' stream)."""
        ev = self.events[self.producer][layer]
        ev.record(stream) if stream is not None else ev.record()

    def set_consumer(self, index: int) -> None:
        self.consumer = index

    def wait_until(self, layer: int) -> None:
        """The forward's stream waits for `layer`'s pages of the consumer's round (none: -1)."""
        if self.consumer < 0:
            return
        ev = self.events[self.consumer][layer]
        if self.cuda:
            torch.cuda.current_stream().wait_event(ev)
        else:
            ev.wait()

    def finish_event(self, index: int):
        return self.events[index][-1]


class StagedCopier:
    """Page copies between the tiers of `pools` (module docstring)."""

    def __init__(self, pools, chunk_bytes: int = STAGING_CHUNK_BYTES):
        self.pools = pools
        self.cuda = pools.device.type == "cuda"
        # one stream per direction: a load never queues behind a backup
        self.streams = {"h2d": torch.cuda.Stream(pools.device), "d2h": torch.cuda.Stream(pools.device)} \
            if self.cuda else {}
        self.chunk_bytes = chunk_bytes
        self.staged = False  # True: every copy through the staging buffers
        self.allocations = 0
        self._buf: dict = {}
        self.trace = None  # a list: `copy_round` appends ("copy", pool, unit) of each unit it copies

    def chunk_pages(self, component: str) -> int:
        """Pages of `component` one staging buffer holds (at least one)."""
        return max(1, self.chunk_bytes // self.pools.page_bytes(component))

    def buffer(self, where: str, component: str, pages: int) -> torch.Tensor:
        """The staging buffer ("host": pinned with CUDA, or "device") of `component`, in the
        pools' layout, `chunk_pages` pages (allocated once), narrowed to `pages` of them."""
        d = self.pools.page_dim
        cap = self.chunk_pages(component)
        if pages > cap:
            raise ValueError(f"staging buffer of {component}: {pages} pages asked, a chunk holds {cap}")
        buf = self._buf.get((where, component))
        if buf is None:
            t = self.pools.tensor("L1", component)
            shape = list(t.shape)
            shape[d] = cap
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
        """dst pool[dst_idx[i]] = src pool[src_idx[i]], every layer. `PageIndexError` (nothing
        moved) when an index is outside its pool; ValueError when the counts differ."""
        si, di = self.check(src_tier, dst_tier, component, src_idx, dst_idx)
        if si.numel() == 0:
            return StagedHandle()
        src, dst = self.pools.tensor(src_tier, component), self.pools.tensor(dst_tier, component)
        if not self.cuda or (src.device.type == "cpu" and dst.device.type == "cpu"):
            if self.staged:
                self._on_host_staged(src, dst, component, si, di)
            else:
                self._direct_on_host(src, dst, si, di)
            return StagedHandle()
        to_device = dst.device.type == "cuda"
        host_pool = src if to_device else dst
        if self.staged or not host_pool.is_pinned():
            return (self._to_device_staged if to_device else self._to_host_staged)(src, dst, component, si, di)
        return self._direct_cuda(src, dst, si, di, "h2d" if to_device else "d2h")

    def copy_round(self, items, layer_pools, events: LayerEvents) -> StagedHandle:
        """One layer-wise load round (SGLang's ``start_loading``): `items` ((src tier, dst tier,
        pool, source indices, destination indices), ... checked by `check`, host -> device, or
        host -> host on CPU) move in the model's layer order: for layer l, the unit of every
        item's pool that holds one of the pools l reads (``layer_pools(l)``: (pool, index in
        it), ...; a ``page_first`` pool is one unit, copied before the first layer reading it),
        the runs of all its requests in one copy each, then layer l's event of the round's set
        of `events` (recorded on the host -> device stream). A unit no layer reads goes before the
        last layer's event. A host pool that is not pinned (or ``staged``) is copied whole,
        synchronously, through the staging buffers first. Returns a handle whose `synchronize`
        waits for the round's last event."""
        idx = events.update_producer()
        direct, todo = [], {}
        for a, b, comp, si, di in items:
            src, dst = self.pools.tensor(a, comp), self.pools.tensor(b, comp)
            if si.numel() == 0:
                continue
            host_pool = src if dst.device.type == "cuda" else dst
            if self.staged or (self.cuda and dst.device.type != src.device.type and not host_pool.is_pinned()):
                self.copy(a, b, comp, si, di).synchronize()
                continue
            direct.append((src, dst, pair_runs(si, di)))
            for u in range(len(self.units(src))):
                todo.setdefault((comp, u), []).append(len(direct) - 1)
        stream = self.streams.get("h2d")
        ctx = torch.cuda.stream(stream) if stream is not None else _nullcontext()
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream(self.pools.device))

        def unit(key) -> None:
            for j in todo.pop(key, ()):
                if self.trace is not None:
                    self.trace.append(("copy",) + key)
                src, dst, runs = direct[j]
                s_u, d_u = self.units(src)[key[1]], self.units(dst)[key[1]]
                for s0, d0, k in runs:
                    d_u.narrow(0, d0, k).copy_(s_u.narrow(0, s0, k), non_blocking=self.cuda)

        with ctx:
            for layer in range(events.num_layers):
                for comp, i in layer_pools(layer):
                    unit((comp, self.unit_of_layer(i)))
                if layer == events.num_layers - 1:
                    for key in list(todo):
                        unit(key)
                events.complete(layer, stream)
        return StagedHandle(events=[events.finish_event(idx)] if self.cuda else [], unit_of_layer=lambda _l: 0)

    def check(self, src_tier: str, dst_tier: str, component: str, src_idx, dst_idx) -> tuple:
        """(source, destination) indices as CPU tensors, checked as `copy` checks them."""
        si, di = as_index(src_idx), as_index(dst_idx)
        if si.numel() != di.numel():
            raise ValueError(f"staged copy: {si.numel()} source and {di.numel()} destination indices")
        for name, idx, tier in (("source", si, src_tier), ("destination", di, dst_tier)):
            self._check_range(f"copy {component} {src_tier} -> {dst_tier}", name, idx, tier, component)
        return si, di

    def _check_range(self, what: str, name: str, idx: torch.Tensor, tier: str, component: str) -> None:
        """`PageIndexError` unless every index of `idx` is a page of pool (`tier`, `component`):
        checked on the CPU before anything moves (on CUDA a bad index is a device-side assert)."""
        n = self.pools.size(tier, component)
        bad = idx[(idx < 0) | (idx >= n)]
        if bad.numel():
            raise PageIndexError(f"{what}: {name} index {int(bad[0])} out of range [0, {n}) of pool {tier} {component}")

    # -- direct: one copy per run of pages, pool to pool ---------------------------------------
    def _direct_on_host(self, src, dst, si, di) -> None:
        d = self.pools.page_dim
        for s0, d0, k in pair_runs(si, di):  # layer_first: every layer of the run in one strided copy
            dst.narrow(d, d0, k).copy_(src.narrow(d, s0, k))

    def _direct_cuda(self, src, dst, si, di, direction: str) -> StagedHandle:
        runs = pair_runs(si, di)
        s_units, d_units = self.units(src), self.units(dst)

        def unit(u):
            for s0, d0, k in runs:
                d_units[u].narrow(0, d0, k).copy_(s_units[u].narrow(0, s0, k), non_blocking=True)

        return StagedHandle(self._events(unit, len(s_units), self.streams[direction]), self.unit_of_layer)

    def _events(self, unit, count: int, stream) -> list:
        """Run `unit(u)` for u < `count` on `stream` (after the work already queued on the
        current stream), an event after each."""
        events = []
        stream.wait_stream(torch.cuda.current_stream(self.pools.device))
        with torch.cuda.stream(stream):
            for u in range(count):
                unit(u)
                ev = torch.cuda.Event()
                ev.record(stream)
                events.append(ev)
        return events

    # -- staged: bounded chunks through the staging buffers ------------------------------------
    def _chunks(self, comp, si, di) -> list:
        m = self.chunk_pages(comp)
        return [(si[c:c + m], di[c:c + m]) for c in range(0, si.numel(), m)]

    def _on_host_staged(self, src, dst, comp, si, di) -> None:
        for cs, cd in self._chunks(comp, si, di):
            stage = self.units(self.buffer("host", comp, cs.numel()))
            for s, b, d in zip(self.units(src), stage, self.units(dst)):
                torch.index_select(s, 0, cs, out=b)
                d.index_copy_(0, cd, b)

    def _to_device_staged(self, src, dst, comp, si, di) -> StagedHandle:
        stream = self.streams["h2d"]
        for cs, cd in self._chunks(comp, si, di):  # each chunk done before the buffers are reused
            n = cs.numel()
            host, dev = self.units(self.buffer("host", comp, n)), self.units(self.buffer("device", comp, n))
            s_units, d_units = self.units(src), self.units(dst)
            cd_dev = cd.to(dst.device)

            def unit(u, host=host, dev=dev, cs=cs, cd_dev=cd_dev, s_units=s_units, d_units=d_units):
                torch.index_select(s_units[u], 0, cs, out=host[u])
                dev[u].copy_(host[u], non_blocking=True)
                d_units[u].index_copy_(0, cd_dev, dev[u])

            for ev in self._events(unit, len(host), stream):
                ev.synchronize()
        return StagedHandle()

    def _to_host_staged(self, src, dst, comp, si, di) -> StagedHandle:
        stream = self.streams["d2h"]
        for cs, cd in self._chunks(comp, si, di):
            n = cs.numel()
            host, dev = self.units(self.buffer("host", comp, n)), self.units(self.buffer("device", comp, n))
            s_units, d_units = self.units(src), self.units(dst)
            cs_dev = cs.to(src.device)

            def unit(u, host=host, dev=dev, cs_dev=cs_dev, s_units=s_units):
                torch.index_select(s_units[u], 0, cs_dev, out=dev[u])
                host[u].copy_(dev[u], non_blocking=True)

            for ev in self._events(unit, len(host), stream):
                ev.synchronize()
            for d, h in zip(d_units, host):
                d.index_copy_(0, cd, h)
        return StagedHandle()


__all__ = ["StagedCopier", "StagedHandle", "LayerEvents", "EmulatedEvent", "PageIndexError", "as_index", "index_runs", "pair_runs",
           "STAGING_CHUNK_BYTES", "check_in_range", "pages_array"]
