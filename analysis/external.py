"""A real SGLang run as a `Run`: the JSONL log of SGLang's ``benchmark/hicache/bench_multiturn.py``.

Format read from ``benchmark/hicache/bench_multiturn.py`` of the Kangyan-Zhou/sglang fork of
sgl-project/sglang at commit 2f1c2a608f6498d8015ede4ea35f54b3b608803d (the newest stored
version; the stored upstream copies, sgl-project/sglang 028e262d and 1d651e28, are older and
write the same line with fewer summary keys and no per-round part). After each run at one
request rate, ``log_to_jsonl_file`` appends ONE line to ``--log-file`` (default
``performance_metrics.jsonl``; the script's auto-run appends one line per request rate,
16, 14, ..., 1)::

    {"timestamp": "2025-...T...", "tag": "<--tag>",
     "summary": {"total_requests", "request_rate", "average_prompt_len", "average_output_len",
                 "p90_prompt_len", "p99_prompt_len", "p90_output_len", "p99_output_len",
                 "average_ttft", "p90_ttft", "p99_ttft", "median_ttft", "max_ttft",
                 "average_latency", "p90_latency", "p99_latency", "median_latency", "max_latency",
                 "input_token_throughput", "output_token_throughput", "throughput",
                 "cache_hit_rate"},
     "round": {"round_0": {"average_ttft", "cache_hit_rate", "request_count"}, ...}}

Seconds throughout (TTFT from a streaming client: first non-empty chunk). ``round`` exists
only with ``--enable-round-barrier``; its rounds are 0-based (``round_0`` = radixsim's round
1) and a round without requests has ``average_ttft`` 0 and ``cache_hit_rate`` 0 (read here
as missing). Percentiles there are ``sorted(x)[int(q * n)]`` (no interpolation).
``cache_hit_rate`` = sum of the server's ``cached_tokens`` / sum of prompt lengths;
``throughput`` = requests / (finish - start) seconds, so duration = total_requests / throughput.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from .runs import Run
from .metrics import ROUND_COLUMNS

SUMMARY_MAP = {  # radixsim summary key <- bench_multiturn summary key
    "requests": "total_requests",
    "hit_rate": "cache_hit_rate",
    "ttft_mean_s": "average_ttft",
    "ttft_p50_s": "median_ttft",
    "ttft_p90_s": "p90_ttft",
    "ttft_p99_s": "p99_ttft",
    "e2e_p50_s": "median_latency",
    "effective_input_tps": "input_token_throughput",
}
_ROUND_KEY = re.compile(r"round_(\d+)$")


def read_log(path) -> list:
    """Every record of a bench_multiturn JSONL log, in file order. ValueError (one line,
    naming FILE:LINE) for an unreadable line or a record without a 'summary' object."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: {'is a directory' if p.is_dir() else 'no such file'}; expected a bench_multiturn JSONL log (--log-file)")
    records = []
    with open(p, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{lineno}: not valid JSON ({e.msg}); expected one bench_multiturn "
                                 "record per line") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("summary"), dict):
                raise ValueError(f"{p}:{lineno}: expected an object with a 'summary' object "
                                 "(a bench_multiturn record)")
            rec["_line"] = lineno
            records.append(rec)
    if not records:
        raise ValueError(f"{p}: empty; expected at least one bench_multiturn record")
    return records


def _num(v, where: str):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}: expected a number, got {v!r}")
    return v


def _rounds(rec: dict, where: str) -> pd.DataFrame | None:
    part = rec.get("round")
    if part is None:
        return None
    if not isinstance(part, dict):
        raise ValueError(f"{where}: 'round' must be an object of round_N entries")
    rows = []
    for key, val in part.items():
        m = _ROUND_KEY.match(key)
        if m is None or not isinstance(val, dict):
            raise ValueError(f"{where}: round entry {key!r}: expected 'round_N': {{...}}")
        n = _num(val.get("request_count"), f"{where}: {key}.request_count") or 0
        empty = n == 0
        ttft = _num(val.get("average_ttft"), f"{where}: {key}.average_ttft")
        hit = _num(val.get("cache_hit_rate"), f"{where}: {key}.cache_hit_rate")
        row = {c: np.nan for c in ROUND_COLUMNS}
        row.update({"round": int(m.group(1)) + 1, "requests": n,
                    "hit_rate": np.nan if empty or hit is None else float(hit),
                    "ttft_mean_s": np.nan if empty or ttft is None else float(ttft)})
        rows.append(row)
    return pd.DataFrame(rows, columns=ROUND_COLUMNS).sort_values("round").reset_index(drop=True).astype(float)


def _pick(records: list, path: Path, index: int | None, tag: str | None) -> dict:
    if tag is not None:
        hits = [r for r in records if r.get("tag") == tag]
        if not hits:
            tags = sorted({str(r.get("tag")) for r in records})
            raise ValueError(f"{path}: no record with tag {tag!r}; tags present: {', '.join(tags)}")
        records = hits
    i = -1 if index is None else index
    if not -len(records) <= i < len(records):
        raise ValueError(f"{path}: record {i} out of range; the log holds {len(records)} record(s)")
    return records[i]


def load_bench_multiturn(path, *, index: int | None = None, tag: str | None = None,
                         label: str | None = None) -> Run:
    """One record of a bench_multiturn log as a `Run` (mode 'sglang'): the last one unless
    `tag` (the --tag) and/or `index` (0-based among the matching records, negative from
    the end) pick another. The summary is mapped to radixsim names (`SUMMARY_MAP`;
    tier hit rates are unknown: None), duration_s = total_requests / throughput; per-round
    rows (round 1-based) when the run used --enable-round-barrier; no per-request rows."""
    p = Path(path)
    rec = _pick(read_log(p), p, index, tag)
    where = f"{p}:{rec['_line']}"
    raw = rec["summary"]
    summary = {k: _num(raw.get(src), f"{where}: summary.{src}") for k, src in SUMMARY_MAP.items()}
    summary.update({"mode": "sglang", "hit_rate_device": None, "hit_rate_host": None, "hit_rate_storage": None})
    tput = _num(raw.get("throughput"), f"{where}: summary.throughput")
    n = summary["requests"]
    summary["duration_s"] = n / tput if n and tput else None
    summary["sglang"] = {k: v for k, v in raw.items()}
    rec_tag = rec.get("tag") or None
    rate = raw.get("request_rate")
    name = p.stem + (f" [{rec_tag}]" if rec_tag else "")
    if isinstance(rate, (int, float)):
        name += f" @{rate:g} req/s"
    config = {"mode": "sglang", "name": name, "source": str(p), "line": rec["_line"], "tag": rec_tag,
              "timestamp": rec.get("timestamp"), "request_rate": rate}
    return Run(name=name, label=label or (f"SGLang {rec_tag}" if rec_tag else f"SGLang {p.stem}"),
               config=config, summary=summary, requests=None, rounds=_rounds(rec, where), timeline=None,
               tree=None, mode="sglang", path=p)


__all__ = ["load_bench_multiturn", "read_log", "SUMMARY_MAP"]
