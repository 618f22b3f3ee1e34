"""L2 eviction removes the host-only ancestors it leaves as useless leaves (issue 14 item 8).

A request's commit inserts prompt + output and then its prompt boundary, which splits the
path: the upper node [0, prompt) keeps no SWA page (its window lies past the prompt, in the
lower node). Once the lower leaf leaves L2, the upper node is a host-only leaf that no
component can reuse at any boundary (all SWA tombstones on every tier, or part of a window whose other pages left with the
child), as SGLang's
SWARadixCache deletes tombstone leaves iteratively. L1 eviction removed such ancestors
(`RadixCache._remove_subtree_leaf`); L2 eviction kept them: dead FULL tokens held L2 pages,
and under `session` eviction (the prompt node ranked after other sessions' output leaves by
its priority + 1) they stayed there while reusable nodes were evicted instead
(fig6-dsv4-pro-b256: device+host hit 0.385 session vs 0.504 LRU before, docs/figure6.md).
"""
from __future__ import annotations

import numpy as np

from cache_core import CacheConfig, RadixCache, ReplayStepper, SwaConfig
from cache_core import invariants
from cache_core.tiers import TierConfig
from helpers import node_at, swa_l1, swa_l2

P = 4
PROMPT = np.arange(0, 16, dtype=np.int64)  # 4 pages
OUTPUT = np.arange(100, 109, dtype=np.int64)  # 9 tokens: prompt + output[:-1] = 24 = 6 pages


def make(policy: str = "lru", W: int = 4) -> RadixCache:
    tc = TierConfig(hicache_ratio=2, l3=False, l3_tokens=None, min_prefetch_tokens=0,
                    write_policy="write_through")
    return RadixCache(CacheConfig(page_size=P, capacity_tokens=64, swa=SwaConfig(window_tokens=W,
                                                                                 capacity_tokens=64),
                                  tiers=tc, policy=policy), record_actions=True)


def demoted_turn(policy: str = "lru", prompt_first: bool = False) -> RadixCache:
    """One turn (prompt 16, output 9) committed, then all of L1 demoted to L2. With
    `prompt_first` the prompt alone was served before, so [0, 16) holds its own window."""
    c = make(policy)
    stepper = ReplayStepper(c)
    if prompt_first:
        stepper.step(PROMPT, np.array([999], dtype=np.int64))
    stepper.step(PROMPT, OUTPUT)
    c.evict(10**9)
    invariants.check(c)
    return c


def test_l2_eviction_removes_the_tombstone_parent_it_leaves():
    c = demoted_turn()
    upper, lower = node_at(c, PROMPT), node_at(c, np.concatenate([PROMPT, OUTPUT[:8]]))
    assert (upper.parent is c.tree.root, lower.parent is upper) == (True, True)
    assert swa_l1(upper) == [-1] * 4 and swa_l2(upper) == [-1] * 4  # no window anywhere in [0, 16)
    assert swa_l2(lower)[-1] >= 0  # the window [20, 24) is on L2
    assert c.hier.evict_l2(1) == 24  # the leaf [16, 24), then its useless parent [0, 16)
    assert c.hier.evicted_l2_tokens == 24
    assert (upper.alive, lower.alive) == (False, False)
    assert c.tree.num_nodes == 1 and c.hier.free_l2_tokens == 128
    invariants.check(c)


def test_l2_eviction_keeps_a_parent_with_its_own_window():
    c = demoted_turn(prompt_first=True)
    upper = node_at(c, PROMPT)
    assert swa_l2(upper)[-1] >= 0  # the prompt's own request left a window at 16
    assert c.hier.evict_l2(1) == 8
    assert c.hier.evicted_l2_tokens == 8
    assert upper.alive and not upper.children
    m = c.match(np.concatenate([PROMPT, OUTPUT]), 24)
    assert (m.cached_tokens, m.host_tokens) == (16, 16)  # still reusable from L2
    invariants.check(c)


def test_session_policy_evicts_the_dead_prompt_node_with_its_leaf():
    """Under `session` the prompt node (priority + 1) would rank after the output leaves of
    other sessions; it leaves with its own leaf instead of staying as dead L2 weight."""
    c = demoted_turn("session")
    upper = node_at(c, PROMPT)
    assert c.hier.evict_l2(1) == 24
    assert not upper.alive and c.tree.num_nodes == 1
    invariants.check(c)


def test_l2_eviction_removes_a_parent_left_with_half_a_window():
    """W=8 (2 pages), output of 5: seq = 20, its window [12, 20) is page 3 of the prompt node
    [0, 16) and the one page of the leaf [16, 20). Without the leaf, [0, 16) holds one page
    of a window: no boundary in it can be reused, so it goes too."""
    c = make(W=8)
    ReplayStepper(c).step(PROMPT, OUTPUT[:5])
    c.evict(10**9)
    upper, lower = node_at(c, PROMPT), node_at(c, np.concatenate([PROMPT, OUTPUT[:4]]))
    assert swa_l2(upper) == [-1, -1, -1, 0] and swa_l2(lower) == [1]
    assert c.hier.evict_l2(1) == 20
    assert (upper.alive, lower.alive, c.tree.num_nodes) == (False, False, 1)
    invariants.check(c)

