"""SWA payload (`SwaPayload`) and validator (`SwaVoter`); see component.py for the rules."""
from __future__ import annotations

import numpy as np


class SwaPayload:
    __slots__ = ("pages", "ntomb", "locks", "sess", "_host", "_on_host")

    def __init__(self, pages: np.ndarray, ntomb: int, locks: list | None = None, sess: list | None = None,
                 host: np.ndarray | None = None):
        self.pages = pages  # L1 SWA pages, -1 = not on L1 (tombstone there)
        self.ntomb = ntomb  # pages not on L1
        self.locks = locks if locks is not None else []  # window starts of live locks
        self.sess = sess if sess is not None else []  # window starts of session references
        self.host = host  # with tiers: L2 SWA pages (-1 = not on L2), or None (read-only)

    @property
    def host(self) -> np.ndarray | None:
        return self._host

    @host.setter
    def host(self, h: np.ndarray | None) -> None:
        if h is not None:
            h.flags.writeable = False  # `_on_host` stays true to it: a change assigns a new array
        self._host = h
        self._on_host = _any_set(h)  # read far more often than a new array is assigned

    def present(self, n: int | None = None) -> np.ndarray:
        """Pages held on some tier (L1 or L2), as a bool mask."""
        p = self.pages if n is None else self.pages[:n]
        if self.host is None:
            return p >= 0
        h = self.host if n is None else self.host[:n]
        return (p >= 0) | (h >= 0)

    def on_host(self, n: int | None = None) -> bool:
        """Some page (of the first `n`) has an L2 copy."""
        h = self._host
        if n is None or h is None or not self._on_host:
            return self._on_host
        return _any_set(h[:n])


def _any_set(h: np.ndarray | None) -> bool:
    """Some slot is >= 0 (argmax: one pass, no temporary mask)."""
    return h is not None and len(h) > 0 and bool(h[h.argmax()] >= 0)


_LOOP_UP_TO = 96  # pages: a Python loop is faster than numpy's fixed cost per call below this


def window_runs(present: np.ndarray, run: int, clean: bool, P: int, W: int):
    """Per page j of `present` (a bool mask continuing a path whose present run is `run`
    tokens, `clean`: no gap since the root): whether the window before the boundary after
    j is complete; then the run and clean after the last page. The run after page j is the
    tokens since the last gap at or before j."""
    if len(present) > _LOOP_UP_TO:
        idx = np.arange(len(present))
        last_gap = np.maximum.accumulate(np.where(present, -1, idx))
        runs = np.where(last_gap >= 0, (idx - last_gap) * P, run + (idx + 1) * P)
        cleans = clean & (last_gap < 0)
        return cleans | (runs >= W), int(runs[-1]), bool(cleans[-1])
    ok = []
    for here in present.tolist():
        if here:
            run += P
        else:
            run, clean = 0, False
        ok.append(clean or run >= W)
    return np.array(ok, dtype=bool), run, bool(clean)


class SwaVoter:
    """Walks down the FULL path keeping the present-SWA run that ends at the position."""

    __slots__ = ("kind", "W", "P", "run", "clean", "l1_only")

    def __init__(self, kind: int, window: int, page_size: int, l1_only: bool = False):
        self.kind = kind  # the component's payload slot
        self.W, self.P = window, page_size
        self.l1_only = l1_only
        self.run = 0  # present SWA tokens ending at the current position
        self.clean = True  # no tombstone since the root

    def mask(self, node, start: int, npages: int):
        """Boundaries after page j (j < npages) of `node` that this component accepts."""
        P, W = self.P, self.W
        pl = node.comp[self.kind]
        if pl is None or (pl.ntomb == len(pl.pages) and (self.l1_only or not pl.on_host(npages))):
            self.run, self.clean = 0, False  # nothing of this window anywhere: the usual internal node
            return False
        present = None
        if pl.ntomb:  # votes see the union of tiers
            present = pl.present(npages) if pl.host is not None and not self.l1_only else pl.pages[:npages] >= 0
        if present is None or present.all():  # the run grows by the whole stretch
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
        ok, self.run, self.clean = window_runs(present, self.run, self.clean, P, W)
        return ok
