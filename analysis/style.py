"""Shared figure style: one colour per run label / policy / tier configuration across every
figure, tier and link colours, and writing a figure as PNG and SVG.

Figures are built on `matplotlib.figure.Figure` with an Agg canvas directly (no pyplot, no
global backend switch, nothing to close), so a caller may keep or drop them freely.
"""
from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

TIER_COLOURS = {"device": "#4C72B0", "host": "#9E9E9E", "storage": "#D0D0D0"}
HOST_GREY = TIER_COLOURS["host"]
OCCUPANCY_COLOURS = {"l1_used_tokens": "#4C72B0", "l2_used_tokens": "#DD8452", "l3_used_tokens": "#55A868"}
POLICY_COLOURS = {"lru": "#1f77b4", "lfu": "#ff7f0e", "fifo": "#2ca02c", "priority": "#d62728",
                  "slru": "#9467bd", "session": "#8c564b", "belady-node": "#000000", "bound": "#000000"}
TIER_CONFIG_COLOURS = {"L1": "#4C72B0", "L1+L2": "#DD8452", "L1+L2+L3": "#55A868"}
LINK_COLOURS = {"L2->L1": "#4C72B0", "L1->L2": "#DD8452", "L3->L2": "#55A868", "L2->L3": "#C44E52"}
# run labels get these in order of first use (tab10 without its grey, which means "host")
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
           "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"]
OPT_LABEL = "belady-node (offline heuristic)"
FORMATS = ("png", "svg")

_assigned: dict = {}


def colour_of(label: str) -> str:
    """The colour of a run label, policy name or tier configuration: fixed for policies and
    'L1' / 'L1+L2' / 'L1+L2+L3', else assigned from `PALETTE` on first use and kept for the
    rest of the process (so every figure of a report agrees)."""
    key = str(label)
    for fixed in (POLICY_COLOURS, TIER_CONFIG_COLOURS):
        if key in fixed:
            return fixed[key]
    if key not in _assigned:
        used = set(_assigned.values())
        free = [c for c in PALETTE if c not in used]
        _assigned[key] = free[0] if free else PALETTE[len(_assigned) % len(PALETTE)]
    return _assigned[key]


def reset_colours() -> None:
    """Forget the colours assigned to run labels (tests; a new report)."""
    _assigned.clear()


def new_figure(nrows: int = 1, ncols: int = 1, figsize=(7.0, 4.0), **kw):
    """(Figure, axes) on an Agg canvas, without pyplot."""
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=True, **kw)
    return fig, axes


def save(fig, out, formats=FORMATS, dpi: int = 110) -> list:
    """Write `fig` to OUT.png and OUT.svg (a known suffix on `out` is dropped first; parent
    folders are created). Returns the paths; nothing when `out` is None."""
    if out is None:
        return []
    out = Path(out)
    if out.suffix.lstrip(".") in ("png", "svg", "pdf"):
        out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        p = out.parent / f"{out.name}.{fmt}"
        fig.savefig(p, dpi=dpi, format=fmt)
        paths.append(p)
    return paths


def tokens_text(v: float, _pos=None) -> str:
    """Tick text of a token count: 950, 50k, 1.5M."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def token_axis(ax, which: str = "y") -> None:
    """Format the x or y axis of `ax` as token counts (`tokens_text`)."""
    from matplotlib.ticker import FuncFormatter

    (ax.yaxis if which == "y" else ax.xaxis).set_major_formatter(FuncFormatter(tokens_text))


def integer_axis(ax, which: str = "x") -> None:
    """Integer ticks only (rounds)."""
    from matplotlib.ticker import MaxNLocator

    (ax.xaxis if which == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def png_bytes(fig, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (for embedding in a report)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


__all__ = ["colour_of", "reset_colours", "new_figure", "save", "png_bytes", "token_axis", "integer_axis",
           "tokens_text", "TIER_COLOURS", "HOST_GREY",
           "POLICY_COLOURS", "TIER_CONFIG_COLOURS", "LINK_COLOURS", "OCCUPANCY_COLOURS", "OPT_LABEL"]
