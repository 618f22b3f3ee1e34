"""The result schema (DESIGN.md): one run = one directory, the same files for every mode.

- ``config.yaml``: the fully resolved configuration plus provenance;
- ``requests.csv``: one row per request, columns `REQUEST_COLUMNS` in this order;
- ``summary.json``: totals and rates (`SUMMARY_KEYS` first; fields a mode cannot measure
  are null, e.g. the time fields of clockless replay).

Every file goes through `outputs.write` (plain numbers only), into a directory from
`outputs.result_dir` (renamed into place once the run is complete).
"""
from __future__ import annotations

import platform
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from . import __version__
from .outputs import write

REQUEST_COLUMNS = [
    "rid", "session_id", "round", "arrival_s", "start_s", "first_token_s", "finish_s",
    "ttft_s", "queue_s", "load_s", "compute_s", "prompt_tokens", "output_tokens",
    "cached_tokens", "cached_device", "cached_host", "cached_storage", "evicted_tokens",
    "rejected",
    # beyond DESIGN.md's columns: the miss split (cold = never cached before)
    "cold_tokens", "evicted_miss_tokens",
]
SUMMARY_KEYS = [
    "requests", "total_prompt_tokens", "total_cached_tokens", "hit_rate", "hit_rate_device",
    "hit_rate_host", "hit_rate_storage", "hit_rate_last10", "effective_input_tps",
    "duration_s", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s",
    "e2e_p50_s", "rejected",
]


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent.parent
    if not (here / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance(seed=None, command: str | None = None) -> dict:
    """Versions, commit and command line, for config.yaml."""
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("simpy", "torch"):
        m = sys.modules.get(mod)
        v = getattr(m, "__version__", None) if m else None
        versions[mod] = None if v is None else str(v)  # torch's is a str subclass YAML cannot write
    return {
        "radixsim_version": __version__,
        "git_commit": _git_commit(),
        "versions": versions,
        "command": command if command is not None else shlex.join(["radixsim"] + sys.argv[1:]),
        "seed": seed,
    }


def write_config(out: Path, config: dict, seed=None, command: str | None = None) -> None:
    doc = dict(config)
    doc["provenance"] = provenance(seed, command)
    write(out / "config.yaml", doc)


def write_requests(out: Path, rows) -> None:
    """`rows`: iterable of dicts keyed by REQUEST_COLUMNS (missing keys are empty cells)."""
    write(out / "requests.csv", rows, columns=REQUEST_COLUMNS)


def write_summary(out: Path, summary: dict) -> None:
    ordered = {k: summary.get(k) for k in SUMMARY_KEYS}
    ordered.update({k: v for k, v in summary.items() if k not in ordered})
    write(out / "summary.json", ordered)


def rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


ROUND_COLUMNS = ["round", "requests", "prompt_tokens", "cached_tokens", "hit_rate", "hit_rate_device",
                 "hit_rate_host", "hit_rate_storage", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s"]


def _tier_split(rows) -> tuple:
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cached_tokens"] for r in rows)
    dev = sum(r["cached_device"] for r in rows)
    host = sum(r["cached_host"] for r in rows)
    sto = sum(r["cached_storage"] for r in rows)
    return prompt, cached, rate(cached, prompt), rate(dev, prompt), rate(host, prompt), rate(sto, prompt)


def round_table(rows) -> list:
    """Per-round sums and hit rates (empty when requests have no round). Time columns are
    filled only when rows carry ttft_s."""
    by: dict = {}
    for r in rows:
        if r.get("round") is not None:
            by.setdefault(r["round"], []).append(r)
    out = []
    for rnd in sorted(by):
        rs = by[rnd]
        prompt, cached, hit, dev, host, sto = _tier_split(rs)
        t = [r["ttft_s"] for r in rs if r.get("ttft_s") is not None]
        out.append({"round": rnd, "requests": len(rs), "prompt_tokens": prompt, "cached_tokens": cached,
                    "hit_rate": hit, "hit_rate_device": dev, "hit_rate_host": host, "hit_rate_storage": sto,
                    "ttft_mean_s": float(np.mean(t)) if t else None,
                    "ttft_p50_s": float(np.percentile(t, 50)) if t else None,
                    "ttft_p90_s": float(np.percentile(t, 90)) if t else None})
    return out


def write_rounds(out: Path, rounds) -> None:
    write(out / "rounds.csv", rounds, columns=ROUND_COLUMNS)


def totals(rows, rounds) -> dict:
    """The hit-rate part of summary.json (hit_rate_last10 over the last 10 rounds)."""
    prompt, cached, hit, dev, host, sto = _tier_split(rows)
    last = None
    if rounds:
        tail = rounds[-10:]
        last = rate(sum(r["cached_tokens"] for r in tail), sum(r["prompt_tokens"] for r in tail))
    return {"requests": len(rows), "total_prompt_tokens": prompt, "total_cached_tokens": cached,
            "hit_rate": hit, "hit_rate_device": dev, "hit_rate_host": host, "hit_rate_storage": sto,
            "hit_rate_last10": last}
