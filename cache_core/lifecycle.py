"""One request's way through the cache, shared by replay (`replay.ReplayStepper`) and the
engine loop (`engine.py`), so a simulated or real run caches exactly what replay caches.

- `admit`: match the prompt (cut to floor((len(prompt) - 1) / P) * P: one token is always
  computed), lock the match, load its host/storage hits (tiers; replay acknowledges at once),
  take FULL pages for the rest (evicting as SGLang does) and every voting component's units
  (`take_slots`: SWA window pages, MAMBA state slots, ...; each pool evicting when short).
  A request that cannot get them is rejected: everything is given back, the match unlocked.
- `commit`: insert prompt + output[:-1] with the request's pages and units, split at the
  prompt boundary (a second insert of the page-aligned prompt with priority + 1), register
  the session's region, unlock the match.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .records import MatchResult, TokenSeq


@dataclass(frozen=True, kw_only=True, slots=True)
class AdmitParams:
    seq: TokenSeq  # prompt + output[:-1]
    prompt_len: int
    session_id: object = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Admitted:
    match: MatchResult  # locked unless rejected
    cached_tokens: int
    evicted_tokens: int  # FULL tokens removed meanwhile (also by SWA/MAMBA pressure)
    rejected: bool
    pages: object = None  # FULL pages for tokens cached_tokens .. (None: nothing to compute)
    slots: dict = field(default_factory=dict)  # the voting components' units by name
    gen: int = 0  # session generation


@dataclass(frozen=True, kw_only=True, slots=True)
class CommitParams:
    seq: TokenSeq
    prompt_len: int
    match: MatchResult  # still locked; unlocked by `commit`
    pages: object  # FULL pages of tokens match.cached_tokens .. (None: none)
    slots: dict
    session_id: object = None
    gen: int = 0
    priority: int = 0
    inserted_len: int = 0  # tokens the request inserted before (chunked prefill): no second hit


def request_slots(cache, new_tokens: int, cached: int, aligned: int) -> tuple[dict, bool]:
    """Every voting component's units for one request, in component order, each pool evicting
    when short: (units by component name, True), or (those taken before the one that failed,
    False): the caller gives them back (`release_slots`)."""
    got: dict = {}
    for c in cache.voters:
        s = c.request_slots(new_tokens, cached, aligned)
        if s is None:
            return got, False
        got[c.name] = s
    return got, True


def release_slots(cache, slots: dict) -> None:
    """Return units from `request_slots` that will not be inserted."""
    for c in cache.voters:
        if c.name in slots:
            c.release_slots(slots[c.name])


def take_slots(cache, match: MatchResult, new_tokens: int, cached: int, aligned: int,
               finalize: bool = True) -> tuple[dict, bool]:
    """`request_slots`, then (unless `finalize` is False: the caller runs them later) the
    components' finalizers (MAMBA copies the reused checkpoint into the private slot)."""
    slots, ok = request_slots(cache, new_tokens, cached, aligned)
    if ok and finalize:
        cache.finalize(match, slots)
    return slots, ok


def admit(cache, p: AdmitParams) -> Admitted:
    P = cache.page_size
    seq = p.seq
    gen = cache.session_begin(p.session_id) if p.session_id is not None else 0
    m = cache.match(seq, max(p.prompt_len - 1, 0) // P * P)
    cache.lock(m)
    if cache.hier is not None:  # host and storage hits load into L1 (acks are immediate)
        m = cache.load(m, seq)
    cached = m.cached_tokens
    evicted0 = cache.full.evicted_tokens
    n = seq.length - cached
    pages = _full_pages(cache, n) if n > 0 else None
    if n > 0 and pages is None:
        cache.unlock(m)
        return Admitted(match=m, cached_tokens=cached, evicted_tokens=cache.full.evicted_tokens - evicted0,
                        rejected=True, gen=gen)
    slots, ok = request_slots(cache, n, cached, seq.length // P * P)
    if not ok:
        if pages is not None:
            cache.free(pages)
        release_slots(cache, slots)
        cache.unlock(m)
        return Admitted(match=m, cached_tokens=cached, evicted_tokens=cache.full.evicted_tokens - evicted0,
                        rejected=True, gen=gen)
    cache.finalize(m, slots)
    return Admitted(match=m, cached_tokens=cached, evicted_tokens=cache.full.evicted_tokens - evicted0,
                    rejected=False, pages=pages, slots=slots, gen=gen)


def _full_pages(cache, n: int):
    """ceil(n / P) FULL pages, evicting first as SGLang does: demand n (+ P when P > 1), then
    the shortfall once more. None when still short."""
    P = cache.page_size
    need_pages = -(-n // P)
    if not cache.full.pool.unbounded:
        demand = n + P if P > 1 else n
        free = cache.free_tokens
        if free < demand:
            cache.evict(demand - free)
        if cache.free_tokens < need_pages * P:
            cache.evict(need_pages * P - cache.free_tokens)
    return cache.alloc(need_pages)


def commit(cache, p: CommitParams):
    """Insert, split at the prompt boundary, register the session, unlock. Returns the
    InsertResult of the full insert (the match itself when nothing was inserted)."""
    P = cache.page_size
    seq, m = p.seq, p.match
    ls = seq.length
    aligned = ls // P * P
    done = m
    if p.pages is not None:
        done = cache.insert(seq, aligned, p.pages, m.cached_tokens, after=m, slots=p.slots,
                            priority=p.priority, inserted_len=p.inserted_len)
    elif p.slots:
        release_slots(cache, p.slots)
    prompt_aligned = p.prompt_len // P * P
    inserted = p.pages is not None and done.handle is not None and done.handle.node.end == aligned
    if ls > p.prompt_len and 0 < prompt_aligned < aligned and (inserted or p.pages is None):
        cache.insert(seq, prompt_aligned, after=m if m.cached_tokens <= prompt_aligned else None,
                     priority=p.priority + 1, inserted_len=prompt_aligned)
    if p.session_id is not None:
        cache.session_finish(p.session_id, p.gen, done)
    cache.unlock(m)
    return done
