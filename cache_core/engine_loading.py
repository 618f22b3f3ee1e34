"""Transfers, loading and the layerwise overlap model of the serving loop (`engine.py`):
handing the cache's transfers to the data plane and acknowledging them, matching, locking and
loading an admitted request (`Loader.resolve`), and the exposed part of overlapped loads.

Loads overlapped with compute (``EngineConfig.load_overlap``, default ``layerwise``), as
SGLang's HiCache does: `HiCacheController.start_loading`
(python/sglang/srt/managers/cache_controller.py) issues a batch's host -> device copies layer
by layer on a side stream, recording one event per layer (``LayerLoadingEvent.complete``),
and the forward pass waits only for the layer it is about to compute
(``LayerDoneCounter.wait_until(layer)``, called by the device KV pool, which
``register_layer_transfer_counter`` hooked up). So a request whose match has a host run joins
a prefill step while its loads are in flight (`_may_overlap`: L2 -> L1 loads only, with an
executor that times steps per layer, ``executor.layers``; a storage run's L3 -> L2 fetch is
waited for in ``loading`` and the L2 -> L1 round after it is overlapped; with SWA/MAMBA the
FULL pages, the window's pages and the MAMBA state in one round, the prefix locked until
they land, as long as the round loads every FULL page of the prefix and L1 takes those
payloads, else the request waits as with ``none``); the loads keep occupying their
link (contention with backups and other loads stays modelled), and the step, of compute time
C over the model's L layers (C split evenly), ends at
``max(t0 + C, a_0 + C, done + C/L)`` (`overlap_end_s`): the first layer's load is exposed, and
each layer's compute then hides the next layer's load, unless the loads are the slower stream,
when the last layer's compute follows the last load. Alone on an idle link (load time T):
``max(T/L + C, T + C/L)`` instead of ``T + C`` with ``none``. The loads' layers are assumed to
land evenly between the loads' issue and their completion on the link.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from .actions import L2, L3, LOAD, PREFETCH, CopyState, Transfer
from .allocator import INDEX_DTYPE
from .engine_types import (DECODE, DONE, LOADING, PREFETCHING, READY, WAITING, Clock, DataPlane, EngineConfig,
                           EngineRequest, Step)
from .lifecycle import CommitParams, commit
from .records import MatchResult
from .scheduling import FINISHED

if TYPE_CHECKING:
    from .engine_queues import RequestQueues

MAX_RESOLVE_ROUNDS = 8
L3_TO_L2 = f"{L3}->{L2}"  # the key of Hierarchy.tokens_moved of FULL tokens read from L3
_TIME_SLACK_S = 1e-9
_EMPTY = np.empty(0, dtype=INDEX_DTYPE)


def overlap_end_s(t0: float, compute_s: float, loads, layers: int) -> float:
    """When a prefill step started at `t0` with `compute_s` of compute ends, given the loads
    of its requests, ``[(issued_s, done_s), ...]``, under the layerwise model (this
    module's docstring): layer i's KV of a load has landed at
    ``a_i = issued + (i + 1) (done - issued) / L``, and the step computes layer i (``c =
    compute_s / L``) once layer i-1 is computed and every a_i has passed. With F_-1 = t0,
    ``F_i = max(F_(i-1), max a_i) + c``, so ``F_(L-1) = max(t0 + L c, max_i (a_i + (L-i) c))``;
    ``a_i + (L - i) c`` is convex in i (a maximum of lines), so its maximum is at i = 0 or
    i = L-1: the step ends at ``max(t0 + C, max a_0 + C, max done + C / L)``. Alone on an
    idle link (issued = t0, load time T): ``t0 + max(C, T/L + C, T + C/L)``."""
    L = max(int(layers), 1)
    first = max(s + (d - s) / L for s, d in loads)
    last = max(d for _, d in loads)
    return max(t0 + compute_s, first + compute_s, last + compute_s / L)


class _Detached:
    """Transfers no request waits for any more (`Loader._detach`)."""

    phase = DONE
    prefetch_tokens = 0
    load_start_s = None

    def __init__(self, waiting_ids: set):
        self.waiting_ids = waiting_ids


class Loader:
    """Transfers, loading and completing steps for an engine: hands the cache's transfers to
    the data plane and acknowledges them, resolves admitted requests, waits for overlapped
    loads, and completes steps (first tokens, decode progress, inserts after prefill chunks
    and at finish). Collaborators: the cache, the engine's config, request queues, clock,
    data plane and step executor, and `on_done` (the engine's: a request finished)."""

    def __init__(self, *, cache, config: EngineConfig, queues: RequestQueues, clock: Clock, dataplane: DataPlane,
                 executor, on_done: Callable[[EngineRequest], None]):
        self.cache, self.config, self.q = cache, config, queues
        self.clock, self.dataplane, self.executor = clock, dataplane, executor
        self.on_done = on_done  # the engine's: a request finished
        self.P = cache.page_size
        self.inflight = 0  # transfers handed to the data plane, not yet reported done
        self._owner: dict = {}  # transfer id -> request waiting for it
        self._done: dict = {}  # request id(...) -> [(transfer id, ok)] finished, not yet acknowledged
        self._landing: dict = {}  # request id(...) -> latest clock time its acknowledged loads land (`_on_done`)
        self._kinds: dict = {}  # transfer id -> kind, for the transfers a request waits for
        self.overlapping: list[EngineRequest] = []  # requests of the step in progress whose overlapped loads it waits for

    def overlap_wait(self, step, t0: float):
        """Layerwise overlap (see the module docstring): after the step's compute C (from t0),
        wait for the loads of its requests that joined with loads in flight, until the end
        the per-layer model gives; the stretch past t0 + C is their exposed load (``load_s``)."""
        loaded = [r for r, _, _ in step.prefill if r.load_start_s is not None]
        if not loaded:
            return
        compute = self.clock.now() - t0
        self.overlapping = loaded  # named as loading if the run stalls here
        while any(r.waiting_ids for r in loaded):
            yield self.clock.idle(None)  # a finished transfer kicks the clock
        self.overlapping = []
        end = overlap_end_s(t0, compute, [(r.load_start_s, r.load_done_s) for r in loaded],
                            self.executor.layers)
        while self.clock.now() < end - _TIME_SLACK_S:  # a kick (arrival) may wake it early; float
            yield self.clock.idle(end)  # round-off must not make it wait for an ulp forever
        stall = self.clock.now() - (t0 + compute)
        for r in loaded:
            if r.first_token_s is None:
                r.load_s += stall
            r.load_start_s = r.load_done_s = None
            self._landing.pop(id(r), None)

    def drain(self, owner: EngineRequest | None = None) -> list:
        """Hand the cache's new transfers to the data plane; `owner` waits for its loads.
        Returns the transfers handed over."""
        acts = self.cache.actions
        if not acts:
            return []
        batch, copies = [], []
        for a in acts:
            if isinstance(a, Transfer):
                batch.append(a)
            elif isinstance(a, CopyState):
                copies.append(a)
        acts.clear()
        run_copy = getattr(self.dataplane, "copy_state", None)
        if copies and run_copy is not None:  # a real data plane copies state slots (MAMBA)
            for c in copies:
                run_copy(c)
        for t in batch:
            if owner is not None and t.kind in (LOAD, PREFETCH):
                owner.waiting_ids.add(t.id)
                self._owner[t.id] = owner
                self._kinds[t.id] = t.kind
            self.inflight += 1
            self.q.counters["transfers"] += 1
        for t in batch:
            self.dataplane.submit(t, self._on_done)
        return batch

    def _on_done(self, tid: int, ok: bool = True, done_s: float | None = None) -> None:
        """The data plane finished transfer `tid`. `done_s`: when it lands on the clock, if not
        now (a measured-clock data plane acknowledges an overlapped load before the forward
        that waits for it, with the time its copy takes; the overlap model then uses that)."""
        self.inflight -= 1
        self._kinds.pop(tid, None)
        r = self._owner.pop(tid, None)
        if done_s is not None and r is not None:
            self._landing[id(r)] = max(self._landing.get(id(r), done_s), done_s)
        if r is None:
            self.cache.ack(tid, ok)
            self.drain()
        else:
            self._done.setdefault(id(r), []).append((tid, ok))
            r.waiting_ids.discard(tid)
            if not r.waiting_ids:
                for t, good in sorted(self._done.pop(id(r))):
                    self.cache.ack(t, good)
                    if not good:  # a failed prefetch brought nothing from L3
                        r.prefetch_tokens = 0
                self.drain()
                self._advance(r)
        self.clock.kick()

    def _detach(self, r: EngineRequest) -> None:
        """r stops waiting for its transfers in flight: they finish in the background, still
        acknowledged together and in emission order (with any of them already finished)."""
        group = _Detached(r.waiting_ids)
        r.waiting_ids = set()
        for t in group.waiting_ids:
            self._owner[t] = group
        done = self._done.pop(id(r), None)
        if done is not None:
            self._done[id(group)] = done

    def _advance(self, r: EngineRequest) -> None:
        """All of r's transfers are acknowledged."""
        if r.load_start_s is not None and r.match is not None:  # layerwise: it computes already
            self._relock_loaded(r)
        elif r.phase == PREFETCHING:
            self.q.prefetching.remove(r)
            r.prefetch_wait_s = self.clock.now() - r.arrival_s
            self.q.to_waiting(r)
        elif r.phase == LOADING:
            self.q.loading.remove(r)
            self.resolve(r)

    def resolve(self, r: EngineRequest) -> None:
        """Match and lock r, issue its loads; ``loading`` while any is in flight, else
        ``ready`` with its reused prefix fixed."""
        cache = self.cache
        if r.match is not None:
            cache.unlock(r.match)
            r.match = None
        if r.phase == WAITING and r.waiting_ids:  # admitted before its prefetch finished (best_effort,
            self._detach(r)  # timeout): it reuses only what has landed and computes the rest
            r.prefetch_tokens = 0
        m = cache.match(r.seq, r.limit)
        cache.lock(m)
        if r.first_prefix is None:
            r.first_prefix = m.device
        m0 = m
        pin = bool(cache.voters) and cache.hier is not None and self._layerwise()
        if pin:  # the prefix stays put while its loads are planned (`_start_overlapped`)
            cache.lock(m0)
        if cache.hier is not None:
            m, fetched = self._load(r, m)
            r.prefetch_tokens += fetched  # a storage run this load brings up counts as a storage hit once loaded
        r.match = m
        r.resolve_rounds += 1
        issued = self.drain(r)
        if self._start_overlapped(r, m0, issued, pin):
            m = m0  # its prefix once the loads land; it joins steps while they are in flight
        elif r.waiting_ids:
            if r.resolve_rounds < MAX_RESOLVE_ROUNDS:
                self.q.set_phase(r, LOADING)
                self.q.loading.append(r)
                return
            self._detach(r)  # give up waiting: they finish in the background
        r.prefix_len = r.computed_tokens = m.cached_tokens
        r.kv_pages = m.cached_tokens // self.P
        self.q.set_phase(r, READY)
        if r.first_token_s is None:
            r.ready_s = self.clock.now()
        if r.retracted == 0:
            r.cached_tokens = m.cached_tokens
            dev = min(r.first_prefix, m.cached_tokens)
            r.cached_device = dev
            loaded = m.cached_tokens - dev
            r.cached_storage = min(r.prefetch_tokens, loaded)
            r.cached_host = loaded - r.cached_storage
        self.q.ready.append(r)

    def _load(self, r: EngineRequest, m: MatchResult) -> tuple:
        """`RadixCache.load` of r's locked match m: (the new match, the FULL tokens it brought
        from L3 into L2 for r, added to ``r.storage_fetched``)."""
        moved = self.cache.hier.tokens_moved
        before = moved[L3_TO_L2]
        m = self.cache.load(m, r.seq)
        fetched = moved[L3_TO_L2] - before
        r.storage_fetched += fetched
        return m, fetched

    def _layerwise(self) -> bool:
        return self.config.load_overlap == "layerwise" and getattr(self.executor, "layers", None) is not None

    def _start_overlapped(self, r: EngineRequest, m0: MatchResult, issued: list, pin: bool) -> bool:
        """If r's loads just `issued` for match `m0` may overlap (`_may_overlap`), r joins steps
        from now while they are in flight. A `pin` (a second lock on m0, SWA/MAMBA) then becomes
        r's match: its whole prefix, the window's pages and the checkpoint included, stays
        locked until the loads land (`_relock_loaded`), so no eviction on L1 and no drop of an
        L2 copy that L3 holds (components/l3_copies.py) takes what they complete; otherwise it goes."""
        ok = bool(r.waiting_ids) and self._may_overlap(r, m0, issued)
        if pin:
            assert r.match is not None  # `resolve` just set it
            self.cache.unlock(r.match if ok else m0)
            if ok:
                r.match = m0
        if ok:
            r.load_start_s = self.clock.now()
        return ok

    def _may_overlap(self, r: EngineRequest, m0, issued: list) -> bool:
        """Layerwise overlap applies to r's transfers just `issued` for match `m0`: L2 -> L1
        loads only. A storage run (L3 -> L2 first, a prefetch or a component payload only L3
        holds) is not overlapped: it precedes, and the request waits for it; once it has
        landed on L2, the next round's L2 -> L1 loads are (as SGLang: the prefetch from L3 is
        waited for, the host -> device load overlaps). With SWA/MAMBA the prefix must be
        settled now, in one round: the loads bring every FULL page up to m0's boundary, and
        the window's pages and the MAMBA checkpoint are issued with them (`load_payloads`:
        their L1 slots taken now, before r takes its own at its start); when an L1 pool has
        no room for them the request waits, and the rounds settle a shorter prefix, as
        without overlap."""
        if (not self._layerwise() or m0.storage_tokens or m0.l3_boundary > m0.cached_tokens
                or not all(self._kinds.get(t) == LOAD for t in r.waiting_ids)):
            return False
        cache = self.cache
        if not cache.voters:
            return True
        full = sum(t.tokens for t in issued if t.kind == LOAD and t.component == "full")
        if m0.device + full < m0.cached_tokens:
            return False
        if not full:  # the path was on L1: `load` issued the payloads already
            return True
        ok = cache.load_payloads(m0)
        self.drain(r)
        return ok

    def _relock_loaded(self, r: EngineRequest) -> None:
        """r's overlapped loads are acknowledged: lock its whole prefix (the loaded nodes too),
        which then replaces the pin r held (SWA/MAMBA). A boundary payload L1 still lacks (a
        failed transfer) loads in one more round, as `resolve`'s rounds do; the step waits for
        it too (`overlap_wait`). When L1 cannot serve the prefix after all and r has not
        started computing, it is resolved again without overlap, as it would have been."""
        cache = self.cache
        m = cache.match(r.seq, r.prefix_len)
        cache.lock(m)
        if cache.voters:
            m, _ = self._load(r, m)  # what L1 serves now; any payload it still lacks is issued
            if self.drain(r) and r.waiting_ids:
                cache.unlock(m)  # r.match (the pinned prefix) holds it until these land too
                r.resolve_rounds += 1
                return
        if m.cached_tokens != r.prefix_len and not r.started and r in self.q.ready:
            if m is not r.match:
                cache.unlock(m)
            r.load_start_s = None
            self.q.ready.remove(r)
            self.resolve(r)
            return
        r.load_done_s = max(self.clock.now(), self._landing.pop(id(r), 0.0))
        if m.cached_tokens != r.prefix_len:
            raise RuntimeError(f"request {r.rid}: overlapped loads left {m.cached_tokens} of its "
                               f"{r.prefix_len} prefix tokens on L1 once it had started (not modelled)")
        if m is not r.match:
            assert r.match is not None  # the pinned prefix, held while the loads were in flight
            cache.unlock(r.match)
            r.match = m
        if r.slots:  # started before its loads landed: the reused payloads (checkpoint) are on L1 now
            cache.finalize(m, r.slots)
            self.drain()  # its copy runs before the step's forward (a torch executor's settle)

    def complete(self, step: Step) -> float:
        """The step's compute is done (at clock.now(), returned)."""
        now = self.clock.now()
        self.q.counters["prefill_steps" if step.prefill else "decode_steps"] += 1
        for r, new, _ in step.prefill:
            r.computed_tokens += new
            if r.computed_tokens < r.fill_len or r.generated_tokens + 1 < r.output_length:
                self._cache_unfinished(r)
            if r.computed_tokens < r.fill_len:
                continue
            if self.q.chunked is r:
                self.q.chunked = None
            if r.first_token_s is None:
                r.first_token_s = now
            if r.generated_tokens < r.output_length:
                r.generated_tokens += 1
            if r.generated_tokens >= r.output_length:
                self._finish(r, now)
            else:
                r.phase = DECODE
                self.q.running.add(r)
        for r in step.decode:
            r.generated_tokens += 1
        for r in self.q.running.remove_finished():
            self._finish(r, now)
        return now

    def _cache_unfinished(self, r: EngineRequest) -> None:
        """SGLang's cache_unfinished_req: after a prefill chunk, the request's computed whole
        pages join the tree (it keeps them locked), so concurrent requests sharing that prefix
        reuse it instead of computing it again. FULL-only caches (with SWA or MAMBA the window
        pages and checkpoints belong to the end of the request: it is inserted at finish)."""
        cache, P = self.cache, self.P
        if cache.voters or r.match is None:
            return
        assert r.seq is not None  # unfinished
        aligned = min(r.computed_tokens, r.seq.length) // P * P
        start = r.match.cached_tokens
        if aligned <= start:
            return
        pages = np.concatenate(r.pages)
        k = (aligned - start) // P
        res = cache.insert(r.seq, aligned, pages[:k], start, after=r.match, priority=r.priority,
                           keep_uncached=True, inserted_len=r.inserted_tokens)
        r.inserted_tokens = aligned
        assert res.handle is not None  # insert always returns the handle of the inserted sequence's node
        end = res.handle.node.end
        # tiers: if a node above was not on L1 yet, the tree took nothing below it and the
        # request keeps the pages it computed there (their KV), as it keeps those past `aligned`
        rest = [pages[(end - start) // P:]] if (end - start) // P < len(pages) else []
        new = MatchResult(end, res.handle)
        cache.lock(new)
        cache.unlock(r.match)
        r.match = new
        r.pages = rest
        self.drain()

    def _finish(self, r: EngineRequest, now: float) -> None:
        pages = np.concatenate(r.pages) if r.pages else _EMPTY
        assert r.seq is not None and r.match is not None  # running until now
        commit(self.cache, CommitParams(seq=r.seq, prompt_len=len(r.prompt), match=r.match, pages=pages,
                                        slots=r.slots or {}, session_id=r.session_id, gen=r.gen,
                                        priority=r.priority, inserted_len=r.inserted_tokens))
        r.match = None
        r.pages, r.slots = [], None
        r.phase = DONE
        r.state = FINISHED
        r.finish_s = now
        self.drain()
        self.on_done(r)
