"""The one-pass LRU curve (cache_core/stack_curve.py, `radixsim curve`).

1. It equals, at every stack depth, a brute-force page-level LRU cache with replay's match cap
   and insert cut (ancestors more recent than descendants): the stack model itself, exactly.
2. It equals exact replays where SGLang's rules cannot interfere (no eviction: every capacity
   at or above the working set), with outputs and partial tail pages.
3. Elsewhere (capacities >= 2x the longest sequence) it stays within the documented bound of
   exact replays (docs/policy_lab.md).
"""
import numpy as np
import pytest

from cache_core import CacheConfig, RadixCache, ReplayStepper
from cache_core.stack_curve import LruCurve
from radixsim.curve import replay_points, run_curve
from radixsim.replay import ReplayOptions


def random_tree_trace(seed: int, n: int = 120, outputs: bool = True):
    """Requests over a random prefix tree: each prompt extends an earlier prompt's prefix."""
    rng = np.random.default_rng(seed)
    prompts, reqs, fresh = [np.arange(5, dtype=np.int64)], [], -1
    for _ in range(n):
        base = prompts[int(rng.integers(len(prompts)))]
        cut = int(rng.integers(0, len(base) + 1))
        p = np.concatenate([base[:cut], rng.integers(0, 40, int(rng.integers(1, 7)))]).astype(np.int64)
        prompts.append(p)
        out = None
        if outputs and rng.random() < 0.5:
            k = int(rng.integers(1, 4))
            out, fresh = np.arange(fresh, fresh - k, -1, dtype=np.int64), fresh - k
        reqs.append((p, out))
    return reqs


def reference_lru(reqs, P: int, depth: int) -> int:
    """Page-level LRU of `depth` pages; a page is named by its whole prefix (exact tuples)."""
    stack: list = []  # most recent first
    cached = 0
    for prompt, out in reqs:
        seq = prompt if out is None or len(out) < 2 else np.concatenate([prompt, out[:-1]])
        pages = [tuple(seq[: (j + 1) * P].tolist()) for j in range(len(seq) // P)]
        top = set(stack[:depth])
        cap = max(len(prompt) - 1, 0) // P
        hit = 0
        while hit < cap and pages[hit] in top:
            hit += 1
        cached += hit * P
        stack = pages + [k for k in stack if k not in set(pages)]  # ancestors above descendants
    return cached


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_curve_equals_page_level_lru_at_every_depth(seed, page_size):
    reqs = random_tree_trace(seed)
    curve = LruCurve(reqs, page_size)
    got = [curve.cached_at_depth(d) for d in range(curve.pages + 2)]
    want = [reference_lru(reqs, page_size, d) for d in range(curve.pages + 2)]
    assert got == want
    assert got[-1] > 0 and got[1] < got[-1]  # the trace does reuse prefixes, and depth matters


def replay_cached(reqs, P: int, cap: int) -> int:
    cache = RadixCache(CacheConfig(page_size=P, capacity_tokens=cap, policy="lru"))
    stepper = ReplayStepper(cache)
    return sum(stepper.step(p, o).cached_tokens for p, o in reqs)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("seed", [3, 4])
def test_curve_equals_replay_where_nothing_is_evicted(seed, page_size):
    reqs = random_tree_trace(seed)
    curve = LruCurve(reqs, page_size)
    top = (curve.pages + 1) * page_size  # the working set plus the +1 page demand
    for cap in (top, top + page_size, 2 * top):
        assert curve.cached_tokens(cap) == replay_cached(reqs, page_size, cap)
    assert replay_cached(reqs, page_size, top // 2) < curve.cached_tokens(top)  # evictions do cost


MULTITURN = ReplayOptions(workload="multiturn", page_size=16, progress=False,
                          workload_set=(("num_clients", 8), ("num_rounds", 8), ("request_length", 512),
                                        ("output_length", 16)))


def test_curve_within_documented_bound_of_replay_on_a_multiturn_workload():
    doc = run_curve(MULTITURN, ["lru"], points=6, check=0)
    longest = None
    from radixsim.curve import lru_curve

    curve = lru_curve(MULTITURN)
    longest = curve.longest_tokens
    caps = [c for c in (r["capacity_tokens"] for r in doc["rows"]) if c >= 2 * longest]
    assert len(caps) >= 2
    exact = replay_points([(MULTITURN, "lru", c) for c in caps], jobs=1)
    diffs = [abs(curve.hit_rate(c) - h) * 100 for c, (h, _) in zip(caps, exact)]
    assert max(diffs) <= 0.6, diffs  # points; docs/policy_lab.md


def test_curve_rows_and_files(tmp_path):
    doc = run_curve(MULTITURN, ["lru", "fifo"], capacities=[4096, 16384], out_dir=tmp_path)
    assert [(r["policy"], r["capacity_tokens"], r["method"]) for r in doc["rows"]] == [
        ("lru", 4096, "stack"), ("lru", 16384, "stack"), ("fifo", 4096, "replay"), ("fifo", 16384, "replay")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.csv", "curve.json", "curve.png", "curve.svg"]
