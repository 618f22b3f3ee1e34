"""`radixsim curve`: hit rate at every capacity, per policy.

LRU comes from one stack-distance pass (`cache_core/stack_curve.py`, approximate where
SGLang's rules interfere: docs/policy_lab.md); every other policy (and the `belady-node`
heuristic, whose prefix-constrained form is not a stack algorithm) from one exact replay per capacity in
a process pool (`radixsim/workers.py`). `--check K` also replays LRU exactly at K of the
capacities and records the largest difference. Writes curve.csv, curve.json and curve.png/.svg.
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from cache_core.stack_curve import LruCurve

from .outputs import write
from .replay import ReplayOptions, no_requests, request_stream, run_replay
from .workers import process_map

COLUMNS = ["policy", "capacity_tokens", "hit_rate", "method"]


def lru_curve(opts: ReplayOptions, progress: bool = False) -> LruCurve:
    """The one-pass LRU curve of the requests `opts` names (a progress bar on a TTY); ValueError
    when it names none."""
    requests = request_stream(opts)
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        requests = tqdm(requests, unit="req", desc="stack pass", file=sys.stderr, mininterval=0.5)
    curve = LruCurve(requests, opts.page_size)
    if curve.requests == 0:  # as `run` and `replay`: an empty trace is bad input, not an empty curve
        raise no_requests(opts)
    return curve


def default_capacities(curve: LruCurve, points: int) -> list[int]:
    """`points` capacities, geometric from 1% of the working set (every page ever cached) to all of it."""
    P = curve.page_size
    top = max(2, curve.pages)
    pages = np.unique(np.geomspace(max(1, top // 100), top, max(points, 1)).round().astype(np.int64))
    return [int(p) * P for p in pages]


def replay_hit_rate(args) -> tuple[float, float]:
    """(hit rate, seconds) of one exact replay (a process-pool item: (options,))."""
    (opts,) = args
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="radixsim-curve-") as tmp:
        s = run_replay(dataclasses.replace(opts, progress=False, miss_split=False), Path(tmp) / "run")
    return s["hit_rate"], time.perf_counter() - t0


def replay_points(items, jobs: int, label: str = "replays", progress: bool = False) -> list:
    """(hit rate, seconds) per (options, policy, capacity) item, in order, `jobs` at a time."""
    work = [(dataclasses.replace(opts, policy=p, capacity_tokens=c),) for opts, p, c in items]
    out = []
    it = process_map(replay_hit_rate, work, jobs) if jobs > 1 else map(replay_hit_rate, work)
    for i, r in enumerate(it):
        out.append(r)
        if progress and sys.stderr.isatty():
            sys.stderr.write(f"\r{label}: {i + 1}/{len(work)} ")
    if progress and sys.stderr.isatty() and work:
        sys.stderr.write("\n")
    return out


def run_curve(opts: ReplayOptions, policies, capacities=None, points: int = 20, out_dir=None,
              jobs: int = 1, check: int = 0, progress: bool = False) -> dict:
    """The curve document ({"rows": [...], "check": {...}, ...}); written to out_dir when given."""
    t0 = time.perf_counter()
    curve = lru_curve(opts, progress)
    stack_s = time.perf_counter() - t0
    caps = sorted(set(capacities)) if capacities else default_capacities(curve, points)
    rows = [{"policy": "lru", "capacity_tokens": c, "hit_rate": curve.hit_rate(c), "method": "stack"}
            for c in caps] if "lru" in policies else []
    others = [(p, c) for p in policies if p != "lru" for c in caps]
    exact = replay_points([(opts, p, c) for p, c in others], jobs, progress=progress)
    for (p, c), (h, _) in zip(others, exact):
        rows.append({"policy": p, "capacity_tokens": c, "hit_rate": h, "method": "replay"})
    doc = {"page_size": opts.page_size, "requests": curve.requests, "prompt_tokens": curve.prompt_tokens,
           "working_set_tokens": curve.pages * opts.page_size, "longest_tokens": curve.longest_tokens,
           "stack_pass_s": stack_s, "rows": rows}
    if check:
        doc["check"] = check_against_replay(opts, curve, caps, check, jobs, progress)
    if out_dir is not None:
        write_curve(doc, out_dir)
    return doc


def check_against_replay(opts: ReplayOptions, curve: LruCurve, caps, k: int, jobs: int,
                         progress: bool = False) -> dict:
    """Exact LRU replays at k capacities spread over `caps`; the largest |curve - replay| in points."""
    idx = np.unique(np.linspace(0, len(caps) - 1, min(k, len(caps))).round().astype(int))
    picked = [caps[i] for i in idx]
    exact = replay_points([(opts, "lru", c) for c in picked], jobs, "check", progress)
    points = [{"capacity_tokens": c, "curve": curve.hit_rate(c), "replay": h, "replay_s": s}
              for c, (h, s) in zip(picked, exact)]
    worst = max((abs(p["curve"] - p["replay"]) * 100 for p in points), default=0.0)
    return {"points": points, "max_diff_points": worst}


def write_curve(doc: dict, out_dir) -> list[Path]:
    """curve.csv, curve.json and the figure (curve.png/.svg: one line per policy, OPT dashed)."""
    import pandas as pd

    from analysis.figures import policy_figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "curve.csv", doc["rows"], columns=COLUMNS)
    write(out / "curve.json", doc)
    policy_figure(pd.DataFrame(doc["rows"]), out / "curve")
    return [out / "curve.csv", out / "curve.json", out / "curve.png"]
