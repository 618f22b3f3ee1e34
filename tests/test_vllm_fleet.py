"""A fleet of `engine.kind: vllm` engines (issue 32): every router runs on them, and the routers
that read an engine's cache exactly (llm_d's precise prefix scorer, cache_aware_exact) read vLLM's
block cache (and its CPU offload) through `VllmKV.exact_reuse`, without changing it.

The trace: 3 multiturn sessions x 3 rounds of 160 new tokens and 16 output tokens, one request at
a time, on 2 engines. Round k's prompt is the session's history: 160, 336 (160 + 16 + 160) and 512
tokens. vLLM caches the full blocks of prompt + output[:-1] (175 -> 10 blocks of 16, 351 -> 21)
and its lookup stops at (prompt - 1) // 16 blocks, so on the engine that served the session's
previous round a request hits 0, 160, 336 tokens; elsewhere it hits only what that engine kept
of the session."""
from __future__ import annotations

import pickle
import types

import pytest

from fleet.routers.base import exact_reuse
from fleet.routers.llm_d import KvCacheUtilization
from radixsim.fleet_run import fleet_rows, simulate_fleet
from scenarios.scenario import resolve

PRECISE = {"kind": "llm_d", "scorers": [{"type": "precise-prefix-cache-scorer", "weight": 3},
                                        {"type": "kv-cache-utilization-scorer", "weight": 2},
                                        {"type": "queue-scorer", "weight": 2}]}


def _raw(router, **cache) -> dict:
    return {"seed": 0, "model": "qwen3-32b", "hardware": "h200x1", "cache": {"l1_tokens": 20480, **cache},
            "engine": {"kind": "vllm"},
            "workload": {"kind": "multiturn", "num_clients": 3, "num_rounds": 3, "request_length": 160,
                         "output_length": 16, "max_parallel": 1},
            "fleet": {"engines": 2, "router": router}}


def _run(router, **cache):
    f, *_ = simulate_fleet(resolve(_raw(router, **cache), "test"))
    return f, [(r["rid"], r["session_id"], r["engine"], r["prompt_tokens"], r["cached_tokens"]) for r in fleet_rows(f)]


def test_round_robin_splits_each_session_over_both_engines_and_loses_its_second_round_hit():
    """Request k on engine k mod 2: session s's rounds are rids s, s + 3, s + 6, so its second
    round lands on the other engine (which holds no block of it: 0) and its third back on the
    first one, which holds round 1's 10 blocks (160 of 512)."""
    f, rows = _run("round_robin")
    assert [(rid, s, e, p) for rid, s, e, p, _ in rows] == [
        (k, k % 3, k % 2, (160, 336, 512)[k // 3]) for k in range(9)]
    assert [c for *_, c in rows] == [0, 0, 0, 0, 0, 0, 160, 160, 160]
    # engine 0 served rids 0, 2, 4, 6, 8: 10 + 10 + 21 + (32 - 10) + (32 - 10) cached blocks; engine 1: 10 + 21 + 21 + 22
    assert [e.cache.stats()["cached_blocks"] for e in f.engines] == [85, 74]
    assert f.completed == f.arrived == 9
    # what llm_d's load scorers read, under the radix cache's names: 20,480 tokens = 1,280 blocks,
    # none referenced at the end: the cached ones evictable, the rest free, no KV held, no queue
    e = f.engines[0]
    assert (e.max_total_tokens, e.cache.free_tokens, e.cache.full.evictable_tokens) == (20480, (1280 - 85) * 16, 85 * 16)
    assert e.cache.full.pool.unbounded is False and KvCacheUtilization.usage(f.engines) == 0.0
    assert [(len(e.queues.waiting), len(e.queues.prefetching)) for e in f.engines] == [(0, 0), (0, 0)]


@pytest.mark.parametrize("router", [PRECISE, "cache_aware_exact"])
def test_exact_routers_keep_each_session_on_one_engine_and_hit_its_whole_history(router):
    f, rows = _run(router)
    assert [c for *_, c in rows] == [0, 0, 0, 160, 160, 160, 336, 336, 336]
    engine_of = {}
    for _, s, e, _, _ in rows:
        assert engine_of.setdefault(s, e) == e  # every round of a session on its first round's engine
    per_session = 10 + 11 + 11  # blocks cached by a session's 3 rounds: 10, then 21 - 10, then 32 - 21
    held = [sum(per_session for s in engine_of if engine_of[s] == i) for i in range(2)]
    assert [e.cache.stats()["cached_blocks"] for e in f.engines] == held and sum(held) == 96
    assert f.completed == f.arrived == 9


def _state(engine) -> bytes:
    o = engine.offload
    return pickle.dumps((vars(engine.blocks), None if o is None else (vars(o.cpu), vars(o.cpu.policy), o.loading)))


@pytest.mark.parametrize("l2", [None, 4096])
def test_a_precise_pick_reads_the_block_cache_and_the_cpu_chunks_without_changing_them(l2, monkeypatch):
    """After the run, each session's last prompt (512 tokens) asked again: its engine holds all
    of it (32 blocks cached) but vLLM's GPU lookup stops at (512 - 1) // 16 = 31 blocks: 496;
    with the CPU offload the 32nd block is a stored CPU chunk past the GPU hit: 512 (as
    `VllmOffloadConnector.matched_tokens` counts it). The other engine holds none of it; the
    pick goes to the session's engine and no block pool or CPU pool changes."""
    from fleet.fleet import Fleet

    seen = []
    arrive = Fleet.arrive

    def keep(self, req):
        seen.append(types.SimpleNamespace(rid=req.rid, session_id=req.session_id, seq=req.seq,
                                          prompt_tokens=req.prompt_tokens, output_length=req.output_length))
        arrive(self, req)

    monkeypatch.setattr(Fleet, "arrive", keep)
    f, rows = _run(PRECISE, **({} if l2 is None else {"l2_tokens": l2}))
    before = [_state(e) for e in f.engines]
    for q in seen[6:]:
        home = f.engine_of[q.rid]
        assert [exact_reuse(e, q) for e in f.engines] == [496 + (l2 is not None) * 16 if i == home else 0
                                                         for i in range(2)]
        assert f.router.pick(q, f.now()) == home
    assert [_state(e) for e in f.engines] == before
