"""`radixsim curve`'s LRU stack pass vs one exact replay (target: at most 2x one replay).

Times, best of --repeat runs each, (a) the one-pass LRU curve read at --points capacities and
(b) one LRU replay of the same trace at the middle capacity (no miss split, results written to
a temporary directory, as `radixsim curve` does for its replays), and prints both and the ratio.

    python benchmarks/bench_curve.py [TRACE] [--page-size 16] [--points 50] [--repeat 3]
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from radixsim.curve import default_capacities, lru_curve, replay_hit_rate  # noqa: E402
from radixsim.replay import ReplayOptions  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(ROOT / "scenarios" / "data" / "mooncake_synthetic_trace.jsonl"))
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--points", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    opts = ReplayOptions(trace=a.trace, page_size=a.page_size, progress=False)
    curve_s, replay_s = [], []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        curve = lru_curve(opts)
        caps = default_capacities(curve, a.points)
        rates = [curve.hit_rate(c) for c in caps]
        curve_s.append(time.perf_counter() - t0)
        mid = caps[len(caps) // 2]
        hit, s = replay_hit_rate((ReplayOptions(trace=a.trace, page_size=a.page_size, capacity_tokens=mid,
                                                progress=False),))
        replay_s.append(s)
    print(f"{curve.requests} requests, page size {a.page_size}: curve at {len(caps)} capacities "
          f"{min(curve_s):.2f} s; one replay (capacity {mid:,}, hit {100 * hit:.2f}% vs curve "
          f"{100 * rates[len(caps) // 2]:.2f}%) {min(replay_s):.2f} s; ratio {min(curve_s) / min(replay_s):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
