"""Index allocators: fixed-capacity pools of page slots handed out and returned in bulk.

A pool hands out *page* indices; with page size P, page i covers token slots
i*P .. i*P+P-1. Slot indices are what the data plane addresses (device KV pages); the core
only counts and moves them. Both operations are O(k) numpy copies for k pages.
"""
from __future__ import annotations

import numpy as np

INDEX_DTYPE = np.int64
_EMPTY = np.empty(0, dtype=INDEX_DTYPE)


class PagePool:
    """A free list of page indices.

    Fresh indices come from a counter (0, 1, 2, ...) and returned pages are reused
    last-in first-out before any fresh one, so allocation order is deterministic and a huge
    capacity costs no memory up front. `capacity_pages=None` makes the pool unbounded.
    """

    __slots__ = ("capacity_pages", "_free", "_top", "_next", "listener", "frees")

    def __init__(self, capacity_pages: int | None):
        if capacity_pages is not None and capacity_pages < 0:
            raise ValueError(f"capacity_pages must be >= 0, got {capacity_pages}")
        self.capacity_pages = capacity_pages
        self.listener = None  # optional callback(kind, indices) for "alloc" and "free"
        self._free = np.empty(1024, dtype=INDEX_DTYPE)  # recycled pages, a stack
        self._top = 0
        self._next = 0  # next fresh index
        self.frees = 0  # frees so far: a match memo reads it (an allocation changes no tree node: the
        # pages go to a caller; the tree takes them at an insert, which the topology counts)

    @property
    def unbounded(self) -> bool:
        return self.capacity_pages is None

    @property
    def free_pages(self) -> int:
        """Pages available without eviction (for an unbounded pool: the recycled ones)."""
        if self.capacity_pages is None:
            return self._top
        return self._top + self.capacity_pages - self._next

    def can_alloc(self, n: int) -> bool:
        return self.capacity_pages is None or n <= self.free_pages

    def alloc(self, n: int) -> np.ndarray | None:
        """Take `n` pages; None (and nothing taken) when fewer are free."""
        if n <= 0:
            return _EMPTY
        top = self._top
        if n <= top:
            self._top = top - n
            out = self._free[top - n : top][::-1].copy()
        else:
            k = n - top
            if self.capacity_pages is not None and self._next + k > self.capacity_pages:
                return None
            fresh = np.arange(self._next, self._next + k, dtype=INDEX_DTYPE)
            self._next += k
            out = np.concatenate([self._free[:top][::-1], fresh]) if top else fresh
            self._top = 0
        if self.listener is not None:
            self.listener("alloc", out)
        return out

    def free(self, pages: np.ndarray) -> None:
        """Return pages to the pool (the caller guarantees they were allocated here)."""
        k = len(pages)
        if k == 0:
            return
        self.frees += 1
        if self.listener is not None:
            self.listener("free", pages)
        top = self._top
        if top + k > len(self._free):
            grow = np.empty(max(2 * len(self._free), top + k), dtype=INDEX_DTYPE)
            grow[:top] = self._free[:top]
            self._free = grow
        # stored reversed: the next alloc hands this batch out again in the order it was freed
        self._free[top : top + k] = pages[::-1]
        self._top = top + k

    def free_one(self, index: int) -> None:
        """Return a single index (a state slot) to the pool."""
        if self._top == len(self._free) or self.listener is not None:
            self.free(np.array([index], dtype=INDEX_DTYPE))
            return
        self._free[self._top] = index
        self._top += 1
        self.frees += 1

    @property
    def index_bound(self) -> int:
        """One past the highest index this pool can have handed out (for range checks)."""
        return self.capacity_pages if self.capacity_pages is not None else self._next

    def free_view(self) -> np.ndarray:
        """A copy of the free page indices (for invariant checks)."""
        rec = self._free[: self._top]
        if self.capacity_pages is None:
            return rec.copy()
        return np.concatenate([rec, np.arange(self._next, self.capacity_pages, dtype=INDEX_DTYPE)])


def pool_errors(name, pool, held: np.ndarray, outstanding: int, errors: list) -> None:
    """Recount a pool: `held` indices in use, `outstanding` handed out; append error lines."""
    free = pool.free_view()
    both = np.concatenate([held, free])
    bound = pool.index_bound
    if len(both) and (both.min() < 0 or both.max() >= bound):
        errors.append(f"{name}: index out of range [0, {bound})")
    elif len(both) and np.bincount(both, minlength=bound).max() > 1:
        errors.append(f"{name}: an index is in two places")
    if pool.capacity_pages is not None and len(free) + len(held) + outstanding != pool.capacity_pages:
        errors.append(f"{name}: free {len(free)} + held {len(held)} + handed out {outstanding} "
                      f"!= capacity {pool.capacity_pages}")
