"""Keys fixed at a node's last access, for policies whose rank depends on state at that time."""
from __future__ import annotations

from typing import Any, Callable


class KeyAtAccess:
    """Per-node keys computed once per access: `key(node)` returns the stored key while the
    node's `stamp` (its access tick, by default) is unchanged, so the eviction queue's lazy
    validation holds, and calls `fresh(node, seen_before)` when it changed (or the node is
    new). Forget a node with `drop` when it is evicted."""

    def __init__(self):
        self._keys: dict = {}  # node id -> (stamp, key)

    def stamp(self, node):
        return node.tick

    def key(self, node):
        got = self._keys.get(node.id)
        now = self.stamp(node)
        if got is not None and got[0] == now:
            return got[1]
        k = self.fresh(node, got is not None)
        self._keys[node.id] = (now, k)
        return k

    def fresh(self, node, seen_before: bool):  # pragma: no cover - abstract
        raise NotImplementedError

    def drop(self, node) -> None:
        self._keys.pop(node.id, None)


class FullRanked:
    """A policy that ranks FULL nodes by its own key and leaves SWA/MAMBA payloads to LRU (their
    tick); `_evicted`, where the policy defines it, is told of each FULL node handed out."""

    key: Callable[[Any], Any]  # the policy's own rank of a FULL node

    def key_for(self, component: str):
        return self.key if component == "full" else (lambda node: node.tick)  # SWA/MAMBA: LRU

    def evict_hook(self, component: str):
        return getattr(self, "_evicted", None) if component == "full" else None
