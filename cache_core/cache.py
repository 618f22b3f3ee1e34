"""`RadixCache`: the orchestrator over the radix topology and its components.

Public calls take and return small dataclasses; callers never hold tree nodes (a
`MatchResult` carries an opaque handle used for lock/unlock and insert bookkeeping).

Typical request (this is what `replay.ReplayStepper` does, step by step)::

    seq = TokenSeq(prompt + output[:-1])
    m = cache.match(seq, limit)          # longest cached prefix, page-aligned
    cache.lock(m)                        # protect the matched path
    pages = cache.alloc(n)               # page indices for the new tokens (may evict)
    cache.insert(seq, n_aligned, pages, m.cached_tokens)
    cache.unlock(m)

All costs are logical: the cache is given no clock, sleeps never and touches no bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .allocator import INDEX_DTYPE
from .components.base import ComponentKind
from .components.full import FullComponent
from .eviction import make_policy
from .keys import as_tokens
from .tree import RadixTree

_EMPTY = np.empty(0, dtype=INDEX_DTYPE)


@dataclass(frozen=True, kw_only=True)
class CacheConfig:
    """Static configuration of one cache. Sizes in tokens; None = unbounded."""

    page_size: int = 1
    capacity_tokens: int | None = None
    policy: str = "lru"

    def __post_init__(self):
        if not isinstance(self.page_size, int) or self.page_size < 1:
            raise ValueError(f"page_size must be an integer >= 1, got {self.page_size!r}")
        if self.capacity_tokens is not None and (
            not isinstance(self.capacity_tokens, int) or self.capacity_tokens < 0
        ):
            raise ValueError(f"capacity_tokens must be an integer >= 0 or None, got {self.capacity_tokens!r}")
        make_policy(self.policy)  # raises ValueError for an unknown name

    @property
    def usable_tokens(self) -> int | None:
        """floor(capacity / page_size) * page_size."""
        if self.capacity_tokens is None:
            return None
        return self.capacity_tokens // self.page_size * self.page_size


class TokenSeq:
    """A token sequence prepared once for repeated matching (int64 bytes + length)."""

    __slots__ = ("data", "length")

    def __init__(self, tokens):
        if isinstance(tokens, TokenSeq):
            self.data, self.length = tokens.data, tokens.length
            return
        arr = as_tokens(tokens)
        self.data = arr.tobytes()
        self.length = len(arr)

    def __len__(self) -> int:
        return self.length


class LockHandle:
    """Opaque reference to a matched prefix; only the cache looks inside."""

    __slots__ = ("_node",)

    def __init__(self, node):
        self._node = node


@dataclass(frozen=True, slots=True)
class MatchResult:
    cached_tokens: int  # reusable prefix length (page-aligned)
    handle: LockHandle


@dataclass(frozen=True, slots=True)
class InsertResult:
    prefix_tokens: int  # tokens of the key that were already in the tree
    freed_pages: int  # pages handed back: duplicates of tree content and the partial tail


class RadixCache:
    """One radix tree with its components (FULL only for now) on the device tier."""

    def __init__(self, config: CacheConfig):
        self.config = config
        self.page_size = config.page_size
        self.policy = make_policy(config.policy)
        self.tree = RadixTree(config.page_size, self._on_split, self._on_remove)
        self.full = FullComponent(self.tree, config.usable_tokens, self.policy)
        self.components = [self.full]  # indexed by ComponentKind
        self._outstanding_pages = 0  # allocated to callers, not yet in the tree or freed
        self._locks: dict[int, list] = {}  # node id -> [node, count], for invariant checks

    # -- tree hooks fan out to components ----------------------------------------------------
    def _on_split(self, upper, lower, upper_tokens):
        for c in self.components:
            c.on_split(upper, lower, upper_tokens)

    def _on_remove(self, node):
        for c in self.components:
            c.on_remove(node)

    # -- match / lock ------------------------------------------------------------------------
    def match(self, seq, limit_tokens: int | None = None) -> MatchResult:
        """Longest cached prefix of seq[:limit] (cut to whole pages). Takes one tick: the root
        and each visited node get it; a split's upper half gets a fresh later tick."""
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        n = seq.length if limit_tokens is None else min(limit_tokens, seq.length)
        n = n // self.page_size * self.page_size
        tick = self.tree.fresh()
        node, matched, last = self.tree.walk(seq.data, n, tick, True)
        self.full.touched(last)
        return MatchResult(matched, LockHandle(node))

    def lock(self, m: MatchResult) -> None:
        node = m.handle._node
        for c in self.components:
            c.lock(node)
        entry = self._locks.setdefault(node.id, [node, 0])
        entry[1] += 1

    def unlock(self, m: MatchResult) -> None:
        node = m.handle._node
        entry = self._locks.get(node.id)
        if entry is None:
            raise RuntimeError("unlock without a matching lock")
        for c in self.components:
            c.unlock(node)
        entry[1] -= 1
        if entry[1] == 0:
            del self._locks[node.id]

    # -- memory ------------------------------------------------------------------------------
    @property
    def free_tokens(self) -> int:
        return self.full.free_tokens

    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` of FULL L1 (if evictable); returns tokens freed."""
        if num_tokens <= 0:
            return 0
        return self.full.evict(num_tokens)

    def alloc(self, num_pages: int):
        """Take `num_pages` L1 pages without evicting; None if not enough are free."""
        pages = self.full.pool.alloc(num_pages)
        if pages is not None:
            self._outstanding_pages += len(pages)
        return pages

    def free(self, pages: np.ndarray) -> None:
        """Return pages obtained from `alloc` that will not be inserted."""
        self._outstanding_pages -= len(pages)
        self.full.pool.free(pages)

    # -- insert -----------------------------------------------------------------------------------
    def insert(self, seq, num_tokens: int, pages: np.ndarray = _EMPTY, pages_from: int = 0,
               after: MatchResult | None = None) -> InsertResult:
        """Insert seq[:num_tokens] (page-aligned). `pages` hold the KV of tokens
        pages_from .. pages_from + len(pages)*P: those the tree already holds are freed, the
        rest go to the new leaf, and pages past num_tokens (a partial tail) are freed too.
        Takes one tick, with the same visiting and splitting rules as `match`.

        `after`: a still-locked match of a prefix of `seq` (no longer than num_tokens); the
        walk resumes from it instead of looking the matched path up again (same result)."""
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        P = self.page_size
        if num_tokens % P or num_tokens > seq.length:
            raise ValueError(f"insert length {num_tokens} must be page-aligned and <= {seq.length}")
        tree = self.tree
        tick = tree.fresh()
        if after is not None:
            start = after.handle._node
            if start.lock_ref <= 0 or not start.alive or after.cached_tokens > num_tokens:
                raise ValueError("`after` must be a locked match of a prefix of the inserted tokens")
            node, prefix, last = tree.walk(seq.data, num_tokens, tick, False, start, after.cached_tokens)
        else:
            node, prefix, last = tree.walk(seq.data, num_tokens, tick, False)
        self.full.touched(last)
        freed = 0
        if len(pages):
            if prefix < pages_from or pages_from % P:
                raise ValueError("pages must start at a page boundary inside the cached prefix")
            lo = (prefix - pages_from) // P
            hi = (num_tokens - pages_from) // P
            if lo:
                self.free(pages[:lo])
            if hi < len(pages):
                self.free(pages[hi:])
            freed = lo + max(0, len(pages) - hi)
            if prefix < num_tokens:
                if hi > len(pages):
                    raise ValueError("not enough pages for the new tokens")
                leaf = tree.add_leaf(node, seq.data[prefix << 3 : num_tokens << 3])
                self._outstanding_pages -= hi - lo
                self.full.attach(leaf, pages[lo:hi])
        elif prefix < num_tokens:
            raise ValueError("insert of new tokens needs their pages")
        return InsertResult(prefix, freed)

    # -- reporting --------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return self.tree.num_nodes

    @property
    def cached_tokens_total(self) -> int:
        return self.full.evictable_tokens + self.full.protected_tokens

    def stats(self) -> dict:
        return {"nodes": self.tree.num_nodes, "page_size": self.page_size, "policy": self.policy.name,
                "full": self.full.stats()}
