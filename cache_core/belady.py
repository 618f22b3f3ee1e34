"""Offline references for the policy lab: the page-level hit-rate bound, and `belady-node`.

`PageBound` — a TRUE upper bound on the hit rate of every policy the radix tree can run,
at a capacity of C tokens and page size P (K = C // P pages). It relaxes the tree to a set
of at most K page keys and lets an offline oracle fill it as well as any schedule can.

The model. Request i matches M_i (its first floor((len(prompt) - 1) / P) page keys: SGLang's
match cap, the last prompt token always recomputed) against the cache S_i as it stands before
i, and then inserts I_i (the whole pages of prompt + output[:-1]; the partial tail page is
never cached; M_i is a prefix of I_i). Keys are chained (a key names its whole prefix), so
"the tree holds key k" is a property of a set of keys.

Why no policy can beat it. Take any run of the tree (any policy, whole-node eviction, splits,
locks, the +1 page demand, rejections: none of these matters). (a) The tree never holds more
than K pages (its pool has K pages; the in-flight request only takes more of them), so |S_i|
<= K for every i. (b) A page enters the tree only when some request inserts it, i.e. key k
can be in S_j only if k was in I_a for some a < j and stayed in the tree since. (c) The hit of
request j is P x (longest prefix of M_j in S_j) <= P x |M_j ∩ S_j| (every cached page counted,
not only the prefix: the relaxation). So each hit page (k, j) needs k in the tree over every
state from a+1 to j, where a = the last request before j whose I holds k (any earlier
insertion must survive past a too). Call that the interval [a + 1, j] of the hit; the
intervals of one key are disjoint (a use is also an insertion). Any run therefore yields a set
of intervals at most K of which cover any state, and its hit tokens are <= P x their number.
The bound is P x the MOST such intervals: choosing a maximum subset of intervals with at
most K over any point is the maximum K-colourable subgraph of an interval graph, which the
greedy solves exactly — sweep the states in order, add the intervals that start there, and
while more than K are open drop the one that ends last (Yannakakis and Gavril, "The maximum
k-colorable subgraph problem for chordal graphs", IPL 24(2), 1987; Carlisle and Lloyd, "On
the k-coloring of intervals", DAM 59, 1995). Exchange argument: if an optimal set keeps the
dropped interval x instead of an open y with end(y) <= end(x), swapping x for y never raises
the load after this state and keeps the count. This is Belady's furthest-next-use rule
(Belady 1966) with bypass, on page keys, where holding a key is free only from its last
insertion before its use. A key is never hit before its first insertion (cold misses).
`tests/test_page_bound.py` checks the greedy against exhaustive search on small instances and
that no registered policy beats it on the leaderboard corpus at reduced size.

Cost: one sort of (key, request) per whole cached page, then O(n log n) heap operations per
capacity, n = the number of prompt pages inserted before (a Python loop: 55-67 s per capacity on
the Mooncake synthetic trace on a loaded 2-core machine, where one belady-node replay took 59-85 s).

`belady-node` — the old "belady" policy, a heuristic, NOT a bound: it ranks leaf NODES by the
next request whose prompt holds their first page. A node is used by request i when i's prompt
contains the node's first page (page keys are chained, so the same key means the same whole
prefix); never used again = +inf, evicted first; ties by least recent access. Under prefix
constraints (only leaves can go; a node is a run of pages; a request reuses only an unbroken
prefix) this is not optimal, and online policies beat it (agentic, 28k tokens: mru 15.49 % vs
15.05 %; docs/policy_lab.md). Memory: one (key, request) pair per prompt page.
The name `belady` is refused with a pointer to both (cache_core/eviction.py: RENAMED).
"""
from __future__ import annotations

import heapq

import numpy as np

from .eviction import Policy, register_policy
from .stack_curve import LruCurve

_INF = float("inf")


class PageBound:
    """The page-level upper bound (module docstring) of the requests' hit rate at any capacity.

    `requests`: (prompt, output or None) int64 token arrays in serving order (as LruCurve and
    `radixsim.replay.request_stream` give them)."""

    def __init__(self, requests, page_size: int):
        self.page_size = P = page_size
        ids, caps, self.prompt_tokens = LruCurve.page_ids(requests, P)
        self.requests = len(ids)
        self.starts, self.ends = self._intervals(ids, caps)

    @staticmethod
    def _intervals(ids, caps) -> tuple[np.ndarray, np.ndarray]:
        """(start state, end state) of every hit a page could be, sorted by start: the hit of key
        k at request j needs k held in states a+1 .. j, a = the last request before j inserting k."""
        if not ids:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        lens = np.fromiter((len(a) for a in ids), np.int64, len(ids))
        key = np.concatenate(ids)
        req = np.repeat(np.arange(len(ids), dtype=np.int64), lens)
        depth = np.arange(len(key), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
        use = depth < np.asarray(caps, np.int64)[req]
        order = np.lexsort((req, key))
        k, r, u = key[order], req[order], use[order]
        ok = (k[1:] == k[:-1]) & u[1:] & (r[1:] > r[:-1])  # an earlier insertion of the same key
        starts, ends = r[:-1][ok] + 1, r[1:][ok]
        by = np.argsort(starts, kind="stable")
        return starts[by], ends[by]

    def hit_pages(self, capacity_tokens: int) -> int:
        """The most page hits any schedule of at most capacity // P pages can have (the greedy)."""
        K = capacity_tokens // self.page_size
        if K <= 0:
            return 0
        starts, ends = self.starts.tolist(), self.ends.tolist()
        alive = bytearray(len(starts))
        by_end: list = []  # (end, i): the open intervals, first to finish first
        by_last: list = []  # (-end, i): the open intervals, last to finish first
        hits = active = 0
        push, pop = heapq.heappush, heapq.heappop
        for i, (s, e) in enumerate(zip(starts, ends)):
            while by_end and by_end[0][0] < s:  # finished before state s: a hit
                _, j = pop(by_end)
                if alive[j]:
                    alive[j] = 0
                    active -= 1
                    hits += 1
            alive[i] = 1
            active += 1
            push(by_end, (e, i))
            push(by_last, (-e, i))
            while active > K:  # drop the open interval that ends last
                _, j = pop(by_last)
                if alive[j]:
                    alive[j] = 0
                    active -= 1
        return hits + active

    def hit_rate(self, capacity_tokens: int) -> float:
        return self.hit_pages(capacity_tokens) * self.page_size / self.prompt_tokens if self.prompt_tokens else 0.0


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


@register_policy("belady-node")
class Belady(Policy):
    """Node-level furthest next use first, a heuristic (needs `oracle` and the current request index `now`)."""

    volatile = True  # next uses move as time passes
    reads_hits = reads_priority = False
    needs_keys = True

    def __init__(self):
        self.oracle: NextUseOracle | None = None
        self.now = 0

    def key(self, node):
        if self.oracle is None:
            raise RuntimeError("belady-node needs the future: set policy.oracle (replay does) before the first insert")
        pk = node.pkeys
        nxt = _INF if pk is None or not len(pk) else self.oracle.next_use(int(pk[0]), self.now)
        return (-nxt, node.tick)
