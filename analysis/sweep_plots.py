"""Sweep and planner figures: a metric against one swept key (line), or two keys (heatmap)."""
from __future__ import annotations

import csv
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_capacity_curve(xs, ys, key: str, metric: str, out_path, *, target=None, answer=None):
    """`metric` against `key` at the evaluated points, the target as a dashed line and the
    answer marked. Returns the Figure."""
    order = np.argsort(xs)
    x = np.asarray(xs, dtype=float)[order]
    y = np.asarray(ys, dtype=float)[order]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, y, marker="o", label=metric)
    if target is not None:
        ax.axhline(target, ls="--", color="grey", label=f"target {target:g}")
    if answer is not None:
        ax.axvline(answer, ls=":", color="black", label=f"answer {answer:,}")
    ax.set_xlabel(key + (" (tokens)" if key.endswith("_tokens") else ""))
    ax.set_ylabel(metric)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return fig


def read_sweep(path) -> tuple[list, list]:
    """sweep.csv -> (header, rows as dicts with numbers parsed)."""
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        rows = []
        for row in r:
            out = {}
            for k, v in row.items():
                try:
                    out[k] = float(v) if v != "" else None
                except ValueError:
                    out[k] = v
            rows.append(out)
        return r.fieldnames, rows


def plot_sweep(sweep_csv, keys: list, metric: str, out_path):
    """One key: metric vs key (line; error bars from `metric_ci95` when present). Two keys: a
    heatmap of metric over the two keys. Returns the Figure."""
    _, rows = read_sweep(sweep_csv)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if len(keys) == 1:
        k = keys[0]
        rows = sorted(rows, key=lambda r: (r[k] is None, r[k] if not isinstance(r[k], str) else 0))
        xs = [r[k] for r in rows]
        ys = [r.get(metric) for r in rows]
        err = [r.get(metric + "_ci95") for r in rows]
        labels = [str(x) for x in xs]
        pos = range(len(xs)) if any(isinstance(x, str) or x is None for x in xs) else xs
        ax.errorbar(list(pos), ys, yerr=[e or 0 for e in err] if any(err) else None, marker="o", capsize=3)
        if pos is not xs:
            ax.set_xticks(list(pos), labels)
        ax.set_xlabel(k)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
    elif len(keys) == 2:
        a, b = keys
        xa = sorted({r[a] for r in rows}, key=str)
        xb = sorted({r[b] for r in rows}, key=str)
        grid = np.full((len(xb), len(xa)), np.nan)
        for r in rows:
            v = r.get(metric)
            grid[xb.index(r[b]), xa.index(r[a])] = np.nan if v is None else v
        im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(xa)), [str(x) for x in xa], rotation=30, ha="right")
        ax.set_yticks(range(len(xb)), [str(x) for x in xb])
        ax.set_xlabel(a)
        ax.set_ylabel(b)
        for i in range(len(xb)):
            for j in range(len(xa)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", color="white", fontsize=8)
        fig.colorbar(im, ax=ax, label=metric)
    else:
        raise ValueError(f"plot_sweep: expected one or two keys, got {keys}")
    ax.set_title(f"{metric} over {' x '.join(keys)}")
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return fig


__all__ = ["plot_capacity_curve", "plot_sweep", "read_sweep"]
