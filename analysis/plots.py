"""Figures from result directories (reads the result files only; never asks which mode
produced a run). Built so far: per-round mean TTFT and hit rate (the seed's figure 4), one run
or several overlaid."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TIER_COLOURS = {"device": "#4C72B0", "host": "#DD8452", "storage": "#55A868"}


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


def _label(run_dir) -> str:
    p = Path(run_dir)
    cfg = p / "config.yaml"
    if cfg.exists():
        import yaml

        with open(cfg) as f:
            doc = yaml.safe_load(f) or {}
        if doc.get("name"):
            return str(doc["name"])
    return p.name


def plot_rounds(run_dirs, out_dir, *, labels=None, formats=("png",)) -> list:
    """Per-round mean TTFT and hit rate, one line per run. Writes ttft_per_round.* and
    hit_rate_per_round.* to out_dir; returns the paths. The figures keep their data: each
    line's y values are exactly rounds.csv's ``ttft_mean_s`` / ``hit_rate`` column."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = [(labels[i] if labels else _label(d), read_rounds(d)) for i, d in enumerate(run_dirs)]
    paths = []
    for name, col, ylabel, title in (
            ("ttft_per_round", "ttft_mean_s", "mean TTFT (s)", "Mean time to first token per round"),
            ("hit_rate_per_round", "hit_rate", "prompt-token hit rate", "Cache hit rate per round")):
        fig, ax = plt.subplots(figsize=(7, 4))
        for label, cols in runs:
            ys = cols.get(col) or []
            if any(y is not None for y in ys):
                ax.plot(cols["round"], [float("nan") if y is None else y for y in ys], marker=".", label=label)
        ax.set_xlabel("round")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if col == "hit_rate":
            ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        if runs:
            ax.legend(fontsize=8)
        fig.tight_layout()
        for fmt in formats:
            p = out / f"{name}.{fmt}"
            fig.savefig(p, dpi=110)
            paths.append(p)
        plt.close(fig)
    return paths


def plot_run(run_dir) -> list:
    """The default plots of one run, written next to its results."""
    return plot_rounds([run_dir], run_dir)


__all__ = ["read_rounds", "plot_rounds", "plot_run", "TIER_COLOURS"]
