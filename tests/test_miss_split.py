"""The cold / evicted miss split over page digests equals the old unbounded shadow tree of
tokens, request by request (issue 16: that tree cost ~9x the replay's memory)."""
from __future__ import annotations

import numpy as np
import pytest

from cache_core import CacheConfig, MambaConfig, RadixCache, ReplayStepper, SwaConfig, TokenSeq
from cache_core.miss_split import MissSplit, page_digests
from cache_core.tree import RadixTree


class TreeShadow:
    """The former method: an unbounded bare radix topology of everything ever cached."""

    def __init__(self, page_size: int):
        self.P = page_size
        self.tree = RadixTree(page_size, lambda *a: None, lambda n: None)

    def observe(self, prompt, output, seq, cached: int) -> tuple[int, int]:
        P, tree = self.P, self.tree
        lp = len(prompt)
        node, ever, _ = tree.walk(seq.data, max(lp - 1, 0) // P * P, tree.fresh())
        aligned = seq.length // P * P
        if aligned > ever:
            end, prefix, _ = tree.walk(seq.data, aligned, tree.fresh(), node, ever)
            if prefix < aligned:
                tree.add_leaf(end, seq.data[prefix << 3 : aligned << 3])
        evicted = max(0, ever - cached)
        return lp - cached - evicted, evicted


def _requests(seed: int, n: int):
    """Interleaved conversations over a few shared system prompts: prompts grow by their
    history; lengths are not page multiples."""
    rng = np.random.default_rng(seed)
    systems = [rng.integers(0, 1000, int(rng.integers(3, 40))) for _ in range(3)]
    hist = {}
    for _ in range(n):
        s = int(rng.integers(0, 8))
        base = hist.get(s, systems[s % 3])
        prompt = np.concatenate([base, rng.integers(0, 1000, int(rng.integers(1, 30)))])
        output = rng.integers(0, 1000, int(rng.integers(1, 9)))
        hist[s] = np.concatenate([prompt, output])
        yield prompt.astype(np.int64), output.astype(np.int64)


CONFIGS = {
    "full": dict(capacity_tokens=160),
    "swa+mamba": dict(capacity_tokens=240, swa=SwaConfig(window_tokens=8, capacity_tokens=64),
                      mamba=MambaConfig(slots=6)),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("page", [1, 4])
def test_key_split_equals_tree_shadow(name, page):
    cache = RadixCache(CacheConfig(page_size=page, **CONFIGS[name]))
    stepper = ReplayStepper(cache)
    old, new = TreeShadow(page), MissSplit(page)
    totals = np.zeros(2, dtype=np.int64)
    for prompt, output in _requests(7, 300):
        seq = TokenSeq.join(prompt, output[:-1]) if len(output) > 1 else TokenSeq(prompt)
        r = stepper.step(prompt, output, seq=seq)
        a = old.observe(prompt, output, seq, r.cached_tokens)
        b = new.observe(prompt, output, seq, r.cached_tokens)
        assert a == b
        totals += a
    assert totals.min() > 0  # both kinds of miss occur


def test_page_digests_name_page_contents():
    a = np.arange(12)
    b = np.concatenate([a[:4], [99, 5, 6, 7], a[8:]])
    da, db = page_digests(a, 4), page_digests(b, 4)
    assert len(da) == 3 and len(set(da.tolist())) == 3
    assert (da == db).tolist() == [True, False, True]
    assert page_digests(a[:11], 4).tolist() == da[:2].tolist()  # the tail page has none
    assert page_digests(a[[1, 0, 2, 3]], 4)[0] != da[0]  # order counts
