"""Cache-aware scheduling: waiting-queue policies, batch admission, continuous batching.

Clock-agnostic and tree-agnostic: nothing here reads a clock or touches a tree node. What the
engine knows about the cache reaches this module through small callbacks (a match length, a
path of node ids, a free-token count), so the same decisions are made in replay, in the
simulator and on hardware. The rules follow SGLang's scheduler (schedule_policy.py: the
waiting-queue sort and `PrefillAdder`; schedule_batch.py: `retract_decode`); where this module
departs from SGLang the docstring says so.

One engine step, as the engine loop is expected to use it::

    ordered = policy.order(waiting, ctx)                 # fcfs / lpm / dfs-weight / random
    admitted, chunked = admission.select(ordered, running, free_tokens_fn, limits,
                                         chunked=previous_chunked)
    ... prefill `admitted` (each for its new_tokens), decode `running` ...
    running.remove_finished(); if decode lacks memory: running.retract(shortfall)

Policies (registered by name, like eviction policies)
-----------------------------------------------------
- ``fcfs``: arrival order, ties by rid.
- ``lpm``: longest prefix match first. ``ctx.match_len(r)`` is called once for every waiting
  request and recorded in ``r.prefix_len``; ties by the higher hit ratio
  ``prefix_len / len(prompt)`` (exact fractions), then fcfs. With more than ``max_queue``
  (128, SGLang's rule) waiting requests it is plain fcfs and no match is made.
  (SGLang's in-batch prefix deprioritisation is not modelled.)
- ``dfs-weight``: see `DfsWeight` for the exact rule (SGLang's post-order walk, subtree
  weight = waiting requests in it).
- ``random``: a seeded `np.random.Generator` permutation of the fcfs order.

Admission and retraction rules: see `Admission` and `RunningBatch.retract`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, NamedTuple

import numpy as np

from .registry import Registry

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"
_STATES = (WAITING, RUNNING, FINISHED)

CLIP_MAX_NEW_TOKENS = 4096  # SGLang's clip of the output estimate (CLIP_MAX_NEW_TOKENS)
LPM_MAX_QUEUE = 128  # SGLang: above this many waiting requests lpm falls back to fcfs


def _int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v}")
    return v


# ---------------------------------------------------------------------------------------------
# request
# ---------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Request:
    """One request and its serving state. Compared by identity (``eq=False``).

    Identity and workload (set once):

    - ``rid``: request id, unique in a run; the last tie-break of every order (so rids of one
      run must be mutually comparable).
    - ``session_id``: the conversation/agent it belongs to (None: none); scheduling ignores it.
    - ``prompt``: the prompt tokens, 1-D int64 (converted on construction; not empty).
    - ``output_length``: tokens the request generates before it finishes (>= 0).
    - ``arrival_s``: arrival time in seconds (a number supplied by the caller; nothing here
      reads a clock). fcfs order is (arrival_s, rid).
    - ``priority``: the request's priority (passed to the cache's insert for the ``priority``
      eviction policy); the queue policies here ignore it.

    Serving state (mutable; the engine and this module update it):

    - ``prefix_len``: tokens of ``fill_len`` found cached at the last match (written by the
      ``lpm`` policy and by `Admission.select` when given a ``match_len``, or by the engine).
    - ``seq``: the engine's prepared token sequence for matching/inserting (e.g. a
      `TokenSeq` of prompt + generated output); opaque here.
    - ``match``: the engine's match handle (a locked `MatchResult`); opaque here. Retraction
      leaves it in place so that the engine can unlock it.
    - ``computed_tokens``: tokens of ``fill_len`` whose KV exists for this request (the reused
      prefix plus every prefilled chunk); chunked-prefill progress. 0 while waiting.
    - ``generated_tokens``: output tokens produced so far (kept across a retraction: SGLang
      re-prefills them, see ``fill_len``).
    - ``state``: "waiting", "running" (admitted: prefilling or decoding) or "finished".
    - ``retracted``: how many times decode retracted it back to the waiting queue.
    """

    rid: object
    session_id: object
    prompt: np.ndarray
    output_length: int
    arrival_s: float
    priority: int = 0
    prefix_len: int = 0
    seq: object = None
    match: object = None
    computed_tokens: int = 0
    generated_tokens: int = 0
    state: str = WAITING
    retracted: int = 0

    def __post_init__(self):
        arr = np.asarray(self.prompt)
        if arr.ndim != 1 or len(arr) == 0 or arr.dtype.kind not in "iu":
            raise ValueError(f"request {self.rid!r}: prompt must be a non-empty 1-D integer array")
        self.prompt = arr.astype(np.int64, copy=False)
        self.output_length = _int(self.output_length, f"request {self.rid!r}: output_length", 0)
        a = float(self.arrival_s)
        if not np.isfinite(a):
            raise ValueError(f"request {self.rid!r}: arrival_s must be finite, got {self.arrival_s!r}")
        self.arrival_s = a
        if self.state not in _STATES:
            raise ValueError(f"request {self.rid!r}: state must be one of {_STATES}, got {self.state!r}")

    @property
    def fill_len(self) -> int:
        """Tokens that must have KV before the next token is sampled: the prompt plus the
        tokens generated so far (after a retraction SGLang re-prefills prompt + output)."""
        return len(self.prompt) + self.generated_tokens

    @property
    def uncached_tokens(self) -> int:
        """Tokens still to prefill: fill_len - max(prefix_len, computed_tokens)."""
        return self.fill_len - max(self.prefix_len, self.computed_tokens)

    @property
    def remaining_output(self) -> int:
        return max(self.output_length - self.generated_tokens, 0)

    def fcfs_key(self):
        return (self.arrival_s, self.rid)

    def __repr__(self) -> str:
        return f"Request(rid={self.rid!r}, state={self.state}, prompt={len(self.prompt)}, out={self.output_length})"


# ---------------------------------------------------------------------------------------------
# waiting-queue policies
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SchedulingContext:
    """What the engine tells the queue policies about the cache (no tree nodes):

    - ``match_len(request) -> int``: the cached prefix length of ``request.fill_len`` tokens
      right now (the engine matches, and may lock, as it sees fit). Needed by ``lpm``.
    - ``path_key(request) -> tuple``: ids of the tree nodes along the request's matched path,
      root excluded, top-down (``()``: nothing matched). Needed by ``dfs-weight``.
    """

    match_len: Callable[[Request], int] | None = None
    path_key: Callable[[Request], tuple] | None = None


_REGISTRY = Registry("schedule policy")


def register_schedule_policy(name: str):
    """Class decorator: make a waiting-queue policy available by name."""
    return _REGISTRY.register(name)


def make_schedule_policy(name: str, **kwargs):
    """A fresh instance of the policy `name` (kwargs go to its constructor, e.g. seed)."""
    return _REGISTRY.make(name, **kwargs)


def schedule_policy_names() -> list[str]:
    return _REGISTRY.names()


class SchedulePolicy:
    """Base class. `order(waiting, ctx)` returns a new list (the input is not reordered) with
    the same requests in the order admission should consider them; deterministic: the
    result does not depend on the input order except through documented ties."""

    name = "?"

    def order(self, waiting: list, ctx: SchedulingContext | None = None) -> list:  # pragma: no cover
        raise NotImplementedError


def _fcfs(waiting) -> list:
    return sorted(waiting, key=Request.fcfs_key)


@register_schedule_policy("fcfs")
class Fcfs(SchedulePolicy):
    """First come, first served: (arrival_s, rid)."""

    def order(self, waiting, ctx=None):
        return _fcfs(waiting)


@register_schedule_policy("lpm")
class LongestPrefixMatch(SchedulePolicy):
    """Longest prefix match first: key (-prefix_len, -prefix_len/len(prompt), arrival_s, rid).

    `ctx.match_len` is called exactly once per waiting request and its value stored in
    ``prefix_len`` (0 <= value <= fill_len, else ValueError). With more than `max_queue`
    waiting requests the order is fcfs and no match is made (SGLang turns the costly
    matching off there); the engine must then match what it admits (`Admission.select`
    takes a ``match_len`` for that, as SGLang re-matches each candidate at admission)."""

    def __init__(self, max_queue: int = LPM_MAX_QUEUE):
        self.max_queue = _int(max_queue, "max_queue", 0)

    def order(self, waiting, ctx=None):
        if len(waiting) > self.max_queue:
            return _fcfs(waiting)
        if ctx is None or ctx.match_len is None:
            raise ValueError("lpm needs ctx.match_len")
        for r in waiting:
            v = operator.index(ctx.match_len(r))
            if not 0 <= v <= r.fill_len:
                raise ValueError(f"match_len({r.rid!r}) = {v} is outside [0, {r.fill_len}]")
            r.prefix_len = v
        return sorted(waiting, key=lambda r: (-r.prefix_len, -Fraction(r.prefix_len, len(r.prompt)),
                                              r.arrival_s, r.rid))


@register_schedule_policy("dfs-weight")
class DfsWeight(SchedulePolicy):
    """SGLang's DFS-weight order, on the tree the paths describe.

    `ctx.path_key(r)` gives each waiting request's matched path (node ids, top-down, root
    excluded); the request sits at the last node of its path (the root for ``()``). The
    paths build a tree (a node id must always have the same parent, else ValueError). The
    weight of a node = waiting requests sitting in its subtree (itself included). The order
    is a post-order walk from the root:

    1. visit the children in descending weight; equal weights: the child whose subtree holds
       the earliest request in fcfs order goes first (SGLang keeps the children dict's order
       there, which the tree-agnostic module cannot see);
    2. after all children, emit the requests sitting at the node itself, in fcfs order.

    So deeper, heavier subtrees are served together, and requests that matched nothing
    (sitting at the root) come last. Not subject to the 128-request fcfs fallback (SGLang
    applies it to lpm, not to dfs-weight)."""

    def order(self, waiting, ctx=None):
        if ctx is None or ctx.path_key is None:
            raise ValueError("dfs-weight needs ctx.path_key")
        root = object()
        parent: dict = {}
        children: dict = {root: []}
        at: dict = {root: []}
        queue = _fcfs(waiting)
        rank = {id(r): i for i, r in enumerate(queue)}
        for r in queue:  # fcfs: the lists at nodes come out in fcfs order
            path = tuple(ctx.path_key(r))
            if len(set(path)) != len(path):
                raise ValueError(f"path_key({r.rid!r}) repeats a node id: {path!r}")
            up = root
            for nid in path:
                if nid not in parent:
                    parent[nid] = up
                    children[nid] = []
                    at[nid] = []
                    children[up].append(nid)
                elif parent[nid] is not up and parent[nid] != up:
                    raise ValueError(f"node {nid!r} has two parents in the path keys (request {r.rid!r})")
                up = nid
            at[up].append(r)
        weight: dict = {}
        first: dict = {}  # earliest fcfs rank of a request in the subtree

        def calc(node):  # iterative post-order
            stack = [(node, False)]
            while stack:
                n, done = stack.pop()
                if not done:
                    stack.append((n, True))
                    stack.extend((c, False) for c in children[n])
                    continue
                w = len(at[n])
                f = rank[id(at[n][0])] if at[n] else len(rank)
                for c in children[n]:
                    w += weight[c]
                    f = min(f, first[c])
                weight[n], first[n] = w, f

        calc(root)
        out: list = []
        stack = [(root, False)]
        while stack:
            n, done = stack.pop()
            if done:
                out.extend(at[n])
                continue
            stack.append((n, True))
            kids = sorted(children[n], key=lambda c: (-weight[c], first[c]))
            stack.extend((c, False) for c in reversed(kids))
        return out


@register_schedule_policy("random")
class RandomOrder(SchedulePolicy):
    """A uniformly random order: ``rng.permutation`` applied to the fcfs order, with
    ``rng = np.random.default_rng(seed)`` owned by the policy (each call draws the next
    permutation, so a run is reproducible from the seed)."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def order(self, waiting, ctx=None):
        base = _fcfs(waiting)
        return [base[i] for i in self.rng.permutation(len(base))]


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
        _int(self.max_running_requests, "max_running_requests", 1)
        _int(self.max_prefill_tokens, "max_prefill_tokens", 1)
        if self.chunked_prefill_tokens is not None:
            _int(self.chunked_prefill_tokens, "chunked_prefill_tokens", 1)
        _int(self.max_total_tokens, "max_total_tokens", 1)


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
    states, computed tokens and locks are the engine's to update."""

    def __init__(self, new_token_ratio: float = 0.7, clip_max_new_tokens: int = CLIP_MAX_NEW_TOKENS,
                 page_size: int = 1):
        try:
            r = float(new_token_ratio)
        except (TypeError, ValueError):
            r = float("nan")
        if isinstance(new_token_ratio, bool) or not (np.isfinite(r) and r >= 0):
            raise ValueError(f"new_token_ratio must be a finite number >= 0, got {new_token_ratio!r}")
        self.new_token_ratio = r
        self.clip_max_new_tokens = _int(clip_max_new_tokens, "clip_max_new_tokens", 0)
        self.page_size = _int(page_size, "page_size", 1)
        self.last_stop: str | None = None

    def _ceil(self, n: int) -> int:
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
        return self._ceil(r.uncached_tokens) + self.reservation(r)

    def held_back(self, running) -> float:
        """Tokens held back for the decode of the running requests."""
        ratio = self.new_token_ratio
        return sum(self.reservation(r) * ratio for r in running)

    def _cut(self, r: Request, need: int, room: int) -> int:
        """New tokens of r's chunk: its end floored to a page boundary."""
        start = r.fill_len - need
        P = self.page_size
        return (start + room) // P * P - start

    def select(self, ordered_waiting, running, free_tokens_fn: Callable[[], int], limits: BatchLimits,
               *, chunked: Request | None = None,
               match_len: Callable[[Request], int] | None = None) -> AdmissionResult:
        """Admit requests for one step (rules in the class docstring). `running`: the
        decoding requests (a RunningBatch or any iterable; the chunked one excluded).
        Returns ``(admitted, chunked)``: admitted = [(request, new tokens this step)] in
        admission order (a continuing chunked request first); chunked = the admitted
        request cut this step, or None."""
        if not isinstance(limits, BatchLimits):
            raise TypeError("limits must be a BatchLimits")
        P = self.page_size
        C = limits.chunked_prefill_tokens
        if C is not None and (C % P or limits.max_prefill_tokens < P):
            raise ValueError(f"with chunking, chunked_prefill_tokens ({C}) must be a multiple of page_size "
                             f"({P}) and max_prefill_tokens ({limits.max_prefill_tokens}) at least one page")
        running = list(running)
        admitted: list = []
        offset = self.held_back(running)
        rem_input = limits.max_prefill_tokens
        rem_chunk = C

        if chunked is not None:
            if C is None:
                raise ValueError("a continuing chunked request needs chunked_prefill_tokens")
            if any(x is chunked for x in running):
                raise ValueError(f"chunked request {chunked.rid!r} must not be in the running batch")
            need = chunked.uncached_tokens
            if need <= 0:
                raise ValueError(f"chunked request {chunked.rid!r} has nothing left to prefill")
            room = min(rem_input, rem_chunk)
            if need > room:
                new = self._cut(chunked, need, room)
                admitted.append((chunked, new))
                self.last_stop = "chunked"
                return AdmissionResult(admitted, chunked)
            admitted.append((chunked, need))
            offset += self._ceil(need) + self.reservation(chunked)
            rem_input -= self._ceil(need)
            rem_chunk -= self._ceil(need)

        stop = "empty"
        out_chunked = None
        n_running = len(running)
        for r in ordered_waiting:
            if r is chunked:
                raise ValueError(f"request {r.rid!r} is both waiting and the chunked request")
            if n_running + len(admitted) >= limits.max_running_requests:
                stop = "max_running"
                break
            avail = min(free_tokens_fn(), limits.max_total_tokens) - offset
            if avail <= 0:
                stop = "memory"
                break
            if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                stop = "prefill_budget"
                break
            if match_len is not None:
                v = operator.index(match_len(r))
                if not 0 <= v <= r.fill_len:
                    raise ValueError(f"match_len({r.rid!r}) = {v} is outside [0, {r.fill_len}]")
                r.prefix_len = v
            need = r.uncached_tokens
            if need <= 0:
                raise ValueError(f"request {r.rid!r}: prefix_len {r.prefix_len} leaves nothing to prefill "
                                 f"(fill_len {r.fill_len}); match at most fill_len - 1 tokens")
            n = self._ceil(need)
            total = n + self.reservation(r)
            if total >= limits.max_total_tokens:
                raise ValueError(f"request {r.rid!r} needs {total} tokens, max_total_tokens is "
                                 f"{limits.max_total_tokens}: it can never be admitted")
            if total >= avail:
                stop = "memory"
                break
            if rem_chunk is None:
                if admitted and n >= rem_input:
                    stop = "prefill_budget"
                    break
            else:
                room = min(rem_input, rem_chunk)
                if n > room:
                    new = self._cut(r, need, room)
                    if new <= 0:
                        stop = "prefill_budget"
                        break
                    admitted.append((r, new))
                    out_chunked = r
                    stop = "chunked"
                    break
            admitted.append((r, need))
            offset += total
            rem_input -= n
            if rem_chunk is not None:
                rem_chunk -= n
        self.last_stop = stop
        return AdmissionResult(admitted, out_chunked)


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
        self.page_size = _int(page_size, "page_size", 1)
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
        done, keep = [], []
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

    def retract_order(self, order: Callable[[Request], object] | None = None) -> list:
        """Running requests in the order `retract` would take them: the smallest ``order``
        key first; default SGLang's (generated_tokens, -len(prompt)): fewest decoded tokens
        first, ties by the longest prompt; full ties: later in batch order first (SGLang
        pops from the back of a stable descending sort)."""
        key = order or _default_retract_key
        idx = sorted(range(len(self.requests)), key=lambda i: (key(self.requests[i]), -i))
        return [self.requests[i] for i in idx]

    def retract(self, n_tokens_needed: int, order: Callable[[Request], object] | None = None,
                freed_tokens: Callable[[Request], int] | None = None) -> list:
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


__all__ = [
    "Request", "SchedulingContext", "SchedulePolicy", "register_schedule_policy", "make_schedule_policy",
    "schedule_policy_names", "Fcfs", "LongestPrefixMatch", "DfsWeight", "RandomOrder", "BatchLimits",
    "Admission", "AdmissionResult", "RunningBatch", "CLIP_MAX_NEW_TOKENS", "LPM_MAX_QUEUE",
    "WAITING", "RUNNING", "FINISHED",
]
