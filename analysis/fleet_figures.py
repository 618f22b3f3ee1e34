"""Figures of fleet runs (radixsim run on a scenario with a `fleet:` section; docs/fleet.md):
per-engine load and hit rate over time, router comparison bars (hit rate, TTFT p90, goodput),
and the P/D time breakdown. `fleet_report_figures` is what `radixsim report` adds."""
from __future__ import annotations

import numpy as np

from .load import load_any, load_runs
from .style import colour_of, integer_axis, new_figure, save

BINS = 60
PD_PARTS = (("bootstrap_s", "bootstrap"), ("prealloc_wait_s", "decode pre-allocation wait"),
            ("queue_s", "prefill queue"), ("load_s", "prefill load"), ("compute_s", "prefill compute"),
            ("kv_transfer_s", "KV transfer"), ("decode_queue_s", "decode queue"), ("decode_s", "decode"))


def is_fleet(run) -> bool:
    return run.requests is not None and "engine" in run.requests.columns


def _grid(values, engine, t, edges, n):
    """(engines x bins) sums of `values` by engine and time bin."""
    out = np.zeros((n, len(edges) - 1))
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    np.add.at(out, (engine, b), values)
    return out


def load_hit_figure(run, out=None, *, label: str | None = None):
    """Two heat maps over simulated time (engines x time bins, by arrival): requests routed to
    each engine, and each engine's prompt-token hit rate (blank: none arrived)."""
    run = load_any(run, label)
    rq = run.requests
    eng = rq["engine"].to_numpy(dtype=int)
    n = int(eng.max()) + 1
    t = rq["arrival_s"].to_numpy(dtype=float)
    edges = np.linspace(t.min(), max(t.max(), t.min() + 1e-9), BINS + 1)
    count = _grid(np.ones(len(t)), eng, t, edges, n)
    prompt = _grid(rq["prompt_tokens"].to_numpy(dtype=float), eng, t, edges, n)
    cached = _grid(rq["cached_tokens"].to_numpy(dtype=float), eng, t, edges, n)
    hit = np.where(prompt > 0, cached / np.where(prompt > 0, prompt, 1), np.nan)
    fig, (a, b) = new_figure(2, 1, figsize=(8, 6.5), sharex=True)
    extent = (edges[0], edges[-1], n - 0.5, -0.5)
    im = a.imshow(count, aspect="auto", extent=extent, cmap="Blues", interpolation="nearest")
    fig.colorbar(im, ax=a, label="requests routed")
    a.set_ylabel("engine")
    integer_axis(a, "y")
    a.set_title(f"Per-engine load and hit rate over time: {run.label}")
    im = b.imshow(hit, aspect="auto", extent=extent, cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    fig.colorbar(im, ax=b, label="hit rate")
    b.set_ylabel("engine")
    integer_axis(b, "y")
    b.set_xlabel("arrival time (s)")
    save(fig, out)
    return fig


def router_figure(runs, out=None, *, labels=None):
    """Bars per run (one router, or fleet setting, each): fleet hit rate, TTFT p90, goodput
    (requests meeting the run's TTFT and TPOT targets per second), from summary.json's fleet."""
    runs = load_runs(runs, labels)
    fig, axes = new_figure(1, 3, figsize=(max(8.0, 1.2 * len(runs) + 5), 3.8))
    x = np.arange(len(runs))
    colours = [colour_of(r.label) for r in runs]
    for ax, key, name in zip(axes, ("hit_rate", "ttft_p90_s", "goodput_rps"),
                             ("hit rate", "TTFT p90 (s)", "goodput (req/s)")):
        vals = [(r.summary.get("fleet") or r.summary).get(key) for r in runs]
        ax.bar(x, [np.nan if v is None else v for v in vals], color=colours, edgecolor="black", linewidth=0.5)
        ax.set_title(name)
        ax.set_xticks(x, [r.label for r in runs], rotation=30, ha="right", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    save(fig, out)
    return fig


def pd_figure(run, out=None, *, label: str | None = None):
    """One stacked bar: the mean seconds of each part of a P/D request (bootstrap, decode
    pre-allocation wait, prefill queue, load and compute = TTFT; then KV transfer, decode queue,
    decode). Parts a run's requests.csv lacks (runs before they were split) are left out."""
    run = load_any(run, label)
    rq = run.requests.dropna(subset=["kv_transfer_s"])
    fig, ax = new_figure(1, 1, figsize=(10, 2.4))
    left = 0.0
    for i, (col, name) in enumerate(PD_PARTS):
        if col not in rq.columns:
            continue
        v = float(rq[col].mean()) if len(rq) else 0.0
        ax.barh([0], [v], left=left, color=f"C{i}", edgecolor="black", linewidth=0.5, label=f"{name} {v:.3f} s")
        left += v
    ax.set_yticks([])
    ax.set_xlabel("mean seconds per request")
    ax.set_title(f"P/D breakdown: {run.label} (TTFT = the first five parts)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    save(fig, out)
    return fig


def stages_figure(runs, out=None, *, labels=None):
    """TTFT p90 (and hit rate) against the offered rate of each load stage, one line per run
    (one router each, in a router comparison), from summary.json's ``stages`` (a staged
    workload: scenarios/shared_prefix.py)."""
    runs = [r for r in load_runs(runs, labels) if (r.summary or {}).get("stages")]
    fig, axes = new_figure(1, 2, figsize=(10, 3.8))
    for r in runs:
        st = r.summary["stages"]
        rate = [s["rate"] for s in st]
        for ax, key in zip(axes, ("ttft_p90_s", "hit_rate")):
            ax.plot(rate, [np.nan if s[key] is None else s[key] for s in st], marker="o", label=r.label,
                    color=colour_of(r.label))
    for ax, name in zip(axes, ("TTFT p90 (s)", "hit rate")):
        ax.set_xlabel("offered rate (requests/s)")
        ax.set_title(f"{name} per load stage")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    save(fig, out)
    return fig


def fleet_report_figures(runs) -> list:
    """[(name, caption, Figure)] for the fleet runs among `runs`."""
    fleets = [r for r in runs if is_fleet(r)]
    out = []
    for i, r in enumerate(fleets):
        out.append((f"fleet-load-{i + 1}", f"Per-engine load and hit rate over time: {r.label}", load_hit_figure(r)))
        if "kv_transfer_s" in r.requests.columns:
            out.append((f"fleet-pd-{i + 1}", f"P/D breakdown of {r.label}", pd_figure(r)))
    if len(fleets) > 1:
        out.append(("fleet-routers", "Fleet runs compared: hit rate, TTFT p90, goodput", router_figure(fleets)))
    return out


__all__ = ["is_fleet", "load_hit_figure", "router_figure", "pd_figure", "fleet_report_figures"]
