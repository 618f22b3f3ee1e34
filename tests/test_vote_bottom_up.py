"""The bottom-up vote (cache_core/vote.py) equals the former top-down one on every path, and
looks only at the nodes near the end of a long path (issue 16 item 6: linear cost)."""
from __future__ import annotations

import numpy as np
import pytest

from cache_core import CacheConfig, MambaConfig, RadixCache, ReplayStepper, SwaConfig, TokenSeq
from cache_core.components.base import Component
from cache_core.tiers import TierConfig
from cache_core.vote import END, _and, _deepest, look_back, vote


def vote_top_down(voters, visited, traversed, page_size, l1_only=False, out=None):
    """The former vote: every validator sees every node of the path from the root."""
    validators = [c.validator(l1_only) for c in voters]
    if out is not None:
        out.extend(validators)
    own = [0] * len(validators)
    best, best_node, best_cut = 0, None, 0
    for nd in visited:
        start = nd.parent.end
        upto = min(nd.end, traversed)
        npages = (upto - start) // page_size
        if npages <= 0:
            break
        partial = upto < nd.end
        comb = True
        for i, v in enumerate(validators):
            m = v.mask(nd, start, npages)
            if m is END and partial:
                m = False
            j = _deepest(m, npages)
            if j >= 0:
                own[i] = start + (j + 1) * page_size
            comb = _and(comb, m)
        j = _deepest(comb, npages)
        if j >= 0:
            best, best_node, best_cut = start + (j + 1) * page_size, nd, (j + 1) * page_size
    lost = tuple((c.name, traversed - o, c.lost_reason)
                 for c, o in zip(voters, own) if o < traversed)
    return best, best_node, best_cut, lost


def _conversations(seed: int, n: int, P: int):
    rng = np.random.default_rng(seed)
    hist = {}
    for _ in range(n):
        s = int(rng.integers(0, 6))
        base = hist.get(s, rng.integers(0, 50, int(rng.integers(1, 4)) * P))
        prompt = np.concatenate([base, rng.integers(0, 50, int(rng.integers(1, 5)) * P + int(rng.integers(0, P)))])
        output = rng.integers(0, 50, int(rng.integers(2, 6)))
        hist[s] = np.concatenate([prompt, output])
        yield prompt.astype(np.int64), output.astype(np.int64)


CONFIGS = {
    "swa": dict(capacity_tokens=400, swa=SwaConfig(window_tokens=8, capacity_tokens=48)),
    "swa+mamba": dict(capacity_tokens=400, swa=SwaConfig(window_tokens=12, capacity_tokens=64),
                      mamba=MambaConfig(slots=5)),
    "mamba": dict(capacity_tokens=400, mamba=MambaConfig(slots=4)),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("l1_only", [False, True])
def test_bottom_up_vote_equals_top_down(name, l1_only):
    P = 4
    cache = RadixCache(CacheConfig(page_size=P, **CONFIGS[name]))
    stepper = ReplayStepper(cache)
    compared = deeper = 0
    for prompt, output in _conversations(3, 400, P):
        seq = TokenSeq(prompt)
        n = len(prompt) // P * P
        visited = []
        _, traversed, _ = cache.tree.walk(seq.data, n, cache.tree.fresh(), visited=visited, split=False)
        va, vb = [], []
        a = vote_top_down(cache.voters, visited, traversed, P, l1_only, out=va)
        b = vote(cache.voters, visited, traversed, P, l1_only, out=vb)
        assert a == b
        for x, y in zip(va, vb):  # the state the L3 run continues from: same verdicts
            if hasattr(x, "run"):
                assert (x.clean or x.run >= x.W) == (y.clean or y.run >= y.W)
        compared += 1
        deeper += len(visited) > 3 and a[0] > 0
        stepper.step(prompt, output)
    assert compared == 400 and deeper >= 5  # long paths with reuse were compared


class _Counting:
    """A voter whose validators count the nodes they are shown."""

    def __init__(self, comp):
        self.comp, self.name, self.window, self.shown = comp, comp.name, comp.window, 0

    def validator(self, l1_only=False):
        inner, outer = self.comp.validator(l1_only), self

        class V:
            def mask(self, node, start, npages):
                outer.shown += 1
                return inner.mask(node, start, npages)

        return V()


def test_vote_examines_only_the_last_window_of_a_long_path():
    P, W = 4, 8
    cache = RadixCache(CacheConfig(page_size=P, swa=SwaConfig(window_tokens=W)))
    stepper = ReplayStepper(cache)
    tokens = np.arange(400, dtype=np.int64)
    for k in range(1, 41):  # a path of 40 nodes of 10 tokens (branches split each one)
        stepper.step(tokens[: 10 * k], np.array([1000 + k, 0], dtype=np.int64))
    seq = TokenSeq(tokens)
    visited = []
    _, traversed, _ = cache.tree.walk(seq.data, 400, cache.tree.fresh(), visited=visited, split=False)
    counting = _Counting(cache.swa)
    best, node, cut, lost = vote([counting], visited, traversed, P)
    assert (len(visited), traversed, best, lost) == (40, 400, 400, ())
    assert counting.shown == 1 + 1  # the gap, then the last node (it holds the whole window)


class _WindowReads(Component):
    """A test-only voter that accepts every boundary and counts reads of its `window`."""

    name = "window-reads"

    def __init__(self, link, window: int):
        self.link, self.kind, self._window, self.reads = link, link.slot, window, 0

    @property
    def window(self) -> int:
        self.reads += 1
        return self._window

    def validator(self, l1_only: bool = False):
        class AcceptAll:
            def mask(self, node, start, npages):
                return True

        return AcceptAll()


class _WindowReadsSpec:
    name = "window-reads"

    def build(self, link):
        return _WindowReads(link, 8)


@pytest.mark.parametrize("tiers", [None, TierConfig(hicache_ratio=2, l3=True, min_prefetch_tokens=0)])
def test_look_back_is_computed_once_per_topology_not_per_vote(tiers):
    """Voters do not change after the cache is built: their look-back (the largest `window`)
    is read when each registers (Topology.voters), never again by the 20 matches' votes
    (L1, and with tiers the tree vote and the storage probe)."""
    cache = RadixCache(CacheConfig(page_size=4, capacity_tokens=256, swa=SwaConfig(window_tokens=16),
                                   extra_components=(_WindowReadsSpec(),), tiers=tiers))
    (comp,) = [c for c in cache.voters if c.name == "window-reads"]
    before = comp.reads
    stepper = ReplayStepper(cache)
    tokens = np.arange(100, dtype=np.int64)
    for k in range(1, 21):
        stepper.step(tokens[: 4 * k + 2], np.array([1000 + k, 0], dtype=np.int64))
    assert (before, comp.reads - before) == (1, 0)
    assert look_back(cache.voters) == 16 and comp.reads == 1
