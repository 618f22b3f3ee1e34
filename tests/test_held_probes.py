"""Admission probes that would only repeat the last match (issue 16 item 6: the queue's head is
probed again every step while memory is short, at 4x the Inkling figure-4 L3 rounds 49,505 of
77,761 matches). `MemoMatch.repeat` answers such a match without its effects, and the engine
holds the match and lock back until the request passes the memory check (engine_steps.Probes).
Pinned here: when `repeat` answers (the same kept plan, no tick since, a tick-ordered policy),
and that engine runs with held-back probes give exactly the rows of runs that match every
probe (memory-short smoke runs of the catalog: L1 only, L3 with SWA and MAMBA, sessions;
lru, lfu, fifo; lpm and dfs-weight ordering; chunked prefill), while a policy with keys of
its own (gdsf) holds nothing back."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cache_core import CacheConfig, RadixCache
from cache_core.engine_steps import Probes
from cache_core.l1_match import MemoMatch
from cache_core.records import TokenSeq
from cache_core.tiers.config import TierConfig

P = 4


def _cache(policy="lru", tiers=None):
    return RadixCache(CacheConfig(page_size=P, capacity_tokens=256, policy=policy, tiers=tiers), auto_ack=True)


def _seq(n, start=0):
    return TokenSeq(np.arange(start, start + n, dtype=np.int64))


@pytest.mark.parametrize("tiers", [None, TierConfig(hicache_ratio=2)])
def test_repeat_answers_only_a_match_that_would_repeat_the_last_one(tiers):
    c = _cache(tiers=tiers)
    a, b = _seq(32), _seq(32, 1000)
    c.insert(a, 32, c.alloc(8))
    c.insert(b, 32, c.alloc(8))
    assert c.matcher.repeat(a, 32) is None  # nothing matched yet
    m = c.match(a)
    again = c.matcher.repeat(a, 32)
    assert again is not None and (again.cached_tokens, again.handle.node) == (m.cached_tokens, m.handle.node)
    assert c.matcher.repeat(a, 16) is None  # another length: another plan
    assert c.matcher.repeat(b, 32) is None  # another request
    c.match(b)
    assert c.matcher.repeat(a, 32) is None  # a tick was taken since (b's match)
    c.match(a)
    assert c.matcher.repeat(a, 32) is not None
    c.tree.fresh()
    assert c.matcher.repeat(a, 32) is None  # any tick since the match
    c.match(a)
    c.insert(_seq(8, 5000), 8, c.alloc(2))
    assert c.matcher.repeat(a, 32) is None  # an insert: a new version (and ticks)


def test_a_policy_with_keys_of_its_own_never_repeats():
    c = _cache(policy="gdsf")
    a = _seq(32)
    c.insert(a, 32, c.alloc(8))
    c.match(a)
    assert not c.matcher.quiet and c.matcher.repeat(a, 32) is None


def _run(monkeypatch, scenario, sets, quiet: bool):
    """A smoke run of `scenario`; rows, evictions and the held/probed counts of its probes."""
    from radixsim.run import simulate
    from scenarios.scenario import from_file
    from sim.recorder import request_rows

    seen: Counter = Counter()
    orig = Probes.match_len

    def counted(self, r):
        v = orig(self, r)
        seen["held" if id(r) in self.held else "probed"] += 1
        return v

    monkeypatch.setattr(Probes, "match_len", counted)
    if not quiet:
        monkeypatch.setattr(MemoMatch, "repeat", lambda self, seq, limit: None)
    eng = simulate(from_file(scenario, sets=sets, smoke_run=True))[0]
    monkeypatch.undo()
    return request_rows(eng), eng.cache.full.evicted_tokens, dict(seen)


SHORT = "cache.max_total_tokens=12800"


@pytest.mark.parametrize("scenario,sets,held", [
    ("fig4-dsv4-flash-l1", [SHORT], 164),
    ("fig4-dsv4-flash-l1", [SHORT, "cache.policy=fifo"], 164),
    ("fig4-dsv4-flash-l3", [SHORT], 90),
    ("fig4-dsv4-flash-l3", [SHORT, "cache.policy=lfu"], 104),
    ("fig6-qwen3.5-397b-b32-session", [SHORT], 58),
    ("fig4-dsv4-flash-l1", [SHORT, "cache.policy=gdsf"], 0),
    ("fig4-dsv4-flash-l1", [SHORT, "engine.schedule_policy=lpm"], 38),
    ("fig4-dsv4-flash-l2", [SHORT, "engine.schedule_policy=dfs-weight"], 78),
    ("fig4-dsv4-flash-l3", [SHORT, "engine.chunked_prefill_tokens=1024"], 121),
])
def test_held_back_probes_change_no_row(monkeypatch, scenario, sets, held):
    rows, evicted, seen = _run(monkeypatch, scenario, sets, quiet=True)
    ref_rows, ref_evicted, ref_seen = _run(monkeypatch, scenario, sets, quiet=False)
    assert seen.get("held", 0) == held and ref_seen.get("held", 0) == 0
    assert seen["probed"] + seen.get("held", 0) == ref_seen["probed"]  # the same probes, fewer of them matched
    assert evicted == ref_evicted and evicted > 0
    assert rows == ref_rows
