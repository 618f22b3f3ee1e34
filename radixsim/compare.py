"""Policy x capacity comparison for `radixsim replay --policy a,b --capacity-tokens N1,N2`.

Every combination is an ordinary result directory under OUT (``POLICY-cap=N``); OUT gets
`comparison.csv` with one row per combination, and a table is printed (hit rates by tier,
the cold/evicted miss split, rejected requests). OUT is written whole, as a run's
(`outputs.result_dir(..., kind="comparison")`): it then holds exactly this comparison.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from .outputs import result_dir, write
from .replay import ReplayOptions, run_replay
from .workers import process_map

COLUMNS = ["policy", "capacity_tokens", "hit_rate", "hit_rate_device", "hit_rate_host", "hit_rate_storage",
           "cold_miss_rate", "evicted_miss_rate", "total_cached_tokens", "rejected", "dir"]


def _one(args):
    opts, out, command = args
    return run_replay(opts, out, command=command)


def _name(policy: str, cap) -> str:
    return f"{policy}-cap={'unbounded' if cap is None else cap}"


def run_comparison(opts: ReplayOptions, policies, capacities, out_dir, jobs: int = 1, command=None) -> str:
    with result_dir(out_dir, kind="comparison") as out:
        return _compare_into(opts, policies, capacities, out, jobs, command)


def _compare_into(opts: ReplayOptions, policies, capacities, out: Path, jobs: int, command) -> str:
    combos = [(p, c) for c in capacities for p in policies]
    work = [(dataclasses.replace(opts, policy=p, capacity_tokens=c, progress=False), out / _name(p, c), command)
            for p, c in combos]
    if jobs > 1:
        summaries = list(process_map(_one, work, jobs))
    else:
        summaries = []
        for i, w in enumerate(work):
            if sys.stderr.isatty():
                sys.stderr.write(f"\r[{i + 1}/{len(work)}] {w[1].name} ")
            summaries.append(_one(w))
        if sys.stderr.isatty():
            sys.stderr.write("\n")
    rows = []
    for (p, c), s, w in zip(combos, summaries, work):
        prompt = s["total_prompt_tokens"] or 1
        rows.append({"policy": p, "capacity_tokens": c, "hit_rate": s["hit_rate"],
                     "hit_rate_device": s["hit_rate_device"], "hit_rate_host": s["hit_rate_host"],
                     "hit_rate_storage": s["hit_rate_storage"],
                     "cold_miss_rate": s.get("cold_miss_tokens", 0) / prompt if "cold_miss_tokens" in s else None,
                     "evicted_miss_rate": (s["evicted_miss_tokens"] / prompt) if "evicted_miss_tokens" in s else None,
                     "total_cached_tokens": s["total_cached_tokens"], "rejected": s["rejected"], "dir": w[1].name})
    write(out / "comparison.csv", rows, columns=COLUMNS)
    return format_table(rows)


def format_table(rows) -> str:
    def pct(v):
        return "   -  " if v is None else f"{100 * v:6.2f}"

    head = (f"{'policy':<10} {'capacity':>12}  {'hit %':>6} {'dev %':>6} {'host %':>6} {'stor %':>6} "
            f"{'cold %':>6} {'evict%':>6} {'rejected':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        label = "belady-node*" if r["policy"] == "belady-node" else r["policy"]
        cap = "unbounded" if r["capacity_tokens"] is None else f"{r['capacity_tokens']:,}"
        lines.append(f"{label:<10} {cap:>12}  {pct(r['hit_rate'])} {pct(r['hit_rate_device'])} "
                     f"{pct(r['hit_rate_host'])} {pct(r['hit_rate_storage'])} {pct(r['cold_miss_rate'])} "
                     f"{pct(r['evicted_miss_rate'])} {r['rejected']:>8}")
    if any(r["policy"] == "belady-node" for r in rows):
        lines.append("* belady-node = node-level furthest next use: offline, a heuristic, not a bound")
    return "\n".join(lines)
