"""Batch admission (`Admission`, SGLang's PrefillAdder), per-step limits (`BatchLimits`) and
continuous batching with retraction (`RunningBatch`); the waiting queue, its requests and the
schedule policies are in scheduling.py."""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np

from .scheduling import CLIP_MAX_NEW_TOKENS, FINISHED, RUNNING, WAITING, Request, check_int


# ---------------------------------------------------------------------------------------------
# admission
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class BatchLimits:
    """Per-step limits (SGLang's server arguments of the same meaning):

    - ``max_running_requests``: requests running at once (decoding, plus those admitted this
      step, the continuing chunked one included).
    - ``max_prefill_tokens``: the step's prefill token budget (SGLang ``max_prefill_tokens``).
    - ``chunked_prefill_tokens``: the step's chunk budget (SGLang ``chunked_prefill_size``);
      no request prefills more than this in one step, and the step's admissions together
      neither; a request longer than what is left is cut (chunked). None: no chunking.
    - ``max_total_tokens``: KV memory in tokens (the pool size); admission never counts more
      available memory than this, and a request needing this much or more can never run.
    """

    max_running_requests: int
    max_prefill_tokens: int
    chunked_prefill_tokens: int | None = None
    max_total_tokens: int

    def __post_init__(self):
        check_int(self.max_running_requests, "max_running_requests", 1)
        check_int(self.max_prefill_tokens, "max_prefill_tokens", 1)
        if self.chunked_prefill_tokens is not None:
            check_int(self.chunked_prefill_tokens, "chunked_prefill_tokens", 1)
        check_int(self.max_total_tokens, "max_total_tokens", 1)


class AdmissionResult(NamedTuple):
    admitted: list  # [(Request, new tokens to prefill this step)], in admission order
    chunked: Request | None  # the admitted request whose prefill continues next step


class Admission:
    """Batch admission (SGLang's `PrefillAdder`), one `select` call per step.

    Token charges (P = ``page_size``; ``ceil`` rounds up to whole pages):

    - output reservation of a request r: ``min(max(output_length - generated_tokens, 0),
      clip_max_new_tokens)`` (clip 4096, as SGLang);
    - each running request holds back ``reservation x new_token_ratio`` (SGLang's estimate of
      the decode tokens still to come; the engine may lower the ratio over time and raise it
      after a retraction, as SGLang does);
    - a request admitted whole is charged ``ceil(uncached_tokens) + reservation`` (the full
      reservation, no ratio, exactly as SGLang); a request cut by chunking is charged only
      ``ceil(new_tokens)`` (its reservation is charged with its last chunk).

    ``available = min(free_tokens_fn(), max_total_tokens) - held back - charges so far``;
    `free_tokens_fn` (free + evictable tokens, supplied by the engine) is read again before
    every candidate, as SGLang re-reads it, so an engine that locks what it admits is seen.

    Budgets of one step: prefill ``max_prefill_tokens`` and, with chunking, the chunk budget
    ``chunked_prefill_tokens``; every admission lowers both by ``ceil(new_tokens)``. With
    chunking the room a request may take is ``min(prefill left, chunk left)``.

    Order of one step:

    1. ``chunked`` (the request cut in the previous step) goes first, with no memory or
       running-count check (its memory was checked when it was first admitted): it
       prefills ``min(uncached, room)``; still longer -> it stays the chunked request and
       the step admits nothing else.
    2. Then the waiting requests in the given order. Before each one: stop if running +
       admitted reached ``max_running_requests``; stop if ``available <= 0``; stop if the
       prefill budget or the chunk budget is ``<= 0``. Then, with n = ceil(uncached):

       - memory: stop if ``n + reservation >= available`` (strict, as SGLang; checked for
         the whole request even when it will be chunked). Admission never skips ahead: a
         request that does not fit blocks the ones behind it, so fcfs stays fair and a
         large request is never starved by smaller ones behind it.
       - without chunking: stop if something was admitted already and ``n >= prefill
         left`` (SGLang); the first request of a step may exceed ``max_prefill_tokens``, so
         a long prompt still runs;
       - with chunking: if ``n > room`` the request is cut to ``room`` (its end floored to a
         page boundary) and becomes the step's one chunked request; admission stops there.
         (SGLang cuts at the chunk budget only; the two agree whenever max_prefill_tokens
         >= chunked_prefill_tokens, the usual setting.)
       - otherwise it is admitted whole, for ``uncached_tokens`` new tokens.

    ``last_stop`` says why the last `select` ended: "empty" (queue exhausted),
    "max_running", "memory", "prefill_budget" or "chunked".

    `select` changes no request except ``prefix_len`` (when given ``match_len``: each
    candidate is matched just before it is considered, as SGLang's admission re-matches);
    states, computed tokens and locks are the engine's to update. ``confirm(r)``, when given,
    is called once r has passed the memory check, before anything else is read: an engine
    may then hold back what its ``match_len`` would do (lock, touch) until a request gets
    that far."""

    def __init__(self, new_token_ratio: float = 0.7, clip_max_new_tokens: int = CLIP_MAX_NEW_TOKENS,
                 page_size: int = 1):
        try:
            r = float(new_token_ratio)
        except (TypeError, ValueError):
            r = float("nan")
        if isinstance(new_token_ratio, bool) or not (np.isfinite(r) and r >= 0):
            raise ValueError(f"new_token_ratio must be a finite number >= 0, got {new_token_ratio!r}")
        self.new_token_ratio = r
        self.clip_max_new_tokens = check_int(clip_max_new_tokens, "clip_max_new_tokens", 0)
        self.page_size = check_int(page_size, "page_size", 1)
        self.last_stop: str | None = None

    def ceil_pages(self, n: int) -> int:
        P = self.page_size
        return -(-n // P) * P

    def reservation(self, r: Request) -> int:
        """Output tokens reserved for r: min(remaining output, clip)."""
        return min(r.remaining_output, self.clip_max_new_tokens)

    def request_tokens(self, r: Request) -> int:
        """Memory an admission of r is checked against: ceil(uncached) + reservation. A
        request with ``request_tokens(r) >= max_total_tokens`` can never be admitted; the
        engine should reject it on arrival (`select` raises ValueError when it meets one,
        rather than block the queue forever)."""
        return self.ceil_pages(r.uncached_tokens) + self.reservation(r)

    def held_back(self, running) -> float:
        """Tokens held back for the decode of the running requests."""
        ratio = self.new_token_ratio
        return sum(self.reservation(r) * ratio for r in running)

    def _cut(self, r: Request, need: int, room: int) -> int:
        """New tokens of r's chunk: its end floored to a page boundary."""
        start = r.fill_len - need
        P = self.page_size
        return (start + room) // P * P - start

    def select(self, ordered_waiting: Iterable[Request], running, free_tokens_fn: Callable[[], int], limits: BatchLimits,
               *, chunked: Request | None = None, match_len: Callable[[Request], int] | None = None,
               confirm: Callable[[Request], None] | None = None) -> AdmissionResult:
        """Admit requests for one step (rules in the class docstring). `running`: the
        decoding requests (a RunningBatch or any iterable; the chunked one excluded).
        Returns ``(admitted, chunked)``: admitted = [(request, new tokens this step)] in
        admission order (a continuing chunked request first); chunked = the admitted
        request cut this step, or None."""
        self._check_limits(limits)
        running = list(running)
        admitted: list = []
        offset = self.held_back(running)
        rem_input = limits.max_prefill_tokens
        rem_chunk = limits.chunked_prefill_tokens
        if chunked is not None:
            if rem_chunk is None:
                raise ValueError("a continuing chunked request needs chunked_prefill_tokens")
            need = self._chunked_need(chunked, running)
            room = min(rem_input, rem_chunk)
            if need > room:
                admitted.append((chunked, self._cut(chunked, need, room)))
                self.last_stop = "chunked"
                return AdmissionResult(admitted, chunked)
            admitted.append((chunked, need))
            offset += self.ceil_pages(need) + self.reservation(chunked)
            rem_input -= self.ceil_pages(need)
            rem_chunk -= self.ceil_pages(need)
        stop, out_chunked = self._admit_waiting(ordered_waiting, chunked, len(running), free_tokens_fn, limits,
                                                (match_len, confirm), admitted, offset, rem_input, rem_chunk)
        self.last_stop = stop
        return AdmissionResult(admitted, out_chunked)

    def _check_limits(self, limits: BatchLimits) -> None:
        """Reject limits `select` cannot work with (TypeError / ValueError)."""
        if not isinstance(limits, BatchLimits):
            raise TypeError("limits must be a BatchLimits")
        P = self.page_size
        C = limits.chunked_prefill_tokens
        if C is not None and (C % P or limits.max_prefill_tokens < P):
            raise ValueError(f"with chunking, chunked_prefill_tokens ({C}) must be a multiple of page_size "
                             f"({P}) and max_prefill_tokens ({limits.max_prefill_tokens}) at least one page")

    @staticmethod
    def _chunked_need(chunked: Request, running: list) -> int:
        """The tokens a continuing chunked request still has to prefill; ValueError when it is
        also in the running batch or has nothing left."""
        if any(x is chunked for x in running):
            raise ValueError(f"chunked request {chunked.rid!r} must not be in the running batch")
        need = chunked.uncached_tokens
        if need <= 0:
            raise ValueError(f"chunked request {chunked.rid!r} has nothing left to prefill")
        return need

    def _admit_waiting(self, ordered_waiting: Iterable[Request], chunked: Request | None, n_running: int,
                       free_tokens_fn: Callable[[], int], limits: BatchLimits, hooks: tuple, admitted: list,
                       offset: float, rem_input: int, rem_chunk: int | None) -> tuple[str, Request | None]:
        """`select`'s pass over the waiting requests, after any continuing chunked one: appends
        to `admitted` (hooks: `select`'s match_len and confirm; offset: memory already held
        back; rem_input / rem_chunk: the prefill and chunk budgets left). Returns (stop
        reason, the request cut this step or None)."""
        match_len, confirm = hooks
        for r in ordered_waiting:
            if r is chunked:
                raise ValueError(f"request {r.rid!r} is both waiting and the chunked request")
            if n_running + len(admitted) >= limits.max_running_requests:
                return "max_running", None
            avail = min(free_tokens_fn(), limits.max_total_tokens) - offset
            if avail <= 0:
                return "memory", None
            if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                return "prefill_budget", None
            need, n, total = self._request_need(r, match_len, limits)
            if total >= avail:
                return "memory", None
            if confirm is not None:
                confirm(r)
            if rem_chunk is None:
                if admitted and n >= rem_input:
                    return "prefill_budget", None
            else:
                room = min(rem_input, rem_chunk)
                if n > room:
                    new = self._cut(r, need, room)
                    if new <= 0:
                        return "prefill_budget", None
                    admitted.append((r, new))
                    return "chunked", r
            admitted.append((r, need))
            offset += total
            rem_input -= n
            if rem_chunk is not None:
                rem_chunk -= n
        return "empty", None

    def _request_need(self, r: Request, match_len: Callable[[Request], int] | None,
                      limits: BatchLimits) -> tuple[int, int, int]:
        """Set r.prefix_len from `match_len` (when given) and return (tokens to prefill, those
        rounded up to pages, that plus the decode reservation); ValueError for a match outside
        [0, fill_len], nothing left to prefill, or a request that can never fit the pool."""
        if match_len is not None:
            v = operator.index(match_len(r))
            if not 0 <= v <= r.fill_len:
                raise ValueError(f"match_len({r.rid!r}) = {v} is outside [0, {r.fill_len}]")
            r.prefix_len = v
        need = r.uncached_tokens
        if need <= 0:
            raise ValueError(f"request {r.rid!r}: prefix_len {r.prefix_len} leaves nothing to prefill "
                             f"(fill_len {r.fill_len}); match at most fill_len - 1 tokens")
        n = self.ceil_pages(need)
        total = n + self.reservation(r)
        if total >= limits.max_total_tokens:
            raise ValueError(f"request {r.rid!r} needs {total} tokens, max_total_tokens is "
                             f"{limits.max_total_tokens}: it can never be admitted")
        return need, n, total


# ---------------------------------------------------------------------------------------------
# continuous batching
# ---------------------------------------------------------------------------------------------
def _default_retract_key(r: Request):
    return (r.generated_tokens, -len(r.prompt))


def _default_freed(r: Request) -> int:
    return max(r.computed_tokens - r.prefix_len, 0) + max(r.generated_tokens - 1, 0)


class RunningBatch:
    """The requests that decode each step, in batch order (the order they were added).

    Requests join after their prefill (a request still being prefilled in chunks stays out,
    as in SGLang); finished ones leave each step (`remove_finished`); when decode runs out of
    memory, `retract` sends some back to the waiting queue."""

    def __init__(self, page_size: int = 1):
        self.page_size = check_int(page_size, "page_size", 1)
        self.requests: list[Request] = []
        self.last_shortfall = 0

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self):
        return iter(list(self.requests))

    def __contains__(self, r) -> bool:
        return any(x is r for x in self.requests)

    def add(self, r: Request) -> None:
        """Join the batch (state -> "running")."""
        if r in self:
            raise ValueError(f"request {r.rid!r} is already running")
        if r.state == FINISHED:
            raise ValueError(f"request {r.rid!r} is finished")
        r.state = RUNNING
        self.requests.append(r)

    def remove(self, r: Request) -> None:
        """Leave the batch without any state change (e.g. an abort)."""
        for i, x in enumerate(self.requests):
            if x is r:
                del self.requests[i]
                return
        raise ValueError(f"request {r.rid!r} is not running")

    def remove_finished(self) -> list:
        """Remove every request with generated_tokens >= output_length (or already marked
        finished); they become "finished". Returns them in batch order (the engine then
        inserts/unlocks their cache entries)."""
        done: list[Request] = []
        keep: list[Request] = []
        for r in self.requests:
            (done if r.generated_tokens >= r.output_length or r.state == FINISHED else keep).append(r)
        for r in done:
            r.state = FINISHED
        self.requests = keep
        return done

    def _decode_need(self, r: Request) -> int:
        """KV tokens r's next decode step allocates: the step writes position
        fill_len - 1 (the last generated token); a new page is needed when that position
        starts one (SGLang's ``(seqlen - 1) % page_size == 0``). 0 before its first token."""
        if r.generated_tokens < 1:
            return 0
        P = self.page_size
        return P if (r.fill_len - 1) % P == 0 else 0

    def decode_tokens(self) -> int:
        """KV tokens the next decode step must allocate (page_size 1: one per request)."""
        return sum(self._decode_need(r) for r in self.requests)

    def retract_order(self, order: Callable[[Any], object] | None = None) -> list:
        """Running requests in the order `retract` would take them: the smallest ``order``
        key first; default SGLang's (generated_tokens, -len(prompt)): fewest decoded tokens
        first, ties by the longest prompt; full ties: later in batch order first (SGLang
        pops from the back of a stable descending sort)."""
        key = order or _default_retract_key
        idx = sorted(range(len(self.requests)), key=lambda i: (key(self.requests[i]), -i))
        return [self.requests[i] for i in idx]

    def retract(self, n_tokens_needed: int, order: Callable[[Any], object] | None = None,
                freed_tokens: Callable[[Any], int] | None = None) -> list:
        """Retract running requests until the next decode step fits.

        ``n_tokens_needed``: the decode shortfall, ``decode_tokens() - (free + evictable)``.
        Requests go in `retract_order(order)`; each one retracted lowers the shortfall by
        ``freed_tokens(r)`` (default: its private KV, ``computed_tokens - prefix_len +
        max(generated_tokens - 1, 0)``; the engine may pass its exact count) plus its own
        decode need. Stops when the shortfall is <= 0; never retracts the last request
        (SGLang); the shortfall left is in ``last_shortfall``. Nothing is retracted when
        n_tokens_needed <= 0.

        Each retracted request leaves the batch and goes back to "waiting": computed_tokens
        = 0, prefix_len = 0, retracted += 1; generated_tokens is kept (its re-prefill covers
        prompt + output, as SGLang); ``match``/``seq`` stay for the engine to release.
        Returns them in retraction order."""
        shortfall = n_tokens_needed
        out: list = []
        if shortfall > 0:
            freed = freed_tokens or _default_freed
            for r in self.retract_order(order):
                if len(self.requests) - len(out) <= 1:
                    break
                shortfall -= operator.index(freed(r)) + self._decode_need(r)
                out.append(r)
                if shortfall <= 0:
                    break
        gone = {id(r) for r in out}
        self.requests = [r for r in self.requests if id(r) not in gone]
        for r in out:
            r.state = WAITING
            r.computed_tokens = 0
            r.prefix_len = 0
            r.retracted += 1
        self.last_shortfall = max(shortfall, 0)
        return out


__all__ = ["Admission", "AdmissionResult", "BatchLimits", "RunningBatch"]
