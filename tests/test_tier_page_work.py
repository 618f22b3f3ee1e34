"""Per-page work of the SWA/MAMBA tier hooks (issue 16): the L3 boundary probe asks the store
once per component for the pages it examines (`contains_each`), never page by page (`key in`
the store); SWA's `useless_leaf` (L2 eviction removing leaves nothing can reuse) is a numpy
scan of its node's pages whose answer is pinned here against the page-by-page rule."""
from __future__ import annotations

import itertools

import numpy as np

from cache_core import TokenSeq
from cache_core.components.swa.payload import SwaPayload, window_runs
from cache_core.tiers.store import StorageIndex
from helpers import hybrid_l3_cache

P, W, PAGES = 4, 8, 1000  # the window is 2 pages; a 1000-page run in L3 only


class CountingStore(StorageIndex):
    """The prefix L3 index, counting page-by-page membership tests (`key in store`)."""

    per_page = 0

    def __contains__(self, key) -> bool:
        self.per_page += 1
        return super().__contains__(key)


def hybrid_cache(**tiers):
    return hybrid_l3_cache(P, W, **tiers)


def test_the_l3_boundary_probe_asks_the_store_per_run_not_per_page():
    c = hybrid_cache()
    seq = TokenSeq(np.arange(PAGES * P, dtype=np.int64))
    keys = seq.page_keys(P).tolist()
    store = c.hier.storage
    store.__class__ = CountingStore
    store.put_many(keys + [(name, k) for name in ("swa", "mamba") for k in keys])
    m = c.match(seq)
    assert (m.storage_tokens, m.cached_tokens) == (PAGES * P, PAGES * P)
    # the deepest boundary SWA and MAMBA accept (the run's last 2 pages, tiers.votes.storage_boundary):
    # one contains_each per component, no `key in store` (before: one per page and component, 4)
    assert store.per_page == 0


class Node:
    """The little of a tree node `useless_leaf` reads: its parent and its SWA payload."""

    def __init__(self, parent, present):
        self.parent = parent
        self.comp = {}
        self.present = present


def chain(swa, *segments):
    """Root -> one node per segment (a list of page flags: present on some tier or not)."""
    node = Node(None, [])
    node.comp[swa.kind] = None
    for seg in segments:
        node = Node(node, seg)
        pages = np.where(np.array(seg, dtype=bool), 0, -1)
        node.comp[swa.kind] = SwaPayload(pages, int((pages < 0).sum()))
    return node


def useless_by_page(swa, node) -> bool:
    """The page-by-page rule: no page whose run of present pages (continuing the parent's
    tail) reaches the window."""
    run, wp = swa.tail_run(node.parent, swa.window_pages), swa.window_pages
    for ok in node.present:
        run = run + 1 if ok else 0
        if run >= wp:
            return False
    return True


def test_useless_leaf_matches_the_page_by_page_rule():
    c = hybrid_cache()
    swa = next(v for v in c.topo.voters if v.name == "swa")
    assert swa.window_pages == 2
    cases = 0
    for head in ([], [[False]]):  # a clean path above (the tail is the whole window), or a tombstone
        for n_parent, n_leaf in [(0, 1), (1, 1), (2, 2), (3, 3), (1, 4)]:
            for bits in itertools.product([False, True], repeat=n_parent + n_leaf):
                parent_seg, leaf_seg = list(bits[:n_parent]), list(bits[n_parent:])
                leaf = chain(swa, *(head + ([parent_seg] if n_parent else []) + [leaf_seg]))
                assert swa.useless_leaf(leaf) == useless_by_page(swa, leaf), (head, parent_seg, leaf_seg)
                cases += 1
    assert cases == 2 * (2 + 4 + 16 + 64 + 32)
    # the first page absent: the clean path above does not count, the one page after it is short
    assert swa.useless_leaf(chain(swa, [True], [False, True])) is True
    assert swa.useless_leaf(chain(swa, [True], [True, False])) is False


def runs_by_page(present, run, clean, P, W):
    ok = []
    for here in present:
        run, clean = (run + P, clean) if here else (0, False)
        ok.append(clean or run >= W)
    return ok, run, clean


def test_window_runs_matches_the_page_by_page_rule_short_and_long():
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 40, 95, 96, 97, 200, 1000):  # short masks loop in Python, long ones in numpy
        for run0, clean0 in [(0, True), (0, False), (4, False), (12, False)]:
            present = rng.random(n) > 0.15
            ok, run, clean = window_runs(present, run0, clean0, 4, 12)
            want, want_run, want_clean = runs_by_page(present.tolist(), run0, clean0, 4, 12)
            assert ok.dtype == bool and ok.tolist() == want and (run, clean) == (want_run, want_clean)
