"""SWA: sliding-window-attention KV, reused through a complete tail window (*window reuse*).

- Payload: ``node.comp[link.slot]`` is an `SwaPayload`: one SWA page index per FULL page of the
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

from ...actions import L1, L2
from ...allocator import INDEX_DTYPE, PagePool, pool_errors
from ...eviction import EvictionQueue
from ..base import Component
from . import tiers as swa_tiers
from .payload import SwaPayload, SwaVoter

_EMPTY = np.empty(0, dtype=INDEX_DTYPE)


class SwaComponent(Component):
    name = "swa"
    lost_reason = "SWA window incomplete"
    slots_per_page = True

    def __init__(self, link, window_tokens: int, capacity_tokens: int | None, bytes_per_token: int = 0):
        self.link = link
        self.kind = link.slot
        self.tree = link.tree
        self.P = link.page_size
        self.window = window_tokens
        self.window_pages = -(-window_tokens // self.P)
        self.pool = PagePool(None if capacity_tokens is None else capacity_tokens // self.P)
        self.queue = EvictionQueue(link.policy, self.is_candidate, "swa", self.session_referenced)
        self.bytes_per_token = bytes_per_token
        self.tiers = None  # a TierLink once attach_tiers ran
        self.outstanding = 0  # pages handed out to requests
        self.evicted_pages = 0
        self.evicted_nodes = 0

    # -- candidates --------------------------------------------------------------------------
    def is_candidate(self, node) -> bool:
        pl = node.comp[self.kind] if node.alive and not node.pending else None  # not while in flight
        return pl is not None and pl.ntomb < len(pl.pages) and not pl.locks

    def validator(self, l1_only: bool = False):
        return SwaVoter(self.kind, self.window, self.P, l1_only)

    def useless_leaf(self, node) -> bool:
        """No boundary in `node` has its whole SWA window on some tier (L1 or L2; the window
        may start in an ancestor, and a path with no tombstone since the root accepts any
        boundary): e.g. all tombstones, or one page of a two-page window whose other page
        left with a child."""
        pl = node.comp[self.kind]
        if pl is None:
            return True
        present = pl.present()
        if not present.any():  # the usual useless leaf: every page gone from the tiers
            return True
        wp = self.window_pages
        if len(present) >= wp and present[-wp:].all():  # the usual kept one: its last window is whole
            return False
        # runs of present pages between the gaps; a first page present continues the parent's tail
        tail = self.tail_run(node.parent, wp) if present[0] else 0
        bounds = np.concatenate(([-1 - tail], np.flatnonzero(~present), [len(present)]))
        return not (np.diff(bounds) - 1 >= wp).any()

    def tail_run(self, node, wp: int) -> int:
        """SWA pages present (any tier) at the end of the path to `node`, up to `wp` (`wp`
        when the path back to the root has no tombstone)."""
        run = 0
        while node.parent is not None and run < wp:
            pl = node.comp[self.kind]
            if pl is None:
                return run
            present = pl.present()
            gaps = np.flatnonzero(~present)
            if len(gaps):
                return run + len(present) - 1 - int(gaps[-1])
            run += len(present)
            node = node.parent
        return wp

    # -- payload hooks -----------------------------------------------------------------------
    def on_split(self, upper, lower, upper_tokens: int) -> None:
        pl = lower.comp[self.kind]
        if pl is None:
            return
        cut = upper_tokens // self.P
        up, lo = pl.pages[:cut], pl.pages[cut:]
        ut = int((up < 0).sum())
        upper_end = upper.end
        host_up = None
        if pl.host is not None:
            host_up, pl.host = pl.host[:cut], pl.host[cut:]
        upper.comp[self.kind] = SwaPayload(up, ut, [ws for ws in pl.locks if ws < upper_end],
                                     [ws for ws in pl.sess if ws < upper_end], host_up)
        pl.pages, pl.ntomb = lo, pl.ntomb - ut

    def on_remove(self, node) -> None:
        pl = node.comp[self.kind]
        if pl is not None and pl.ntomb < len(pl.pages):
            self.pool.free(pl.pages[pl.pages >= 0])
        if pl is not None and pl.host is not None:
            assert self.host_pool is not None  # an L2 copy lives in the L2 pool
            self.host_pool.free(pl.host[pl.host >= 0])
        node.comp[self.kind] = None

    # -- one request ---------------------------------------------------------------------------
    def request_slots(self, new_tokens: int, cached: int, aligned: int):
        """SWA pages for the request's window: min(ceil(n / P), window pages + 1), evicting
        in policy order when short (none when it computes nothing)."""
        if new_tokens <= 0:
            return _EMPTY
        P = self.P
        need = min(-(-new_tokens // P), self.window_pages + 1)
        free = self.pool.free_pages * P
        if not self.pool.unbounded and free < need * P:
            self.evict_tokens(need * P - free)
        return self.alloc(need)

    def evict_tokens(self, num_tokens: int) -> int:
        """Free at least `num_tokens` of the SWA pool in policy order; returns tokens freed."""
        return self.evict(-(-num_tokens // self.P)) * self.P if num_tokens > 0 else 0

    def alloc(self, num_pages: int):
        """Take SWA pages without evicting; None if not enough are free."""
        pages = self.pool.alloc(num_pages)
        if pages is not None:
            self.outstanding += len(pages)
        return pages

    def release_slots(self, slots) -> None:
        self.outstanding -= len(slots)
        self.pool.free(slots)

    def place(self, final, leaf, lo: int, hi: int, slots) -> None:
        given = _EMPTY if slots is None else slots
        w_lo = max(lo, hi - self.window_pages * self.P, 0)
        rest = self.attach_window(final, w_lo, hi, given, leaf)
        self.outstanding -= len(given) - len(rest)
        if len(rest):
            self.release_slots(rest)

    # -- tiers (tiers/hierarchy.py moves FULL; SWA pages follow their node: tiers.py here) ----
    def attach_tiers(self, tiers, l2_ratio: float | None) -> None:
        self.attach_l2_pool(tiers, l2_ratio)

    def transfer_bytes(self, tokens: int) -> int:
        return int(tokens * self.bytes_per_token)

    def backup(self, node) -> None:
        swa_tiers.backup(self, node)

    def store_payloads(self, node) -> list:
        pl = node.comp[self.kind]
        if pl is None or pl.host is None or node.pkeys is None:
            return []
        have = pl.host >= 0
        return [(self.name, k, h) for k, h in zip(node.pkeys[have].tolist(), pl.host[have].tolist())]

    def storage_mask(self, keys, run_pages: int, voter) -> np.ndarray:
        return swa_tiers.storage_mask(self, keys, run_pages, voter)

    def l3_mask(self, visited, traversed: int, keys, lo_b: int, cap: int) -> np.ndarray:
        return swa_tiers.l3_mask(self, visited, traversed, keys, lo_b, cap)

    def fetch_boundary(self, node, keys) -> bool:
        return self.host_pool is not None and swa_tiers.fetch_window(self, node, keys)

    def prefetch(self, node, keys) -> None:
        swa_tiers.prefetch(self, node, keys)

    def load_boundary(self, node) -> bool:
        return swa_tiers.load_window(self, node)

    def held_in_l3(self, node, pl, storage) -> np.ndarray:
        """Positions of the node's L2 copies that L3 also holds (l3_copies.py)."""
        idx = np.flatnonzero(pl.host >= 0)
        return idx[storage.contains_each([(self.name, k) for k in node.pkeys[idx].tolist()])] if len(idx) else idx

    def has_host_copy(self, pl) -> bool:
        return pl.on_host()

    def drop_host(self, node, pl, held) -> None:
        """Free the L2 copies at positions `held` (L3 holds them)."""
        assert self.host_pool is not None  # they live in the L2 pool
        self.host_pool.free(pl.host[held])
        h = pl.host.copy()
        h[held] = -1
        pl.host = h

    def drop_l1(self, node) -> int:
        """Free the node's L1 SWA pages (they stay wherever L2 holds them); returns pages."""
        pl = node.comp[self.kind]
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
            new_leaf.comp[self.kind] = SwaPayload(np.full(k, -1, dtype=INDEX_DTYPE), k)
        if (hi - lo) // P <= 0 or not len(pages):
            return pages
        used = np.zeros(len(pages), dtype=bool)
        node = bottom
        while node.parent is not None and node.end > lo:
            start = node.parent.end
            pl = node.comp[self.kind]
            if pl is None:
                k = node.num_tokens // P
                pl = node.comp[self.kind] = SwaPayload(np.full(k, -1, dtype=INDEX_DTYPE), k)
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
            pl = n.comp[self.kind]
            if pl is not None:
                pl.locks.append(ws)
            n = n.parent

    def unlock(self, node) -> None:
        ws = max(0, node.end - self.window)
        n = node
        while n.parent is not None and n.end > ws:
            pl = n.comp[self.kind]
            if pl is not None:
                pl.locks.remove(ws)
                if not pl.locks:
                    self.touched(n)
            n = n.parent

    def snapshot_state(self, node) -> str | None:
        """On L1: "present" (every page), "partial" (some), "tombstone" (none); None: no payload."""
        pl = node.comp[self.kind] if node.comp else None
        if pl is None:
            return None
        n = len(pl.pages)
        on = int((pl.pages >= 0).sum())
        if n and on == n:
            return "present"
        return "partial" if on else "tombstone"

    def page_slots(self, node, npages: int):
        return node.comp[self.kind].pages[:npages]

    @property
    def free_tokens(self) -> int:
        return self.pool.free_pages * self.P

    # -- session references (sessions.py) ------------------------------------------------------
    def session_referenced(self, node) -> bool:
        return bool(node.comp[self.kind].sess)

    def add_session_ref(self, node) -> int:
        """The region's tail window plus one page: its start `ws` is recorded on every payload
        that intersects [ws, end) (like window locks, so splits stay exact); the token is `ws`."""
        ws = max(0, node.end - self.window - self.P)
        n = node
        while n.parent is not None and n.end > ws:
            pl = n.comp[self.kind]
            if pl is not None:
                pl.sess.append(ws)
                self.touched(n)
            n = n.parent
        return ws

    def drop_session_ref(self, node, ws: int) -> None:
        n = node
        while n.parent is not None and n.end > ws:
            pl = n.comp[self.kind]
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

    def check(self, nodes, locks, in_flight, errors: list) -> None:
        P = self.P
        expect_locks: dict[int, list] = {}
        for node, cnt in locks:
            ws = max(0, node.end - self.window)
            n = node
            while n.parent is not None and n.end > ws:
                expect_locks.setdefault(n.id, []).extend([ws] * cnt)
                n = n.parent
        held = []
        live = self.queue.live_ids()
        for n in nodes[1:]:
            pl = n.comp[self.kind]
            if pl is None:
                errors.append(f"node #{n.id}: no SWA payload")
                continue
            if len(pl.pages) != n.num_tokens // P:
                errors.append(f"node #{n.id}: {len(pl.pages)} SWA slots for {n.num_tokens // P} pages")
            if pl.ntomb != int((pl.pages < 0).sum()):
                errors.append(f"node #{n.id}: SWA tombstone count {pl.ntomb} != {int((pl.pages < 0).sum())}")
            held.append(pl.pages[pl.pages >= 0])
            if sorted(pl.locks) != sorted(expect_locks.get(n.id, [])):
                errors.append(f"node #{n.id}: SWA window locks {sorted(pl.locks)} != "
                              f"{sorted(expect_locks.get(n.id, []))}")
            if self.is_candidate(n) and n.id not in live:
                errors.append(f"node #{n.id}: SWA candidate missing from its eviction queue")
        held.append(in_flight(L1, self.name))
        pool_errors("swa pool", self.pool, np.concatenate(held), self.outstanding, errors)
        if self.host_pool is not None:
            host = [n.comp[self.kind].host[n.comp[self.kind].host >= 0] for n in nodes[1:]
                    if n.comp[self.kind] is not None and n.comp[self.kind].host is not None]
            host.append(in_flight(L2, self.name))
            pool_errors("swa L2 pool", self.host_pool, np.concatenate(host), 0, errors)

    def stats(self) -> dict:
        pages = tombs = tomb_nodes = 0
        for n in self.tree.iter_nodes():
            pl = n.comp[self.kind] if n.parent is not None else None
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
