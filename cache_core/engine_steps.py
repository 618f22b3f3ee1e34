"""One step of the engine loop (a mixin of `cache_core.engine.Engine`): forming a step
(the chunked request, ready requests, the waiting queue through `admission.Admission`),
prefill page allocation, the decode batch with retraction, the step's pricing entries, and
completing a step (first tokens, decode progress, inserts after prefill chunks and at finish).
The rules are in engine.py's module docstring."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .allocator import INDEX_DTYPE
from .engine_types import DECODE, DONE, PREFILL, READY, WAITING, EngineRequest, EngineStalled, EngineState, Step
from .lifecycle import CommitParams, commit
from .records import MatchResult
from .admission import BatchLimits
from .scheduling import FINISHED, RUNNING

_EMPTY = np.empty(0, dtype=INDEX_DTYPE)


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


class StepOps(EngineState):
    # ---------------------------------------------------------------------------------------
    # one step
    # ---------------------------------------------------------------------------------------
    def schedule(self, admit: bool = True) -> Step | None:
        """Form the next step (None: nothing can run now); `admit` False: no new request
        from the waiting queue (after a stall's retraction, the earlier admitted go first)."""
        now = self.clock.now()
        self._release_timeouts(now)
        P = self.P
        C = self.config.chunked_prefill_tokens
        budget = PrefillBudget(tokens=self.config.max_prefill_tokens, chunk=C, page_size=P)
        cut = False
        # 1. the chunked request, 2. ready requests (admitted earlier, loads done)
        if self.chunked is not None:
            r = self.chunked
            new = budget.portion(r)
            if new > 0:
                budget.take(r, new)
            cut = r.computed_tokens + new < r.fill_len
        while self.ready and not cut and budget.room() > 0 and (C is not None or not budget.entries or
                                                                 self.ready[0].uncached_tokens < budget.tokens):
            r = self.ready[0]
            new = budget.portion(r)
            if new <= 0:
                break
            self.ready.popleft()
            r.phase = PREFILL
            r.state = RUNNING
            budget.take(r, new)
            if new < r.fill_len - r.computed_tokens:
                self.chunked = r
                cut = True
        # 3. the waiting queue
        if admit and not cut and self.waiting and budget.room() > 0:
            self._admit(budget)
        entries = budget.entries
        # prefill pages; a request that cannot get them now keeps what it holds and retries
        prefill, blocked = [], []
        for r, new in entries:
            need = -(-(r.computed_tokens + new) // P) - r.kv_pages
            if not self._alloc(r, need):
                if r is not self.chunked:
                    blocked.append(r)
                continue
            if not r.started and not self._start(r):  # after FULL, in replay's order
                if self.chunked is r:
                    self.chunked = None
                self._fail_start(r)
                continue
            prefill.append((r, new, r.computed_tokens))
        for r in reversed(blocked):
            r.phase = READY
            self.ready.appendleft(r)
        self._drain()  # state copies of the requests that start now run before their compute
        decode = []
        if not prefill or self.config.mixed_chunk:
            decode = self._decode_batch()
        if not prefill and not decode:
            return self._nothing_to_run()
        cost = self._prefill_cost(prefill)
        self.steps += 1
        return Step(self.steps, now, tuple(prefill), tuple(decode), cost,
                    tuple(r.fill_len - 1 for r in decode))

    def _nothing_to_run(self) -> Step | None:
        """No prefill and no decode can run: wait (None) for acknowledgements or arrivals, or
        retract the latest admitted prefill that holds memory none of them can complete with
        and form the step again; with nothing left to wait for, the engine is stalled."""
        if self.inflight or self.prefetching or self.loading:
            return None  # acknowledgements will free or bring memory
        stuck = list(self.ready) + ([self.chunked] if self.chunked is not None else [])
        stuck = [r for r in stuck if r.started or r.pages or (r.match is not None and r.match.cached_tokens)]
        if stuck:  # admitted prefills hold memory (pages, locked prefixes) none of them can complete with:
            r = max(stuck, key=lambda x: (x.admit_s, x.rid))  # give back the latest one's
            if r is self.chunked:
                self.chunked = None
            else:
                self.ready.remove(r)
            self.counters["retractions"] += 1
            r.retracted += 1
            self._release(r)
            self._to_waiting(r, front=True)
            return self.schedule(admit=False)
        if not self.input_closed or self.idle_done():
            return None
        raise EngineStalled(f"nothing can run: {self.stall_report()}")

    def _release_timeouts(self, now: float) -> None:
        if self.config.prefetch_policy != "timeout" or not self.prefetching:
            return
        for r in [x for x in self.prefetching if x.ready_at is not None and x.ready_at <= now]:
            self.prefetching.remove(r)
            r.prefetch_wait_s = now - r.arrival_s
            self._to_waiting(r)  # its prefetch goes on; what arrives in time is used

    def _admitted(self) -> list:
        out = list(self.running)
        out += self.loading
        out += self.ready
        if self.chunked is not None:
            out.append(self.chunked)
        out += [r for r in self._in_prefill]
        return out

    def _admit(self, budget: PrefillBudget) -> None:
        limits = self.limits
        self._in_prefill = [r for r, _ in budget.entries if r is not self.chunked]
        if budget.tokens != limits.max_prefill_tokens or budget.chunk != limits.chunked_prefill_tokens:
            limits = BatchLimits(max_running_requests=limits.max_running_requests,
                                 max_prefill_tokens=max(budget.tokens, 1),
                                 chunked_prefill_tokens=None if budget.chunk is None else max(budget.chunk, self.P),
                                 max_total_tokens=limits.max_total_tokens)
        ordered = self.policy.order(self.waiting, self._ctx)
        probed: list = []

        def probe(r) -> int:
            """Match and lock a candidate just before admission considers it (as SGLang's
            PrefillAdder locks what it admits), so the next candidate sees less evictable
            memory. Host hits count as uncached here: loading them takes L1 pages."""
            m = self.cache.match(r.seq, r.limit)
            self.cache.lock(m)
            probed.append((r, m))
            return m.device if self.cache.hier is not None else m.cached_tokens

        res = self.admission.select(ordered, self._admitted(), self._free_fn, limits, match_len=probe)
        for _, m in probed:
            self.cache.unlock(m)
        self._in_prefill = []
        now = self.clock.now()
        r: EngineRequest
        gone = {id(r) for r, _ in res.admitted}
        self.waiting = [r for r in self.waiting if id(r) not in gone]
        for r, new in res.admitted:
            if r.admit_s is None:
                r.admit_s = now
            r.state = RUNNING
            self._resolve(r)
            if r.phase != READY:
                continue  # loading: it joins a later step
            self.ready.remove(r)
            new = min(new, r.fill_len - r.computed_tokens) if res.chunked is r else r.fill_len - r.computed_tokens
            if new <= 0:
                continue
            r.phase = PREFILL
            budget.take(r, new)
            if r.computed_tokens + new < r.fill_len:
                self.chunked = r

    def _decode_batch(self) -> list:
        running = self.running
        if not len(running):
            return []
        cache, P = self.cache, self.P

        def need(r) -> int:
            return 1 if r.fill_len > r.kv_pages * P else 0

        pages = sum(need(r) for r in running)
        if pages * P > self._free_fn() and not cache.full.pool.unbounded:
            out = running.retract(pages * P - self._free_fn(), freed_tokens=lambda r: sum(map(len, r.pages)) * P)
            for r in out:
                self.counters["retractions"] += 1
                self._release(r)
                self._to_waiting(r, front=True)
            self.waiting[: len(out)] = sorted(self.waiting[: len(out)], key=lambda x: x.fcfs_key())
        batch = []
        for r in running:
            if need(r) and not self._alloc(r, 1):  # the last request alone does not fit: it waits
                running.remove(r)
                r.retracted += 1
                self.counters["retractions"] += 1
                self._release(r)
                self._to_waiting(r, front=True)
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
            self.counters["shared_prefill_tokens"] += shared
            out.append((new - shared, ctx + shared))
        return tuple(out)

    def complete(self, step: Step) -> None:
        """The step's compute is done (at clock.now())."""
        now = self.clock.now()
        cache = self.cache
        self.counters["prefill_steps" if step.prefill else "decode_steps"] += 1
        for r, new, _ in step.prefill:
            r.computed_tokens += new
            if r.computed_tokens < r.fill_len or r.generated_tokens + 1 < r.output_length:
                self._cache_unfinished(r)
            if r.computed_tokens < r.fill_len:
                continue
            if self.chunked is r:
                self.chunked = None
            if r.first_token_s is None:
                r.first_token_s = now
            if r.generated_tokens < r.output_length:
                r.generated_tokens += 1
            if r.generated_tokens >= r.output_length:
                self._finish(r, now)
            else:
                r.phase = DECODE
                self.running.add(r)
        for r in step.decode:
            r.generated_tokens += 1
        for r in self.running.remove_finished():
            self._finish(r, now)
        hier = cache.hier
        l2 = l3 = 0
        if hier is not None:
            if hier.pool is not None and hier.pool.capacity_pages is not None:
                l2 = hier.pool.capacity_pages * self.P - hier.free_l2_tokens
            if hier.storage is not None:
                l3 = len(hier.storage) * self.P
        l1 = 0 if cache.full.pool.unbounded else self.max_total_tokens - cache.free_tokens
        self.timeline.append((now, len(self._admitted()), len(self.waiting) + len(self.prefetching), l1, l2, l3))

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
        self._drain()

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
        self._drain()
        self._done_request(r)

    def _done_request(self, r: EngineRequest) -> None:
        r.seq = None  # the tokens are not needed any more: a long run must not keep them
        r.prompt = r.prompt[:0]
        self.finished.append(r)
        for f in self.listeners:
            f(r)
