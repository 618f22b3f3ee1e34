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
from typing import Any, Callable

import numpy as np

from .registry import Registry

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"
_STATES = (WAITING, RUNNING, FINISHED)

CLIP_MAX_NEW_TOKENS = 4096  # SGLang's clip of the output estimate (CLIP_MAX_NEW_TOKENS)
LPM_MAX_QUEUE = 128  # SGLang: above this many waiting requests lpm falls back to fcfs


def check_int(value, name: str, minimum: int) -> int:
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
        self.output_length = check_int(self.output_length, f"request {self.rid!r}: output_length", 0)
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

    # Any: the caller's requests (a Request subclass such as the engine's EngineRequest)
    match_len: Callable[[Any], int] | None = None
    path_key: Callable[[Any], tuple] | None = None


_REGISTRY = Registry("schedule policy")


def register_schedule_policy(name: str, config: type | None = None):
    """Class decorator: make a waiting-queue policy available by name; `config`: its options
    dataclass (cache_core/options.py: its fields are `engine:` keys; default: none)."""
    return _REGISTRY.register(name, config)


def schedule_policy_config(name: str) -> type:
    """The options dataclass schedule policy `name` registered with."""
    return _REGISTRY.config_of(name)


def schedule_policy_configs() -> list[type]:
    """The registered schedule policies' options dataclasses (each once; `NoOptions`: none)."""
    return _REGISTRY.configs()


def unregister_schedule_policy(name: str) -> None:
    _REGISTRY.unregister(name)


def make_schedule_policy(name: str, options=None, **kwargs):
    """A fresh instance of the policy `name` (kwargs go to its constructor, e.g. seed); its
    `options` those given (its options dataclass), else the defaults."""
    policy = _REGISTRY.make(name, **kwargs)
    policy.options = options if options is not None else _REGISTRY.config_of(name)()
    return policy


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
        self.max_queue = check_int(max_queue, "max_queue", 0)

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


__all__ = [
    "Request", "SchedulingContext", "SchedulePolicy", "register_schedule_policy", "unregister_schedule_policy",
    "make_schedule_policy", "schedule_policy_names", "schedule_policy_config", "schedule_policy_configs",
    "Fcfs", "LongestPrefixMatch", "DfsWeight", "RandomOrder",
    "CLIP_MAX_NEW_TOKENS", "LPM_MAX_QUEUE", "WAITING", "RUNNING", "FINISHED", "check_int",
]
