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
   tail page are freed); then, when S is longer than the prompt and
   0 < floor(len(prompt) / P) * P < that cut length, insert the page-aligned prompt once
   more as a separate call, which splits the node at the prompt boundary;
e. unlock.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cache import RadixCache, TokenSeq
from .keys import as_tokens


@dataclass(frozen=True, slots=True)
class StepResult:
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    evicted_tokens: int
    rejected: bool


class ReplayStepper:
    """Applies steps a-e to a `RadixCache` for one request at a time."""

    def __init__(self, cache: RadixCache):
        self.cache = cache

    def step(self, prompt, output=None) -> StepResult:
        cache = self.cache
        P = cache.page_size
        prompt = as_tokens(prompt)
        lp = len(prompt)
        if output is not None and len(output) > 1:
            s = np.concatenate([prompt, as_tokens(output)[:-1]])
        else:
            s = prompt
        n_out = 0 if output is None else len(output)
        seq = TokenSeq(s)
        ls = seq.length

        m = cache.match(seq, max(lp - 1, 0) // P * P)  # (a)
        cached = m.cached_tokens
        cache.lock(m)  # (b)
        evicted = 0
        n = ls - cached  # (c)
        pages = None
        if n > 0:
            need_pages = -(-n // P)
            if not cache.full.pool.unbounded:
                demand = n + P if P > 1 else n
                free = cache.free_tokens
                if free < demand:
                    evicted += cache.evict(demand - free)
                if cache.free_tokens < need_pages * P:
                    evicted += cache.evict(need_pages * P - cache.free_tokens)
            pages = cache.alloc(need_pages)
            if pages is None:
                cache.unlock(m)
                return StepResult(lp, n_out, cached, evicted, True)
        aligned = ls // P * P  # (d)
        if pages is not None:
            cache.insert(seq, aligned, pages, cached, after=m)
        prompt_aligned = lp // P * P
        if ls > lp and 0 < prompt_aligned < aligned:
            cache.insert(seq, prompt_aligned, after=m)
        cache.unlock(m)  # (e)
        return StepResult(lp, n_out, cached, evicted, False)
