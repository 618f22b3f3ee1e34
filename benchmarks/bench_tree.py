"""Per-request cost of the cache core under replay.

(i)  a 200-round synthetic conversation: 32 sessions, each round sends the whole history
     plus 100 new tokens and gets 100 output tokens (the seed's tree-core overhead setup);
     page sizes 1 and 64; unbounded cache; per-request microseconds (mean, p50, p99) over
     all rounds and in rounds 1-25 vs 176-200.
(ii) the Mooncake FAST'25 synthetic trace (scenarios/data), page size 16, 2M-token L1:
     per-request microseconds of the core (match through unlock, parsing excluded), and
     the wall time of the whole `radixsim replay` process (import + parse + replay + write).

    python benchmarks/bench_tree.py [--rounds 200] [--sessions 32] [--skip-process]
"""
from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cache_core import CacheConfig, RadixCache, ReplayStepper  # noqa: E402
from scenarios.traces import JsonlTrace, TraceRequest  # noqa: E402

TRACE = ROOT / "scenarios" / "data" / "mooncake_synthetic_trace.jsonl"


def _fmt(us: np.ndarray) -> str:
    return f"mean {us.mean():8.1f}  p50 {np.percentile(us, 50):8.1f}  p99 {np.percentile(us, 99):8.1f} us"


def conversation(page_size: int, rounds: int, sessions: int, new: int = 100, out: int = 100):
    cache = RadixCache(CacheConfig(page_size=page_size, capacity_tokens=None))
    step = ReplayStepper(cache)
    per_round = rounds * (new + out)
    hist = [np.empty(per_round, dtype=np.int64) for _ in range(sessions)]
    lens = [0] * sessions
    next_tok = 0
    times = np.zeros((rounds, sessions))
    cached = np.zeros((rounds, sessions), dtype=np.int64)
    for r in range(rounds):
        for s in range(sessions):
            h = hist[s]
            h[lens[s] : lens[s] + new] = np.arange(next_tok, next_tok + new)
            next_tok += new
            lens[s] += new
            output = np.arange(next_tok, next_tok + out, dtype=np.int64)
            next_tok += out
            prompt = h[: lens[s]]
            t0 = time.perf_counter()
            res = step.step(prompt, output)
            times[r, s] = time.perf_counter() - t0
            cached[r, s] = res.cached_tokens
            h[lens[s] : lens[s] + out] = output
            lens[s] += out
    return times * 1e6, cached, cache


def mooncake_core(page_size: int, capacity: int | None):
    reqs = [r for r in JsonlTrace(TRACE) if isinstance(r, TraceRequest)]
    cache = RadixCache(CacheConfig(page_size=page_size, capacity_tokens=capacity))
    step = ReplayStepper(cache)
    fresh = -1
    times = np.zeros(len(reqs))
    total = 0
    for i, r in enumerate(reqs):
        output = np.arange(fresh, fresh - r.output_length, -1, dtype=np.int64) if r.output_length else None
        fresh -= r.output_length
        t0 = time.perf_counter()
        res = step.step(r.prompt, output)
        times[i] = time.perf_counter() - t0
        total += res.cached_tokens
    return times * 1e6, total, len(reqs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--skip-process", action="store_true", help="skip the whole-process timing")
    args = ap.parse_args()

    print(f"(i) {args.rounds}-round conversation, {args.sessions} sessions, 100 new + 100 output tokens/round")
    for page in (1, 64):
        us, cached, cache = conversation(page, args.rounds, args.sessions)
        early = us[: min(25, args.rounds)].ravel()
        late = us[max(0, args.rounds - 25) :].ravel()
        print(f"  page {page:>2}: all    {_fmt(us.ravel())}   nodes {cache.num_nodes:,}")
        print(f"           r1-25  {_fmt(early)}")
        print(f"           r{args.rounds - 24}-{args.rounds} {_fmt(late)}   late/early mean x{late.mean() / early.mean():.2f}")
        print(f"           last-round prompt {int(cached[-1, 0]) + 1 + 100 - 1:,} tokens, cached {int(cached[-1, 0]):,}")

    print("(ii) Mooncake synthetic trace, core only (match..unlock, parsing excluded)")
    for page, cap in ((16, 2_000_000), (1, 2_000_000), (16, None)):
        us, total, n = mooncake_core(page, cap)
        print(f"  page {page:>2} cap {str(cap):>9}: {_fmt(us)}  cached {total:,}")

    if not args.skip_process:
        print("(ii) whole `radixsim replay` process (import + parse + replay + write), best of 3")
        for page, cap in ((16, 2_000_000), (1, 2_000_000), (64, 500_000), (16, None)):
            best = float("inf")
            for _ in range(3):
                with tempfile.TemporaryDirectory() as out:
                    cmd = [sys.executable, "-m", "radixsim", "replay", str(TRACE), "--page-size", str(page),
                           "--out", out, "--no-progress"]
                    if cap is not None:
                        cmd += ["--capacity-tokens", str(cap)]
                    t0 = time.perf_counter()
                    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
                    best = min(best, time.perf_counter() - t0)
            print(f"  page {page:>2} cap {str(cap):>9}: {best:.2f} s = {best / 3993 * 1e3:.3f} ms/request "
                  f"({best / 3993 * 1e3 / 1.3 * 100:.0f}% of SGLang's 1.3 ms)")


if __name__ == "__main__":
    main()
