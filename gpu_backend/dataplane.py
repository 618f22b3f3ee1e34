"""The torch data plane: carries out the core's actions on real pools and a real page store.

- "load" (L2 -> L1) and "backup" (L1 -> L2): the pools' `gpu_backend.staging.StagedCopier`
  (`KVPools.staged`): one copy per run of pages, pool to pool (on a GPU a DMA from/to the
  pinned host pool on one stream per direction; bounded staging buffers only for a host pool
  that is not pinned),
  for FULL and SWA pages and MAMBA state slots alike (a layer-wise load: `copy_round`, below);
- sidecar pools follow their component's indices: every transfer of FULL (SWA) pages moves
  the same pages of the sidecars that follow FULL (SWA), stored under their own names;
- "store" (L2 -> L3): the L2 pages are read and put into the `PageStore` under
  ``page_key(component, page key)``; a FULL store also puts the component payloads it
  carries (`Transfer.payloads`: the node's L2 SWA pages and checkpoint, which the core
  records in L3 with it, e.g. at ``l3_write: on_l2_evict``), checksummed alike;
- "prefetch" (L3 -> L2): the pages are read from the store; any missing or corrupt page fails
  the whole transfer (acknowledged ``ok=False``: the core frees the destination and the
  request recomputes those tokens), never wrong data;
- `CopyState` (MAMBA copy-on-reuse): a state-slot copy on its tier; an every-K snapshot's
  CopyState (emitted at insert, when the private slot holds a later state) is skipped: the
  executor wrote that state into the snapshot slot during the forward (`already_taken`).

Every transfer is carried out at once (on a GPU the copy is waited for) and its duration
measured (`copy_s`), except, with ``overlap="layerwise"`` (the engine's ``load_overlap``) and a
pace, an L2 -> L1 load (FULL, SWA or MAMBA: the loads the engine overlaps with compute,
`engine_loading.py`): it is queued, and before the next forward the queued loads' pages of all
requests move in ONE round (`_issue`, `StagedCopier.copy_round`: layer by layer in the model's
order, per pool unit the runs of all requests in one copy, layer l's event recorded after the
units layer l reads: `staging.LayerEvents`, SGLang's ``LayerDoneCounter``, three event sets
reused across steps), left in flight (`pending`); that forward waits for layer l's event of the
latest round just before layer l (`layer_waiter`; one host -> device stream, so the latest
round's event covers the earlier rounds), and `finish_loads` (after that forward, or before any
other transfer or state copy) waits for what is left. With ``overlap="none"`` the loads are
not left in flight for a forward but still move together (`batch_loads`): with a pace queued and
issued as one round before the next forward alike; without one, those submitted at one clock
instant in one round just after it (`flush`), waited for, each acknowledged after the round's
measured time (``batch_loads = False``: each copied and waited for at submission). Without a
pace (`torch.clock: measured` or `realtime`) the overlapped loads submitted at one clock instant
move in one round just after it (`flush`, or `land` when a forward asks for them first), left
in flight (on CPU the copy is synchronous, so it has landed; the events are emulated), each
landing when the round's measured time has passed, and are waited for by the next forward
layer by layer alike; the engine then prices the overlap with its layer-wise model over the measured
times (`engine_loading.py`: `overlap_end_s`; on a GPU the forward's device time also holds any
wait for a layer's pages). A MAMBA state resumed from a loaded checkpoint is read at its layer
(`Segment.seed_slot`), after that layer's event.
When a transfer is reported done on the engine's clock is the `pace`'s choice:
without one, its measured duration after it started (`torch.clock: measured` or `realtime`;
times ``layer_scale``, the preset's layers over the model's when `torch.layers` reduced them:
KV bytes scale with the layers);
with one (a data plane such as the simulator's modelled links, `torch.clock: modelled`), when
that data plane reports the same transfer done, so the engine's decisions do not depend on how
long the copy took on this machine.
"""
from __future__ import annotations

import time

import numpy as np

from cache_core.engine_types import LOAD_OVERLAPS

from .pools import component_name
from .staging import LayerEvents, as_index
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

    mode = "torch"  # what the results call this run's mode (sim/recorder.py)

    def __init__(self, env, pools, store=None, pace=None, layer_scale: float = 1.0, overlap: str = "none"):
        if overlap not in LOAD_OVERLAPS:
            raise ValueError(f"load overlap {overlap!r}: expected {', '.join(LOAD_OVERLAPS)}")
        self.env = env
        spec = pools.spec
        # loads left in flight for the next forward: the engine overlaps them (layerwise); with a
        # pace they move together before the forward (`_issue`), without one (measured clock)
        # those of one clock instant just after it, each acknowledged after the round's measured time
        self.overlap = overlap == "layerwise"
        # loads not overlapped move together too: with a pace before the next forward, without
        # one (measured clock) those submitted at one clock instant in one round just after it,
        # acknowledged when that round is done (False: each copied and waited for at submission)
        self.batch_loads = True
        self._acks: list = []  # measured clock: (load id, on_done) of the loads queued
        self.batched = 0  # loads not overlapped that moved in a round with the others of their step
        self.pending: list = []  # handles of the load rounds in flight
        # per-layer completion events, reused across steps (SGLang's LayerDoneCounter)
        self.events = LayerEvents(spec.num_layers, pools.staged.cuda)
        # the deferred loads' pages, (src tier, dst tier, pool) -> (src, dst): the next forward's
        # loads move together, one copy per pool for all requests (`_issue`)
        self._queued: dict = {}
        self._landing: dict = {}  # measured clock: overlapped load id -> (landing time, on_done, ok)
        self.overlapped = 0  # loads left in flight for a forward to wait for layer by layer
        self.load_batches = 0  # rounds that moved the deferred loads of a forward together
        self.layer_scale = layer_scale  # without a pace: a copy lasts its measured time x this
        self.pools = pools
        self.store = store
        self.pace = pace  # None: done after the measured duration; else a data plane that times it
        self.bytes_moved: dict = {}
        self.failed = 0
        self.copies = 0
        self.snapshots = 0  # every-K snapshot CopyStates the executor had carried out in its forward
        self.already_taken = None  # executor hook: CopyState -> True if nothing is left to copy
        self.copy_s = 0.0  # measured seconds of every transfer
        self.staged = pools.staged

    def submit(self, t, on_done) -> None:
        if self.pace is None and t.kind == "load" and (self.overlap or self.batch_loads):
            self._execute(t)  # checked and queued: moved with the others of this instant (`flush`)
            key = f"{t.src_tier}->{t.dst_tier}"
            self.bytes_moved[key] = self.bytes_moved.get(key, 0) + t.bytes
            self._acks.append((t.id, on_done))
            if len(self._acks) == 1:
                self.env.timeout(0).callbacks.append(lambda _e: self.flush())
            return
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
        ev = self.env.timeout(dt * self.layer_scale)
        ev.callbacks.append(lambda _e, tid=t.id, ok=ok: on_done(tid, ok))

    def land(self, tids) -> None:
        """Acknowledge now the overlapped loads `tids` still unacknowledged (measured clock),
        each with the clock time its copy lands (``done_s``): a forward about to wait for them
        layer by layer needs the core to have entered their pages; when they land is for the
        engine's overlap model. Each load is acknowledged once (here or at its landing). Loads
        still queued move first (`flush`)."""
        if self._acks:
            self.flush()
        for tid in tids:
            got = self._landing.pop(tid, None)
            if got is not None:
                due, on_done, ok = got
                if due > self.env.now:
                    on_done(tid, ok, due)
                else:
                    on_done(tid, ok)

    def layer_waiter(self):
        """The `wait_layer` hook of the next forward: before layer l, wait for the unit of every
        pending load that holds layer l (each unit once: ``page_first`` before layer 0 only);
        None when no load is pending."""
        t0 = time.perf_counter()
        self._issue()
        self.copy_s += time.perf_counter() - t0
        if not self.pending:
            return None
        self.events.set_consumer(self.events.producer)  # the latest round covers the earlier ones
        return self.events.wait_until

    def finish_loads(self) -> None:
        """Wait for every load still in flight (after the forward that waited layer by layer, or
        before another transfer or state copy touches the pools)."""
        t0 = time.perf_counter()
        self._wait_pending()
        self.copy_s += time.perf_counter() - t0

    def flush(self) -> None:
        """Move the loads queued so far (measured clock, not overlapped: those of one instant)."""
        t0 = time.perf_counter()
        self._issue()
        self.copy_s += time.perf_counter() - t0

    def _issue(self) -> None:
        """Start the deferred loads: per pool, the pages of every request in ONE copy (per layer
        unit, the runs of all of them: HiCache's per-layer batched load). Measured clock, loads
        not overlapped: the round is waited for, and each load acknowledged after its measured
        time (times ``layer_scale``)."""
        if not self._queued:
            return
        t0 = time.perf_counter()
        items = [(a, b, comp, as_index(si), as_index(di)) for (a, b, comp), (si, di) in self._queued.items()]
        self._queued = {}
        h = self._round(items)
        self.load_batches += 1
        acks, self._acks = self._acks, []
        if self.overlap or not acks:  # left in flight for the next forward
            self.pending.append(h)
        else:
            h.synchronize()
        dt = (time.perf_counter() - t0) * self.layer_scale
        for tid, on_done in acks:  # measured clock: each lands when its round's measured time has passed
            if self.overlap:  # `land` may acknowledge it early
                self._landing[tid] = (self.env.now + dt, on_done, True)
                self.env.timeout(dt).callbacks.append(lambda _e, tid=tid: self.land([tid]))
            else:
                self.env.timeout(dt).callbacks.append(lambda _e, tid=tid, on_done=on_done: on_done(tid, True))

    def _round(self, items):
        """One load round: every item's pages, layer by layer in the model's order, each layer's
        event recorded after its pages (`StagedCopier.copy_round`)."""
        return self.staged.copy_round(items, self.pools.spec.pools_of_layer, self.events)

    def _wait_pending(self) -> None:
        self._issue()
        for h in self.pending:
            h.synchronize()
        self.pending.clear()
        self.events.set_consumer(-1)

    def copy_state(self, a) -> None:
        """A CopyState action (MAMBA): state slot a.src -> a.dst on tier a.tier, unless
        `already_taken(a)` says the executor wrote that snapshot during the forward."""
        if self.already_taken is not None and self.already_taken(a):
            self.snapshots += 1
            return
        self.finish_loads()
        self.pools.copy_state(a.tier, [int(a.src)], [int(a.dst)])
        self.copies += 1

    def _pools_of(self, component: str) -> list:
        """A core component's pool and the sidecar pools that follow its indices."""
        return [component] + [sc.name for sc in self.pools.spec.sidecars if sc.follows == component]

    def _execute(self, t) -> bool:
        defer = t.kind == "load" and (self.overlap or self.batch_loads)
        if not defer:
            self._wait_pending()
        if t.kind in ("load", "backup"):
            si, di = _idx(t.src), _idx(t.dst)
            comps = self._pools_of(t.component)
            if not defer:
                for comp in comps:
                    self.staged.copy(t.src_tier, t.dst_tier, comp, si, di).synchronize()
                return True
            for comp in comps:  # checked now (every pool first), moved with the step's other loads (`_issue`)
                self.staged.check(t.src_tier, t.dst_tier, comp, si, di)
            for comp in comps:
                got = self._queued.setdefault((t.src_tier, t.dst_tier, component_name(comp, self.pools.sidecars)),
                                              ([], []))
                got[0].extend(si)
                got[1].extend(di)
            self.overlapped += defer and self.overlap
            self.batched += defer and not self.overlap
            return True
        if self.store is None:
            raise RuntimeError(f"transfer {t.id} ({t.kind}) needs an L3 page store")
        keys = [int(k) for k in np.asarray(t.keys).reshape(-1)]
        if t.kind == "store":
            parts = {t.component: (keys, _idx(t.src))}
            for comp, key, slot in t.payloads:  # the node's SWA pages and checkpoint ride along
                ks, idx = parts.setdefault(comp, ([], []))
                ks.append(int(key))
                idx.append(int(slot))
            for comp, (ks, idx) in parts.items():
                for c in self._pools_of(comp):
                    self.store.put([page_key(c, k) for k in ks], self.pools.read_pages("L2", c, idx))
            return True
        if t.kind == "prefetch":
            got = {c: self.store.get([page_key(c, k) for k in keys]) for c in self._pools_of(t.component)}
            if any(g is None for pages in got.values() for g in pages):
                return False  # a missing or corrupt page: a miss, never wrong data
            for c, pages in got.items():
                self.pools.write_pages("L2", c, _idx(t.dst), pages)
            return True
        raise ValueError(f"transfer {t.id}: unknown kind {t.kind!r}")


__all__ = ["TorchDataPlane"]
