"""Default per-round plots of result directories (the seed's figure 4), kept for
`radixsim run` (`plot_run`) and the docs (`plot_rounds`); the figures themselves are in
`analysis/figures.py`. Reads result files only."""
from __future__ import annotations

import csv
from pathlib import Path

from .figures import rounds_figure
from .load import load_runs
from .style import TIER_COLOURS, save

PER_ROUND_FILES = (("ttft_per_round", "ttft_mean_s"), ("hit_rate_per_round", "hit_rate"))


def read_rounds(run_dir) -> dict:
    """rounds.csv as columns: {name: [values]} (floats; empty cells -> None)."""
    path = Path(run_dir) / "rounds.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    cols: dict = {}
    for r in rows:
        for k, v in r.items():
            cols.setdefault(k, []).append(None if v == "" else float(v))
    return cols


def plot_rounds(run_dirs, out_dir, *, labels=None, formats=("png",)) -> list:
    """Per-round mean TTFT and hit rate, one line per run (result directories, or
    bench_multiturn JSONL logs for a real SGLang run). Writes ttft_per_round.* and
    hit_rate_per_round.* to out_dir; returns the paths. Each line's y values are exactly
    the run's rounds.csv ``ttft_mean_s`` / ``hit_rate`` column."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = load_runs(run_dirs, list(labels) if labels else None)
    paths = []
    for name, col in PER_ROUND_FILES:
        fig = rounds_figure(runs, panels=(col,))
        paths += save(fig, out / name, formats=formats)
    return paths


def plot_run(run_dir) -> list:
    """The default plots of one run, written next to its results."""
    return plot_rounds([run_dir], run_dir)


__all__ = ["read_rounds", "plot_rounds", "plot_run", "TIER_COLOURS"]
