"""SWA: sliding-window-attention KV, reused through a complete tail window (*window reuse*).

- Payload: ``node.comp[SWA]`` is an `SwaPayload`: one SWA page index per FULL page of the
  node (-1 = *tombstone*: the slot was freed but the node stays, FULL still anchors it),
  plus the window locks that cover the node. SWA pages come from their own pool (its own
  index space; FULL page ``node.value[j]`` maps to SWA page ``pages[j]``).
- Validator: a boundary b is reusable iff the W tokens before it (all of them when b < W)
  hold SWA KV. The voter walks down keeping the length of the present run that ends at the
  current position; every page boundary inside a node is a candidate.
- Insert: a new leaf keeps at most one window (the pages of the last ceil(W/P) pages before
  the inserted end); pages before it are tombstones from the start. An insert *heals*
  tombstones of existing nodes inside its live window with the SWA pages it computed.
- Lock: only the window [b - W, b): every node that intersects it records the window start
  (a split hands the upper half exactly the windows that still intersect it).
- Evict: in policy order over nodes that hold SWA pages and no window lock, from internal
  nodes too: an internal node loses all its SWA pages (tombstones); an unlocked leaf is
  removed whole (its FULL KV is of no use without the window). A leaf whose SWA pages are
  all tombstones is useless and is removed when the tree cleans up after an eviction.
"""
from __future__ import annotations

import numpy as np

from ..allocator import INDEX_DTYPE, PagePool
from ..eviction import EvictionQueue
from .base import Component, ComponentKind

SWA = ComponentKind.SWA


class SwaPayload:
    __slots__ = ("pages", "ntomb", "locks", "sess", "host")

    def __init__(self, pages: np.ndarray, ntomb: int, locks: list | None = None, sess: list | None = None,
                 host: np.ndarray | None = None):
        self.pages = pages  # L1 SWA pages, -1 = not on L1 (tombstone there)
        self.ntomb = ntomb  # pages not on L1
        self.locks = locks if locks is not None else []  # window starts of live locks
        self.sess = sess if sess is not None else []  # window starts of session references
        self.host = host  # with tiers: L2 SWA pages (-1 = not on L2), or None

    def present(self, n: int | None = None) -> np.ndarray:
        """Pages held on some tier (L1 or L2), as a bool mask."""
        p = self.pages if n is None else self.pages[:n]
        if self.host is None:
            return p >= 0
        h = self.host if n is None else self.host[:n]
        return (p >= 0) | (h >= 0)


class _SwaVoter:
    """Walks down the FULL path keeping the present-SWA run that ends at the position."""

    __slots__ = ("W", "P", "run", "clean", "l1_only")

    def __init__(self, window: int, page_size: int, l1_only: bool = False):
        self.W, self.P = window, page_size
        self.l1_only = l1_only
        self.run = 0  # present SWA tokens ending at the current position
        self.clean = True  # no tombstone since the root

    def mask(self, node, start: int, npages: int):
        """Boundaries after page j (j < npages) of `node` that this component accepts."""
        P, W = self.P, self.W
        pl = node.comp[SWA]
        if pl is None or (pl.ntomb == len(pl.pages) and (pl.host is None or self.l1_only
                                                           or pl.host[:npages].max(initial=-1) < 0)):
            self.run, self.clean = 0, False  # nothing of this window anywhere: the usual internal node
            return False
        pages = pl.pages[:npages]
        if pl is not None and pl.host is not None and pl.ntomb and not self.l1_only:
            pages = np.where(pl.present(npages), 0, -1)  # votes see the union of tiers
        elif pages is not None and (pl.ntomb == 0 or (npages < len(pl.pages) and not (pages < 0).any())):
            run0 = self.run
            self.run += npages * P
            if self.clean:
                return True
            first = max(0, -(-(W - run0) // P) - 1)  # first j with run0 + (j+1)P >= W
            if first == 0:
                return True
            if first >= npages:
                return False
            m = np.zeros(npages, dtype=bool)
            m[first:] = True
            return m
        present = pages >= 0 if pages is not None else np.zeros(npages, dtype=bool)
        # run after page j = tokens since the last tombstone at or before j
        idx = np.arange(npages)
        last_tomb = np.maximum.accumulate(np.where(present, -1, idx))
        run = np.where(last_tomb >= 0, (idx - last_tomb) * P, self.run + (idx + 1) * P)
        clean = self.clean & (last_tomb < 0)
        ok = clean | (run >= W)
        self.run = int(run[-1])
        self.clean = bool(clean[-1])
        return ok


class SwaComponent(Component):
    kind = SWA
    name = "swa"

    def __init__(self, cache, window_tokens: int, capacity_tokens: int | None):
        self.cache = cache
        self.tree = cache.tree
        self.P = cache.page_size
        self.window = window_tokens
        self.window_pages = -(-window_tokens // self.P)
        self.pool = PagePool(None if capacity_tokens is None else capacity_tokens // self.P)
        self.queue = EvictionQueue(cache.policy, self._is_candidate, "swa")
        self.evicted_pages = 0
        self.evicted_nodes = 0

    # -- candidates --------------------------------------------------------------------------
    @staticmethod
    def _is_candidate(node) -> bool:
        pl = node.comp[SWA] if node.alive and not node.pending else None  # not while in flight
        return pl is not None and pl.ntomb < len(pl.pages) and not pl.locks

    def touched(self, node) -> None:
        if node is not None and node.parent is not None:
            if self._is_candidate(node):
                self.queue.push(node)
            if self.l3_copies is not None:
                self.l3_copies.offer(node)

    def validator(self, l1_only: bool = False):
        return _SwaVoter(self.window, self.P, l1_only)

    def useless_leaf(self, node) -> bool:
        pl = node.comp[SWA]
        return pl is None or not pl.present().any()

    # -- payload hooks -----------------------------------------------------------------------
    def on_split(self, upper, lower, upper_tokens: int) -> None:
        pl = lower.comp[SWA]
        if pl is None:
            return
        cut = upper_tokens // self.P
        up, lo = pl.pages[:cut], pl.pages[cut:]
        ut = int((up < 0).sum())
        upper_end = upper.end
        host_up = None
        if pl.host is not None:
            host_up, pl.host = pl.host[:cut], pl.host[cut:]
        upper.comp[SWA] = SwaPayload(up, ut, [ws for ws in pl.locks if ws < upper_end],
                                     [ws for ws in pl.sess if ws < upper_end], host_up)
        pl.pages, pl.ntomb = lo, pl.ntomb - ut

    def on_remove(self, node) -> None:
        pl = node.comp[SWA]
        if pl is not None and pl.ntomb < len(pl.pages):
            self.pool.free(pl.pages[pl.pages >= 0])
        if pl is not None and pl.host is not None:
            self.host_pool.free(pl.host[pl.host >= 0])
        node.comp[SWA] = None

    # -- tiers (cache_core/tiers.py moves FULL; SWA pages follow their node) --------------------
    host_pool = None  # set by the hierarchy when an L2 tier exists
    l3_copies = None  # with L3 too: its L2 copies that L3 holds go first (l3_copies.L3HeldCopies)

    def drop_l1(self, node) -> int:
        """Free the node's L1 SWA pages (they stay wherever L2 holds them); returns pages."""
        pl = node.comp[SWA]
        if pl is None or pl.ntomb == len(pl.pages):
            return 0
        present = pl.pages[pl.pages >= 0]
        self.pool.free(present)
        pl.pages = np.full(len(pl.pages), -1, dtype=INDEX_DTYPE)
        pl.ntomb = len(pl.pages)
        return len(present)

    def attach_window(self, bottom, lo: int, hi: int, pages: np.ndarray, new_leaf) -> np.ndarray:
        """Give the pages of [lo, hi) on the path ending at `bottom` (whose end is hi) SWA
        pages, healing tombstones; the new leaf starts as tombstones outside the window.
        `pages[i]` holds the SWA KV of position lo + i*P: a page whose position already holds
        SWA KV is a duplicate. Returns the pages not used (duplicates and extras)."""
        P = self.P
        if new_leaf is not None:
            k = new_leaf.num_tokens // P
            new_leaf.comp[SWA] = SwaPayload(np.full(k, -1, dtype=INDEX_DTYPE), k)
        if (hi - lo) // P <= 0 or not len(pages):
            return pages
        used = np.zeros(len(pages), dtype=bool)
        node = bottom
        while node.parent is not None and node.end > lo:
            start = node.parent.end
            pl = node.comp[SWA]
            if pl is None:
                k = node.num_tokens // P
                pl = node.comp[SWA] = SwaPayload(np.full(k, -1, dtype=INDEX_DTYPE), k)
            j0 = max(0, (lo - start) // P)
            js = np.arange(j0, len(pl.pages))
            off = (start - lo) // P + js  # index into `pages` of each position
            sel = (off < len(pages)) & (pl.pages[j0:] < 0)
            if sel.any():
                pl.pages = pl.pages.copy()
                pl.pages[js[sel]] = pages[off[sel]]
                used[off[sel]] = True
                pl.ntomb -= int(sel.sum())
            self.touched(node)
            node = node.parent
        return pages[~used]

    # -- locks ---------------------------------------------------------------------------------
    def lock(self, node) -> None:
        ws = max(0, node.end - self.window)
        n = node
        while n.parent is not None and n.end > ws:
            pl = n.comp[SWA]
            if pl is not None:
                pl.locks.append(ws)
            n = n.parent

    def unlock(self, node) -> None:
        ws = max(0, node.end - self.window)
        n = node
        while n.parent is not None and n.end > ws:
            pl = n.comp[SWA]
            if pl is not None:
                pl.locks.remove(ws)
                if not pl.locks:
                    self.touched(n)
            n = n.parent

    # -- session references (sessions.py) ------------------------------------------------------
    def add_session_ref(self, node, ws: int) -> None:
        n = node
        while n.parent is not None and n.end > ws:
            pl = n.comp[SWA]
            if pl is not None:
                pl.sess.append(ws)
                self.touched(n)
            n = n.parent

    def drop_session_ref(self, node, ws: int) -> None:
        n = node
        while n.parent is not None and n.end > ws:
            pl = n.comp[SWA]
            if pl is not None and ws in pl.sess:
                pl.sess.remove(ws)
                self.touched(n)
            n = n.parent

    # -- eviction ------------------------------------------------------------------------------
    def evict(self, num: int) -> int:
        """Free at least `num` SWA pages in policy order; returns pages freed."""
        freed, removed = self.evict_payloads(num)
        self.evicted_pages += freed
        self.evicted_nodes += removed
        return freed

    def stats(self) -> dict:
        pages = tombs = tomb_nodes = 0
        for n in self.tree.iter_nodes():
            pl = n.comp[SWA] if n.parent is not None else None
            if pl is not None:
                pages += len(pl.pages) - pl.ntomb
                tombs += pl.ntomb
                tomb_nodes += pl.ntomb == len(pl.pages)
        cap = self.pool.capacity_pages
        return {
            "window_tokens": self.window,
            "capacity_tokens": None if cap is None else cap * self.P,
            "used_tokens": pages * self.P,
            "tombstone_tokens": tombs * self.P,
            "tombstone_nodes": tomb_nodes,
            "evicted_tokens": self.evicted_pages * self.P,
            "evicted_nodes": self.evicted_nodes,
        }
