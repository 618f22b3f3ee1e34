"""The llm_d router (fleet/routers/llm_d.py) on small constructed fleets: each scorer against
hand-computed scores, the weighted sum of a scheduling profile, the pickers, and the bad-input
lines (issue 32 item 3)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cache_core.records import TokenSeq
from fleet.routers import make_router
from fleet.routers.llm_d import MODEL_HASH as MODEL

from helpers import KeyReq, KeySeq, stub_cache

P = 64
ROOT = Path(__file__).resolve().parents[1]


Seq, Req = KeySeq, KeyReq  # tests/helpers.py (pages of P = 64 tokens)


def llm_d(n=2, scorers=(), picker="max-score-picker", seed=0):
    return make_router({"kind": "llm_d", "scorers": [dict(s) for s in scorers], "picker": picker}, n,
                       page_size=P, seed=seed)


def prefix(**params):
    return {"type": "prefix-cache-scorer", "weight": 1, "parameters": {"blockSizeTokens": P, **params}}


def send_to(r, req, i):
    """Score `req` (as a pick does), then route it to engine `i` whatever the pick was."""
    r.pick(req, 0.0)
    r.routed(req, i, 0.0)


class _Match:
    def __init__(self, device, host):
        self.device, self.host_tokens, self.cached_tokens = device, host, device


class Eng:
    """An engine as the scorers read it: its cache match, its KV pool and its waiting queue."""

    def __init__(self, device=0, host=0, pool=1000, free=1000, evictable=0, waiting=0, prefetching=0):
        m = _Match(device, host)
        full = type("F", (), {"evictable_tokens": evictable, "pool": type("Pool", (), {"unbounded": False})()})()
        self.cache = stub_cache(m, full=full, free_tokens=free)
        self.max_total_tokens = pool
        self.queues = type("Q", (), {"waiting": [None] * waiting, "prefetching": [None] * prefetching})()


def scores(r, req, which=0):
    return r.scorers[which][0].score(r, req)


# -- prefix-cache-scorer (GIE's approximate index) --------------------------------------------

def test_prefix_scorer_counts_the_model_hash_and_the_blocks_in_the_leading_run():
    r = llm_d(3, [prefix()])
    send_to(r, Req(0, [1, 2, 3, 4]), 0)
    send_to(r, Req(1, [1, 2, 9]), 1)
    # hashes [M, 1, 2, 3, 7, 8]: M and 1, 2 on engines 0 and 1, 3 on engine 0 only, 7 on none: stop
    assert scores(r, Req(2, [1, 2, 3, 7, 8])) == [4 / 6, 3 / 6, 0.0]
    # a prompt matching nothing still matches the model hash on every engine that got a request
    assert scores(r, Req(3, [50, 51, 52])) == [1 / 4, 1 / 4, 0.0]


def test_prefix_scorer_lru_evicts_the_first_added_hash_and_counts_holders_not_runs():
    r = llm_d(2, [prefix(lruCapacityPerServer=3)])
    send_to(r, Req(0, [1, 2, 3]), 0)  # adds M, 1, 2, 3 in order: M, the oldest, is evicted
    assert list(r.scorers[0][0].lru[0]) == [1, 2, 3]
    assert scores(r, Req(1, [1, 2])) == [0.0, 0.0]  # no engine holds M: the walk stops at once
    send_to(r, Req(2, [60]), 1)  # engine 1 now holds M
    # [M, 1, 2]: M on engine 1, 1 and 2 on engine 0: counted per holder within the run
    assert scores(r, Req(3, [1, 2])) == [2 / 3, 1 / 3]


def test_prefix_scorer_lru_refreshes_a_hash_added_again():
    r = llm_d(2, [prefix(lruCapacityPerServer=4)])
    send_to(r, Req(0, [1, 2, 3]), 0)  # M 1 2 3
    send_to(r, Req(1, [1]), 0)  # M 1 again: order 2 3 M 1
    send_to(r, Req(2, [7]), 0)  # M again, then 7: 2 evicted -> 3 1 M 7 (M moved to the end first)
    assert list(r.scorers[0][0].lru[0]) == [3, 1, MODEL, 7]
    assert 2 not in r.scorers[0][0].hash_to_engines


def test_prefix_scorer_caps_blocks_and_ignores_a_prompt_shorter_than_a_block():
    r = llm_d(2, [prefix(maxPrefixBlocksToMatch=2)])
    send_to(r, Req(0, [1, 2, 3, 4]), 0)
    assert r.scorers[0][0].lru[0].keys() == {MODEL, 1, 2}
    assert scores(r, Req(1, [1, 2, 3, 4])) == [1.0, 0.0]  # [M, 1, 2]: all three on engine 0
    assert scores(r, Req(2, [], prompt=63)) == [0.0, 0.0]  # no whole block: no hashes, score 0


def test_prefix_scorer_blocks_of_other_sizes_than_the_page():
    """hashBlockSize 64 characters = 16 tokens (4 per token): a 100-token prompt is 6 blocks;
    another sharing its first 40 tokens shares blocks 0 and 1 (32 tokens), then differs."""
    r = make_router({"kind": "llm_d", "scorers": [{"type": "prefix-cache-scorer"}]}, 2, page_size=P)
    sc = r.scorers[0][0]
    assert (sc.block, sc.max_blocks, sc.capacity) == (16, 256, 31250)
    a = np.arange(100, dtype=np.int64)
    b = np.concatenate([a[:40], np.arange(1000, 1060, dtype=np.int64)])
    send_to(r, Req(0, [], prompt=100, seq=TokenSeq(a)), 0)
    assert scores(r, Req(1, [], prompt=100, seq=TokenSeq(b))) == [3 / 7, 0.0]


def test_prefix_scorer_hash_block_size_must_be_whole_tokens():
    r = llm_d(2, [{"type": "prefix-cache-scorer", "parameters": {"hashBlockSize": 256}}])
    assert r.scorers[0][0].block == 64
    with pytest.raises(ValueError, match=r"^fleet.router.scorers\[0\].parameters.hashBlockSize: got 66; "
                                         r"expected a multiple of 4"):
        llm_d(2, [{"type": "prefix-cache-scorer", "parameters": {"hashBlockSize": 66}}])


# -- precise-prefix-cache-scorer (llm-d: the engines' own caches) ---------------------------

def test_precise_scorer_normalises_min_max_among_the_engines_holding_a_block():
    r = llm_d(4, [{"type": "precise-prefix-cache-scorer"}])
    req = Req(0, list(range(20)))
    # blocks: 10, 4 + 2 (device + host), none, 63 tokens (no whole block)
    r.engines = [[Eng(device=640)], [Eng(device=256, host=128)], [Eng()], [Eng(device=63)]]
    assert scores(r, req) == [1.0, 0.0, 0.0, 0.0]  # 6 blocks score as little as none (llm-d's min-max)
    r.engines[2] = [Eng(device=512)]  # 8 blocks
    assert scores(r, req) == [1.0, 0.0, 0.5, 0.0]
    r.engines = [[Eng(device=640)], [Eng()], [Eng(device=320, host=320)], [Eng()]]
    assert scores(r, req) == [1.0, 0.0, 1.0, 0.0]  # all holders equal: 1.0 each


def test_precise_scorer_takes_an_engine_best_dp_rank():
    r = llm_d(2, [{"type": "precise-prefix-cache-scorer"}])
    r.engines = [[Eng(device=128), Eng(device=640)], [Eng(device=320), Eng()]]
    assert scores(r, Req(0, list(range(20)))) == [1.0, 0.0]


# -- kv-cache-utilization-scorer and queue-scorer (GIE) -------------------------------------

def test_kv_utilization_scorer_counts_held_pages_not_evictable_or_free_ones():
    r = llm_d(3, [{"type": "kv-cache-utilization-scorer"}])
    r.engines = [[Eng(pool=1000, free=300, evictable=200)],  # held 500: 1 - 0.5
                 [Eng(pool=1000, free=0, evictable=1000)],  # all cached, none held: 1.0
                 [Eng(pool=1000, free=250), Eng(pool=1000, free=750)]]  # DP ranks: 1,000 of 2,000 held
    assert scores(r, Req(0, [1])) == [0.5, 1.0, 0.5]


def test_queue_scorer_is_min_max_over_waiting_requests():
    r = llm_d(3, [{"type": "queue-scorer"}])
    r.engines = [[Eng(waiting=3)], [Eng(waiting=1, prefetching=1)], [Eng(waiting=5)]]
    assert scores(r, Req(0, [1])) == [2 / 3, 1.0, 0.0]
    r.engines = [[Eng(waiting=2)], [Eng(waiting=1, prefetching=1)], [Eng(prefetching=2)]]
    assert scores(r, Req(0, [1])) == [1.0, 1.0, 1.0]


# -- the profile: weighted sum, clamping, pickers ---------------------------------------------

def test_weighted_sum_and_the_max_score_pick():
    """engine 0: prefix 1.0, KV usage 0.75, queue 4 (the longest); engine 1: no prefix, idle."""
    prof = [{"type": "precise-prefix-cache-scorer", "weight": 3}, {"type": "kv-cache-utilization-scorer", "weight": 2},
            {"type": "queue-scorer", "weight": 1}]
    r = llm_d(2, prof)
    r.engines = [[Eng(device=640, free=250, waiting=4)], [Eng()]]
    req = Req(0, list(range(20)))
    assert r.pick(req, 0.0) == 0
    assert r.last_scores == [3 * 1.0 + 2 * 0.25 + 1 * 0.0, 0 + 2 * 1.0 + 1 * 1.0] == [3.5, 3.0]
    prof[2]["weight"] = 2
    r = llm_d(2, prof)
    r.engines = [[Eng(device=640, free=250, waiting=4)], [Eng()]]
    assert r.pick(req, 0.0) == 1 and r.last_scores == [3.5, 4.0]


def test_scores_are_clamped_to_0_1_before_weighting():
    class Wild:
        def score(self, router, req):
            return [1.5, -0.5]

    r = llm_d(2, [])
    r.scorers = [(Wild(), 2.0)]
    r.pick(Req(0, [1]), 0.0)
    assert r.last_scores == [2.0, 0.0]


def test_max_score_picker_breaks_ties_at_random_for_a_seed():
    r = llm_d(3, [], seed=5)
    seq = [r.pick(Req(k, [1]), 0.0) for k in range(60)]
    assert set(seq) == {0, 1, 2}  # every score 0: a random engine each time (not the lowest index)
    again = llm_d(3, [], seed=5)
    assert [again.pick(Req(k, [1]), 0.0) for k in range(60)] == seq
    r = llm_d(3, [{"type": "queue-scorer"}], seed=5)
    r.engines = [[Eng(waiting=1)], [Eng()], [Eng()]]
    assert {r.pick(Req(k, [1]), 0.0) for k in range(60)} == {1, 2}  # never the engine scored lower


def test_random_picker_ignores_the_scores():
    r = llm_d(3, [{"type": "queue-scorer"}], picker="random-picker", seed=5)
    r.engines = [[Eng(waiting=1)], [Eng()], [Eng(waiting=9)]]
    assert {r.pick(Req(k, [1]), 0.0) for k in range(60)} == {0, 1, 2}


def test_the_default_profile_is_gie_default():
    r = make_router({"kind": "llm_d"}, 2, page_size=P)
    assert [(s.type, w) for s, w in r.scorers] == [("queue-scorer", 2.0), ("kv-cache-utilization-scorer", 2.0),
                                                   ("prefix-cache-scorer", 3.0)]
    assert r.picker == "max-score-picker"
    r = make_router({"kind": "llm_d", "picker": {"type": "random-picker"}}, 2, page_size=P)
    assert r.picker == "random-picker"


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, line", [
    ({"scorers": [{"type": "prefix-scorer"}]},
     "fleet.router.scorers[0].type: unknown scorer 'prefix-scorer'; expected one of precise-prefix-cache-scorer, "
     "prefix-cache-scorer, kv-cache-utilization-scorer, queue-scorer"),
    ({"picker": "best-picker"},
     "fleet.router.picker: unknown picker 'best-picker'; expected one of max-score-picker, random-picker"),
    ({"scorers": [{"type": "queue-scorer"}, {"type": "queue-scorer", "weight": -1}]},
     "fleet.router.scorers[1].weight: got -1; expected a number >= 0"),
    ({"scorers": [{"type": "queue-scorer", "weight": True}]},
     "fleet.router.scorers[0].weight: got True; expected a number >= 0"),
    ({"scorers": [{"type": "queue-scorer", "wieght": 2}]},
     "fleet.router.scorers[0].wieght: unknown key; expected type, weight, parameters"),
    ({"scorers": [{"type": "precise-prefix-cache-scorer", "parameters": {"indexerConfig": {}}}]},
     "fleet.router.scorers[0].parameters.indexerConfig: not a modelled parameter of precise-prefix-cache-scorer; "
     "expected (none)"),
    ({"scorers": [{"type": "prefix-cache-scorer", "parameters": {"lruCapacityPerServer": 0}}]},
     "fleet.router.scorers[0].parameters.lruCapacityPerServer: got 0; expected a positive integer"),
    ({"scorers": {"type": "queue-scorer"}},
     "fleet.router.scorers: got {'type': 'queue-scorer'}; expected a list of {type: NAME, weight: W}"),
    ({"picker": {"type": "max-score-picker", "parameters": {"maxNumOfEndpoints": 2}}},
     "fleet.router.picker.parameters: not modelled; expected only type"),
])
def test_bad_profiles_are_one_line(spec, line):
    with pytest.raises(ValueError) as e:
        make_router({"kind": "llm_d", **spec}, 2, page_size=P)
    assert str(e.value) == line


def test_the_cli_names_the_file_and_field_and_writes_nothing(tmp_path):
    sc = tmp_path / "bad.yaml"
    sc.write_text("seed: 0\nmodel: qwen3-32b\nhardware: h200x1\n"
                  "workload: {kind: shared_prefix, num_groups: 2, num_prompts_per_group: 2, system_prompt_len: 100,"
                  " question_len: 10, output_len: 4, stages: [{rate: 1, duration: 2}]}\n"
                  "fleet: {engines: 2, router: {kind: llm_d, scorers: [{type: queue-scorer, weight: -2}]}}\n")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "radixsim", "run", str(sc), "--out", str(out), "--no-plots",
                        "--no-progress"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"radixsim run: {sc}: fleet.router.scorers[0].weight: got -2; expected a number >= 0"]
    assert not out.exists()



# -- on a real fleet -----------------------------------------------------------------------------

def _run_fleet(router: dict):
    import copy

    from radixsim.fleet_run import fleet_rows, simulate_fleet
    from scenarios.scenario import resolve

    raw = {"name": "llm-d", "seed": 3, "model": "qwen3-32b", "hardware": "h200x1",
           "cache": {"page_size": 64, "l1_tokens": 200_000, "hicache_ratio": 2},
           "engine": {"max_running_requests": 8},
           "workload": {"kind": "multiturn", "num_clients": 8, "num_rounds": 3, "request_length": 1024,
                        "output_length": 16, "max_parallel": 8, "request_rate": 32, "round_barrier": False},
           "fleet": {"engines": 3, "router": copy.deepcopy(router)}}
    f, *_ = simulate_fleet(resolve(raw, "test"))
    return f, fleet_rows(f)


def test_the_precise_scorer_reads_the_caches_without_touching_them(monkeypatch):
    """On 3 engines (L1 + L2), at every pick: the precise scorer's blocks are what the cache's
    match would give (device + host), and scoring leaves every tree's LRU clock where it was."""
    from fleet.routers.llm_d import PrecisePrefix

    seen = []

    def checked(self, router, req):
        clocks = [e.cache.tree.now for ranks in router.engines for e in ranks]
        got = [self.blocks(ranks[0], req, P) for ranks in router.engines]
        out = PrecisePrefix.score.__wrapped__(self, router, req)
        assert [e.cache.tree.now for ranks in router.engines for e in ranks] == clocks  # read only
        want = [(m.device + m.host_tokens) // P for m in (ranks[0].cache.match(req.seq, req.limit)
                                                          for ranks in router.engines)]
        assert got == want
        seen.append(max(got))
        return out

    checked.__wrapped__ = PrecisePrefix.score
    monkeypatch.setattr(PrecisePrefix, "score", checked)
    f, rows = _run_fleet({"kind": "llm_d", "scorers": [{"type": "precise-prefix-cache-scorer"}]})
    assert len(rows) == len(seen) == 24 and max(seen) > 0


def test_an_llm_d_fleet_run_is_deterministic_for_a_seed_and_books_every_request():
    prof = {"kind": "llm_d", "scorers": [{"type": "prefix-cache-scorer", "parameters": {"blockSizeTokens": 64}},
                                         {"type": "queue-scorer"}]}
    f1, rows1 = _run_fleet(prof)
    f2, rows2 = _run_fleet(prof)
    assert [r["engine"] for r in rows1] == [r["engine"] for r in rows2]
    assert len(rows1) == 24 and f1.router.outstanding == [0, 0, 0]
    # every routed prompt's hashes went into its engine's LRU (none left pending)
    assert f1.router.scorers[0][0]._hashes == {}
