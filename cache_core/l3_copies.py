"""A component's L2 copies that L3 also holds, dropped first when its L2 pool is short
(tiers_hybrid.py: SWA pages and MAMBA checkpoints on the tiers)."""
from __future__ import annotations

import numpy as np

from .components.mamba import MAMBA
from .eviction import EvictionQueue


class L3HeldCopies:
    """A component's L2 copies in policy order, for dropping those that L3 also holds (SWA
    pages stored under ("swa", key), a checkpoint under ("mamba", key of its last page)) when
    its L2 pool is short: they stay reusable through L3 (`l3_boundary` fetches them back),
    so they go before any host-only node is evicted for the pool. Queue candidates: nodes
    with an L2 copy, nothing in flight, no window/checkpoint lock; whether L3 holds a copy is
    read when it is popped (a candidate L3 does not cover is offered again)."""

    def __init__(self, hier, comp):
        self.hier, self.comp = hier, comp
        self.queue = EvictionQueue(hier.cache.policy, self.is_candidate, comp.name)
        self.dropped = 0  # SWA pages / checkpoints dropped from L2

    def is_candidate(self, node) -> bool:
        pl = node.comp[self.comp.kind] if node.alive and not node.pending else None
        if pl is None or pl.locks or pl.host is None:
            return False
        return bool(pl.host >= 0) if self.comp.kind == MAMBA else bool((pl.host >= 0).any())

    def offer(self, node) -> None:
        if self.is_candidate(node):
            self.queue.push(node)

    def _held(self, node, pl) -> np.ndarray:
        """Positions (SWA: page indices within the node; MAMBA: [0]) of L2 copies L3 holds."""
        storage, pk = self.hier.storage, node.pkeys
        if pk is None or not len(pk):
            return np.empty(0, dtype=np.int64)
        if self.comp.kind == MAMBA:
            return np.zeros(1 if ("mamba", int(pk[-1])) in storage else 0, dtype=np.int64)
        idx = np.flatnonzero(pl.host >= 0)
        return idx[[("swa", int(k)) in storage for k in pk[idx].tolist()]] if len(idx) else idx

    def drop(self, units: int) -> int:
        """Drop at least `units` L2 copies that L3 holds, in policy order; returns units freed."""
        freed = 0
        kept = []
        while freed < units:
            node = self.queue.pop()
            if node is None:
                break
            pl = node.comp[self.comp.kind]
            held = self._held(node, pl)
            if not len(held):
                kept.append(node)
                continue
            if self.comp.kind == MAMBA:
                self.comp.host_pool.free_one(pl.host)
                pl.host = -1
            else:
                self.comp.host_pool.free(pl.host[held])
                h = pl.host.copy()
                h[held] = -1
                pl.host = h
                self.offer(node)  # copies L3 does not hold may remain
            freed += len(held)
        for node in kept:
            self.queue.push(node)
        self.queue.maybe_compact(self.hier.cache.tree.num_nodes)
        self.dropped += freed
        return freed
