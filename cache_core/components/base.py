"""The component contract: what every cacheable value on the radix topology implements.

One token-keyed tree gives every prefix its identity; each *component* attaches one kind of
reusable value to it and defines only what differs between kinds:

=================  ==========================================================================
hook               meaning
=================  ==========================================================================
``validator()``    a fresh per-match voter; ``accept(node, end_tokens)`` is asked at every
                   candidate boundary of the FULL traversal, top-down, and may keep state
                   as the walk goes deeper. The reusable boundary is the deepest one that
                   every active component accepts; a rejection never stops the walk.
                   ``None`` means "accepts every boundary" (FULL).
``finalize()``     prepare a matched value for one request (MAMBA: copy the shared
                   checkpoint into a private slot), returning actions for the data plane.
``on_split()``     the tree cut a node; cut this component's payload the same way.
``on_insert()``    attach this component's payload to a node created or extended by insert.
``on_remove()``    the node leaves the tree; release this component's payload.
``lock()``/        protect what a running request reads (FULL: the whole matched path;
``unlock()``       SWA: only the window; MAMBA: the checkpoint).
``evict()``        free at least n units of this component's pool in policy order; removing
                   a payload does not always remove the node (SWA leaves tombstones).
``stats()``        capacity use, evictable vs protected size, evictions, tombstones.
=================  ==========================================================================

FULL is always present and anchors the topology. SWA and MAMBA plug in as new modules that
implement this contract; sidecars have no vote and no tree slot and follow a declared source
component's indices.
"""
from __future__ import annotations

from enum import IntEnum


class ComponentKind(IntEnum):
    """Index of a component's payload slot on a node."""

    FULL = 0
    SWA = 1
    MAMBA = 2


class Component:
    """Base class with no-op hooks; a component overrides what it needs."""

    kind: ComponentKind

    def validator(self, l1_only: bool = False):
        """Return a voter with ``mask(node, start, npages)`` (see vote.py), or None to accept
        all. `l1_only`: vote on what is on the device tier only."""
        return None

    def finalize(self, node, matched_tokens: int) -> list:
        """Actions that make the matched value usable by one request (default: none)."""
        return []

    def on_split(self, upper, lower, upper_tokens: int) -> None:
        """Cut this component's payload: `upper` takes the first `upper_tokens` tokens."""

    def on_remove(self, node) -> None:
        """Release this component's payload of a node that leaves the tree."""

    def lock(self, node) -> None:
        """Protect what a request that matched up to `node` reads."""

    def unlock(self, node) -> None:
        """Undo one `lock(node)`."""

    def evict(self, num: int) -> int:
        """Free at least `num` units of this component's pool if possible; return units freed."""
        return 0

    def stats(self) -> dict:
        return {}

    def evict_payloads(self, num: int) -> tuple[int, int]:
        """The eviction loop SWA and MAMBA share: pop candidates in policy order; an unlocked
        leaf goes whole (when no L2 tier exists: it serves nothing without this payload),
        otherwise only this component's L1 payload is dropped (`drop_l1`; an L2 copy may
        remain). Returns (units freed, nodes removed)."""
        freed = removed = 0
        while freed < num:
            node = self.queue.pop()
            if node is None:
                break
            if not node.children and node.lock_ref == 0 and self.host_pool is None:
                before = self.pool.free_pages
                self.cache._remove_subtree_leaf(node)
                freed += self.pool.free_pages - before
                removed += 1
                continue
            freed += self.drop_l1(node)
        self.queue.maybe_compact(self.cache.tree.num_nodes)
        return freed, removed
