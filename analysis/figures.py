"""Figures from result files (never from the simulator): per-round overlay (figure 4),
tier hit rates with TTFT (figure-6 style), policy comparison, capacity curves, a run's
timeline, simulation vs hardware; the radix-tree picture is in `analysis/tree_figure.py`.

Every function returns the matplotlib `Figure` (its artists hold exactly the plotted data)
and, given `out` (a path with or without .png/.svg), also writes OUT.png and OUT.svg.
Inputs are `Run`s or anything `load_any` reads (result directory, bench_multiturn log).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from .load import Run, config_value, load_any, load_runs
from .metrics import hit_rate_by_tier, link_utilisation, match_ttft, error_table, per_round, runs_table
from .style import (HOST_GREY, LINK_COLOURS, OCCUPANCY_COLOURS, OPT_LABEL, TIER_COLOURS, colour_of,
                    integer_axis, new_figure, save, token_axis)

ROUND_PANELS = {"ttft_mean_s": ("mean TTFT (s)", "Mean time to first token per round"),
                "ttft_p90_s": ("p90 TTFT (s)", "p90 time to first token per round"),
                "hit_rate": ("prompt-token hit rate", "Cache hit rate per round"),
                "hit_rate_device": ("device hit rate", "Device (L1) hit rate per round"),
                "hit_rate_host": ("host hit rate", "Host (L2) hit rate per round")}


def _runs(runs, labels=None) -> list:
    """Runs with distinct labels (`load_runs`; Run objects are relabelled as copies)."""
    if isinstance(runs, (Run, str, Path)):
        runs = [runs]
    return load_runs(runs, labels)


def _nan(values) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def rounds_figure(runs, out=None, *, labels=None, panels=("ttft_mean_s", "hit_rate")):
    """Per-round panels (default: mean TTFT, then hit rate), one line per run; each line's
    y data is exactly the run's per-round column (rounds.csv, or an external log's rounds).
    A run without that column (replay has no TTFT) gets no line in that panel; an external
    (SGLang) run is drawn dashed."""
    runs = _runs(runs, labels)
    fig, axes = new_figure(len(panels), 1, figsize=(7.5, 3.2 * len(panels)), sharex=True)
    axes = np.atleast_1d(axes)
    tables = [(r, per_round(r)) for r in runs]
    for ax, col in zip(axes, panels):
        ylabel, title = ROUND_PANELS.get(col, (col, col))
        for r, tab in tables:
            if len(tab) and tab[col].notna().any():
                ax.plot(tab["round"].to_numpy(), tab[col].to_numpy(dtype=float), marker=".", label=r.label,
                        color=colour_of(r.label), linestyle="--" if r.mode == "sglang" else "-")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if col.startswith("hit_rate"):
            ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    axes[-1].set_xlabel("round")
    integer_axis(axes[-1])
    save(fig, out)
    return fig


def ttft_change_pct(base: float, value: float) -> float:
    """TTFT change vs the baseline in percent: 100 * (value - base) / base (negative = lower)."""
    return 100.0 * (value - base) / base


def format_change(pct: float) -> str:
    """The text printed above a TTFT bar: '-35.2%' (35.2% lower than the baseline)."""
    return f"{pct:+.1f}%"


def fig6_figure(runs, out=None, *, labels=None, ttft: str = "ttft_mean_s", title: str | None = None,
                group: int | None = None):
    """Figure-6 style, one bar group per configuration (run): top panel, stacked hit rate by
    tier (device at the bottom in the run's colour, host on top in grey, storage above it
    hatched); bottom panel, TTFT (`ttft`, a summary key) in the run's colour, with the TTFT
    change vs the first (baseline) run printed above each bar (`format_change`); with
    `group` = k, each consecutive group of k runs has its own baseline (its first run: e.g.
    k = 2 for LRU / session pairs, as the seed's figure 6 prints one change per pair). A run
    without a tier split (an SGLang log) shows its whole hit rate as the device bar."""
    runs = _runs(runs, labels)
    fig, (ax_hit, ax_t) = new_figure(2, 1, figsize=(max(5.0, 1.3 * len(runs) + 2.5), 6.5), sharex=True)
    colours = [colour_of(r.label) for r in runs]
    _tier_bars(ax_hit, runs, colours)
    ax_hit.set_title(title or "Hit rate by tier and TTFT per configuration")
    _ttft_bars(ax_t, runs, colours, ttft, group or len(runs) or 1)
    long = max((len(r.label) for r in runs), default=0) > 10
    ax_t.set_xticks(np.arange(len(runs)), [r.label for r in runs], rotation=20 if long else 0,
                    ha="right" if long else "center")
    save(fig, out)
    return fig


def _tier_bars(ax, runs, colours) -> None:
    x = np.arange(len(runs))
    hits = [hit_rate_by_tier(r) for r in runs]
    dev = _nan([h["hit_rate_device"] if h["hit_rate_device"] is not None else h["hit_rate"] for h in hits])
    host = np.nan_to_num(_nan([h["hit_rate_host"] for h in hits]))
    sto = np.nan_to_num(_nan([h["hit_rate_storage"] for h in hits]))
    ax.bar(x, dev, color=colours, edgecolor="black", linewidth=0.5, label="device (L1)")
    ax.bar(x, host, bottom=dev, color=HOST_GREY, edgecolor="black", linewidth=0.5, label="host (L2)")
    handles = [Patch(facecolor="white", edgecolor="black", label="device (L1), run colour"),
               Patch(facecolor=HOST_GREY, edgecolor="black", label="host (L2)")]
    if sto.any():
        ax.bar(x, sto, bottom=dev + host, color=TIER_COLOURS["storage"], hatch="//", edgecolor="black",
               linewidth=0.5, label="storage (L3)")
        handles.append(Patch(facecolor=TIER_COLOURS["storage"], hatch="//", edgecolor="black", label="storage (L3)"))
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("prompt-token hit rate")
    ax.legend(handles=handles, fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)


def _ttft_labels(t, group: int) -> list:
    """Per run (TTFT array `t`): (index, its baseline's index, the text above its bar):
    "baseline", the change vs its group's first run, or "" (no baseline TTFT); runs without
    a TTFT are left out."""
    out = []
    for i, v in enumerate(t):
        if not np.isfinite(v):
            continue
        b = i // group * group
        base = t[b]
        out.append((i, b, "baseline" if i == b else (format_change(ttft_change_pct(base, v)) if base > 0 else "")))
    return out


def fig6_changes(runs, *, ttft: str = "ttft_mean_s", group: int | None = None) -> list:
    """The TTFT changes `fig6_figure` prints above its bars, as lines for the terminal: one
    per run that is not its group's baseline, e.g. 'b128 session: TTFT -0.1% vs b128 LRU
    (1.491 s vs 1.492 s)'."""
    t = _nan([(r.summary or {}).get(ttft) for r in runs])
    return [f"{runs[i].label}: TTFT {text} vs {runs[b].label} ({t[i]:.3f} s vs {t[b]:.3f} s)"
            for i, b, text in _ttft_labels(t, group or len(runs) or 1) if i != b and text]


def _ttft_bars(ax, runs, colours, ttft: str, group: int) -> None:
    t = _nan([(r.summary or {}).get(ttft) for r in runs])
    ax.bar(np.arange(len(runs)), np.nan_to_num(t), color=colours, edgecolor="black", linewidth=0.5)
    top = float(np.nanmax(t)) if np.isfinite(t).any() else 1.0
    for i, _, text in _ttft_labels(t, group):
        ax.text(i, t[i] + 0.02 * top, text, ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    stat = {"ttft_mean_s": "mean", "ttft_p50_s": "p50", "ttft_p90_s": "p90", "ttft_p99_s": "p99"}.get(ttft, ttft)
    ax.set_ylabel(f"{stat} TTFT (s)")
    ax.grid(True, axis="y", alpha=0.3)


def comparison_table(source) -> pd.DataFrame:
    """policy, capacity_tokens, hit rates ... from a comparison.csv (a path to it or to its
    directory, as written by `radixsim replay --policy a,b --capacity-tokens x,y`), a
    DataFrame, or a list of runs (policy and L1 capacity read from each config)."""
    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, (str, Path)) and Path(source).is_dir() and (Path(source) / "comparison.csv").is_file():
        source = Path(source) / "comparison.csv"
    if isinstance(source, (str, Path)) and Path(source).is_file():
        from .load import read_csv

        return read_csv(Path(source), ("policy", "capacity_tokens", "hit_rate"), text_columns=("policy", "dir"))
    runs = _runs(source)
    rows = []
    for r in runs:
        cap = config_value(r, "cache.capacity_tokens")
        cap = config_value(r, "cache.l1_tokens") if cap is None else cap
        rows.append({"policy": config_value(r, "cache.policy") or "?", "capacity_tokens": cap,
                     **hit_rate_by_tier(r)})
    return pd.DataFrame(rows)


def policy_figure(source, out=None, *, metric: str = "hit_rate"):
    """Hit rate (`metric`) vs L1 capacity, one line per policy (fixed policy colours); the
    'belady-node' policy (offline heuristic) is drawn dashed in black. Rows with an
    unbounded capacity are left out. Log x axis when capacities span 10x or more."""
    df = comparison_table(source)
    if metric not in df.columns:
        raise ValueError(f"metric {metric!r}: not a column of the comparison; expected one of {', '.join(df.columns)}")
    df = df[pd.to_numeric(df["capacity_tokens"], errors="coerce").notna()].copy()
    df["capacity_tokens"] = df["capacity_tokens"].astype(float)
    fig, ax = new_figure(figsize=(7, 4.2))
    policies = list(dict.fromkeys(df["policy"]))
    for pol in sorted(policies, key=lambda p: p == "belady-node"):
        g = df[df["policy"] == pol].sort_values("capacity_tokens")
        opt = pol == "belady-node"
        ax.plot(g["capacity_tokens"].to_numpy(), g[metric].to_numpy(dtype=float), marker="o", markersize=4,
                linestyle="--" if opt else "-", color=colour_of(pol), label=OPT_LABEL if opt else pol)
    caps = df["capacity_tokens"]
    if len(caps) and caps.min() > 0 and caps.max() / caps.min() >= 10:
        ax.set_xscale("log")
    ax.set_xlabel("L1 capacity (tokens)")
    token_axis(ax, "x")
    ax.set_ylabel("prompt-token hit rate" if metric == "hit_rate" else metric)
    ax.set_ylim(0, 1.02)
    ax.set_title("Eviction policies: hit rate vs capacity")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    save(fig, out)
    return fig


def sweep_table(source) -> pd.DataFrame:
    """A sweep as a DataFrame: a sweep.csv (`radixsim sweep`: grid keys + summary fields,
    with `<field>_ci95` columns under --repeat) or the sweep directory holding it, a
    DataFrame, or runs (`runs_table`: flattened config keys + summary fields)."""
    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, (str, Path)) and Path(source).is_dir() and (Path(source) / "sweep.csv").is_file():
        source = Path(source) / "sweep.csv"
    if isinstance(source, (str, Path)) and Path(source).is_file() and Path(source).suffix == ".csv":
        p = Path(source)
        try:
            return pd.read_csv(p)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(f"{p}: not a readable sweep CSV ({first})") from None
    return runs_table(_runs(source))


def sweep_keys(sweep_dir) -> list:
    """The grid keys of a `radixsim sweep` directory (its sweep.yaml), in grid order."""
    import yaml

    p = Path(sweep_dir) / "sweep.yaml"
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        return [str(k) for k, _ in doc.get("grid") or []]
    except (OSError, yaml.YAMLError, TypeError, ValueError):
        raise ValueError(f"{p}: unreadable; expected the sweep's grid (radixsim sweep)") from None


def _need(df: pd.DataFrame, col: str, what: str) -> None:
    if col not in df.columns:
        raise ValueError(f"{what} {col!r}: not in the sweep; expected one of {', '.join(map(str, df.columns))}")


def _numeric(col: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(col) and col.notna().all()


def _key_column(col: pd.Series) -> pd.Series:
    """A grid key as given, or as text ('null' for an empty cell, numbers as %g) when it is
    not all numbers, so that every value gets its own row, column or line."""
    if _numeric(col):
        return col
    return col.map(lambda v: "null" if v is None or v != v else (f"{v:g}" if isinstance(v, float) else str(v)))


def _curve(ax, g: pd.DataFrame, x: str, metric: str, label: str, positions=None) -> None:
    g = g.sort_values(x) if positions is None else g
    xs = g[x].to_numpy(dtype=float) if positions is None else [positions[v] for v in g[x]]
    ys = g[metric].to_numpy(dtype=float)
    ax.plot(xs, ys, marker="o", color=colour_of(label), label=label)
    ci = f"{metric}_ci95"
    if ci in g.columns and g[ci].notna().any():  # 95% confidence half-widths (radixsim sweep --repeat)
        ax.errorbar(xs, ys, yerr=g[ci].fillna(0).to_numpy(dtype=float), fmt="none", capsize=3,
                    color=colour_of(label))


def capacity_figure(source, x: str, metric: str = "hit_rate", *, y: str | None = None, group: str | None = None,
                    out=None):
    """`metric` vs a swept key `x`: a line (one per value of `group` if given; error bars
    from a `<metric>_ci95` column; categorical x when the key is not numeric), or, with a
    second key `y`, a heatmap (mean over repeated cells, values printed in the cells)."""
    df = sweep_table(source)
    for col, what in ((x, "x key"), (metric, "metric"), (y, "y key"), (group, "group key")):
        if col is not None:
            _need(df, col, what)
    if y is None:
        fig, ax = new_figure(figsize=(7, 4.2))
        positions = None
        if group is not None:
            df = df.assign(**{group: _key_column(df[group])})
        if not _numeric(df[x]):
            df = df.assign(**{x: _key_column(df[x])})
            cats = list(dict.fromkeys(df[x]))
            positions = {c: i for i, c in enumerate(cats)}
            ax.set_xticks(range(len(cats)), cats)
        groups = [(None, df)] if group is None else list(df.groupby(group, sort=True))
        for gval, g in groups:
            _curve(ax, g, x, metric, metric if gval is None else f"{group}={gval}", positions)
        if x.endswith("_tokens") and positions is None:
            token_axis(ax, "x")
        ax.set_xlabel(x)
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} vs {x}")
        ax.grid(True, alpha=0.3)
        if group is not None:
            ax.legend(fontsize=8)
    else:
        fig, ax = _heatmap(df, x, y, metric)
    save(fig, out)
    return fig


def _heatmap(df: pd.DataFrame, x: str, y: str, metric: str):
    df = df.assign(**{x: _key_column(df[x]), y: _key_column(df[y])})
    grid = df.pivot_table(index=y, columns=x, values=metric, aggfunc="mean").sort_index().sort_index(axis=1)
    fig, ax = new_figure(figsize=(1.1 * grid.shape[1] + 3, 0.8 * grid.shape[0] + 2))
    vals = grid.to_numpy(dtype=float)
    im = ax.imshow(vals, origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(grid.shape[1]), [f"{v:g}" if isinstance(v, float) else str(v) for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [f"{v:g}" if isinstance(v, float) else str(v) for v in grid.index])
    mid = np.nanmin(vals) + 0.6 * (np.nanmax(vals) - np.nanmin(vals)) if np.isfinite(vals).any() else 0.0
    for (i, j), v in np.ndenumerate(vals):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=8, color="black" if v > mid else "white")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"{metric} over {x} x {y}")
    fig.colorbar(im, ax=ax, label=metric)
    return fig, ax


def timeline_figure(run, out=None, *, label: str | None = None):
    """Stacked panels over simulated time: running and waiting requests; busy fraction of
    each link (timeline.csv util_* columns); tokens held on each tier (l1/l2/l3_used_tokens,
    tiers that hold nothing all run long are left out)."""
    run = load_any(run, label)
    tl = run.timeline
    if tl is None or not len(tl):
        raise ValueError(f"{run.path or run.label}: no timeline.csv rows; expected a timed run (radixsim run)")
    fig, (a, b, c) = new_figure(3, 1, figsize=(8, 8), sharex=True)
    t = tl["t_s"].to_numpy(dtype=float)
    for col, colour in (("running", "#1f77b4"), ("waiting", "#d62728")):
        if col in tl.columns:
            a.step(t, tl[col].to_numpy(dtype=float), where="post", label=col, color=colour)
    a.set_ylabel("requests")
    integer_axis(a, "y")
    a.set_title(f"Timeline of {run.label}")
    a.legend(fontsize=8)
    util = link_utilisation(run)
    for name in [n for n in util.columns if n != "t_s"]:
        b.step(t, util[name].to_numpy(dtype=float), where="post", label=name, color=LINK_COLOURS.get(name))
    b.set_ylabel("link busy fraction")
    b.set_ylim(0, 1.05)
    if b.lines:
        b.legend(fontsize=8, ncol=2)
    for col in ("l1_used_tokens", "l2_used_tokens", "l3_used_tokens"):
        if col in tl.columns and tl[col].fillna(0).any():
            c.plot(t, tl[col].to_numpy(dtype=float), label=col.split("_")[0].upper(), color=OCCUPANCY_COLOURS[col])
    c.set_ylabel("tokens held")
    token_axis(c, "y")
    c.set_xlabel("simulated time (s)")
    if c.lines:
        c.legend(fontsize=8)
    for ax in (a, b, c):
        ax.grid(True, alpha=0.3)
    save(fig, out)
    return fig


def simhw_figure(sim, hw, out=None, *, by: str = "rid"):
    """Simulated vs measured TTFT of matched requests (`by`='rid') or rounds ('round'):
    scatter (x = measured, y = simulated) with the y = x line and the error table printed.
    Returns (Figure, errors) with errors = `metrics.error_table` of the plotted pairs."""
    sim, hw = load_runs([sim, hw])
    pairs = match_ttft(sim, hw, by)
    errors = error_table(pairs)
    fig, ax = new_figure(figsize=(5.5, 5.2))
    xs, ys = pairs["hw_ttft_s"].to_numpy(dtype=float), pairs["sim_ttft_s"].to_numpy(dtype=float)
    ax.scatter(xs, ys, s=14, color=colour_of(sim.label), alpha=0.8, label=f"{len(pairs)} {by}s")
    hi = max(float(np.max(xs)) if len(xs) else 1.0, float(np.max(ys)) if len(ys) else 1.0) * 1.05
    ax.plot([0, hi], [0, hi], linestyle="--", color="grey", linewidth=1, label="y = x")
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    unit = "mean TTFT per round" if by == "round" else "TTFT per request"
    ax.set_xlabel(f"measured {unit} (s): {hw.label}")
    ax.set_ylabel(f"simulated {unit} (s): {sim.label}")
    ax.set_title("Simulation vs hardware")

    def f(v, pct=False):
        return "-" if v is None else (f"{100 * v:.1f}%" if pct else f"{v:.3f} s")

    ax.text(0.03, 0.97, f"n = {errors['n']}\nmean abs error {f(errors['mean_abs_error_s'])}\n"
            f"mean rel error {f(errors['mean_rel_error'], True)}\np90 rel error {f(errors['p90_rel_error'], True)}",
            transform=ax.transAxes, va="top", fontsize=8,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "grey"})
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, alpha=0.3)
    save(fig, out)
    return fig, errors


def tree_figure(source, out=None, *, title: str | None = None):
    """The radix-tree picture (`analysis.tree_figure.tree_figure`; networkx is imported
    only when a tree is drawn)."""
    from .tree_figure import tree_figure as draw

    return draw(source, out, title=title)


__all__ = ["rounds_figure", "fig6_figure", "policy_figure", "capacity_figure", "timeline_figure", "simhw_figure",
           "tree_figure", "comparison_table", "sweep_table", "sweep_keys", "ttft_change_pct", "format_change"]
