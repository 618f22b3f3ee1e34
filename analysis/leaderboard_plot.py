"""The leaderboard figure: the share of the LRU -> bound gap each policy closes, per trace."""
from __future__ import annotations

import numpy as np

from .style import colour_of, new_figure, save


def gap_figure(rows, out=None):
    """One panel per trace: bars of the gap closed (%) per policy, one bar group per capacity
    (rows as `radixsim leaderboard` writes them; lru is 0 and the bound 100 by definition)."""
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    policies = [p for p in dict.fromkeys(r["policy"] for r in rows) if p not in ("lru", "bound")]
    fig, axes = new_figure(1, len(traces), figsize=(4.5 * len(traces), 4.0))
    axes = np.atleast_1d(axes)
    width = 0.8 / max(1, len(policies))
    for ax, trace in zip(axes, traces):
        caps = sorted({r["capacity_tokens"] for r in rows if r["trace"] == trace})
        gap = {(r["capacity_tokens"], r["policy"]): r["gap_closed"] for r in rows if r["trace"] == trace}
        x = np.arange(len(caps))
        for i, pol in enumerate(policies):
            vals = [np.nan if gap.get((c, pol)) is None else 100 * gap[(c, pol)] for c in caps]
            ax.bar(x + (i - (len(policies) - 1) / 2) * width, vals, width, color=colour_of(pol), label=pol)
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_xticks(x, [f"{c:,}" for c in caps], fontsize=7)
        ax.set_xlabel("L1 capacity (tokens)")
        ax.set_title(trace, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("LRU -> bound gap closed (%)")
    axes[-1].legend(fontsize=7)
    save(fig, out)
    return fig
