"""The L3 read path as SGLang's HiCache drives a Mooncake store (issue 29 item 2c).

What the links already price (sim/links.py, docs/store_model.md): a transfer on the L3 -> L2
link pays ``l3_latency_s`` (one Mooncake get: the master's BatchQuery RPC and the transfer's
setup), ``l3_block_overhead_s`` per page and its bytes at the protocol's rate (``l3_protocol``
rdma / tcp), processor-shared with every other transfer on the link; pages only the SSD tier
holds are first read on the SSD link (``ssd_latency_s``, ``ssd_bytes_per_s``), as Mooncake's
SSD load path stages them (docs/source/design/store/ssd-offload.md at kvcache-ai/Mooncake@3b5a594:
master query, then the owner's ``FileStorage::BatchGet`` reads them into its ``ClientBuffer``,
then the Transfer Engine pulls them over RDMA/TCP). Then L2 -> L1 is the request's load.

What this module adds, from SGLang's prefetch code (sglang 0.5.23, the reference venv:
``srt/managers/cache_controller.py`` ``prefetch_io_aux_func`` / ``_page_transfer``;
``srt/mem_cache/hicache_storage.py`` ``STORAGE_BATCH_SIZE = 128``):

- one prefetch I/O thread per rank takes the prefetch operations from its queue **one at a time,
  in order** (the ranks run in step, each on its own shard, so one serial pipeline of the
  whole bytes models them all);
- it fetches an operation's pages in batches of ``STORAGE_BATCH_SIZE`` pages, **one Mooncake
  get per batch, in series** (``batch_get_v1``: zero-copy into the host pool for the mooncake
  backend, ``_page_get_zero_copy``: no staging copy on SGLang's side).

So with ``engine.l3_get_batch_pages`` = B (null, the default: off, every prefetch one transfer
as before) a prefetch of n pages is ceil(n / B) transfers on the L3 link, one after another,
each paying the link's latency and per-page cost and its share of the bytes (and, first, its
share of the SSD-only pages on the SSD link), and prefetches wait for each other in FIFO order.
Other transfers (stores, L2 <-> L1) are unchanged.
"""
from __future__ import annotations

from collections import deque

from cache_core.actions import L2, L3

from .links import DataPlane, transfer_pages

SGLANG_STORAGE_BATCH_SIZE = 128  # sglang/srt/mem_cache/hicache_storage.py STORAGE_BATCH_SIZE


def batches(pages: int, nbytes, ssd_pages: int, batch_pages: int) -> list:
    """[(pages, bytes, ssd pages)] of each batch of a transfer of `pages` pages and `nbytes`
    bytes, `ssd_pages` of them only on SSD: batches of `batch_pages` pages in order, the last
    one shorter; bytes and SSD pages split in proportion to the pages (integer parts that add
    up exactly: the cumulative share floored)."""
    out, done = [], 0
    while done < pages:
        n = min(batch_pages, pages - done)
        hi = done + n
        out.append((n, nbytes * hi // pages - nbytes * done // pages, ssd_pages * hi // pages - ssd_pages * done // pages))
        done = hi
    return out


class SerialL3Reads:
    """Wraps a `DataPlane`'s ``submit``: prefetches (L3 -> L2) go through one FIFO I/O thread
    that fetches each in batches (module doc); every other transfer goes as before. Counters:
    ``prefetches``, ``gets`` (batches), ``wait_s`` (time prefetches waited for the thread)."""

    def __init__(self, env, plane: DataPlane, batch_pages: int):
        if isinstance(batch_pages, bool) or not isinstance(batch_pages, int) or batch_pages < 1:
            raise ValueError(f"engine.l3_get_batch_pages must be an integer >= 1, got {batch_pages!r}")
        self.env = env
        self.plane = plane
        self.batch_pages = batch_pages
        self.queue: deque = deque()
        self.busy = False
        self.prefetches = 0
        self.gets = 0
        self.wait_s = 0.0
        self._submit = plane.submit
        plane.submit = self.submit

    def submit(self, t):
        if (t.src_tier, t.dst_tier) != (L3, L2):
            return self._submit(t)
        self.plane.link_for(t)  # the same checks as any transfer
        done = self.env.event()
        self.queue.append((t, done, self.env.now))
        if not self.busy:
            self.busy = True
            self.env.process(self._run())
        return done

    def _run(self):
        env, links = self.env, self.plane.links
        while self.queue:
            t, done, queued = self.queue.popleft()
            self.prefetches += 1
            self.wait_s += env.now - queued
            link, pages = self.plane.link_for(t), transfer_pages(t)
            ssd = t.ssd_pages if links.ssd is not None else 0
            for n, nbytes, ssd_n in batches(pages, t.bytes, ssd, self.batch_pages):
                self.gets += 1
                if ssd_n:
                    yield links.ssd.transfer(t.bytes * ssd_n // pages, pages=ssd_n)
                yield link.transfer(nbytes, pages=n)
            done.succeed(env.now)
        self.busy = False

    def summary(self) -> dict:
        return {"batch_pages": self.batch_pages, "prefetches": self.prefetches, "gets": self.gets,
                "wait_s": self.wait_s}


def install(env, engine, batch_pages: int | None) -> SerialL3Reads | None:
    """Put the serial batched L3 read path on `engine`'s simulated data plane; None (nothing
    wrapped) when `batch_pages` is None."""
    if batch_pages is None:
        return None
    reads = SerialL3Reads(env, engine.dataplane.plane, batch_pages)
    engine.l3_reads = reads
    return reads


__all__ = ["SGLANG_STORAGE_BATCH_SIZE", "SerialL3Reads", "batches", "install"]
