"""cache_core/lifecycle.py: one request lifecycle (admit, commit) shared by replay and the
engine, with keyword-only parameter and result records (issue 16 item 2)."""
from __future__ import annotations

import dataclasses

import pytest

from cache_core import CacheConfig, MambaConfig, RadixCache, ReplayStepper, SwaConfig, TokenSeq, invariants
from cache_core import engine_loading, engine_steps, lifecycle, replay
from cache_core.lifecycle import AdmitParams, Admitted, CommitParams, admit, commit
from helpers import shape, toks


def test_records_are_keyword_only():
    seq = TokenSeq(toks("abcd"))
    with pytest.raises(TypeError):
        AdmitParams(seq, 4)  # noqa: the point is that this is refused
    for rec in (AdmitParams, Admitted, CommitParams):
        assert all(f.kw_only for f in dataclasses.fields(rec))


def test_admit_then_commit_is_what_replay_does():
    cfg = CacheConfig(page_size=2, capacity_tokens=64, swa=SwaConfig(window_tokens=4, capacity_tokens=32),
                      mamba=MambaConfig(slots=6, every_tokens=4))
    reqs = [toks("abcdefgh"), toks("abcdefghij"), toks("abcdxyzw"), toks("abcdefghijkl")]
    ref = RadixCache(cfg)
    st = ReplayStepper(ref)
    want = [st.step(r).cached_tokens for r in reqs]
    cache = RadixCache(cfg)
    got = []
    for r in reqs:
        seq = TokenSeq(r)
        a = admit(cache, AdmitParams(seq=seq, prompt_len=len(r)))
        assert not a.rejected and sorted(a.slots) == ["mamba", "swa"]
        commit(cache, CommitParams(seq=seq, prompt_len=len(r), match=a.match, pages=a.pages, slots=a.slots))
        invariants.check(cache)
        got.append(a.cached_tokens)
    assert got == want == [0, 8, 0, 10]  # "abcd": no whole SWA window at 4
    assert shape(cache) == shape(ref)


def test_a_rejected_admission_gives_everything_back():
    cache = RadixCache(CacheConfig(page_size=2, capacity_tokens=8, mamba=MambaConfig(slots=2)))
    seq = TokenSeq(toks("abcdefghijkl"))  # 12 tokens: 6 pages, the pool has 4
    a = admit(cache, AdmitParams(seq=seq, prompt_len=12))
    assert (a.rejected, a.cached_tokens, a.pages, a.slots) == (True, 0, None, {})
    assert cache.free_tokens == 8 and cache.mamba.pool.free_pages == 2 and cache.topo.locks == {}
    invariants.check(cache)


def test_replay_and_the_engine_share_the_lifecycle():
    assert replay.admit is lifecycle.admit and replay.commit is lifecycle.commit
    # the engine's StepBuilder takes a request's units and its Loader commits through the lifecycle
    assert engine_steps.take_slots is lifecycle.take_slots and engine_loading.commit is lifecycle.commit
