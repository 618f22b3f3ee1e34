"""FULL: full-attention KV, reused along the whole path (*path reuse*).

- Payload: ``node.value``, the L1 page indices of the node's tokens (one index per page).
- Validator: none. Every prefix whose tokens are all in the tree is reusable.
- Lock: a reference count on every node from the match point up to the root. Tokens of a
  node with a non-zero count are *protected*; all others are *evictable*.
- Evict: only unlocked leaves, whole nodes at a time, in policy order; a parent becomes a
  candidate when its last child goes and it is unlocked. Removing a FULL payload removes
  the node (FULL anchors the topology), dropping every other component's payload with it.

Costs: lock/unlock O(depth); evicting k nodes O(k log n) (lazy-invalidation heap).
"""
from __future__ import annotations

import numpy as np

from ..allocator import PagePool
from ..eviction import EvictionQueue, Policy
from .base import Component, ComponentKind


class FullComponent(Component):
    kind = ComponentKind.FULL
    name = "full"
    slots_per_page = True

    def __init__(self, tree, capacity_tokens: int | None, policy: Policy, useless=None):
        self.tree = tree
        self.useless = useless  # with voting components: `useless(leaf)`, a leaf none can use
        self.page_size = tree.page_size
        cap_pages = None if capacity_tokens is None else capacity_tokens // self.page_size
        self.pool = PagePool(cap_pages)
        self.queue = EvictionQueue(policy, self.is_candidate)
        self.evictable_tokens = 0
        self.protected_tokens = 0
        self.evicted_tokens = 0  # lifetime total
        self.evicted_nodes = 0
        self.outstanding = 0  # pages handed out to callers (RadixCache.alloc), not yet in the tree

    # -- capacity ------------------------------------------------------------------------
    @property
    def capacity_tokens(self) -> int | None:
        cap = self.pool.capacity_pages
        return None if cap is None else cap * self.page_size

    @property
    def free_tokens(self) -> int:
        return self.pool.free_pages * self.page_size

    # -- candidates ------------------------------------------------------------------------
    @staticmethod
    def is_candidate(node) -> bool:
        return node.alive and node.lock_ref == 0 and not node.children

    def touched(self, node) -> None:
        """`node`'s policy key may have changed: offer it again if it is a candidate."""
        if node is not None and node.lock_ref == 0 and not node.children and node.alive:
            self.queue.push(node)

    # -- payload hooks ------------------------------------------------------------------------
    def on_split(self, upper, lower, upper_tokens: int) -> None:
        cut = upper_tokens // self.page_size
        upper.value = lower.value[:cut]
        lower.value = lower.value[cut:]
        if lower.pkeys is not None:
            upper.pkeys, lower.pkeys = lower.pkeys[:cut], lower.pkeys[cut:]

    def attach(self, leaf, pages: np.ndarray) -> None:
        """Give a new (unlocked) leaf its pages."""
        leaf.value = pages
        self.evictable_tokens += leaf.num_tokens
        self.queue.push(leaf)

    def on_remove(self, node) -> None:
        self.pool.free(node.value)
        self.evictable_tokens -= node.num_tokens

    # -- locks --------------------------------------------------------------------------------
    def lock(self, node) -> None:
        """+1 on every node from `node` to the root. Reference counts never increase going
        down a path, so the nodes that become protected are a bottom segment: their size is
        one subtraction of end positions. O(depth)."""
        n = node
        while n.lock_ref == 0:  # the root always holds 1, so this stops there at the latest
            n.lock_ref = 1
            n = n.parent
        delta = node.end - n.end
        while n.parent is not None:
            n.lock_ref += 1
            n = n.parent
        self.evictable_tokens -= delta
        self.protected_tokens += delta

    def unlock(self, node) -> None:
        """-1 on every node from `node` to the root; offers `node` for eviction if it is
        now an unlocked leaf. O(depth)."""
        if node.parent is None:  # a match of nothing locks nothing
            return
        if node.lock_ref <= 0:
            raise RuntimeError(f"unlock of node {node.id} that is not locked")
        n = node
        while n.lock_ref == 1 and n.parent is not None:
            n.lock_ref = 0
            n = n.parent
        delta = node.end - n.end
        while n.parent is not None:
            n.lock_ref -= 1
            n = n.parent
        self.evictable_tokens += delta
        self.protected_tokens -= delta
        self.touched(node)

    # -- eviction ------------------------------------------------------------------------------
    def remove(self, node):
        """Remove an unlocked leaf (`remove_leaf`), then, with voting components, every
        ancestor that becomes an unlocked leaf none of them can use (e.g. all SWA tombstones,
        no MAMBA checkpoint). Returns (last parent, tokens); they count as evictions."""
        parent, n = self.remove_leaf(node)
        if self.useless is None:
            return parent, n
        root = self.tree.root
        while parent is not root and not parent.children and parent.lock_ref == 0 and self.useless(parent):
            parent, k = self.remove_leaf(parent)
            n += k
        self.touched(parent)
        return parent, n

    def remove_leaf(self, node):
        """Remove an unlocked leaf (all its components go with it); returns (parent, tokens)."""
        n = node.num_tokens
        parent = self.tree.remove_leaf(node)
        self.evicted_tokens += n
        self.evicted_nodes += 1
        return parent, n

    def evict(self, num: int) -> int:
        """Remove unlocked leaves in policy order until `num` tokens are freed or none is left."""
        freed = 0
        queue, remove, touched = self.queue, self.remove, self.touched
        while freed < num:
            node = queue.pop()
            if node is None:
                break
            parent, n = remove(node)
            freed += n
            touched(parent)  # a parent that just became an unlocked leaf is a candidate
        queue.maybe_compact(self.tree.num_nodes)
        return freed

    def page_slots(self, node, npages: int):
        return node.value[:npages]

    def stats(self) -> dict:
        return {
            "capacity_tokens": self.capacity_tokens,
            "free_tokens": self.free_tokens if self.capacity_tokens is not None else None,
            "evictable_tokens": self.evictable_tokens,
            "protected_tokens": self.protected_tokens,
            "evicted_tokens": self.evicted_tokens,
            "evicted_nodes": self.evicted_nodes,
        }
