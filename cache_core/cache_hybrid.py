"""RadixCache's SWA/MAMBA operations (a mixin): their pools as the replay stepper and the
engine see them, the finalizer, and placing windows and checkpoints after an insert."""
from __future__ import annotations

import numpy as np

from .actions import L1, CopyState
from .allocator import INDEX_DTYPE
from .components.swa import SWA
from .records import MatchResult

_EMPTY = np.empty(0, dtype=INDEX_DTYPE)


class HybridOps:
    def _after_hybrid_insert(self, visited, final, leaf, lo, hi, swa_pages, state_slots) -> None:
        for nd in visited:
            for c in self.components:
                c.touched(nd)
        swa, mamba = self.swa, self.mamba
        hi = min(hi, final.end)  # nothing was cached past a node still in flight (tiers)
        lo = min(lo, hi)
        if swa is not None:
            given = _EMPTY if swa_pages is None else swa_pages
            w_lo = max(lo, hi - swa.window_pages * self.page_size, 0)
            rest = swa.attach_window(final, w_lo, hi, given, leaf)
            self._outstanding_swa -= len(given) - len(rest)
            if len(rest):
                self.free_swa(rest)
        if mamba is not None and state_slots is not None:
            self._place_checkpoints(final, lo, hi, list(state_slots))

    def _swa_windowless(self, node) -> bool:
        """No boundary in `node` has its whole SWA window on some tier (L1 or L2; the window
        may start in an ancestor, and a path with no tombstone since the root accepts any
        boundary): e.g. one page of a two-page window whose other page left with a child."""
        pl = node.comp[SWA]
        if pl is None:
            return True
        wp = self.swa.window_pages
        run = _tail_run(node.parent, wp)
        for ok in pl.present().tolist():
            run = run + 1 if ok else 0
            if run >= wp:
                return False
        return True

    def _place_checkpoints(self, final, lo: int, hi: int, slots: list) -> None:
        """The request's private state becomes the checkpoint at `hi` (end of its cached
        sequence); snapshot slots go to every-K positions in (lo, hi), latest first."""
        mamba = self.mamba
        if not slots:
            return
        private, snaps = slots[0], slots[1:]
        targets = []
        if hi > lo:
            targets.append((hi, private))
            every = mamba.every
            if every:
                q = (hi - 1) // every * every
                while q > lo and snaps:
                    targets.append((q, snaps.pop()))
                    q -= every
        else:
            mamba.release([private])
        if snaps:
            mamba.release(snaps)
        for q, slot in targets:
            nd = self._node_ending_at(final, q)
            if mamba.put_checkpoint(nd, slot):
                mamba.private -= 1
                if q != hi and self.actions is not None:
                    self.actions.append(CopyState("mamba", L1, int(private), int(slot), q))
            else:
                mamba.release([slot])

    def _node_ending_at(self, bottom, q: int):
        """The node on the path ending at `bottom` whose edge ends exactly at position q
        (splitting the node that contains q)."""
        nd = bottom
        while nd.parent.end >= q:
            nd = nd.parent
        if nd.end == q:
            return nd
        return self.tree.split(nd, q - nd.parent.end)


    def finalize(self, m: MatchResult, private_slot: int) -> list:
        """Component finalizers for one request that reuses `m`: MAMBA copies the shared
        checkpoint into `private_slot` (a `CopyState` action). Returns the actions."""
        if self.mamba is None:
            return []
        acts = self.mamba.finalize(m.handle._node, private_slot)
        if self.actions is not None:
            self.actions.extend(acts)
        return acts


    @property
    def free_swa_tokens(self) -> int:
        return self.swa.pool.free_pages * self.page_size

    def evict_swa(self, num_tokens: int) -> int:
        """Free at least `num_tokens` of the SWA pool in policy order; returns tokens freed."""
        return self.swa.evict(-(-num_tokens // self.page_size)) * self.page_size if num_tokens > 0 else 0

    def alloc_swa(self, num_pages: int):
        """Take SWA pages without evicting; None if not enough are free."""
        pages = self.swa.pool.alloc(num_pages)
        if pages is not None:
            self._outstanding_swa += len(pages)
        return pages

    def free_swa(self, pages: np.ndarray) -> None:
        self._outstanding_swa -= len(pages)
        self.swa.pool.free(pages)

    def alloc_states(self, n: int):
        """`n` MAMBA state slots for one request (evicting checkpoints if short): the first
        is its private working state; None if the pool cannot supply them."""
        return self.mamba.acquire(n)

    def free_states(self, slots) -> None:
        self.mamba.release(slots)


def _tail_run(node, wp: int) -> int:
    """SWA pages present (any tier) at the end of the path to `node`, up to `wp` (`wp` when
    the path back to the root has no tombstone)."""
    run = 0
    while node.parent is not None and run < wp:
        pl = node.comp[SWA]
        if pl is None:
            return run
        present = pl.present()
        gaps = np.flatnonzero(~present)
        if len(gaps):
            return run + len(present) - 1 - int(gaps[-1])
        run += len(present)
        node = node.parent
    return wp
