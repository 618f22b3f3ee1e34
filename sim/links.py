"""Modelled links: one SimPy process per link direction, processor-shared bandwidth.

A ``Link`` is one direction of one link ("L2->L1" is PCIe host-to-device, "L1->L2" the
other way, "L3->L2" / "L2->L3" the node's network to the L3 store). A transfer on it has two
phases:

1. a fixed delay, ``latency_s + pages * per_page_s``, that occupies no bandwidth (a launch,
   an RPC, per-block setup); transfers overlap freely here;
2. a bandwidth phase under *processor sharing*: while n transfers are in this phase each
   moves bytes at ``bandwidth_Bps / n``.

Alone on the link a transfer takes ``latency_s + pages * per_page_s + nbytes / bandwidth_Bps``,
the same as ``sim.cost.transfer_time_s``. Zero-byte transfers cost nothing and complete at
once (as in ``transfer_time_s``). Everything is deterministic.

Algorithm (virtual time). The link keeps a virtual clock ``V``: the bytes that each
bandwidth-phase transfer has received so far since V = 0. V advances at ``bandwidth / n``
while n > 0 transfers are active and stands still when n = 0. A transfer entering the
bandwidth phase at virtual time V0 with ``nbytes`` to move gets a virtual finish tag
``V0 + nbytes``; it completes when V reaches the tag. The tags of active transfers never
change when others arrive or leave (only V's speed does), so "recomputing the others'
remaining times" is just recomputing one number: the real time at which V reaches the
smallest tag, ``now + (tag_min - V) * n / bandwidth``. Active transfers sit in a heap keyed by
tag and transfers in their fixed delay in a heap keyed by their start time, so each event
does O(log active) work (within the O(active) budget).

A single process per link loops: advance V to ``now``; complete every transfer whose tag V
has reached (transfers with equal tags finish at the same instant, exactly); move every
transfer whose fixed delay has ended into the bandwidth phase; then sleep until the earlier
of the next completion, the next end of a fixed delay, or a wake-up from ``transfer()``
(a new arrival). When it wakes exactly at the completion time it planned, V is set to the
target tag exactly, so float round-off never leaves a sliver of work behind.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import simpy

from cache_core.actions import L1, L2, L3, Transfer


def _check_pos(name: str, value, *, zero_ok: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{name} must be {'>= 0' if zero_ok else '> 0'}, got {value!r}")
    return float(value)


class Link:
    """One direction of one link with processor-shared bandwidth (see the module doc).

    ``transfer(nbytes, pages=1)`` returns an event that succeeds, with the completion time
    as its value, when the transfer is done. Counters: ``bytes_done`` (bytes of completed
    transfers), ``busy_time_s`` (time with at least one transfer in the bandwidth phase, up
    to now), ``utilisation(t0, t1)`` (the busy fraction of a window) and ``timeline()``
    (change points of the number of transfers in the bandwidth phase)."""

    def __init__(self, env: simpy.Environment, name: str, bandwidth_Bps: float, latency_s: float,
                 per_page_s: float = 0.0):
        self.env = env
        self.name = name
        self.bandwidth_Bps = _check_pos("bandwidth_Bps", bandwidth_Bps)
        self.latency_s = _check_pos("latency_s", latency_s, zero_ok=True)
        self.per_page_s = _check_pos("per_page_s", per_page_s, zero_ok=True)
        self.bytes_done = 0
        self._seq = 0              # tie-breaker: FIFO among equal keys, never compares events
        self._pending = []         # heap of (start_time, seq, nbytes, event): in the fixed delay
        self._active = []          # heap of (finish_tag, seq, nbytes, event): sharing bandwidth
        self._v = 0.0              # virtual clock: bytes received by each active transfer
        self._last = env.now       # real time at which _v was last brought up to date
        self._planned = None       # (time, tag) of the completion the process sleeps towards
        self._wake = None          # event the process waits on for new arrivals
        self._busy_closed = 0.0    # busy time of finished busy periods
        self._busy_since = None    # start of the current busy period, if any
        self._timeline = [(env.now, 0)]
        self.process = env.process(self._run())

    # -- public -------------------------------------------------------------------------------
    def transfer(self, nbytes: int, pages: int = 1) -> simpy.Event:
        """Start moving `nbytes` (made of `pages` pages, for the per-page overhead) now."""
        if not ((type(nbytes) is int or type(nbytes) is float and nbytes < math.inf) and nbytes >= 0
                and type(pages) is int and pages >= 0):
            _check_transfer(nbytes, pages)  # the common case (plain numbers) skips the full checks
        done = self.env.event()
        if nbytes == 0:
            return done.succeed(self.env.now)
        self._seq += 1
        start = self.env.now + self.latency_s + pages * self.per_page_s
        heapq.heappush(self._pending, (start, self._seq, nbytes, done))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        return done

    def set_bandwidth(self, bandwidth_Bps: float) -> None:
        """From now on the bandwidth phase runs at `bandwidth_Bps` (a fault what-if: a slowed
        link, scenarios/events.py). The bytes received so far are kept: the virtual clock is
        brought up to now at the old rate, then the process replans at the new one."""
        new = _check_pos("bandwidth_Bps", bandwidth_Bps)
        self._advance()
        self.bandwidth_Bps = new
        self._planned = None
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    @property
    def active(self) -> int:
        """Transfers in the bandwidth phase now."""
        return len(self._active)

    @property
    def in_flight(self) -> int:
        """Transfers not yet complete (fixed delay or bandwidth phase)."""
        return len(self._active) + len(self._pending)

    @property
    def busy_time_s(self) -> float:
        """Seconds, up to now, with at least one transfer in the bandwidth phase."""
        if self._busy_since is None:
            return self._busy_closed
        return self._busy_closed + (self.env.now - self._busy_since)

    def utilisation(self, t0: float, t1: float) -> float:
        """Fraction of [t0, t1] with at least one transfer in the bandwidth phase.
        The window must lie within [link creation, now]."""
        if not (t0 < t1):
            raise ValueError(f"utilisation window needs t0 < t1, got [{t0}, {t1}]")
        if t0 < self._timeline[0][0] or t1 > self.env.now:
            raise ValueError(f"utilisation window [{t0}, {t1}] outside [{self._timeline[0][0]}, {self.env.now}]")
        busy = 0.0
        points = self._timeline + [(self.env.now, None)]
        for (ta, n), (tb, _) in zip(points, points[1:]):
            if n > 0:
                lo, hi = max(ta, t0), min(tb, t1)
                if hi > lo:
                    busy += hi - lo
        return busy / (t1 - t0)

    def timeline(self) -> list:
        """[(t_s, active_transfers), ...]: the count of transfers in the bandwidth phase from
        each instant on. The first point is the link's creation time (count 0, or the count
        after a change at that very instant); then one point per instant at which the count
        changed (changes at one instant are merged; equal counts are never repeated)."""
        return list(self._timeline)

    # -- the process --------------------------------------------------------------------------
    def _advance(self):
        now = self.env.now
        if self._planned is not None and now == self._planned[0]:
            self._v = self._planned[1]
        elif self._active:
            self._v = min(self._v + (now - self._last) * self.bandwidth_Bps / len(self._active),
                          self._active[0][0])
        self._last = now

    def _record(self, before: int):
        now, n = self.env.now, len(self._active)
        if before == 0 and n > 0:
            self._busy_since = now
        elif before > 0 and n == 0:
            self._busy_closed += now - self._busy_since
            self._busy_since = None
        last_t, last_n = self._timeline[-1]
        if n == last_n:
            return
        if last_t != now:
            self._timeline.append((now, n))
        elif len(self._timeline) == 1:      # the creation point itself
            self._timeline[0] = (now, n)
        else:                               # a second change at the same instant: merge
            self._timeline.pop()
            if self._timeline[-1][1] != n:
                self._timeline.append((now, n))

    def _run(self):
        env = self.env
        while True:
            self._advance()
            before = len(self._active)
            done = []
            while self._active and self._active[0][0] <= self._v:
                _, _, nbytes, ev = heapq.heappop(self._active)
                self.bytes_done += nbytes
                done.append(ev)
            while self._pending and self._pending[0][0] <= env.now:
                _, seq, nbytes, ev = heapq.heappop(self._pending)
                heapq.heappush(self._active, (self._v + nbytes, seq, nbytes, ev))
            self._record(before)
            for ev in done:
                ev.succeed(env.now)
            # sleep until the next completion, the next end of a fixed delay, or an arrival
            self._planned = None
            wake_at = math.inf
            if self._active:
                tag = self._active[0][0]
                t = env.now + (tag - self._v) * len(self._active) / self.bandwidth_Bps
                self._planned = (t, tag)
                wake_at = t
            if self._pending:
                wake_at = min(wake_at, self._pending[0][0])
            self._wake = env.event()
            if wake_at == math.inf:
                yield self._wake
            else:
                yield self._wake | env.timeout(wake_at - env.now)
            self._wake = None

    def __repr__(self):
        return (f"Link({self.name!r}, {self.bandwidth_Bps:g} B/s, {self.latency_s:g} s, "
                f"per_page {self.per_page_s:g} s, active {self.active})")


def _check_transfer(nbytes, pages) -> None:
    """ValueError unless `nbytes` is a finite number >= 0 and `pages` an integer >= 0."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not math.isfinite(nbytes) \
            or nbytes < 0:
        raise ValueError(f"transfer bytes must be a finite number >= 0, got {nbytes!r}")
    if isinstance(pages, bool) or not isinstance(pages, int) or pages < 0:
        raise ValueError(f"pages must be an integer >= 0, got {pages!r}")


# ------------------------------------------------------------------------------------------
# The four links of a node and the data plane over them
# ------------------------------------------------------------------------------------------

KIND_TIERS = {"load": (L2, L1), "backup": (L1, L2), "store": (L2, L3), "prefetch": (L3, L2)}
"""Transfer kind -> (src_tier, dst_tier), as documented on cache_core.actions.Transfer."""


@dataclass
class LinkSet:
    """The four link directions of a node, keyed by (src_tier, dst_tier), and the SSD read
    link of an L3 store's SSD tier (cache.l3_ssd_tokens: a read of pages only the SSD holds
    goes through it before the network; docs/store_model.md)."""

    links: dict
    ssd: Link | None = None

    @classmethod
    def from_hardware(cls, env: simpy.Environment, hw) -> "LinkSet":
        """Build "L2->L1"/"L1->L2" from the preset's PCIe numbers (``pcie_bytes_per_s``: the
        rate of its io backend, ``pcie_latency_s``), "L3->L2"/"L2->L3" from its L3 numbers
        (``l3_bytes_per_s``: the rate of its protocol, ``l3_latency_s``, ``l3_block_overhead_s``
        per page) and the SSD read link from ``ssd_bytes_per_s`` and ``ssd_latency_s``.

        The PCIe links are one GPU's host link: every TP rank moves its own shard over its own
        link at the same time, so one rank's link (its bytes: `DataPlane`'s ``shards``) times
        the whole transfer. The L3 links belong to the node."""
        pcie_bw = hw.pcie_bytes_per_s
        links = {
            (L2, L1): Link(env, "L2->L1", pcie_bw, hw.pcie_latency_s),
            (L1, L2): Link(env, "L1->L2", pcie_bw, hw.pcie_latency_s),
            (L3, L2): Link(env, "L3->L2", hw.l3_bytes_per_s, hw.l3_latency_s, hw.l3_block_overhead_s),
            (L2, L3): Link(env, "L2->L3", hw.l3_bytes_per_s, hw.l3_latency_s, hw.l3_block_overhead_s),
        }
        ssd = Link(env, "SSD->L3", hw.ssd_bytes_per_s, hw.ssd_latency_s)
        return cls(links, ssd)

    def get(self, src_tier: str, dst_tier: str) -> Link:
        """The link from `src_tier` to `dst_tier`; ValueError for a pair with no link."""
        try:
            return self.links[(src_tier, dst_tier)]
        except KeyError:
            known = ", ".join(f"{a}->{b}" for a, b in self.links)
            raise ValueError(f"no link {src_tier}->{dst_tier}; known: {known}") from None

    def __iter__(self):
        return iter(self.links.values())


def transfer_pages(t: Transfer) -> int:
    """Pages a Transfer is made of: its keys (L3 addresses pages by key), else its slot
    indices on either side, else 1 (a single state slot)."""
    for side in (t.keys, t.src, t.dst):
        if side is not None and hasattr(side, "__len__") and not isinstance(side, (str, bytes)):
            return len(side)
    return 1


PCIE_PAIRS = frozenset({(L2, L1), (L1, L2)})


class DataPlane:
    """Routes ``cache_core.actions.Transfer`` records onto a LinkSet.

    A Transfer's bytes are the whole model's (every rank's shard together). On the PCIe links,
    which model one rank's link, a transfer of component c moves ``bytes / shards[c]``
    (`scenarios.presets.transfer_shards`: GQA KV splits over the ranks, a replicated MLA
    latent does not, so each rank moves all of it), and their ``bytes_done`` count one rank's
    bytes, as SGLang counts a load's (``HiCacheController._transfer_num_bytes``: tokens x the
    rank's host pool ``size_per_token``). L3 transfers move the whole bytes over the node's
    link. ``shards`` None: 1 for every component (one GPU)."""

    def __init__(self, links: LinkSet, shards: dict | None = None):
        self.links = links
        self.shards = dict(shards or {})
        for c, ways in self.shards.items():
            if isinstance(ways, bool) or not isinstance(ways, int) or ways < 1:
                raise ValueError(f"shards[{c!r}] must be an integer >= 1, got {ways!r}")

    def link_for(self, t: Transfer) -> Link:
        """The link of `t`'s (src_tier, dst_tier); ValueError for an unknown pair or a kind
        that does not match its tiers."""
        pair = (t.src_tier, t.dst_tier)
        expected = KIND_TIERS.get(t.kind)
        if expected is not None and expected != pair:
            raise ValueError(f"transfer {t.id}: kind {t.kind!r} moves {expected[0]}->{expected[1]}, "
                             f"not {t.src_tier}->{t.dst_tier}")
        return self.links.get(*pair)

    def submit(self, t: Transfer) -> simpy.Event:
        """Start `t` on its link; the returned event succeeds (value: completion time) when
        the bytes have arrived, i.e. when the caller may ``RadixCache.ack(t.id)``. A prefetch
        with ``ssd_pages`` reads those pages' bytes on the SSD link first."""
        link, pages = self.link_for(t), transfer_pages(t)
        if (t.src_tier, t.dst_tier) in PCIE_PAIRS:
            return link.transfer(t.bytes / self.shards.get(t.component, 1), pages=pages)
        if not t.ssd_pages or self.links.ssd is None:
            return link.transfer(t.bytes, pages=pages)
        return link.env.process(self._from_ssd(t, link, pages))

    def _from_ssd(self, t: Transfer, link: Link, pages: int):
        yield self.links.ssd.transfer(t.bytes * t.ssd_pages // pages, pages=t.ssd_pages)
        return (yield link.transfer(t.bytes, pages=pages))


__all__ = ["DataPlane", "KIND_TIERS", "Link", "LinkSet", "PCIE_PAIRS", "transfer_pages"]
