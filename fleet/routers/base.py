"""The router contract and the accounting every router shares.

A router sees what a real one sees at the moment a request arrives: the request (its tokens,
page keys, session id) and its own bookkeeping of what it sent where and what has finished
(`Router.outstanding`, `Router.outstanding_tokens`). Only cache_aware_exact and llm_d (its
precise prefix and load scorers, as llm-d reads KV events and engine metrics) read the engines
themselves (`Router.engines`, set by the fleet: per engine the list of its ranks, one without
DP attention): their exact caches, pools and queues.

Lifecycle: ``pick(req, now) -> engine index``; then the fleet calls ``routed(req, i, now)``
and, when the request finishes on engine i, ``finished(req, i, now)``. Ties go to the lowest
engine index (llm_d's pickers: at random from ``seed``, as llm-d's), so every router is
deterministic for a seed (``seed`` also places session_affinity's ring).

Faults (scenarios/events.py ``engine_down``): engines in ``down`` are never picked (a gateway's
health check takes them out of the pool, as the filters before llm-d's scorers and sgl-router's
worker removal do); a request lost with its engine is ``failed(req, i, now)`` (its accounting
dropped, no cache learnt from it) and routed again; an engine back up is ``forget(i)``-ten:
whatever the router had learnt about its cache is dropped (sgl-router removes a failed
worker's tree with it).
"""
from __future__ import annotations

from collections import OrderedDict

ROUTERS: dict = {}  # name -> Router subclass, in registration order (fleet/routers/__init__.py imports the built-ins)


def register_router(name: str):
    """Class decorator: `fleet.router: {kind: name, ...}` builds the class (sets `cls.name`); its
    keyword parameters become the router's scenario keys (`fleet.routers.parameters`)."""

    def deco(cls):
        if name in ROUTERS:
            raise ValueError(f"router {name!r} is already registered")
        cls.name = name
        ROUTERS[name] = cls
        return cls

    return deco


def unregister_router(name: str) -> None:
    del ROUTERS[name]


class Router:
    name = "base"

    def __init__(self, n: int, *, page_size: int, seed: int = 0):
        self.n = n
        self.P = page_size
        self.outstanding = [0] * n  # requests routed to each engine and not finished
        self.outstanding_tokens = [0] * n  # their prompt + output tokens (queued + running work)
        self.engines = None  # cache_aware_exact's view only
        self.down: set = set()  # engines out of the pool (a fault): never picked

    def alive(self) -> list:
        """The engines that may be picked, in index order."""
        return [i for i in range(self.n) if i not in self.down]

    def failed(self, req, i: int, now: float) -> None:
        """`req`, routed to engine i, was lost with it (engine_down): it is routed again."""
        Router.finished(self, req, i, now)

    def forget(self, i: int) -> None:
        """Engine i came back with empty caches: drop what was learnt of them (none here)."""

    def pick(self, req, now: float) -> int:
        raise NotImplementedError

    def routed(self, req, i: int, now: float) -> None:
        self.outstanding[i] += 1
        self.outstanding_tokens[i] += req.prompt_tokens + req.output_length

    def finished(self, req, i: int, now: float) -> None:
        self.outstanding[i] -= 1
        self.outstanding_tokens[i] -= req.prompt_tokens + req.output_length

    def prompt_keys(self, req) -> list:
        """The stable keys (cache_core.keys) of the prompt's whole pages."""
        return req.seq.page_keys(self.P)[: req.prompt_tokens // self.P].tolist()


class RecentKeys(OrderedDict):
    """A router's view of the page keys an engine holds, least recently used first."""

    def touch(self, keys) -> None:
        """Make `keys` the most recent, the first one last (a prefix's leaves go first)."""
        for k in reversed(keys):
            self[k] = None
            self.move_to_end(k)

    def trim(self, cap: int | None) -> None:
        """Drop the least recently used keys down to `cap` (None: no bound)."""
        while cap is not None and len(self) > cap:
            self.popitem(last=False)


def argmin(values, skip=()) -> int:
    """Index of the smallest value, the lowest index among equals; indices in `skip` (down
    engines) are passed over (all skipped: the lowest index, never reached by the fleet)."""
    best = None
    for i, v in enumerate(values):
        if i in skip:
            continue
        if best is None or v < values[best]:
            best = i
    return 0 if best is None else best


def leading(keys: list, present) -> int:
    """How many of `keys`, from the first, are in `present` (a prefix run of pages)."""
    n = 0
    for k in keys:
        if k not in present:
            break
        n += 1
    return n


def exact_reuse(engine, req) -> int:
    """Tokens of `req` that `engine`'s cache holds now on device and host (a shared L3 offers
    every engine the same storage run, so storage does not count), read as an index would:
    what ``cache.match`` would return, without its effects (no LRU tick, no split, no queue
    offer), so a router asking every engine changes none of their eviction orders. A cache that
    answers this itself (cache_core/vllm_engine.py `VllmKV.exact_reuse`: vLLM's block cache and
    its CPU offload) does."""
    cache = engine.cache
    own = getattr(cache, "exact_reuse", None)
    if own is not None:
        return own(req)
    m = cache.matcher.result(cache.query(req.seq, cache.matcher.span(req.seq, req.limit)))
    return m.device + m.host_tokens if cache.hier is not None else m.cached_tokens
