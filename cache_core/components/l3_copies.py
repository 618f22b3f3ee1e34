"""A component's L2 copies that L3 also holds, dropped first when its L2 pool is short
(the components' tier modules: SWA pages and MAMBA checkpoints on the tiers)."""
from __future__ import annotations

from ..eviction import EvictionQueue


class L3HeldCopies:
    """A component's L2 copies in policy order, for dropping those that L3 also holds (SWA
    pages stored under ("swa", key), a checkpoint under ("mamba", key of its last page)) when
    its L2 pool is short: they stay reusable through L3 (`l3_mask` fetches them back), so
    they go before any host-only node is evicted for the pool. Queue candidates: nodes with
    an L2 copy, nothing in flight, no window/checkpoint lock; whether L3 holds a copy is read
    when it is popped (a candidate L3 does not cover is offered again). The component says
    which copies L3 holds (`held_in_l3`) and drops them (`drop_host`)."""

    def __init__(self, storage, link, comp):
        self.storage, self.tree, self.comp = storage, link.tree, comp
        self.queue = EvictionQueue(link.policy, self.is_candidate, comp.name, comp.session_referenced)
        self.dropped = 0  # SWA pages / checkpoints dropped from L2

    def is_candidate(self, node) -> bool:
        pl = node.comp[self.comp.kind] if node.alive and not node.pending else None
        if pl is None or pl.locks or pl.host is None:
            return False
        return self.comp.has_host_copy(pl)

    def offer(self, node) -> None:
        if self.is_candidate(node):
            self.queue.push(node)

    def drop(self, units: int) -> int:
        """Drop at least `units` L2 copies that L3 holds, in policy order; returns units freed."""
        freed = 0
        kept = []
        comp = self.comp
        while freed < units:
            node = self.queue.pop()
            if node is None:
                break
            pl = node.comp[comp.kind]
            held = comp.held_in_l3(node, pl, self.storage) if node.pkeys is not None and len(node.pkeys) else ()
            if not len(held):
                kept.append(node)
                continue
            comp.drop_host(node, pl, held)
            self.offer(node)  # copies L3 does not hold may remain
            freed += len(held)
        for node in kept:
            self.queue.push(node)
        self.queue.maybe_compact(self.tree.num_nodes)
        self.dropped += freed
        return freed
