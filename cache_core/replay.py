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
from .lifecycle import AdmitParams, CommitParams, admit, commit


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
        prompt = as_tokens(prompt)
        lp = len(prompt)
        n_out = 0 if output is None else len(output)
        if seq is None:
            if output is not None and len(output) > 1:
                seq = TokenSeq.join(prompt, as_tokens(output)[:-1])
            else:
                seq = TokenSeq(prompt)
        a = admit(cache, AdmitParams(seq=seq, prompt_len=lp, session_id=session_id))
        m = a.match
        if not a.rejected:
            commit(cache, CommitParams(seq=seq, prompt_len=lp, match=m, pages=a.pages, slots=a.slots,
                                       session_id=session_id, gen=a.gen, priority=priority))
        return StepResult(lp, n_out, a.cached_tokens, a.evicted_tokens, a.rejected, m.traversed, m.lost,
                          m.device, m.host_tokens, m.storage_tokens)
