"""One-pass LRU hit-rate curve of a radix cache (Mattson's stack distances, page level).

Why LRU on a radix tree is a stack algorithm: every request touches the whole path of the
sequence it inserts, root to leaf, in one tick; so a page is never less recent than its
descendants (ancestors win ties). Ordering all pages ever cached by recency (ancestors before
descendants within one request) gives one stack; an LRU cache of C pages that evicts
least-recent leaves holds exactly the top C pages of that stack (the least recent page is
always a leaf, so leaf-only eviction never blocks), for every C at once (inclusion).
A request's prefix hit at capacity C is the number of its matched pages whose stack position
is below C (positions never decrease along a path, so the pages below C are a prefix).

Bookkeeping in O(runs) per request: a page's *owner* is the last request that touched it. The
pages a request r still owns are the deepest `own[r]` pages of its sequence (a later request
that touches one of them touches all its ancestors), so a page at depth d owned by r sits at
stack position `sum(own[r'] for r' > r) + d - (len[r] - own[r])`; a path's pages group into
runs with one owner each, and each run is one interval of positions (a difference array
collects them; a Fenwick tree over requests holds `own` and gives the sums).

Where SGLang's rules (cache_core/replay.py) make the curve approximate (docs/policy_lab.md):
- whole-node eviction: SGLang evicts whole leaf nodes, so it may free more than it needs and
  hold fewer than C tokens for a while; a session's evicted tail comes back as one multi-page
  node, so the error grows with node size relative to C (exact when every node is one page);
- a match that ends inside a node refreshes the whole node, its unmatched tail included
  (SGLang ticks the child before splitting it); the stack keeps the tail's old recency;
- the +1 page demand (P > 1): a request evicts until n + P tokens are free, so the cache keeps
  about one page fewer than C; the curve reads the stack at C // P - 1 pages when P > 1; the
  last prompt page is recomputed (match cap) and needs a free page even when cached;
- the match cap len(prompt) - 1: applied exactly (the last prompt token is never a hit);
- locks: replay serves one request at a time and a locked page is on the request's own path,
  which the stack moves to the top anyway; but a sequence that does not fit is rejected (no
  insert) and one that barely fits evicts its own session's pages: read the curve only at
  capacities of at least twice `longest_tokens`.
Pages are identified by a 64-bit prefix hash (`_prefix_page_hashes`): equal ids mean equal
prefixes up to a ~2**-64 collision chance per pair.
"""
from __future__ import annotations

import numpy as np

_U64 = np.uint64
_B = _U64(0x9E3779B97F4A7C15)  # odd, so invertible mod 2**64
_B_INV = _U64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x + _U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _prefix_page_hashes(tokens: np.ndarray, page_size: int) -> np.ndarray:
    """A 64-bit id per whole page naming the whole prefix up to it: each page's content is one
    dot product with fixed odd multipliers (mod 2**64), mixed, then chained by a polynomial
    hash mod 2**64 (vectorised; no Python loop per page)."""
    n = len(tokens) // page_size
    if n == 0:
        return np.empty(0, _U64)
    with np.errstate(over="ignore"):
        mult = _splitmix(np.arange(1, page_size + 1, dtype=_U64)) | _U64(1)
        c = _splitmix(tokens[: n * page_size].view(_U64).reshape(n, page_size) @ mult)
        powers_inv = np.cumprod(np.full(n, _B_INV, _U64), dtype=_U64)
        powers = np.cumprod(np.full(n, _B, _U64), dtype=_U64)
        return _splitmix(np.cumsum(c * powers_inv, dtype=_U64) * powers)


def _dense(keys: np.ndarray) -> np.ndarray:
    """Dense ids 0.. of equal keys (np.unique's inverse, with the faster unstable sort)."""
    order = np.argsort(keys, kind="quicksort")
    s = keys[order]
    ids = np.empty(len(keys), np.int64)
    ids[order] = np.concatenate(([0], np.cumsum(s[1:] != s[:-1])))
    return ids


class _Fenwick:
    __slots__ = ("tree", "total")

    def __init__(self, n: int):
        self.tree = [0] * (n + 1)
        self.total = 0

    def add(self, i: int, v: int) -> None:
        self.total += v
        i += 1
        tree, n = self.tree, len(self.tree)
        while i < n:
            tree[i] += v
            i += i & -i

    def above(self, i: int) -> int:
        """Sum over indices > i."""
        s, j, tree = 0, i + 1, self.tree
        while j > 0:
            s += tree[j]
            j -= j & -j
        return self.total - s


class LruCurve:
    """Cached tokens of an LRU radix cache at every capacity, from one pass over the requests.

    `requests`: (prompt, output or None) int64 token arrays in serving order; the cached
    sequence is prompt + output[:-1] cut to whole pages, as replay inserts it."""

    def __init__(self, requests, page_size: int):
        self.page_size = P = page_size
        ids, caps, prompt_tokens = self._page_ids(requests, P)
        self.requests = len(ids)
        self.longest_tokens = max((len(a) for a in ids), default=0) * P  # longest cached sequence
        self.prompt_tokens = prompt_tokens
        self.pages = int(max((int(a.max()) + 1 for a in ids if len(a)), default=0))
        self._hits = self._positions(ids, caps)  # hits[p]: matched pages at stack position < p + 1

    @staticmethod
    def _page_ids(requests, P: int):
        keys, caps, prompt_tokens = [], [], 0
        for prompt, output in requests:
            prompt = np.asarray(prompt, np.int64)
            seq = prompt if output is None or len(output) < 2 else np.concatenate([prompt, output[:-1]])
            keys.append(_prefix_page_hashes(seq, P))
            caps.append(max(len(prompt) - 1, 0) // P)
            prompt_tokens += len(prompt)
        if not keys:
            return [], caps, 0
        lens = np.fromiter((len(k) for k in keys), np.int64, len(keys))
        return np.split(_dense(np.concatenate(keys)), np.cumsum(lens)[:-1]), caps, prompt_tokens

    page_ids = _page_ids  # (dense page ids per request, matchable pages per request, prompt tokens): PageBound's input

    def _positions(self, ids, caps) -> np.ndarray:
        last = np.full(self.pages, -1, np.int64)  # owner: the last request that touched a page
        fen = _Fenwick(len(ids))
        diff = np.zeros(self.pages + 1, np.int64)
        for i, (path, cap) in enumerate(zip(ids, caps)):
            owner = last[path]
            seen = int(np.argmax(owner < 0)) if len(owner) and owner[-1] < 0 else len(owner)
            if seen:
                starts = np.concatenate(([0], np.flatnonzero(np.diff(owner[:seen])) + 1, [seen])).tolist()
                runs = [(a, b, int(owner[a])) for a, b in zip(starts[:-1], starts[1:])]
                for a, b, r in runs:  # positions before this request moves anything
                    hb = min(b, cap)
                    if a < hb:
                        base = fen.above(r)  # pages more recent than the run's first page
                        diff[base] += 1
                        diff[base + hb - a] -= 1
                for a, b, r in runs:
                    fen.add(r, a - b)
            last[path] = i
            fen.add(i, len(path))
        return np.cumsum(np.cumsum(diff)[:-1])

    def stack_pages(self, capacity_tokens: int) -> int:
        """Stack depth read for a capacity: C // P pages, one fewer for P > 1 (the +1 page demand)."""
        return max(0, capacity_tokens // self.page_size - (1 if self.page_size > 1 else 0))

    def cached_tokens(self, capacity_tokens: int) -> int:
        return self.cached_at_depth(self.stack_pages(capacity_tokens))

    def cached_at_depth(self, pages: int) -> int:
        """Cached tokens of a pure page-level LRU cache holding the top `pages` stack pages."""
        k = min(pages, len(self._hits))
        return 0 if k <= 0 else int(self._hits[k - 1]) * self.page_size

    def hit_rate(self, capacity_tokens: int) -> float | None:
        if not self.prompt_tokens:
            return None
        return self.cached_tokens(capacity_tokens) / self.prompt_tokens
