"""One report of several runs: `write_report(run_dirs, "report.html")` writes a single
self-contained HTML file (tables + every applicable figure embedded as base64 PNG);
``report.md`` writes Markdown with the PNGs next to it (``report-<figure>.png``), linked
relatively.

Contents: a key-figures table (requests, hit rate by tier, mean/p50/p90 TTFT, effective
input throughput, duration), the TTFT split (queue / load / compute), evictions and bytes
per link, one configuration table per run, then the figures that apply: per-round TTFT
and hit rate (runs with rounds), figure-6 tier bars, a capacity curve (when the runs differ
in exactly one numeric config key), simulation vs hardware (a sim run and an SGLang/torch
run), each run's timeline (timed runs) and tree (runs with tree.json), and a policy
comparison for every comparison directory (one holding comparison.csv) and a capacity
curve or heatmap for every sweep directory (`radixsim sweep`) given.
"""
from __future__ import annotations

import base64
import html
from pathlib import Path

from . import figures
from .fleet_figures import fleet_report_figures, is_fleet, stages_figure
from .load import Run, flatten, load_runs
from .metrics import evictions, hit_rate_by_tier, link_bytes, per_round, time_breakdown
from .style import png_bytes

IGNORED_KEYS = ("name", "description", "mode", "seed", "source", "line", "timestamp", "tag")
HW_MODES = ("sglang", "torch")


def fmt_rate(v) -> str:
    """A hit rate as printed in the tables: 4 decimals ('0.9670'); '-' when unknown."""
    return "-" if v is None or v != v else f"{v:.4f}"


def fmt_s(v) -> str:
    """Seconds, 3 decimals; '-' when unknown."""
    return "-" if v is None or v != v else f"{v:.3f}"


def fmt_tps(v) -> str:
    """Tokens per second with thousands separators, no decimals; '-' when unknown."""
    return "-" if v is None or v != v else f"{v:,.0f}"


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return str(v)


def key_table(runs) -> tuple[list, list]:
    """(header, rows) of the key-figures table, one row per run."""
    head = ["run", "mode", "requests", "hit rate", "device", "host", "storage", "mean TTFT (s)",
            "p50 TTFT (s)", "p90 TTFT (s)", "eff. input (tok/s)", "duration (s)"]
    rows = []
    for r in runs:
        s, h = r.summary or {}, hit_rate_by_tier(r)
        rows.append([r.label, r.mode, _fmt(s.get("requests")), fmt_rate(h["hit_rate"]),
                     fmt_rate(h["hit_rate_device"]), fmt_rate(h["hit_rate_host"]), fmt_rate(h["hit_rate_storage"]),
                     fmt_s(s.get("ttft_mean_s")), fmt_s(s.get("ttft_p50_s")), fmt_s(s.get("ttft_p90_s")),
                     fmt_tps(s.get("effective_input_tps")), fmt_s(s.get("duration_s"))])
    return head, rows


PARTS = ("before", "during", "after")
EVENT_EFFECTS = ("requests_retried", "tokens_recomputed", "cache_tokens_lost", "l3_reads_failed",
                 "l3_writes_dropped", "l3_pages_restored", "l3_pages_lost", "links_slowed")


def detail_tables(runs) -> list:
    """[(title, header, rows)]: the TTFT split, evictions and bytes per link (those that
    apply to at least one run)."""
    out = []
    split = [(r, time_breakdown(r)) for r in runs]
    rows = [[r.label, str(len(t))] + [fmt_s(float(t[c].mean())) for c in ("queue_s", "load_s", "compute_s", "ttft_s")]
            for r, t in split if len(t)]
    if rows:
        out.append(("TTFT split (mean over requests)",
                    ["run", "requests", "queue (s)", "load (s)", "compute (s)", "TTFT (s)"], rows))
    rows = [[r.label, str(st["stage"]), f"{st['rate']:g}", fmt_s(st["duration_s"]), _fmt(st["requests"]),
             fmt_tps(st["output_tok_s"]), _fmt(st["requests_s"]), fmt_s(st["ttft_mean_s"]), fmt_s(st["ttft_p50_s"]),
             fmt_s(st["ttft_p90_s"]), fmt_s(st["itl_mean_s"]), fmt_rate(st["hit_rate"])]
            for r in runs for st in (r.summary or {}).get("stages") or []]
    if rows:
        out.append(("Load stages (stages.csv)", ["run", "stage", "rate (req/s)", "duration (s)", "requests",
                                                 "output (tok/s)", "req/s", "mean TTFT (s)", "p50 TTFT (s)",
                                                 "p90 TTFT (s)", "mean ITL (s)", "hit rate"], rows))
    rows = [[r.label, ev["label"]] + [_fmt(ev.get(f"{p}_requests")) for p in PARTS]
            + [fmt_s(ev.get(f"{p}_ttft_p90_s")) for p in PARTS] + [fmt_rate(ev.get(f"{p}_slo_ttft")) for p in PARTS]
            + [", ".join(f"{k} {_fmt(v)}" for k, v in ev.items() if k in EVENT_EFFECTS)]
            for r in runs for ev in (r.summary or {}).get("events") or []]
    if rows:
        out.append(("Fault events (before / during / after each window, by arrival)",
                    ["run", "event"] + [f"requests {p}" for p in PARTS] + [f"p90 TTFT {p} (s)" for p in PARTS]
                    + [f"SLO TTFT {p}" for p in PARTS] + ["what it did"], rows))
    rows = [[r.label, e.component, e.tier, f"{int(e.amount):,}", e.unit]
            for r in runs for e in evictions(r).itertuples()]
    if rows:
        out.append(("Evictions by component and tier", ["run", "component", "tier", "evicted", "unit"], rows))
    rows = [[r.label, link, f"{int(b):,}"] for r in runs for link, b in link_bytes(r).items()]
    if rows:
        out.append(("Bytes moved per link", ["run", "link", "bytes"], rows))
    return out


def config_rows(run: Run) -> list:
    """[[key, value]] of a run's configuration (flattened; provenance left out)."""
    return [[k, _fmt(v)] for k, v in flatten(run.config).items() if not k.startswith("provenance.")]


def swept_key(runs) -> str | None:
    """The one numeric config key whose value differs between the runs, if exactly one."""
    if len(runs) < 2:
        return None
    flats = [flatten(r.config) for r in runs]
    keys = set.intersection(*(set(f) for f in flats))
    diff = [k for k in sorted(keys) if not k.startswith("provenance.") and k.split(".")[-1] not in IGNORED_KEYS
            and len({repr(f[k]) for f in flats}) > 1]
    if len(diff) == 1 and all(isinstance(f[diff[0]], (int, float)) and not isinstance(f[diff[0]], bool) for f in flats):
        return diff[0]
    return None


def report_figures(runs, comparisons=(), sweeps=()) -> list:
    """[(name, caption, Figure)] of every figure that applies to these runs (and to the
    comparison and sweep directories given)."""
    out = []
    if any(len(per_round(r)) for r in runs):
        out.append(("rounds", "Per-round mean TTFT and hit rate", figures.rounds_figure(runs)))
    if runs:
        out.append(("fig6", "Hit rate by tier and mean TTFT per run (change vs the first run)",
                    figures.fig6_figure(runs)))
    key = swept_key(runs)
    if key is not None:
        out.append(("capacity", f"Hit rate vs {key}", figures.capacity_figure(runs, key, "hit_rate")))
    sims = [r for r in runs if r.mode == "sim"]
    for i, hw in enumerate(r for r in runs if r.mode in HW_MODES):
        if sims:
            by = "rid" if hw.requests is not None and sims[0].requests is not None else "round"
            fig, _ = figures.simhw_figure(sims[0], hw, by=by)
            out.append((f"simhw-{i + 1}", f"{sims[0].label} vs {hw.label} (TTFT by {by})", fig))
    out += fleet_report_figures(runs)
    if any((r.summary or {}).get("stages") for r in runs):
        out.append(("stages", "TTFT p90 and hit rate against the offered rate of each load stage",
                    stages_figure(runs)))
    for i, r in enumerate(runs):
        if r.timeline is not None and len(r.timeline) and not is_fleet(r):  # a fleet's: per engine, above
            out.append((f"timeline-{i + 1}", f"Timeline of {r.label}", figures.timeline_figure(r)))
        if r.tree is not None:
            out.append((f"tree-{i + 1}", f"Radix tree of {r.label}", figures.tree_figure(r)))
    for i, c in enumerate(comparisons):
        out.append((f"policy-{i + 1}", f"Policy comparison ({c})", figures.policy_figure(c)))
    for i, sw in enumerate(sweeps):
        keys = figures.sweep_keys(sw)
        if keys:
            y = keys[1] if len(keys) > 1 else None
            out.append((f"sweep-{i + 1}", f"Sweep {sw}: hit rate over {' x '.join(keys[:2])}",
                        figures.capacity_figure(sw, keys[0], "hit_rate", y=y)))
    return out


def _split_sources(run_dirs):
    """(runs, comparison directories, sweep directories)."""
    runs, comps, sweeps = [], [], []
    for d in run_dirs:
        if isinstance(d, Run):  # already loaded
            runs.append(d)
            continue
        p = Path(d)
        if p.is_dir() and (p / "comparison.csv").is_file() and not (p / "summary.json").exists():
            comps.append(p)
        elif p.is_dir() and (p / "sweep.csv").is_file() and not (p / "summary.json").exists():
            sweeps.append(p)
        else:
            runs.append(d)
    return runs, comps, sweeps


def _html_table(head, rows) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _md_table(head, rows) -> str:
    def cell(c):
        return str(c).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in rows]
    return "\n".join(lines)


CSS = ("body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}"
       "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}"
       "td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #eee}"
       "details{margin:.5em 0}")


def _write_html(out: Path, title, runs, tables, figs) -> None:
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>", "<h2>Key figures</h2>",
             _html_table(*key_table(runs))]
    for t, head, rows in tables:
        parts += [f"<h2>{html.escape(t)}</h2>", _html_table(head, rows)]
    if figs:
        parts.append("<h2>Figures</h2>")
    for name, caption, fig in figs:
        data = base64.b64encode(png_bytes(fig)).decode("ascii")
        parts.append(f"<figure id='{name}'><img alt='{html.escape(caption)}' src='data:image/png;base64,{data}'>"
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts.append("<h2>Configurations</h2>")
    for r in runs:
        parts += [f"<details open><summary><b>{html.escape(r.label)}</b> ({html.escape(str(r.path or ''))})</summary>",
                  _html_table(["key", "value"], config_rows(r)), "</details>"]
    parts.append("</body></html>\n")
    out.write_text("".join(parts), encoding="utf-8")


def _write_md(out: Path, title, runs, tables, figs) -> None:
    parts = [f"# {title}", "## Key figures", _md_table(*key_table(runs))]
    for t, head, rows in tables:
        parts += [f"## {t}", _md_table(head, rows)]
    if figs:
        parts.append("## Figures")
    for name, caption, fig in figs:
        png = out.parent / f"{out.stem}-{name}.png"
        png.write_bytes(png_bytes(fig))
        parts.append(f"![{caption}]({png.name})\n\n*{caption}*")
    parts.append("## Configurations")
    for r in runs:
        parts += [f"### {r.label}", f"`{r.path}`" if r.path else "", _md_table(["key", "value"], config_rows(r))]
    out.write_text("\n\n".join(p for p in parts if p) + "\n", encoding="utf-8")


def write_report(run_dirs, out_path, *, labels=None, title: str = "radixsim report") -> Path:
    """Write the report of `run_dirs` (result directories, bench_multiturn logs, or
    comparison directories) to `out_path`: .html/.htm (self-contained) or .md (PNGs next to
    it). Returns the path. ValueError (one line) for unreadable inputs or another suffix."""
    out = Path(out_path)
    if out.suffix not in (".html", ".htm", ".md"):
        raise ValueError(f"{out}: expected a report path ending in .html or .md")
    sources, comps, sweeps = _split_sources(run_dirs)
    if not sources and not comps and not sweeps:
        raise ValueError("no runs given; expected result directories")
    runs = load_runs(sources, labels)
    tables = detail_tables(runs)
    figs = report_figures(runs, comps, sweeps)
    out.parent.mkdir(parents=True, exist_ok=True)
    (_write_md if out.suffix == ".md" else _write_html)(out, title, runs, tables, figs)
    return out


__all__ = ["write_report", "swept_key", "key_table", "detail_tables", "config_rows", "report_figures", "fmt_rate", "fmt_s",
           "fmt_tps"]
