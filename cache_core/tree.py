"""The radix topology: token-keyed nodes, match, insert, split, remove. No policy here.

Keys are token runs stored as raw little-endian int64 bytes, so comparing a whole edge is
one `bytes.startswith` (memcmp) and a child is found by the bytes of its first page (one dict
lookup). Every non-root edge is a whole number of pages. The tree never frees memory and
never decides what to evict: components hang their payloads on nodes (`Node.value` for
FULL, `Node.comp[kind]` for the others) and are told about splits and removals through
hooks (see components/base.py).

Logical clock: every match or insert call passes one `tick`; the root and every node the
walk visits get it; a node created by the call (the upper half of a split, a new leaf)
gets a fresh later tick from `RadixTree.fresh()`.

Access statistics are kept *lazily*, so a walk writes O(1) of them instead of O(depth):
only the deepest node a walk visits stores the call's tick; when a node leaves the tree its
parent absorbs its statistics (tick = max, hits += child's). Every ancestor is visited whenever
a descendant is, so for any node with no children — the only nodes a policy ever ranks — the
stored tick is the tick of the last call that visited it, or a fresh tick that call created
below it (a new leaf, a split): both lie between that call's tick and the next call's, so
every comparison with other nodes comes out as if every visited node had been updated.
Hits follow SGLang 0.5.23, which counts them at *insert*, not at match: an insert counts one
hit on every node of its path that ends past `inserted_len` (the tokens the same request
inserted before), the new leaf included, and a split's upper half starts with the hits of
the node it was cut from. Lazily (`count_hits`) that is +1 on the path's last node and -1 on
the deepest node ending at or before `inserted_len`: the sum over a node's subtree, which is
what it holds once it is a leaf, is then exactly SGLang's count. (An internal node's stored
values mean nothing until it becomes a leaf: they may lag behind its descendants' visits, or
hold a creation tick absorbed from a removed child.) A component that takes nodes out of its
own candidate region without removing them from the tree calls `absorb(parent, child)` the
same way.

Complexity: a walk costs one dict lookup and one memcmp per visited node, plus one numpy
comparison on the edge where the paths diverge: O(depth + matched_tokens / 8 bytes-per-op).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .allocator import INDEX_DTYPE
from .keys import TOKEN_DTYPE

_EMPTY_PAGES = np.empty(0, dtype=INDEX_DTYPE)


@dataclass(slots=True, eq=False)
class Node:
    """One radix node. Internal to cache_core: callers never hold one."""

    id: int
    key: bytes  # this edge's tokens, int64 little-endian
    parent: "Node | None"
    tick: int
    created: int
    value: np.ndarray = field(default_factory=lambda: _EMPTY_PAGES)  # FULL pages on L1
    children: dict = field(default_factory=dict)
    lock_ref: int = 0
    hits: int = 0
    alive: bool = True
    hot: "Node | None" = None  # the child a walk entered last (a lookup shortcut)
    end: int = 0  # tokens from the root to the end of this node's edge
    host: "np.ndarray | None" = None  # FULL pages on L2 (tiers only)
    pending: int = 0  # transfers in flight that read or fill this node (tiers only)
    pkeys: "np.ndarray | None" = None  # page keys of this edge (L3 tier or a policy that needs them)
    priority: int = 0  # highest request priority that inserted or extended this node
    srefs: int = 0  # sessions whose registered FULL region (prefix path) covers this node
    comp: list | tuple = field(default_factory=list)  # per-component payloads, by slot (TreeLink.slot) (): none

    @property
    def num_tokens(self) -> int:
        return len(self.key) >> 3

    def tokens(self) -> np.ndarray:
        return np.frombuffer(self.key, dtype=TOKEN_DTYPE)


def _common_tokens(a: bytes, b: bytes, b_off: int, limit: int) -> int:
    """Number of equal leading int64 tokens of a and b[b_off:], compared up to `limit` tokens."""
    x = np.frombuffer(a, dtype=TOKEN_DTYPE, count=limit)
    y = np.frombuffer(b, dtype=TOKEN_DTYPE, count=limit, offset=b_off)
    neq = np.flatnonzero(x != y)
    return int(neq[0]) if len(neq) else limit


class RadixTree:
    """Token-keyed radix tree with page-granular edges.

    `on_split(upper, lower, upper_tokens)` and `on_remove(node)` are called for every split
    and every removed node, so components can cut or drop their payloads.
    """

    def __init__(self, page_size: int, on_split: Callable, on_remove: Callable,
                 comp_slots: int = 0, lazy: bool = True):
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.lazy = lazy  # lazy access statistics (module doc); eager when internal nodes are ranked
        self._comp_slots = comp_slots
        self._pb = 8 * page_size  # bytes per page of key
        self._on_split = on_split
        self._on_remove = on_remove
        self._clock = 0
        self._ids = 0
        self.root = self._new_node(b"", None)
        self.root.lock_ref = 1  # the root is never evicted
        self.num_nodes = 1

    # -- clock and ids -------------------------------------------------------------
    def fresh(self) -> int:
        """Take the next logical tick."""
        self._clock += 1
        return self._clock

    @property
    def now(self) -> int:
        return self._clock

    def _new_node(self, key: bytes, parent: Node | None) -> Node:
        self._ids += 1
        t = self.fresh()
        comp = [None] * self._comp_slots if self._comp_slots else ()
        return Node(id=self._ids, key=key, parent=parent, tick=t, created=t, comp=comp)

    # -- walk ------------------------------------------------------------------------
    def walk(self, qb: bytes, n_tokens: int, tick: int,
             start: Node | None = None, start_tokens: int = 0, visited: list | None = None,
             split: bool = True):
        """Walk down along qb[: n_tokens] (page-aligned), splitting where the match ends
        inside an edge (unless `split` is False: then the returned node is the partly matched
        one). Returns (node, matched_tokens, last_visited_child_or_None).

        With `start` (a live node whose path from the root is exactly qb[:start_tokens],
        e.g. a locked match), the walk resumes there: the nodes above it get the tick through
        parent links instead of being looked up again. Same result, same ticks.

        Ticks are lazy (deepest visited node only) unless `visited` is a list: then every
        visited node gets the tick and is appended to it, top-down. A walk counts no hits
        (`count_hits` does, for an insert)."""
        pb = self._pb
        end = n_tokens << 3
        last = None
        self.root.tick = tick
        if start is None:
            node = self.root
            pos = 0
        else:
            node = start
            pos = start_tokens << 3
            if start.parent is not None:
                last = start
                if visited is not None:
                    self._tick_path(start, tick, visited)
        while pos < end:
            # fast path: the child walked into last time (conversations re-walk one path)
            child = node.hot
            if child is None or not qb.startswith(child.key, pos, end):
                child = node.children.get(qb[pos : pos + pb])
                if child is None:
                    break
                node.hot = child
                if not qb.startswith(child.key, pos, end):
                    last = child
                    if visited is not None:
                        child.tick = tick
                        visited.append(child)
                    node, pos = self._enter_partial(child, qb, pos, end, split)
                    break
            last = child
            if visited is not None:
                child.tick = tick
                visited.append(child)
            pos = child.end << 3
            node = child
        if visited is None and last is not None:  # lazy ticks: the deepest visited node only (module doc)
            last.tick = tick
        return node, pos >> 3, last

    @staticmethod
    def _tick_path(start: Node, tick: int, visited: list) -> None:
        """Eager ticks for a walk resumed at `start`: tick every node from `start` up to
        (not including) the root, and append them to `visited` top-down."""
        up = []
        n = start
        while n.parent is not None:
            n.tick = tick
            up.append(n)
            n = n.parent
        visited.extend(reversed(up))

    def _enter_partial(self, child: Node, qb: bytes, pos: int, end: int, split: bool) -> tuple[Node, int]:
        """The walk stops inside `child`'s edge: match whole pages of it against qb[pos:end]
        (at least one, matched through the dict key), split there when `split` and the match
        ends inside the edge. Returns (node the walk ends at, new byte position)."""
        kb = child.key
        limit = min(len(kb), end - pos) >> 3
        m = _common_tokens(kb, qb, pos, limit) // self.page_size * self.page_size
        node = self.split(child, m) if split and (m << 3) < len(kb) else child
        return node, pos + (m << 3)

    def count_hits(self, node: Node, inserted_len: int = 0) -> list:
        """An insert whose path ends at `node` counts one hit on every node of that path that
        ends past `inserted_len` tokens (SGLang's rule; module doc). Eager: each such node;
        lazy: +1 on `node`, -1 on the deepest node of the path ending at or before it.
        Returns the nodes whose stored hits changed."""
        if not self.lazy:
            path = self.hit_path(node, inserted_len)
            for n in path:
                n.hits += 1
            return path
        changed: list[Node] = []
        if node.parent is None or node.end <= inserted_len:
            return changed
        node.hits += 1
        changed.append(node)
        if inserted_len:
            up = node.parent
            assert up is not None  # node is not the root (checked above)
            while up.parent is not None and up.end > inserted_len:
                up = up.parent
            if up.parent is not None:
                up.hits -= 1
                changed.append(up)
        return changed

    @staticmethod
    def hit_path(node: Node, inserted_len: int = 0) -> list:
        """The nodes of the path ending at `node` that end past `inserted_len`, bottom-up
        (those an insert counts a hit on)."""
        path = []
        while node.parent is not None and node.end > inserted_len:
            path.append(node)
            node = node.parent
        return path

    def split(self, child: Node, upper_tokens: int) -> Node:
        """Cut `child`'s edge after `upper_tokens`; the new upper node gets a fresh tick (and,
        eagerly, `child`'s hits: lazily the subtree sum already includes them)."""
        pb = self._pb
        cut = upper_tokens << 3
        if not 0 < cut < len(child.key) or not child.alive:
            raise ValueError(f"split of node {child.id} at {upper_tokens} tokens: outside its "
                             f"{len(child.key) >> 3}-token edge (or the node is gone)")
        parent = child.parent
        assert parent is not None  # an alive node with an edge is not the root
        upper = self._new_node(child.key[:cut], parent)
        upper.lock_ref = child.lock_ref
        upper.srefs = child.srefs
        upper.priority = child.priority
        upper.end = parent.end + upper_tokens
        if not self.lazy:
            upper.hits = child.hits
        child.key = child.key[cut:]
        child.parent = upper
        upper.children[child.key[:pb]] = child
        upper.hot = child
        parent.children[upper.key[:pb]] = upper
        if parent.hot is child:
            parent.hot = upper
        self.num_nodes += 1
        self._on_split(upper, child, upper_tokens)
        return upper

    def add_leaf(self, parent: Node, key: bytes) -> Node:
        """Attach a new leaf with edge `key` under `parent` (fresh tick)."""
        leaf = self._new_node(key, parent)
        leaf.end = parent.end + (len(key) >> 3)
        parent.children[key[: self._pb]] = leaf
        self.num_nodes += 1
        return leaf

    def remove_leaf(self, node: Node) -> Node:
        """Detach an unlocked leaf; returns its parent."""
        parent = node.parent
        assert parent is not None  # a leaf is not the root
        del parent.children[node.key[: self._pb]]
        if parent.hot is node:
            parent.hot = None
        self.absorb(parent, node)
        node.alive = False
        self.num_nodes -= 1
        self._on_remove(node)
        # stale eviction-queue entries may still point here: keep nothing big alive
        node.key = b""
        node.parent = None
        node.hot = None
        return parent

    def absorb(self, parent: Node, child: Node) -> None:
        """Fold a departing child's lazy access statistics into its parent."""
        if not self.lazy:
            return
        if child.tick > parent.tick:
            parent.tick = child.tick
        parent.hits += child.hits

    # -- inspection -----------------------------------------------------------------------
    def path_nodes(self, qb: bytes, n_tokens: int) -> list:
        """(node, tokens of its edge on the path) along qb[:n_tokens], read-only: no tick,
        no split (it updates only the lookup hint `hot`, as `walk` does). The last node may be
        covered only partly."""
        pb, end = self._pb, n_tokens << 3
        node, pos, out = self.root, 0, []
        while pos < end:
            child = node.hot  # the walk's fast path (a lookup hint only: no result depends on it)
            if child is None or not qb.startswith(child.key, pos, end):
                child = node.children.get(qb[pos : pos + pb])
                if child is None:
                    break
                node.hot = child
                whole = qb.startswith(child.key, pos, end)
            else:
                whole = True
            if whole:
                out.append((child, len(child.key) >> 3))
                pos = child.end << 3
                node = child
                continue
            limit = min(len(child.key), end - pos) >> 3
            m = _common_tokens(child.key, qb, pos, limit) // self.page_size * self.page_size
            out.append((child, m))
            break
        return out

    def iter_nodes(self):
        """All nodes, root first, depth-first (children in insertion order)."""
        stack = [self.root]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(list(n.children.values())))

    def path_tokens(self, node: Node) -> np.ndarray:
        """The whole prefix that ends at `node`."""
        parts = []
        n: Node | None = node
        while n is not None:
            parts.append(n.key)
            n = n.parent
        return np.frombuffer(b"".join(reversed(parts)), dtype=TOKEN_DTYPE)
