"""Eviction policies (a sort key each) and the queue mechanics that serve them.

A policy is a small class with a `key(node)` method: among the evictable candidates of one
(component, tier), the one with the smallest key goes first; ties fall to the older node id,
so every run is deterministic. Policies read only logical state (ticks, hit counts,
creation order): no wall time anywhere.

Register a new policy with `@register_policy("name")`; it then works in replay, the
simulator and the GPU backend with no change to the core.

Mechanics: `EvictionQueue` is a binary heap with lazy invalidation. A candidate is pushed
whenever it becomes evictable or its key changes; an entry is trusted at pop time only if the
node is still an evictable candidate and its key still equals the entry's. Popping k victims
costs O(k log n) amortised; the heap is compacted when stale entries outnumber live ones.
"""
from __future__ import annotations

import heapq
from typing import Callable

from .registry import Registry

_REGISTRY = Registry("eviction policy")


def register_policy(name: str, config: type | None = None):
    """Class decorator: make a policy available by name (`--policy name`); `config`: its options
    dataclass (cache_core/options.py: its fields are `cache:` keys; default: none)."""
    return _REGISTRY.register(name, config)


def policy_config(name: str) -> type:
    """The options dataclass eviction policy `name` registered with."""
    return _REGISTRY.config_of(name)


def policy_configs() -> list[type]:
    """The registered policies' options dataclasses (each once; `NoOptions`: none)."""
    return _REGISTRY.configs()


def unregister_policy(name: str) -> None:
    _REGISTRY.unregister(name)


# names no longer registered -> why, for the one-line refusal (radixsim/args.py, scenarios/schema.py)
RENAMED = {"belady": "'belady' is now 'belady-node' (node-level furthest next use: a heuristic that online "
                     "policies beat, not a bound); the true bound is the leaderboard's 'bound' row "
                     "(cache_core/belady.py: PageBound)"}


def make_policy(name: str, options=None):
    """A fresh policy `name`, its `options` those given (its options dataclass), else the defaults."""
    if name in RENAMED:
        raise ValueError(f"unknown eviction policy {name!r}: {RENAMED[name]}")
    policy = _REGISTRY.make(name)
    policy.options = options if options is not None else _REGISTRY.config_of(name)()
    return policy


def policy_names() -> list[str]:
    return _REGISTRY.names()


class Policy:
    """Base class. `key(node)` must be cheap. The core re-offers a node whenever something a
    key may read changes through the cache (an access, a lock, a session reference); a policy
    whose key also moves on its own (with time, e.g. the next use of `belady-node`) sets
    ``volatile = True`` and the queue re-ranks a candidate whose key moved when it pops it.

    `key_for(component)` gives the key used for one component's candidates ("full", "swa",
    "mamba"); by default the same `key` for all. Flags the cache reads:
    ``uses_sessions`` (register session references), ``needs_keys`` (keep stable page keys
    on nodes), ``reads_hits`` / ``reads_priority`` (whether a key reads `node.hits` /
    `node.priority`: when False, the cache does not re-offer a node whose count or priority
    changed; the conservative default is True)."""

    name = "?"
    volatile = False
    uses_sessions = False
    needs_keys = False
    reads_hits = True
    reads_priority = True
    # True: keys read only node fields the core re-offers on and compare ticks only with each
    # other; no state of the policy's own. Touching the same nodes again with no tick taken
    # in between then changes no order, and the engine leaves such repeats out (l1_match.MemoMatch)
    tick_order_only = False

    def key(self, node):  # pragma: no cover - abstract
        raise NotImplementedError

    def key_for(self, component: str):
        return self.key

    def payload_key(self, component: str, referenced):
        """The key for a component's payloads that answers `referenced(node)` (whether a
        session references its payload on `node`; `Component.session_referenced`): by
        default `key_for(component)`; the ``session`` policy ranks by it."""
        return self.key_for(component)

    def evict_hook(self, component: str):
        """A callable(node, key) the queue calls on each candidate it hands out for eviction
        (a policy with state that moves on evictions: a SIEVE hand, a GreedyDual clock), or None."""
        return None


@register_policy("lru")
class LRU(Policy):
    """Least recently used: the oldest access tick goes first (SGLang's default)."""

    reads_hits = reads_priority = False
    tick_order_only = True

    def key(self, node):
        return node.tick


@register_policy("lfu")
class LFU(Policy):
    """Least frequently used: fewest hits first, ties by oldest access tick. A hit is one
    insert whose path covers the node, as SGLang 0.5.23 counts them (tree.py)."""

    reads_priority = False
    tick_order_only = True

    def key(self, node):
        return (node.hits, node.tick)


@register_policy("fifo")
class FIFO(Policy):
    """First in, first out: the oldest creation tick goes first (access does not matter;
    a split's upper half is created at the split)."""

    reads_hits = reads_priority = False
    tick_order_only = True

    def key(self, node):
        return node.created


@register_policy("mru")
class MRU(Policy):
    """Most recently used first: the newest access tick goes first (SGLang's "mru")."""

    reads_hits = reads_priority = False
    tick_order_only = True

    def key(self, node):
        return -node.tick


@register_policy("filo")
class FILO(Policy):
    """First in, last out: the newest creation tick goes first (SGLang's "filo")."""

    reads_hits = reads_priority = False
    tick_order_only = True

    def key(self, node):
        return -node.created


@register_policy("priority")
class PriorityLRU(Policy):
    """Request priority first (a node keeps the highest priority of the requests that
    inserted or extended it; lower goes first), then least recently used. As in SGLang, a
    request's prompt part is inserted a second time with its priority + 1, so a request's
    output tail goes before its prompt."""

    reads_hits = False
    tick_order_only = True

    def key(self, node):
        return (node.priority, node.tick)


@register_policy("slru")
class SLRU(Policy):
    """Segmented LRU as a sort key: nodes with fewer than two hits (probation) go before
    nodes with two or more (protected); LRU within each segment. Hits as for "lfu"."""

    reads_priority = False
    tick_order_only = True

    def key(self, node):
        return (node.hits >= 2, node.tick)


@register_policy("session")
class SessionAware(Policy):
    """The seed's session-aware eviction (sessions.py registers the references):
    FULL ranks (referenced, session refcount, base priority, LRU) — unreferenced first;
    a component that reports session references (`Component.session_referenced`: SWA, MAMBA)
    takes unreferenced entries of their regions first, then referenced ones, LRU within each.
    References change the order only: nothing is pinned."""

    reads_hits = False
    uses_sessions = True
    tick_order_only = True

    def key(self, node):
        r = node.srefs
        return (r > 0, r, node.priority, node.tick)

    def payload_key(self, component: str, referenced):
        return lambda node: (referenced(node), node.tick)


class EvictionQueue:
    """Min-heap of (key, node id, node) with lazy invalidation."""

    __slots__ = ("policy", "_heap", "_is_candidate", "_key", "_volatile", "_on_pop")

    def __init__(self, policy: Policy, is_candidate: Callable, component: str = "full", referenced=None):
        self.policy = policy
        self._heap: list = []
        self._is_candidate = is_candidate
        # `referenced`: the component's session_referenced hook, or None
        self._key = policy.key_for(component) if referenced is None else policy.payload_key(component, referenced)
        self._volatile = policy.volatile
        self._on_pop = policy.evict_hook(component)

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, node) -> None:
        """Offer `node` with its current key (call when it becomes a candidate or its key changes)."""
        heapq.heappush(self._heap, (self._key(node), node.id, node))

    def pop(self):
        """Remove and return the candidate with the smallest key, or None."""
        heap, key, ok = self._heap, self._key, self._is_candidate
        while heap:
            k, i, node = heapq.heappop(heap)
            if ok(node):
                now = key(node)
                if now == k:
                    if self._on_pop is not None:
                        self._on_pop(node, k)
                    return node
                if self._volatile:  # the key moved on its own: rank it again
                    heapq.heappush(heap, (now, i, node))
        return None

    def maybe_compact(self, live: int) -> None:
        """Drop stale entries when they dominate the heap (amortised O(1) per push). A volatile
        queue keeps one entry per candidate, ranked by its key now: an entry whose key moved on
        its own is the candidate's only entry (`pop` would have ranked it again)."""
        if len(self._heap) > 2 * live + 4096:
            key, ok, volatile = self._key, self._is_candidate, self._volatile
            seen = set()
            fresh = []
            for k, i, node in self._heap:
                if i not in seen and ok(node):
                    now = key(node)
                    if now == k or volatile:
                        seen.add(i)
                        fresh.append((now, i, node))
            heapq.heapify(fresh)
            self._heap = fresh

    def live_ids(self) -> set:
        """Ids of candidates with a valid entry (for invariant checks)."""
        key, ok = self._key, self._is_candidate
        return {i for k, i, node in self._heap if ok(node) and (key(node) == k or self._volatile)}
