"""FULL with L1/L2 residency (cache_core/tiers/hierarchy.py): device leaves are demoted, not removed, when backed
up; the hierarchy that builds it owns the L2 pool, its queue and the transfers, and hands it a
`FullTierLink` (components/ports.py), never itself."""
from __future__ import annotations

from .full import FullComponent
from .ports import FullTierLink


class TieredFull(FullComponent):
    """FULL with L1/L2 residency: device leaves are demoted, not removed, when backed up."""

    def __init__(self, tree, capacity_tokens, policy, useless):
        super().__init__(tree, capacity_tokens, policy, useless)
        self.tier_port: FullTierLink | None = None  # given by the hierarchy that built it
        self.demoted_tokens = 0

    def attach_tiers_port(self, link: FullTierLink) -> None:
        self.tier_port = link

    def _port(self) -> FullTierLink:
        """The port (set before any node reaches L2: only nodes with a host copy need it)."""
        assert self.tier_port is not None
        return self.tier_port

    @staticmethod
    def is_candidate(node) -> bool:
        if not node.alive or node.value is None or node.lock_ref or node.pending:
            return False
        for c in node.children.values():
            if c.value is not None or (c.pending and c.host is not None):  # on L1, or loading onto it
                return False
        return True

    def touched(self, node) -> None:
        if node is not None and node.parent is not None and self.is_candidate(node):
            self.queue.push(node)

    def on_split(self, upper, lower, upper_tokens: int) -> None:
        cut = upper_tokens // self.page_size
        if lower.value is not None:
            upper.value, lower.value = lower.value[:cut], lower.value[cut:]
        else:
            upper.value = None
        if lower.host is not None:
            upper.host, lower.host = lower.host[:cut], lower.host[cut:]
        if lower.pkeys is not None:
            upper.pkeys, lower.pkeys = lower.pkeys[:cut], lower.pkeys[cut:]
        if lower.pending and self.tier_port is not None:
            self.tier_port.split_in_flight(upper, lower)

    def on_remove(self, node) -> None:
        if node.value is not None:
            self.pool.free(node.value)
            if node.lock_ref == 0:
                self.evictable_tokens -= node.num_tokens
            node.value = None
        if node.host is not None:
            self._port().host_pool.free(node.host)
            node.host = None

    def lock(self, node) -> None:
        delta = 0
        n = node
        while n.parent is not None:
            if n.lock_ref == 0 and n.value is not None:
                delta += n.num_tokens
            n.lock_ref += 1
            n = n.parent
        self.evictable_tokens -= delta
        self.protected_tokens += delta

    def unlock(self, node) -> None:
        if node.parent is None:
            return
        if node.lock_ref <= 0:
            raise RuntimeError(f"unlock of node {node.id} that is not locked")
        delta = 0
        n = node
        while n.parent is not None:
            n.lock_ref -= 1
            if n.lock_ref == 0:
                if n.value is not None:
                    delta += n.num_tokens
                self.touched(n)
                self._port().host_touched(n)
            n = n.parent
        self.evictable_tokens += delta
        self.protected_tokens -= delta

    def set_l1(self, node, pages) -> None:
        """A load completed: the node's KV is valid on L1 again."""
        node.value = pages
        if node.lock_ref:
            self.protected_tokens += node.num_tokens
        else:
            self.evictable_tokens += node.num_tokens
        self.touched(node)

    def remove_leaf(self, node):
        """Evict a device leaf: demote it when it has (or, write_back, gets) an L2 copy,
        else remove it from the tree. Returns (parent, L1 tokens freed)."""
        tiers = self.tier_port
        if node.host is None and tiers.write_back and tiers.host_pool is not None:
            tiers.backup_chain(node)
        n = node.num_tokens
        if node.host is not None and not node.pending:
            self.pool.free(node.value)
            node.value = None
            for c in tiers.voters:
                c.demote(node)
            self.evictable_tokens -= n
            self.demoted_tokens += n
            self.evicted_tokens += n
            self.evicted_nodes += 1
            tiers.host_touched(node)
            return node.parent, n
        if node.children or node.pending:
            return node.parent, 0  # cannot go yet (a backup in flight)
        return super().remove_leaf(node)
