"""Replay: serve requests one at a time, with no clock, exactly as SGLang's scheduler drives
its radix cache (so per-request cached tokens can be compared with SGLang's own tree).

Per request, with page size P and S = prompt + output[:-1] (S = prompt without output):

a. match the prompt cut to floor((len(prompt) - 1) / P) * P tokens (one token is always
   computed); cached_tokens = matched length;
b. lock the matched path;
c. n = len(S) - cached; if n > 0: demand = n (+ P when P > 1); if free < demand, evict
   demand - free tokens; take ceil(n / P) pages; if short, evict the shortfall once more
   and retry; if still short the request is *rejected* (unlock, no insert; it still counts
   in the totals with its cached tokens);
d. insert S cut to whole pages (pages of tokens the tree already holds and of the partial
   tail page are freed; every node of the path counts one hit); then, when S is longer than
   the prompt and 0 < floor(len(prompt) / P) * P < that cut length, insert the page-aligned
   prompt once more as a separate call with the request's priority + 1, which splits the
   node at the prompt boundary (no hits: the request inserted those tokens already);
e. unlock.
"""
from __future__ import annotations

from dataclasses import dataclass


from .cache import RadixCache, TokenSeq
from .keys import as_tokens


@dataclass(frozen=True, slots=True)
class StepResult:
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    evicted_tokens: int
    rejected: bool
    traversed_tokens: int = 0  # how far the FULL path matched (>= cached with SWA/MAMBA votes)
    lost: tuple = ()  # ((component, tokens, reason), ...) from the vote
    cached_device: int = -1  # with tiers: cached tokens that were on L1 already (-1: all)
    cached_host: int = 0  # loaded from L2
    cached_storage: int = 0  # prefetched from L3


class ReplayStepper:
    """Applies steps a-e to a `RadixCache` for one request at a time.

    With SWA and MAMBA the same steps run, with the voted reusable prefix as `cached`, plus:
    a MAMBA private state slot (and snapshot slots for every-K checkpoints) taken after the
    lock, the finalizer's copy of the reused checkpoint, and SWA pages for the request's
    window (min(ceil(n / P), window pages + 1)), each pool evicting in its own policy order
    when short. A request that cannot get its FULL pages, its SWA window or its private state
    is rejected."""

    def __init__(self, cache: RadixCache):
        self.cache = cache

    def step(self, prompt, output=None, seq: TokenSeq | None = None, session_id=None,
             priority: int = 0) -> StepResult:
        """Serve one request. `seq`, when given, must be TokenSeq(prompt + output[:-1])
        (a workload that keeps histories contiguous builds it without a copy). With a
        session-aware policy a request with `session_id` registers its session's region when
        it completes."""
        cache = self.cache
        P = cache.page_size
        prompt = as_tokens(prompt)
        lp = len(prompt)
        n_out = 0 if output is None else len(output)
        if seq is None:
            if output is not None and len(output) > 1:
                seq = TokenSeq.join(prompt, as_tokens(output)[:-1])
            else:
                seq = TokenSeq(prompt)
        ls = seq.length

        gen = cache.session_begin(session_id) if session_id is not None else 0
        m = cache.match(seq, max(lp - 1, 0) // P * P)  # (a)
        cache.lock(m)  # (b)
        if cache.hier is not None:  # host and storage hits load into L1 (acks are immediate)
            m = cache.load(m, seq)
        cached = m.cached_tokens
        evicted0 = cache.full.evicted_tokens
        n = ls - cached  # (c)
        aligned = ls // P * P
        pages = None
        if n > 0:
            need_pages = -(-n // P)
            if not cache.full.pool.unbounded:
                demand = n + P if P > 1 else n
                free = cache.free_tokens
                if free < demand:
                    cache.evict(demand - free)
                if cache.free_tokens < need_pages * P:
                    cache.evict(need_pages * P - cache.free_tokens)
            pages = cache.alloc(need_pages)
            if pages is None:
                return self._reject(m, lp, n_out, cached, cache.full.evicted_tokens - evicted0)
        slots, ok = cache.request_slots(n, cached, aligned)  # SWA window pages, MAMBA slots, ...
        if not ok:
            if pages is not None:
                cache.free(pages)
            cache.release_slots(slots)
            return self._reject(m, lp, n_out, cached, cache.full.evicted_tokens - evicted0)
        cache.finalize(m, slots)
        self.commit(seq, lp, m, pages, slots, session_id, gen, priority)
        return StepResult(lp, n_out, cached, cache.full.evicted_tokens - evicted0, False, m.traversed, m.lost,
                          m.device, m.host_tokens, m.storage_tokens)

    def commit(self, seq: TokenSeq, lp: int, m, pages, slots: dict, session_id=None, gen: int = 0,
               priority: int = 0, inserted_len: int = 0):
        """Steps (d) and (e) for a request that computed `seq` (prompt of `lp` tokens plus
        output[:-1]) over the locked match `m`: `pages` (or None) hold the KV of tokens
        m.cached_tokens .. ceil(len(seq) / P) * P; `slots` the voting components' units as allocated for it (`RadixCache.request_slots`).
        Inserts, registers the session's region, unlocks `m`. `inserted_len`: tokens the
        request inserted already (chunked prefill), which count no hit again. Shared with the engine loop,
        so a simulated or real run caches exactly what replay caches."""
        cache = self.cache
        P = cache.page_size
        ls = seq.length
        aligned = ls // P * P
        done = m
        if pages is not None:  # (d)
            done = cache.insert(seq, aligned, pages, m.cached_tokens, after=m, slots=slots,
                                priority=priority, inserted_len=inserted_len)
        elif slots:
            cache.release_slots(slots)
        prompt_aligned = lp // P * P
        inserted = pages is not None and done.handle is not None and done.handle.node.end == aligned
        if ls > lp and 0 < prompt_aligned < aligned and (inserted or pages is None):
            cache.insert(seq, prompt_aligned, after=m if m.cached_tokens <= prompt_aligned else None,
                         priority=priority + 1, inserted_len=prompt_aligned)
        if session_id is not None:
            cache.session_finish(session_id, gen, done)
        cache.unlock(m)  # (e)
        return done

    def _reject(self, m, lp, n_out, cached, evicted) -> StepResult:
        # evicted counts every FULL token removed meanwhile (also by SWA/MAMBA pressure)
        self.cache.unlock(m)
        return StepResult(lp, n_out, cached, evicted, True, m.traversed, m.lost,
                          m.device, m.host_tokens, m.storage_tokens)
