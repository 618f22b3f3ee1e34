"""Forming one step of the engine loop (`StepBuilder`, held by `cache_core.engine.Engine`): the
chunked request, ready requests, the waiting queue through `admission.Admission`, prefill page
allocation, the decode batch with retraction and the step's pricing entries. Completing a step
is the loader's (`engine_loading.Loader.complete`). The rules are in engine.py's module docstring."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from .engine_types import PREFILL, READY, EngineConfig, EngineRequest, Step
from .lifecycle import release_slots, take_slots
from .admission import Admission, BatchLimits
from .scheduling import RUNNING, SchedulingContext

if TYPE_CHECKING:
    from .engine_loading import Loader
    from .engine_queues import RequestQueues


@dataclass(kw_only=True)
class PrefillBudget:
    """One step's prefill budget: tokens left of ``max_prefill_tokens`` and of the chunk
    (``chunked_prefill_tokens``; None: no chunking), charged in whole pages, and the
    (request, new tokens) entries it was spent on, in order."""

    tokens: int
    chunk: int | None
    page_size: int
    entries: list = field(default_factory=list)

    def room(self) -> int:
        return self.tokens if self.chunk is None else min(self.tokens, self.chunk)

    def take(self, r, new: int) -> None:
        c = -(-new // self.page_size) * self.page_size
        self.tokens -= c
        if self.chunk is not None:
            self.chunk -= c
        self.entries.append((r, new))

    def portion(self, r) -> int:
        """How much of r's prefill fits: all of it, or (chunking) whole pages of the room."""
        need = r.fill_len - r.computed_tokens
        if self.chunk is not None and need > self.room():
            P = self.page_size
            return max((r.computed_tokens + self.room()) // P * P - r.computed_tokens, 0)
        return need


class Probes:
    """One step's admission probes (`Admission.select`'s match_len and confirm): a candidate is
    matched and locked just before admission considers it (as SGLang's PrefillAdder locks
    what it admits), so the next candidate sees less evictable memory; `release` unlocks
    them after the step's selection. Host hits count as uncached here: loading them takes
    L1 pages. A match that would only repeat the last one (`MemoMatch.repeat`: the queue's
    head probed again each step while memory is short) is held back until the candidate
    passes the memory check (`confirm`): a request stopped there is left as it was."""

    def __init__(self, cache):
        self.cache = cache
        self.locked: list = []  # the probes' locked matches
        self.held: dict = {}  # id(request) -> its held-back match

    def match_len(self, r) -> int:
        """The tokens of r on L1 (`MatchResult.device`; without tiers all it matched)."""
        m = self.cache.matcher.repeat(r.seq, r.limit)
        if m is None:
            m = self._lock(r)
        else:
            self.held[id(r)] = m
        return m.device

    def confirm(self, r) -> None:
        m = self.held.pop(id(r), None)
        if m is None:
            return
        got = self._lock(r)
        if (got.device, got.cached_tokens) != (m.device, m.cached_tokens):
            raise RuntimeError(f"request {r.rid!r}: a held-back match changed before its confirmation")

    def _lock(self, r):
        m = self.cache.match(r.seq, r.limit)
        self.cache.lock(m)
        self.locked.append(m)
        return m

    def release(self) -> None:
        for m in self.locked:
            self.cache.unlock(m)


class StepBuilder:
    """Forms the steps of an engine: admission, chunking, prefill pages, the decode batch with
    retraction. Collaborators: the cache, the engine's config, batch limits, admission rules
    and schedule policy, its request queues, its `Loader` (admitted requests are resolved
    and transfers drained there) and `on_nothing_to_run` (the engine's stall check)."""

    def __init__(self, *, cache, config: EngineConfig, queues: RequestQueues, loader: Loader, admission: Admission,
                 policy, limits: BatchLimits, on_nothing_to_run: Callable[[], None]):
        self.cache, self.config, self.q, self.loader = cache, config, queues, loader
        self.admission, self.policy, self.limits = admission, policy, limits
        self.on_nothing_to_run = on_nothing_to_run  # the engine's stall check
        self.P = cache.page_size
        self.steps = 0
        self._in_prefill: list[EngineRequest] = []  # requests taken into the step being formed (admission sees them)
        self._ctx = SchedulingContext(match_len=self._match_len, path_key=self._path_key)

    def schedule(self, admit: bool = True) -> Step | None:
        """Form the next step (None: nothing can run now); `admit` False: no new request
        from the waiting queue (after a stall's retraction, the earlier admitted go first)."""
        now = self.q.now()
        self._release_timeouts(now)
        P = self.P
        C = self.config.chunked_prefill_tokens
        budget = PrefillBudget(tokens=self.config.max_prefill_tokens, chunk=C, page_size=P)
        cut = False
        # 1. the chunked request, 2. ready requests (admitted earlier, loads done)
        if self.q.chunked is not None:
            r = self.q.chunked
            new = budget.portion(r)
            if new > 0:
                budget.take(r, new)
            cut = r.computed_tokens + new < r.fill_len
        while self.q.ready and not cut and budget.room() > 0 and (C is not None or not budget.entries or
                                                                 self.q.ready[0].uncached_tokens < budget.tokens):
            r = self.q.ready[0]
            new = budget.portion(r)
            if new <= 0:
                break
            self.q.ready.popleft()
            r.phase = PREFILL
            r.state = RUNNING
            budget.take(r, new)
            if new < r.fill_len - r.computed_tokens:
                self.q.chunked = r
                cut = True
        # 3. the waiting queue
        if admit and not cut and self.q.waiting and budget.room() > 0:
            self._admit(budget)
        entries = budget.entries
        # prefill pages; a request that cannot get them now keeps what it holds and retries
        prefill, blocked = [], []
        for r, new in entries:
            need = -(-(r.computed_tokens + new) // P) - r.kv_pages
            if not self._alloc(r, need):
                if r is not self.q.chunked:
                    blocked.append(r)
                continue
            if not r.started and not self._start(r):  # after FULL, in replay's order
                if self.q.chunked is r:
                    self.q.chunked = None
                self._fail_start(r)
                continue
            prefill.append((r, new, r.computed_tokens))
        for r in reversed(blocked):
            r.phase = READY
            self.q.ready.appendleft(r)
        self.loader.drain()  # state copies of the requests that start now run before their compute
        decode = []
        if not prefill or self.config.mixed_chunk:
            decode = self._decode_batch()
        if not prefill and not decode:
            return self._nothing_to_run()
        cost = self._prefill_cost(prefill)
        self.steps += 1
        return Step(self.steps, now, tuple(prefill), tuple(decode), cost,
                    tuple([r.fill_len - 1 for r in decode]))

    def _nothing_to_run(self) -> Step | None:
        """No prefill and no decode can run: wait (None) for acknowledgements or arrivals, or
        retract the latest admitted prefill that holds memory none of them can complete with
        and form the step again; with nothing left to wait for, the engine is stalled."""
        if self.loader.inflight or self.q.prefetching or self.q.loading:
            return None  # acknowledgements will free or bring memory
        stuck = list(self.q.ready) + ([self.q.chunked] if self.q.chunked is not None else [])
        stuck = [r for r in stuck if r.started or r.pages or (r.match is not None and r.match.cached_tokens)]
        if stuck:  # admitted prefills hold memory (pages, locked prefixes) none of them can complete with:
            r = max(stuck, key=lambda x: (x.admit_s, x.rid))  # give back the latest one's
            if r is self.q.chunked:
                self.q.chunked = None
            else:
                self.q.ready.remove(r)
            self.q.counters["retractions"] += 1
            r.retracted += 1
            self._release(r)
            self.q.to_waiting(r, front=True)
            return self.schedule(admit=False)
        self.on_nothing_to_run()  # raises EngineStalled when no arrival can come any more
        return None

    def _release_timeouts(self, now: float) -> None:
        if self.config.prefetch_policy != "timeout" or not self.q.prefetching:
            return
        for r in [x for x in self.q.prefetching if x.ready_at is not None and x.ready_at <= now]:
            self.q.prefetching.remove(r)
            r.prefetch_wait_s = now - r.arrival_s
            self.q.to_waiting(r)  # its prefetch goes on; what arrives in time is used

    def admitted(self) -> list:
        out = list(self.q.running)
        out += self.q.loading
        out += self.q.ready
        if self.q.chunked is not None:
            out.append(self.q.chunked)
        out += self._in_prefill
        return out

    def admitted_count(self) -> int:
        """len(admitted()) without building the list (the engine's timeline row per step)."""
        q = self.q
        return len(q.running) + len(q.loading) + len(q.ready) + (q.chunked is not None) + len(self._in_prefill)

    def _admit(self, budget: PrefillBudget) -> None:
        limits = self.limits
        self._in_prefill = [r for r, _ in budget.entries if r is not self.q.chunked]
        if budget.tokens != limits.max_prefill_tokens or budget.chunk != limits.chunked_prefill_tokens:
            limits = BatchLimits(max_running_requests=limits.max_running_requests,
                                 max_prefill_tokens=max(budget.tokens, 1),
                                 chunked_prefill_tokens=None if budget.chunk is None else max(budget.chunk, self.P),
                                 max_total_tokens=limits.max_total_tokens)
        ordered = self.policy.order(self.q.waiting, self._ctx)
        probes = Probes(self.cache)
        res = self.admission.select(ordered, self.admitted(), self._free_fn, limits, match_len=probes.match_len,
                                    confirm=probes.confirm)
        probes.release()
        self._in_prefill = []
        if not res.admitted:
            return
        now = self.q.now()
        r: EngineRequest
        gone = {id(r) for r, _ in res.admitted}
        self.q.waiting = [r for r in self.q.waiting if id(r) not in gone]
        for r, new in res.admitted:
            if r.admit_s is None:
                r.admit_s = now
            r.state = RUNNING
            self.loader.resolve(r)
            if r.phase != READY:
                continue  # loading: it joins a later step
            self.q.ready.remove(r)
            new = min(new, r.fill_len - r.computed_tokens) if res.chunked is r else r.fill_len - r.computed_tokens
            if new <= 0:
                continue
            r.phase = PREFILL
            budget.take(r, new)
            if r.computed_tokens + new < r.fill_len:
                self.q.chunked = r

    def _decode_batch(self) -> list:
        running = self.q.running
        if not len(running):
            return []
        cache, P = self.cache, self.P
        pages = sum(1 for r in running if r.fill_len > r.kv_pages * P)  # a new page for the next token
        if pages * P > self._free_fn() and not cache.full.pool.unbounded:
            out = running.retract(pages * P - self._free_fn(), freed_tokens=lambda r: sum(map(len, r.pages)) * P)
            for r in out:
                self.q.counters["retractions"] += 1
                self._release(r)
                self.q.to_waiting(r, front=True)
            self.q.waiting[: len(out)] = sorted(self.q.waiting[: len(out)], key=lambda x: x.fcfs_key())
        batch = []
        for r in running:
            if r.fill_len > r.kv_pages * P and not self._alloc(r, 1):  # the last request alone does not fit: it waits
                running.remove(r)
                r.retracted += 1
                self.q.counters["retractions"] += 1
                self._release(r)
                self.q.to_waiting(r, front=True)
                continue
            batch.append(r)
        return batch

    def _prefill_cost(self, prefill) -> tuple:
        """(new tokens computed, context) per entry; a prefix shared with an earlier entry of
        the same step (same page keys) is computed once."""
        if len(prefill) < 2:
            return tuple((new, ctx) for _, new, ctx in prefill)
        P = self.P
        seen: set = set()
        out = []
        for r, new, ctx in prefill:
            shared = 0
            if ctx % P == 0:
                keys = r.seq.page_keys(P)[ctx // P : (ctx + new) // P].tolist()
                for k in keys:
                    if k not in seen:
                        break
                    shared += P
                seen.update(keys)
            shared = min(shared, new - 1)
            self.q.counters["shared_prefill_tokens"] += shared
            out.append((new - shared, ctx + shared))
        return tuple(out)

    def _match_len(self, r: EngineRequest) -> int:
        """Tokens of r that need no compute now: device + host hits (host hits will load)."""
        m = self.cache.match(r.seq, r.limit)
        return m.device + m.host_tokens if self.cache.hier is not None else m.cached_tokens

    def _path_key(self, r: EngineRequest) -> tuple:
        node = self.cache.match(r.seq, r.limit).handle.node
        ids = []
        while node.parent is not None:
            ids.append(node.id)
            node = node.parent
        return tuple(reversed(ids))

    def _free_fn(self) -> int:
        return self.cache.free_tokens + self.cache.full.evictable_tokens

    def _alloc(self, r: EngineRequest, pages: int) -> bool:
        if pages <= 0:
            return True
        cache = self.cache
        ev0 = cache.full.evicted_tokens
        if not cache.full.pool.unbounded and cache.free_tokens < pages * self.P:
            cache.evict(pages * self.P - cache.free_tokens)
        got = cache.alloc(pages)
        r.evicted_tokens += cache.full.evicted_tokens - ev0
        if got is None:
            self.q.counters["alloc_waits"] += 1
            return False
        r.pages.append(got)
        r.kv_pages += pages
        return True

    def _release(self, r: EngineRequest) -> None:
        """Give back everything r holds (retraction or a failed start)."""
        cache = self.cache
        if r.pages:
            cache.free(np.concatenate(r.pages))
        if r.slots is not None:
            release_slots(cache, r.slots)
        if r.match is not None:
            cache.unlock(r.match)
        r.pages, r.slots, r.match = [], None, None
        r.load_start_s = r.load_done_s = None
        r.started = False
        r.kv_pages = r.computed_tokens = r.prefix_len = r.inserted_tokens = 0
        r.resolve_rounds = 0
        self.loader.drain()

    def _start(self, r: EngineRequest) -> bool:
        """First prefill of r: its SWA window pages and MAMBA slots, as replay takes them."""
        cache = self.cache
        r.started = True
        assert r.seq is not None and r.match is not None  # admitted and resolved, not finished
        n = r.seq.length - r.prefix_len
        # with loads still overlapped, the finalizers run at their end (engine_loading.py)
        r.slots, ok = take_slots(cache, r.match, n, r.prefix_len, r.seq.length // self.P * self.P,
                                 finalize=r.load_start_s is None or r.load_done_s is not None)
        return ok

    def _fail_start(self, r: EngineRequest) -> None:
        self.q.counters["alloc_waits"] += 1
        self._release(r)
        self.q.to_waiting(r, front=True)
