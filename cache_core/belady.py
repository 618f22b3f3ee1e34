"""`belady`: the offline bound — evict the candidate whose next use lies furthest ahead.

The whole request sequence is known in advance (replay, or a simulator run whose workload is
generated up front). A node is *used* by request i when i's prompt contains the node's first
page (page keys are chained, so the same key means the same whole prefix): the next use of a
node is the first request after `now` whose prompt holds that key. Never used again = +inf,
evicted first; ties by least recent access.

Under prefix constraints (only leaves can go; a node is a run of pages; a request reuses only
an unbroken prefix) furthest-next-use is not the true optimum — report it as "OPT (approx.)".
A cheaper online policy can beat it, e.g. when evicting one long leaf that is needed a bit
later frees more than several short ones that are needed later still.

Memory: one (key, request) pair per prompt page — 16 bytes x total prompt pages.
"""
from __future__ import annotations

import numpy as np

from .eviction import Policy, register_policy

_INF = float("inf")


class NextUseOracle:
    """Next request index that contains a page key, from the prompts' page keys."""

    def __init__(self, keys_per_request):
        lens = [len(k) for k in keys_per_request]
        keys = np.concatenate(keys_per_request) if keys_per_request else np.empty(0, np.uint64)
        req = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
        order = np.lexsort((req, keys))
        self.keys = keys[order]
        self.req = req[order]

    def next_use(self, key: int, now: int) -> float:
        keys = self.keys
        lo = int(np.searchsorted(keys, np.uint64(key), "left"))
        hi = int(np.searchsorted(keys, np.uint64(key), "right"))
        if lo == hi:
            return _INF
        j = lo + int(np.searchsorted(self.req[lo:hi], now, "right"))
        return _INF if j >= hi else int(self.req[j])


@register_policy("belady")
class Belady(Policy):
    """Furthest next use first (needs `oracle` and the current request index `now`)."""

    volatile = True  # next uses move as time passes
    reads_hits = reads_priority = False
    needs_keys = True

    def __init__(self):
        self.oracle: NextUseOracle | None = None
        self.now = 0

    def key(self, node):
        if self.oracle is None:
            raise RuntimeError("belady needs the future: set policy.oracle (replay does) before the first insert")
        pk = node.pkeys
        nxt = _INF if pk is None or not len(pk) else self.oracle.next_use(int(pk[0]), self.now)
        return (-nxt, node.tick)
