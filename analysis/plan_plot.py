"""The planner's capacity curve (sweeps are drawn by `analysis.figures.capacity_figure`)."""
from __future__ import annotations

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


__all__ = ["plot_capacity_curve"]
