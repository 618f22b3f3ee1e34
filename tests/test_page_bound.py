"""The leaderboard's bound (cache_core/belady.py: PageBound) is a true upper bound.

(1) The greedy equals the optimum of the relaxation it claims to solve, by exhaustive dynamic
programming over cache contents on small random request sequences; (2) no registered policy
beats it on the leaderboard corpus at reduced size, while online policies beat the old
node-level heuristic (`belady-node`) on the corpus's agentic trace; (3) the name `belady` is
refused with a pointer to both."""
import itertools
from pathlib import Path

import numpy as np
import pytest

from cache_core.belady import PageBound
from cache_core.eviction import make_policy, policy_names
from cache_core.stack_curve import LruCurve
from radixsim.curve import replay_points
from radixsim.leaderboard import BOUND, CORPUS, SHARED_TRACE, run_leaderboard
from radixsim.replay import ReplayOptions
from scenarios.agentic import SWE_AGENT


def relaxation_optimum(requests, P: int, K: int) -> int:
    """max sum_i |M_i & S_i| over S_0 = {}, S_{i+1} a subset of S_i | I_i, |S_i| <= K: every set."""
    ids, caps, _ = LruCurve.page_ids(requests, P)
    best = {frozenset(): 0}
    for pages, m in zip(ids, caps):
        use, ins = set(pages[:m].tolist()), set(pages.tolist())
        nxt: dict = {}
        for S, v in best.items():
            v += len(use & S)
            pool = sorted(S | ins)
            for k in range(min(K, len(pool)) + 1):
                for T in itertools.combinations(pool, k):
                    T = frozenset(T)
                    if nxt.get(T, -1) < v:
                        nxt[T] = v
        best = nxt
    return max(best.values())


@pytest.mark.parametrize("seed", range(12))
def test_greedy_is_the_optimum_of_the_relaxation(seed):
    rng = np.random.default_rng(seed)
    P = int(rng.integers(1, 3))
    stems = [rng.integers(0, 3, size=int(rng.integers(1, 4)) * P) for _ in range(3)]
    reqs = []
    for _ in range(6):
        a, b = (int(x) for x in rng.integers(0, 3, size=2))
        prompt = np.concatenate([stems[a], stems[b][: int(rng.integers(0, len(stems[b]) + 1))]]).astype(np.int64)
        out = rng.integers(0, 3, size=int(rng.integers(0, 2 * P + 1))).astype(np.int64)
        reqs.append((prompt, out if len(out) else None))
    pb = PageBound(reqs, P)
    for K in (1, 2, 3):
        assert pb.hit_pages(K * P) == relaxation_optimum(reqs, P, K), (seed, K)


def test_bound_counts_hand_computed():
    """P = 1, K = 1. r0 'ab' inserts a, ab; r1 'ab' uses a (cap: b is the last token);
    r2 'xy' inserts x; r3 'ab' uses a: a's intervals [1, 1] and [2, 3] (r1 inserted it again);
    x is never used. One page: both hits (2); the output 'z' of r2 is inserted only up to
    output[:-1], so nothing."""
    t = lambda s: np.array([ord(c) for c in s], np.int64)  # noqa: E731
    reqs = [(t("ab"), None), (t("ab"), None), (t("xy"), t("z")), (t("ab"), None)]
    pb = PageBound(reqs, 1)
    assert pb.starts.tolist() == [1, 2] and pb.ends.tolist() == [1, 3]
    assert [pb.hit_pages(k) for k in (0, 1, 2)] == [0, 2, 2]
    assert pb.prompt_tokens == 8 and pb.hit_rate(1) == 2 / 8


def _reduced_corpus(tmp_path) -> dict:
    lines = SHARED_TRACE.read_text().splitlines()[:120]
    (tmp_path / "mc.jsonl").write_text("\n".join(lines) + "\n")
    ag = dict(CORPUS["agentic"]["workload_set"])
    return {
        "mooncake_synthetic": ReplayOptions(trace=str(tmp_path / "mc.jsonl"), page_size=16, progress=False),
        "multiturn": ReplayOptions(workload="multiturn", page_size=16, progress=False, workload_set=(
            ("num_clients", 6), ("num_rounds", 6), ("request_length", 256), ("output_length", 8))),
        "multiturn_p1": ReplayOptions(workload="multiturn", page_size=1, progress=False, workload_set=(
            ("num_clients", 4), ("num_rounds", 4), ("request_length", 64), ("output_length", 3),
            ("ready_queue_policy", "random"))),
        "agentic": ReplayOptions(workload="agentic", page_size=16, progress=False, workload_set=(
            *ag.items(), ("num_sessions", 4), ("concurrency", 2), ("turns", (4, 8)),
            ("repo_context_tokens", (500, 2000)))),
        "agentic_swe": ReplayOptions(workload="agentic", page_size=16, progress=False, workload_set=(
            ("num_sessions", 3), ("concurrency", 2), *{**SWE_AGENT, "turns": (6, 14)}.items())),
    }


def test_no_policy_beats_the_bound_on_the_reduced_corpus(tmp_path):
    rows = run_leaderboard(_reduced_corpus(tmp_path), fractions=(0.1, 0.25, 0.5), jobs=2)
    by: dict = {}
    for r in rows:
        by.setdefault((r["trace"], r["capacity_tokens"]), {})[r["policy"]] = r["hit_rate"]
    assert len(by) == 15 and all(set(v) == {*policy_names(), BOUND} for v in by.values())
    over = [(k, p, h, v[BOUND]) for k, v in by.items() for p, h in v.items() if h > v[BOUND]]
    assert over == []
    # the bound is not vacuous: LRU and the best policy reach it where the cache holds everything
    assert by[("multiturn", 4704)][BOUND] == pytest.approx(0.5676855895196506)


def test_online_policies_beat_belady_node_but_not_the_bound():
    """The issue's case: the corpus's agentic trace at 28,304 tokens (10 % of its working set)."""
    opts = ReplayOptions(page_size=16, progress=False, **CORPUS["agentic"])
    (mru, _), (node, _) = replay_points([(opts, "mru", 28_304), (opts, "belady-node", 28_304)], 1)
    from radixsim.replay import request_stream

    bound = PageBound(request_stream(opts), 16).hit_rate(28_304)
    assert (round(100 * mru, 2), round(100 * node, 2)) == (15.49, 15.05)
    assert mru < bound and round(100 * bound, 2) == 45.50


def test_belady_is_refused_with_a_pointer():
    assert "belady" not in policy_names() and "belady-node" in policy_names()
    with pytest.raises(ValueError, match="'belady' is now 'belady-node'.*not a bound.*'bound' row"):
        make_policy("belady")


def test_replay_policy_belady_is_one_line_exit_2(capsys, tmp_path):
    from helpers import run_main as run_inproc

    rc, out, err = run_inproc(capsys, ["replay", "t.jsonl", "--policy", "lru,belady", "--out", str(tmp_path / "X")])
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert "argument --policy: 'belady' is now 'belady-node'" in err and "not a bound" in err
    assert not (tmp_path / "X").exists()
