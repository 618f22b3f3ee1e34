"""The serving loop shared by the simulator and the torch backend: continuous batching over
the one cache core, talking to the world only through three plug-ins (engine_types.py:
clock, data plane, step executor).

Life of a request (``EngineRequest.phase``)::

    arrived -> [prefetching] -> waiting -> [loading] -> ready -> prefill (chunks) -> decode -> done
                                   ^                                                  |
                                   +-------------------- retracted -------------------+

1. **Arrival** (`arrive`): a request that can never fit (``ceil(prompt + generated) + output
   reservation >= max_total_tokens``) is rejected at once. With an L3 tier the request is
   matched; a storage run (or a tree boundary whose SWA window / MAMBA checkpoint only L3
   still holds: ``MatchResult.l3_boundary``) starts a prefetch L3 -> L2
   (`RadixCache.prefetch`), and the prefetch policy decides when it may be scheduled
   (``EngineConfig.prefetch_policy``).
2. **Admission** (`schedule`), each step, in this order and under one prefill budget:
   the request chunked in the previous step; requests whose loads finished (``ready``,
   admitted earlier); then the waiting queue in the schedule policy's order through
   `admission.Admission.select` (SGLang's PrefillAdder rules: max running, memory =
   free + evictable L1 tokens minus reservations, prefill and chunk budgets). Each waiting
   request is matched just before it is considered; its prefix counts device and host hits
   (what it will not compute).
3. **Loading**: an admitted request is matched and locked again and `RadixCache.load` issues
   its L2 -> L1 loads (all of a host run at once, acknowledged in order) and any prefetch the
   match still allows. With layerwise overlap (`engine_loading.py`) a FULL-only request with only loads
   joins steps at once. Otherwise, while transfers are in flight the request is ``loading``: it holds its
   running slot and its lock but takes no part in steps; when they are all acknowledged it is
   matched again (a voting component's boundary payload may need a second round), at most
   ``MAX_RESOLVE_ROUNDS`` times. Its reused prefix is then fixed: ``cached_tokens``. A request
   admitted before its arrival prefetch finished (``best_effort``; ``timeout`` past its
   budget) does not wait for it: the prefetch finishes in the background and the request
   reuses only what had landed (waiting would hold a running slot and memory admission had
   already counted as free).
4. **Prefill**: the first chunk allocates the request's SWA window pages and MAMBA state slots
   (and copies the reused checkpoint), exactly as replay does; every chunk allocates the FULL
   pages for its tokens, evicting as needed. Requests of one step that share a prefix beyond
   the cache compute it once (by page key): the later request is priced as if those tokens
   were context. (Each still allocates its own pages; the insert frees duplicates.)
5. **Decode**: one token per running request per step; a request starting a new page gets one.
   When L1 cannot supply the pages even after eviction, running requests are retracted
   (`RunningBatch.retract`, SGLang's order): their pages are freed, their lock released, and
   they go back to the front of the waiting queue to re-prefill prompt + generated tokens.
6. **Finish**: `lifecycle.commit` inserts prompt + output[:-1] with the request's pages
   (and window pages and checkpoint), registers its session region and unlocks: the cache
   ends up exactly as replay leaves it.

Steps: a step with prefill work runs only the prefill (SGLang's default) unless
``mixed_chunk``; otherwise it decodes every running request. The step executor prices or runs
``Step.prefill_cost`` and ``Step.decode_contexts``. When nothing can run and nothing is in
flight while admitted requests hold L1 memory (pages, or locked prefixes they loaded) that none
of them can complete with, the latest admitted gives it back and waits again (a retraction),
and the step is formed again without new admissions. A driver that stops with requests
unfinished gets `EngineStalled` naming them by phase (`Engine.check_finished`).

Loads overlapped with compute (``EngineConfig.load_overlap``, default ``layerwise``, as
SGLang's HiCache does): `engine_loading.py` states the model.

Times of a result row (until the first token): ``queue_s`` in the waiting queue, ``load_s``
waiting for transfers (prefetch gate, loading; with layerwise overlap, the exposed part: how
much longer than its compute C a step ran waiting for that request's loads), compute the rest
(ready, prefill): they add up to the TTFT, and a retraction after the first token changes none
of them.

Transfers the cache emits are handed to the data plane as they appear (backups and stores run
in the background and compete for the links); the engine acknowledges the cache when the data
plane reports them done. A request's own transfers are acknowledged together, in emission
order, once all have finished (a piece is valid on L1 only below a parent on L1).
"""
from __future__ import annotations

from .engine_loading import MAX_RESOLVE_ROUNDS, Loader, overlap_end_s
from .engine_queues import RequestQueues
from .engine_steps import StepBuilder
from .engine_types import ARRIVED, PREFETCHING, EngineConfig, EngineRequest, EngineStalled, check_finished
from .admission import Admission, BatchLimits, RunningBatch
from .scheduling import make_schedule_policy

UNBOUNDED_TOKENS = 1 << 62


class Engine:
    """Continuous batching over one `RadixCache` (built with ``record_actions=True``; with
    tiers ``auto_ack=False``). See the module docstring for the rules.

    It holds its requests' queues (`engine_queues.RequestQueues`), a `Loader` (transfers,
    loading, completing steps) and a `StepBuilder` (forming steps), each given only the
    collaborators it uses; neither holds the engine. Callbacks into it: the loader reports a
    finished request (`done_request`), the builder asks whether nothing-to-run is a stall
    (`check_stalled`)."""

    def __init__(self, cache, config: EngineConfig, clock, dataplane, executor):
        if cache.actions is None:
            raise ValueError("the engine needs a RadixCache built with record_actions=True")
        if cache.hier is not None:
            if cache.hier.auto_ack:
                raise ValueError("the engine acknowledges transfers itself: build the cache with auto_ack=False")
            cache.pipeline_loads = True
        self.cache = cache
        self.config = config
        self.clock, self.dataplane, self.executor = clock, dataplane, executor
        self.P = P = cache.page_size
        kw = {"seed": config.seed} if config.schedule_policy == "random" else {}
        self.policy = make_schedule_policy(config.schedule_policy, config.schedule_options, **kw)
        self.admission = Admission(config.new_token_ratio, page_size=P)
        cap = cache.config.usable_tokens
        self.max_total_tokens = UNBOUNDED_TOKENS if cap is None else cap
        self.limits = BatchLimits(max_running_requests=config.max_running_requests,
                                  max_prefill_tokens=config.max_prefill_tokens,
                                  chunked_prefill_tokens=config.chunked_prefill_tokens,
                                  max_total_tokens=self.max_total_tokens)
        if config.chunked_prefill_tokens is not None and config.chunked_prefill_tokens % P:
            raise ValueError(f"engine.chunked_prefill_tokens ({config.chunked_prefill_tokens}) must be a "
                             f"multiple of cache.page_size ({P})")
        self.queues = q = RequestQueues(now=clock.now, running=RunningBatch(P))
        self.arrived = 0
        self.input_closed = False
        self.timeline: list = []  # (t_s, admitted, waiting, l1_used, l2_used, l3_used) after each step
        self.listeners: list = []  # called with each request that finishes or is rejected
        # transfers, loading, the overlap wait, completing steps
        self.loader = Loader(cache=cache, config=config, queues=q, clock=clock, dataplane=dataplane,
                             executor=executor, on_done=self.done_request)
        # forms the steps (admission, chunking, prefill pages, decode batch)
        self.builder = StepBuilder(cache=cache, config=config, queues=q, loader=self.loader, admission=self.admission,
                                   policy=self.policy, limits=self.limits, on_nothing_to_run=self.check_stalled)

    @property
    def finished(self) -> list:
        return self.queues.finished

    @property
    def counters(self) -> dict:
        return self.queues.counters

    @property
    def inflight(self) -> int:
        """Transfers handed to the data plane, not yet reported done."""
        return self.loader.inflight

    @property
    def steps(self) -> int:
        return self.builder.steps

    # ---------------------------------------------------------------------------------------
    # the loop
    # ---------------------------------------------------------------------------------------
    def loop(self):
        """The serving loop (a generator: ``yield`` what the plug-ins return)."""
        while not (self.input_closed and self.idle_done()):
            step = self.builder.schedule()
            if step is None:
                yield self.clock.idle(self.wake_at())
                continue
            t0 = self.clock.now()
            yield from self.executor.execute(step)
            yield from self.loader.overlap_wait(step, t0)
            settle = getattr(self.executor, "settle", None)
            if settle is not None:
                settle(step)
            self.sample(self.loader.complete(step))

    def sample(self, now: float) -> None:
        """One timeline row after a step (`timeline`)."""
        cache, hier, q = self.cache, self.cache.hier, self.queues
        l2 = l3 = 0
        if hier is not None:
            if hier.pool is not None and hier.pool.capacity_pages is not None:
                l2 = hier.pool.capacity_pages * self.P - hier.free_l2_tokens
            if hier.storage is not None:
                l3 = len(hier.storage) * self.P
        l1 = 0 if cache.full.pool.unbounded else self.max_total_tokens - cache.free_tokens
        self.timeline.append((now, self.builder.admitted_count(), len(q.waiting) + len(q.prefetching), l1, l2, l3))

    def idle_done(self) -> bool:
        """No request anywhere in the engine."""
        return self.queues.idle()

    def check_stalled(self) -> None:
        """Nothing can run and nothing is in flight: once no more requests can arrive, the
        requests left can never finish (EngineStalled)."""
        if self.input_closed and not self.idle_done():
            raise EngineStalled(f"nothing can run: {self.stall_report()}")

    def close_input(self) -> None:
        """No more arrivals: the loop ends when the last request finishes."""
        self.input_closed = True
        self.clock.kick()

    def check_finished(self, expected: int | None = None) -> None:
        """After the loop's driver stopped: EngineStalled unless every request finished
        (engine_types.check_finished)."""
        check_finished(self, expected)

    def stall_report(self) -> str:
        """One line: the unfinished requests by phase (with their ids) and the memory state."""
        q = self.queues
        groups = [("prefetching", q.prefetching), ("waiting", q.waiting),
                  ("loading", q.loading + [r for r in self.loader.overlapping if r.waiting_ids]),
                  ("ready", q.ready), ("chunked", [q.chunked] if q.chunked is not None else []),
                  ("running", list(q.running))]
        parts = [f"{name} {len(rs)} (rids {', '.join(str(r.rid) for r in rs[:8])}{', ...' if len(rs) > 8 else ''})"
                 for name, rs in groups if rs]
        held = sum(len(rs) for _, rs in groups)
        lost = self.arrived - len(self.finished) - held
        if lost:
            parts.append(f"{lost} in no queue")
        return (f"{self.arrived - len(self.finished)} of {self.arrived} arrived requests unfinished: "
                f"{'; '.join(parts) or 'none'}; L1 free {self.cache.free_tokens} tokens, evictable "
                f"{self.cache.full.evictable_tokens}, transfers in flight {self.inflight}")

    def wake_at(self):
        times = [r.ready_at for r in self.queues.prefetching if r.ready_at is not None]
        return min(times) if times else None

    # ---------------------------------------------------------------------------------------
    # arrivals (transfers, loading and the overlap model: engine_loading.py)
    # ---------------------------------------------------------------------------------------
    def arrive(self, r: EngineRequest) -> None:
        """A request arrives (its arrival_s set by the driver)."""
        cache = self.cache
        self.arrived += 1
        r.phase = ARRIVED
        r.phase_since_s = r.arrival_s
        if self.admission.ceil_pages(r.fill_len) + self.admission.reservation(r) >= self.max_total_tokens:
            r.reject(self.clock.now())
            self.done_request(r)
            return
        if r.session_id is not None:
            r.gen = cache.session_begin(r.session_id)
        hier = cache.hier
        if hier is not None and hier.storage is not None:
            m = cache.match(r.seq, r.limit)
            if m.storage_tokens or m.l3_boundary > m.cached_tokens:  # a storage run, or component payloads in L3
                cache.lock(m)
                r.prefetch_tokens = cache.prefetch(m, r.seq)
                r.storage_fetched += r.prefetch_tokens
                cache.unlock(m)
                self.loader.drain(r)
        if r.waiting_ids and self.config.prefetch_policy != "best_effort":
            self.queues.set_phase(r, PREFETCHING)
            if self.config.prefetch_policy == "timeout":
                assert hier is not None  # only an L3 prefetch leaves transfers to wait for
                r.ready_at = r.arrival_s + hier.cfg.prefetch_budget_s(r.prefetch_tokens)
            self.queues.prefetching.append(r)
        else:
            self.queues.to_waiting(r)
        self.clock.kick()

    def close_session(self, session_id) -> None:
        self.cache.close_session(session_id)

    def done_request(self, r: EngineRequest) -> None:
        """r finished or was rejected: it joins `finished` and the listeners hear of it."""
        r.seq = None  # the tokens are not needed any more: a long run must not keep them
        r.prompt = r.prompt[:0]
        self.queues.finished.append(r)
        for f in self.listeners:
            f(r)


__all__ = ["Engine", "EngineStalled", "MAX_RESOLVE_ROUNDS", "overlap_end_s"]
