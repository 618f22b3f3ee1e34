"""The cold / evicted miss split of a replay.

A request's miss is *cold* where no earlier request ever cached that prefix, *evicted* where
one did (evicted since, or not reusable under the component votes). "Ever cached" is the match
length in an unbounded bare radix topology of everything every request cached. That topology
holds one 64-bit digest per page instead of the page's tokens (`page_digests`), so it costs
8 bytes a page rather than 8 a token: a shadow tree of the tokens cost about 9x the memory of
the replay itself. Digests never leave the process (unlike cache_core.keys' stable page keys,
which name a whole prefix and cost a modular polynomial per token); two different pages get
the same digest with a chance of about 2**-64.
"""
from __future__ import annotations

import numpy as np

from .keys import as_tokens, splitmix64
from .tree import RadixTree

_U64 = np.uint64


class _Weights:
    """One pseudo-random 64-bit weight per position in a page (SplitMix64 of the position)."""

    w = np.empty(0, dtype=_U64)

    @classmethod
    def upto(cls, n: int) -> np.ndarray:
        if len(cls.w) < n:
            cls.w = splitmix64(np.arange(n, dtype=_U64))
        return cls.w[:n]


def page_digests(tokens, page_size: int) -> np.ndarray:
    """One uint64 per full page of `tokens`: the page's tokens weighted by position and
    summed modulo 2**64, then mixed."""
    t = as_tokens(tokens).view(_U64)
    pages = t[: len(t) // page_size * page_size].reshape(-1, page_size)
    with np.errstate(over="ignore"):
        return splitmix64((pages * _Weights.upto(page_size)).sum(axis=1, dtype=_U64))


class MissSplit:
    """Splits each request's miss into cold and evicted tokens (see the module docstring)."""

    def __init__(self, page_size: int):
        self.P = page_size
        self.tree = RadixTree(1, lambda *a: None, lambda n: None)  # one "token" per page

    def observe(self, prompt, output, seq, cached: int) -> tuple[int, int]:
        """(cold_tokens, evicted_miss_tokens) of a request that got `cached` tokens; then
        records the pages it caches (prompt + output[:-1], whole pages)."""
        tree, lp = self.tree, len(prompt)
        data = page_digests(np.frombuffer(seq.data, dtype=np.int64), self.P).tobytes()
        n = len(data) >> 3
        node, ever, _ = tree.walk(data, max(lp - 1, 0) // self.P, tree.fresh())
        if n > ever:
            end, prefix, _ = tree.walk(data, n, tree.fresh(), node, ever)
            if prefix < n:
                tree.add_leaf(end, data[prefix << 3 :])
        evicted = max(0, ever * self.P - cached)
        return lp - cached - evicted, evicted
