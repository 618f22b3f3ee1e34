"""Cost of generating a multi-turn workload (scenarios/workloads.py).

Generates every request of the default workload (48 clients x 60 rounds, 4096 new + 16
output tokens per round, page size 64: the DeepSeek-V4-Flash experiment of SPEC.md 5),
touching each request's prompt, output and page keys, and prints the total prompt tokens
(checked against the closed form), the wall time and the peak RSS of the process.

    python benchmarks/bench_workloads.py [--clients 48] [--rounds 60] [--request-length 4096]
                                         [--output-length 16] [--page-size 64] [--no-barrier]
"""
from __future__ import annotations

import argparse
import pathlib
import resource
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scenarios.workloads import MultiTurnConfig, MultiTurnWorkload  # noqa: E402


def _peak_rss_mib() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux (bytes on macOS)
    return kib / (1024 * 1024) if sys.platform == "darwin" else kib / 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--request-length", type=int, default=4096)
    ap.add_argument("--output-length", type=int, default=16)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--no-barrier", action="store_true")
    a = ap.parse_args(argv)
    cfg = MultiTurnConfig(num_clients=a.clients, num_rounds=a.rounds, request_length=a.request_length,
                          output_length=a.output_length, page_size=a.page_size,
                          round_barrier=not a.no_barrier)
    rss0 = _peak_rss_mib()
    t0 = time.perf_counter()
    w = MultiTurnWorkload(cfg)
    n = prompt_tokens = keys = 0
    for q in w:
        n += 1
        prompt_tokens += len(q.prompt)
        keys += len(q.page_keys)
        assert len(q.output) == cfg.output_length
    wall = time.perf_counter() - t0
    expect = w.total_prompt_tokens()
    if prompt_tokens != expect:
        print(f"MISMATCH: generated {prompt_tokens:,} prompt tokens, closed form {expect:,}")
        return 1
    new_tokens = cfg.num_clients * (cfg.max_prompt_tokens + cfg.output_length)
    print(f"workload: {cfg.num_clients} clients x {cfg.num_rounds} rounds, {cfg.request_length} new + "
          f"{cfg.output_length} output tokens/round, page size {cfg.page_size}, "
          f"round_barrier={cfg.round_barrier}")
    print(f"requests:            {n:,}")
    print(f"total prompt tokens: {prompt_tokens:,} (= closed form)")
    print(f"tokens generated:    {new_tokens:,} (each client's history once); {keys:,} page keys handed out")
    print(f"wall time:           {wall:.3f} s ({wall / n * 1e6:.0f} us/request)")
    print(f"peak RSS:            {_peak_rss_mib():.1f} MiB (after imports: {rss0:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
