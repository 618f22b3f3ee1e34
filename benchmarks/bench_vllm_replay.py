"""Replay speed of radixsim's vLLM flavour (cache_core/vllm_blocks.py) against vLLM 0.33.0's own
v1 core (tools/vllm_ref: KVCacheManager + BlockPool) on the same trace, in the same session,
and the per-request differences (cached tokens, refusals, evicted blocks), which must be 0.
With --l2-tokens: vLLM's CPU KV offloading connector too (cache_core/vllm_offload.py against
tools/vllm_ref/run_vllm_offload.py: OffloadingConnectorScheduler + CPUOffloadingManager); the
differences then cover GPU hits, CPU hits, refusals, GPU evictions, CPU stores and CPU evictions.

Both sides read the trace first (radixsim: scenarios.traces.JsonlTrace; vLLM: the harness's
reader) and time only the request loop.

usage: python benchmarks/bench_vllm_replay.py [--trace scenarios/data/mooncake_synthetic_trace.jsonl]
           [--capacity-tokens 200000] [--block-size 16] [--venv ~/.cache/vllm-ref]
           [--l2-tokens 400000 [--offload-block-size 16] [--policy lru|arc]]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cache_core.vllm_blocks import VllmBlockCache  # noqa: E402
from cache_core.vllm_offload import VllmOffloadCache  # noqa: E402
from cache_core.vllm_offload_policies import POLICIES  # noqa: E402
from radixsim.replay import FreshTokens  # noqa: E402
from radixsim.replay_vllm import num_blocks  # noqa: E402
from scenarios.traces import JsonlTrace  # noqa: E402

DRIVER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import run_vllm_blocks as h
trace, bs, nb = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
reqs = list(h.read_trace(trace))
rp = h.Replayer(bs, nb)
t0 = time.perf_counter()
rows = [rp.run_one(*r) for r in reqs]
wall = time.perf_counter() - t0
json.dump({"wall_s": wall, "rows": [[r["cached_tokens"], r["oom"], len(r["evicted_blocks"])] for r in rows]}, sys.stdout)
"""
OFFLOAD_DRIVER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import run_vllm_offload as h
trace, bs, nb, chunks, bpc, pol = sys.argv[2], *map(int, sys.argv[3:7]), sys.argv[7]
reqs = list(h.read_trace(trace))
rp = h.OffloadReplayer(bs, nb, chunks, bpc, pol)
t0 = time.perf_counter()
rows = [rp.run_one(*r) for r in reqs]
wall = time.perf_counter() - t0
json.dump({"wall_s": wall, "rows": [[r["gpu_hit"], r["cpu_hit"], r["oom"], len(r["evicted"]), len(r["stored"]),
                                     len(r["cpu_evicted"])] for r in rows]}, sys.stdout)
"""


def _requests(trace: str):
    fresh = FreshTokens()
    return [(r.prompt, r.output_tokens if r.output_tokens is not None else fresh.take(r.output_length or 0))
            for r in JsonlTrace(trace) if hasattr(r, "prompt")]


def ours_offload(trace: str, bs: int, nb: int, chunks: int, bpc: int, policy: str):
    reqs = _requests(trace)
    cache = VllmOffloadCache(bs, nb, chunks, bpc, policy)
    t0 = time.perf_counter()
    rows = []
    for p, o in reqs:
        r = cache.step(p, o)
        rows.append([r.gpu_hit, r.cpu_hit, r.rejected, len(r.gpu_evicted), len(r.stored), len(r.cpu_evicted)])
    return time.perf_counter() - t0, rows


def ours(trace: str, bs: int, nb: int):
    reqs = _requests(trace)
    cache = VllmBlockCache(bs, nb)
    t0 = time.perf_counter()
    rows = []
    for p, o in reqs:
        r = cache.step(p, o)
        rows.append([r.cached_tokens, r.rejected, r.evicted_tokens // bs])
    return time.perf_counter() - t0, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "scenarios" / "data" / "mooncake_synthetic_trace.jsonl"))
    ap.add_argument("--capacity-tokens", type=int, default=200_000)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--venv", default=os.environ.get("RADIXSIM_VLLM_REF_VENV",
                                                     str(pathlib.Path.home() / ".cache" / "vllm-ref")))
    ap.add_argument("--l2-tokens", type=int, default=None, help="CPU offload capacity (default: no L2)")
    ap.add_argument("--offload-block-size", type=int, default=None, help="tokens per CPU offload block")
    ap.add_argument("--policy", default="lru", choices=POLICIES, help="the CPU offload's eviction policy")
    args = ap.parse_args(argv)
    nb = num_blocks(args.capacity_tokens, args.block_size)
    py = pathlib.Path(args.venv) / "bin" / "python"
    if not py.exists():
        sys.stderr.write(f"bench_vllm_replay: --venv: no {py}; expected tools/vllm_ref/setup_venv.sh's venv\n")
        return 2
    if args.l2_tokens is not None:
        return offload(args, py, nb)
    run = subprocess.run([str(py), "-W", "ignore", "-c", DRIVER, str(ROOT / "tools" / "vllm_ref"), args.trace,
                          str(args.block_size), str(nb)], capture_output=True, text=True, cwd=ROOT / "tools" / "vllm_ref")
    if run.returncode:
        sys.stderr.write(run.stderr[-2000:])
        return 1
    ref = json.loads(run.stdout)
    wall, rows = ours(args.trace, args.block_size, nb)
    diff = sum(a != b for a, b in zip(rows, ref["rows"])) + abs(len(rows) - len(ref["rows"]))
    n = len(rows)
    print(f"trace {pathlib.Path(args.trace).name}: {n} requests, block size {args.block_size}, "
          f"{nb - 1} blocks ({args.capacity_tokens} tokens); {sum(r[0] for r in rows):,} cached tokens, "
          f"{sum(r[2] for r in rows):,} blocks evicted")
    print(f"vLLM 0.33.0 KVCacheManager: {ref['wall_s']:.2f} s ({1e6 * ref['wall_s'] / n:.0f} us/request)")
    print(f"radixsim vllm flavour:      {wall:.2f} s ({1e6 * wall / n:.0f} us/request), "
          f"{ref['wall_s'] / wall:.1f}x faster")
    print(f"requests that differ (cached tokens, refused, evicted blocks): {diff}")
    return 1 if diff else 0


def offload(args, py, nb: int) -> int:
    """The --l2-tokens comparison: both sides with vLLM's CPU offloading connector."""
    tpc = args.offload_block_size or args.block_size
    if tpc % args.block_size or args.l2_tokens < tpc:
        sys.stderr.write(f"bench_vllm_replay: --offload-block-size {tpc}: expected a multiple of --block-size "
                         f"{args.block_size}, at most --l2-tokens {args.l2_tokens}\n")
        return 2
    chunks, bpc = args.l2_tokens // tpc, tpc // args.block_size
    run = subprocess.run([str(py), "-W", "ignore", "-c", OFFLOAD_DRIVER, str(ROOT / "tools" / "vllm_ref"), args.trace,
                          str(args.block_size), str(nb), str(chunks), str(bpc), args.policy],
                         capture_output=True, text=True, cwd=ROOT / "tools" / "vllm_ref")
    if run.returncode:
        sys.stderr.write(run.stderr[-2000:])
        return 1
    ref = json.loads(run.stdout)
    wall, rows = ours_offload(args.trace, args.block_size, nb, chunks, bpc, args.policy)
    diff = sum(a != b for a, b in zip(rows, ref["rows"])) + abs(len(rows) - len(ref["rows"]))
    n = len(rows)
    print(f"trace {pathlib.Path(args.trace).name}: {n} requests, block size {args.block_size}, {nb - 1} GPU blocks "
          f"({args.capacity_tokens} tokens), {chunks} CPU chunks of {tpc} tokens ({args.policy}); "
          f"{sum(r[0] for r in rows):,} GPU-hit tokens, {sum(r[1] for r in rows):,} CPU-hit tokens, "
          f"{sum(r[4] for r in rows):,} chunks stored, {sum(r[5] for r in rows):,} CPU chunks evicted")
    print(f"vLLM 0.33.0 KVCacheManager + OffloadingConnectorScheduler: {ref['wall_s']:.2f} s "
          f"({1e6 * ref['wall_s'] / n:.0f} us/request)")
    print(f"radixsim vllm flavour + vllm_offload: {wall:.2f} s ({1e6 * wall / n:.0f} us/request), "
          f"{ref['wall_s'] / wall:.1f}x faster")
    print(f"requests that differ (GPU hit, CPU hit, refused, GPU evicted, stored, CPU evicted): {diff}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
