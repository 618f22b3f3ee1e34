"""The torch data plane: carries out the core's actions on real pools and a real page store.

- "load" (L2 -> L1) and "backup" (L1 -> L2): one batched gather/scatter per transfer between
  the tiers' pools (`KVPools.copy_pages`; a side CUDA stream with an event on a GPU), for FULL
  and SWA pages and MAMBA state slots alike;
- "store" (L2 -> L3): the L2 pages are read and put into the `PageStore` under
  ``page_key(component, page key)``;
- "prefetch" (L3 -> L2): the pages are read from the store; any missing or corrupt page fails
  the whole transfer (acknowledged ``ok=False``: the core frees the destination and the
  request recomputes those tokens), never wrong data;
- `CopyState` (MAMBA copy-on-reuse): a state-slot copy on its tier; an every-K snapshot's
  CopyState (emitted at insert, when the private slot holds a later state) is skipped: the
  executor wrote that state into the snapshot slot during the forward (`already_taken`).

Every transfer is carried out at once (on a GPU the copy is waited for) and its duration
measured (`copy_s`); when it is reported done on the engine's clock is the `pace`'s choice:
without one, its measured duration after it started (`torch.clock: measured` or `realtime`);
with one (a data plane such as the simulator's modelled links, `torch.clock: modelled`), when
that data plane reports the same transfer done, so the engine's decisions do not depend on how
long the copy took on this machine.
"""
from __future__ import annotations

import time

import numpy as np

from .store import page_key

TIER_OF = {"L1": "L1", "L2": "L2"}


def _idx(x) -> list:
    if x is None:
        return []
    if isinstance(x, (int, np.integer)):
        return [int(x)]
    return [int(v) for v in np.asarray(x).reshape(-1)]


class TorchDataPlane:
    """Executes Transfer and CopyState actions on `pools` and `store` (module docstring)."""

    def __init__(self, env, pools, store=None, pace=None):
        self.env = env
        self.pools = pools
        self.store = store
        self.pace = pace  # None: done after the measured duration; else a data plane that times it
        self.bytes_moved: dict = {}
        self.failed = 0
        self.copies = 0
        self.snapshots = 0  # every-K snapshot CopyStates the executor had carried out in its forward
        self.already_taken = None  # executor hook: CopyState -> True if nothing is left to copy
        self.copy_s = 0.0  # measured seconds of every transfer

    def submit(self, t, on_done) -> None:
        t0 = time.perf_counter()
        ok = self._execute(t)
        dt = time.perf_counter() - t0
        self.copy_s += dt
        key = f"{t.src_tier}->{t.dst_tier}"
        self.bytes_moved[key] = self.bytes_moved.get(key, 0) + (t.bytes if ok else 0)
        if not ok:
            self.failed += 1
        if self.pace is not None:
            self.pace.submit(t, lambda tid, _ok, ok=ok: on_done(tid, ok))
            return
        ev = self.env.timeout(dt)
        ev.callbacks.append(lambda _e, tid=t.id, ok=ok: on_done(tid, ok))

    def copy_state(self, a) -> None:
        """A CopyState action (MAMBA): state slot a.src -> a.dst on tier a.tier, unless
        `already_taken(a)` says the executor wrote that snapshot during the forward."""
        if self.already_taken is not None and self.already_taken(a):
            self.snapshots += 1
            return
        self.pools.copy_state(a.tier, [int(a.src)], [int(a.dst)])
        self.copies += 1

    def _execute(self, t) -> bool:
        comp = t.component
        if t.kind in ("load", "backup"):
            h = self.pools.copy_pages(t.src_tier, t.dst_tier, comp, _idx(t.src), _idx(t.dst))
            h.synchronize()
            return True
        if self.store is None:
            raise RuntimeError(f"transfer {t.id} ({t.kind}) needs an L3 page store")
        keys = [page_key(comp, int(k)) for k in np.asarray(t.keys).reshape(-1)]
        if t.kind == "store":
            pages = self.pools.read_pages("L2", comp, _idx(t.src))
            self.store.put(keys, pages)
            return True
        if t.kind == "prefetch":
            got = self.store.get(keys)
            if any(g is None for g in got):
                return False  # a missing or corrupt page: a miss, never wrong data
            self.pools.write_pages("L2", comp, _idx(t.dst), got)
            return True
        raise ValueError(f"transfer {t.id}: unknown kind {t.kind!r}")


__all__ = ["TorchDataPlane"]
