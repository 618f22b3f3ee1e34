"""Result directories -> `Run` objects (DESIGN.md "Result schema"). Reads files only.

A result directory holds ``config.yaml``, ``requests.csv`` and ``summary.json`` (required),
``rounds.csv`` and ``timeline.csv`` (when the workload has rounds / the mode has a clock) and
optionally ``tree.json`` (a `cache_core.snapshot` dump). Anything missing or malformed raises
a `ValueError` whose message is one line naming the file and what was expected.

The metrics (per-round table, hit rate by tier, percentiles, links, evictions, TTFT split)
live in `analysis/metrics.py` and are re-exported here.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd

from .runs import Run, flatten  # noqa: F401  (re-exported)

REQUIRED_REQUEST_COLUMNS = ("rid", "prompt_tokens", "cached_tokens")
REQUIRED_ROUND_COLUMNS = ("round", "prompt_tokens", "cached_tokens", "hit_rate")
TEXT_COLUMNS = ("session_id", "events")  # session ids: any id type; timeline events: ";"-joined indices; every other column is numeric


def _read_json(path: Path, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); expected {what}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; expected {what}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected {what} (a JSON object), got {type(doc).__name__}")
    return doc


def _read_yaml(path: Path) -> dict:
    from scenarios.yamlfile import read_mapping

    try:
        return read_mapping(path, "the run's resolved configuration")
    except FileNotFoundError:
        raise ValueError(f"{path}: missing; expected the run's resolved configuration") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None


def read_csv(path: Path, required=(), text_columns=TEXT_COLUMNS) -> pd.DataFrame:
    """A result CSV with numeric columns (empty cells -> NaN). ValueError names the file and
    the problem: unreadable, missing columns, or a non-numeric cell (with its line)."""
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: empty file; expected a CSV header line") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path}: not a readable CSV ({first})") from None
    df = df.fillna("")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected at least {', '.join(required)}")
    for col in df.columns:
        if col in text_columns:
            df[col] = df[col].where(df[col] != "", None)
            continue
        raw = df[col].str.strip()
        num = pd.to_numeric(raw.where(raw != "", None), errors="coerce")
        bad = num.isna() & (raw != "")
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(f"{path}:{i + 2}: column {col!r}: expected a number or an empty cell, "
                             f"got {df[col].iloc[i]!r}")
        df[col] = num
    return df


def load_run(run_dir, label: str | None = None) -> Run:
    """Read one result directory into a `Run`. ValueError (one line) when the directory or
    a required file is missing or malformed."""
    p = Path(run_dir)
    if not p.exists():
        raise ValueError(f"{p}: no such result directory; expected a directory with config.yaml, "
                         "requests.csv and summary.json")
    if not p.is_dir():
        raise ValueError(f"{p}: not a directory; expected a result directory with config.yaml, "
                         "requests.csv and summary.json")
    for name in ("summary.json", "requests.csv", "config.yaml"):
        if not (p / name).is_file():
            raise ValueError(f"{p / name}: missing; expected a result directory written by "
                             "radixsim run/replay (config.yaml, requests.csv, summary.json)")
    summary = _read_json(p / "summary.json", "the run's summary")
    config = _read_yaml(p / "config.yaml")
    requests = read_csv(p / "requests.csv", REQUIRED_REQUEST_COLUMNS)
    rounds = read_csv(p / "rounds.csv", REQUIRED_ROUND_COLUMNS) if (p / "rounds.csv").is_file() else None
    timeline = read_csv(p / "timeline.csv", ("t_s",)) if (p / "timeline.csv").is_file() else None
    tree = None
    if (p / "tree.json").is_file():
        tree = _read_json(p / "tree.json", "a tree snapshot (cache_core.snapshot)")
        if not isinstance(tree.get("nodes"), list):
            raise ValueError(f"{p / 'tree.json'}: expected a 'nodes' list (a cache_core.snapshot dump)")
    mode = str(summary.get("mode") or config.get("mode") or "unknown")
    name = str(config.get("name") or p.name)
    return Run(name=name, label=label or name, config=config, summary=summary, requests=requests,
               rounds=rounds, timeline=timeline, tree=tree, mode=mode, path=p)


def load_any(source, label: str | None = None) -> Run:
    """A `Run` from a result directory, a bench_multiturn JSONL log (analysis/external.py),
    or an already loaded Run (relabelled when `label` is given)."""
    if isinstance(source, Run):
        return dataclasses.replace(source, label=label) if label else source
    p = Path(source)
    if p.is_file() and p.suffix in (".jsonl", ".json"):
        from .external import load_bench_multiturn

        return load_bench_multiturn(p, label=label)
    return load_run(p, label)


def load_runs(sources, labels=None) -> list:
    """Several runs with distinct labels: given `labels`, else each run's name, falling back
    to its directory name (then a numeric suffix) where names repeat. Runs passed in are
    relabelled as copies, never changed."""
    sources = list(sources)
    if labels is not None and len(labels) != len(sources):
        raise ValueError(f"--labels: got {len(labels)} label(s) for {len(sources)} run(s); expected one per run")
    runs = [load_any(s, labels[i] if labels else None) for i, s in enumerate(sources)]
    if labels:
        return runs
    names = [r.label for r in runs]
    runs = [dataclasses.replace(r, label=r.path.name) if names.count(r.label) > 1 and r.path is not None else r
            for r in runs]
    seen: dict = {}
    for i, r in enumerate(runs):
        k = seen[r.label] = seen.get(r.label, 0) + 1
        if k > 1:
            runs[i] = dataclasses.replace(r, label=f"{r.label} ({k})")
    return runs


def config_value(run: Run, key: str):
    """A dotted config key of a run (``cache.l1_tokens``), or None when absent."""
    cur = run.config
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


from .metrics import (  # noqa: E402  (re-exported: the metrics read Runs duck-typed)
    effective_input_tps, evictions, hit_rate_by_tier, latency_percentiles, link_bytes, link_utilisation,
    per_round, runs_table, sim_hw_errors, time_breakdown,
)

__all__ = ["Run", "load_run", "load_any", "load_runs", "read_csv", "flatten", "config_value",
           "per_round", "hit_rate_by_tier", "effective_input_tps", "latency_percentiles", "link_bytes",
           "link_utilisation", "evictions", "time_breakdown", "sim_hw_errors", "runs_table"]
