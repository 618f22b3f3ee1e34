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
from sim.recorder import percentile, rate, round_table, totals  # noqa: F401  (row math, shared with replay)

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


def provenance(seed=None, command: str | None = None, scenario: dict | None = None,
               scenario_file: str | None = None) -> dict:
    """Versions, commit and command line, for config.yaml; a scenario run's adds the scenario
    document as given and its file, from which `radixsim run DIR` reruns it (scenarios/run_record.py)."""
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("simpy", "torch"):
        m = sys.modules.get(mod)
        v = getattr(m, "__version__", None) if m else None
        versions[mod] = None if v is None else str(v)  # torch's is a str subclass YAML cannot write
    out = {
        "radixsim_version": __version__,
        "git_commit": _git_commit(),
        "versions": versions,
        "command": command if command is not None else shlex.join(["radixsim"] + sys.argv[1:]),
        "seed": seed,
    }
    if scenario is not None:
        out.update(scenario=scenario, scenario_file=scenario_file)
    return out


def write_config(out: Path, config: dict, seed=None, command: str | None = None, sc=None) -> None:
    """config.yaml: `config` plus provenance (with scenario `sc`'s document as given, if any)."""
    doc = dict(config)
    doc["provenance"] = provenance(seed, command, getattr(sc, "raw", None), getattr(sc, "source", None))
    write(out / "config.yaml", doc)


def write_requests(out: Path, rows) -> None:
    """`rows`: iterable of dicts keyed by REQUEST_COLUMNS (missing keys are empty cells); rows with
    ``frontend_s`` (engine.frontend set) add that column last."""
    rows = list(rows)
    extra = ["frontend_s"] if rows and "frontend_s" in rows[0] else []
    write(out / "requests.csv", rows, columns=REQUEST_COLUMNS + extra)


def write_summary(out: Path, summary: dict) -> None:
    ordered = {k: summary.get(k) for k in SUMMARY_KEYS}
    ordered.update({k: v for k, v in summary.items() if k not in ordered})
    write(out / "summary.json", ordered)


ROUND_COLUMNS = ["round", "requests", "prompt_tokens", "cached_tokens", "hit_rate", "hit_rate_device",
                 "hit_rate_host", "hit_rate_storage", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s"]


def write_rounds(out: Path, rounds) -> None:
    write(out / "rounds.csv", rounds, columns=ROUND_COLUMNS)


def write_stages(out: Path, workload, rows, summary: dict) -> None:
    """stages.csv (and summary["stages"]) of a staged workload (one with a `stage_list`: the
    shared_prefix kind); nothing for any other."""
    if getattr(workload, "stage_list", None) is None:
        return
    from sim.staged import STAGE_COLUMNS, stage_table

    table = stage_table(workload, rows)
    write(out / "stages.csv", table, columns=STAGE_COLUMNS)
    summary["stages"] = table


def write_events(events, rows, summary: dict, slo_ttft_s: float | None = None, fleet: dict | None = None,
                 faults=None, stats=None) -> None:
    """summary["events"] (and fleet.json's) of a run with fault events (scenarios/events.py):
    each event's window and the requests before, during and after it; nothing without events.
    ValueError (one line) for an event outside the run, before anything is written."""
    if not events:
        return
    from sim.events import check_within_run, event_table

    check_within_run(events, rows)
    table = event_table(events, rows, slo_ttft_s, faults, stats)
    summary["events"] = table
    if fleet is not None:
        fleet["events"] = table
