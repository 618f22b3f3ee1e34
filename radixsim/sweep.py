"""`radixsim sweep`: a scenario over the cartesian product of grid values, one normal result
directory per point, one `sweep.csv`; resumable; a local process pool or Ray.

Layout of `--out DIR`::

    DIR/sweep.yaml            the scenario (after --set), the grid and the repeat count: the
                              sweep the directory belongs to (another sweep there is refused)
    DIR/.lock                 held while a sweep runs (a second one on DIR refuses)
    DIR/points/NNNN-HASH/     one result directory per (grid point, repeat), HASH that of the
                              point's fully resolved scenario; `.done` (holding HASH) marks it complete
    DIR/sweep_points.csv      one row per run: the grid values, repeat, seed, the summary figures
    DIR/sweep.csv             one row per grid point: the grid values and the summary figures
                              (with --repeat N: the mean over the repeats and a `_ci95` column,
                              the half-width of the 95% confidence interval, Student's t);
                              fleet runs add `FLEET_FIGURES` (SLO attainment, goodput, load balance)

A point directory whose `.done` holds its HASH is not run again, so an interrupted sweep is
resumed by running the same command. Every point is validated before any runs (one-line errors).
"""
from __future__ import annotations

import copy
import itertools
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from scenarios.scenario import ScenarioError, apply_sets, resolve

from .outputs import clean_stale, owned_dir, scenario_key, write
from .workers import process_map

FIGURES = ["hit_rate", "hit_rate_device", "hit_rate_host", "hit_rate_storage", "hit_rate_last10",
           "effective_input_tps", "duration_s", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
           "tpot_mean_s", "e2e_p50_s", "rejected"]
# fleet runs (summary.json's `fleet`, docs/fleet.md): column -> path in the summary
FLEET_FIGURES = {"slo_attainment": ("fleet", "slo_attainment"), "goodput_rps": ("fleet", "goodput_rps"),
                 "goodput_tokens_per_s": ("fleet", "goodput_tokens_per_s"), "tpot_p90_s": ("fleet", "tpot_p90_s"),
                 "load_requests_max_over_mean": ("fleet", "load_balance", "requests", "max_over_mean"),
                 "load_requests_cv": ("fleet", "load_balance", "requests", "cv"),
                 "load_busy_max_over_mean": ("fleet", "load_balance", "busy_s", "max_over_mean")}
# two-sided 95% Student t quantiles for n - 1 = 1..30 degrees of freedom (beyond: 1.96)
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042]


def parse_grid(items) -> list[tuple[str, list]]:
    """['cache.l2_tokens=1000,2000', 'cache.policy=lru,session'] -> [(key, [values...]), ...]
    (values parsed as YAML: numbers, null, true/false, strings)."""
    out = []
    for item in items:
        key, eq, vals = item.partition("=")
        if not eq or not key or not vals:
            raise ScenarioError(f"--grid {item!r}: expected KEY=V1,V2,... (e.g. cache.l2_tokens=4000000,8000000)")
        values = [yaml.safe_load(v) if v.strip() else v for v in vals.split(",")]
        if any(k == key for k, _ in out):
            raise ScenarioError(f"--grid {key}: given twice; expected each key once")
        out.append((key, values))
    return out


def t95(n: int) -> float:
    return _T95[n - 2] if 2 <= n <= len(_T95) + 1 else 1.96


def mean_ci(values) -> tuple[float | None, float | None]:
    """(mean, half-width of the 95% confidence interval) of the non-None values."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return m, t95(len(xs)) * s / math.sqrt(len(xs))


@dataclass(frozen=True)
class Point:
    index: int
    values: tuple  # ((key, value), ...) in grid order
    repeat: int
    seed: int
    raw: dict  # the scenario mapping for this point (overrides applied)
    key: str  # `scenario_key` of the resolved scenario: what the point is

    @property
    def name(self) -> str:
        return f"{self.index:04d}-{self.key}"


def make_points(raw: dict, grid, repeat: int = 1, where: str = "<scenario>") -> list[Point]:
    """Every (grid point, repeat), validated (ScenarioError names the point)."""
    if repeat < 1:
        raise ScenarioError(f"--repeat {repeat}: expected an integer >= 1")
    keys = [k for k, _ in grid]
    if repeat > 1 and "seed" in keys:
        raise ScenarioError("--grid seed with --repeat: expected one of them (repeats vary the seed)")
    base_seed = int(raw.get("seed", 0) or 0)
    points = []
    for combo in itertools.product(*[vals for _, vals in grid]) if grid else [()]:
        for r in range(repeat):
            pt = apply_sets(raw, [], where)
            from scenarios.scenario import set_key

            for k, v in zip(keys, combo):
                set_key(pt, k, copy.deepcopy(v), f"--grid {k}")
            seed = int(pt.get("seed", 0) or 0) if "seed" in keys else base_seed + r
            pt["seed"] = seed
            label = ", ".join(f"{k}={v}" for k, v in zip(keys, combo)) or "base"
            try:
                sc = resolve(pt, f"{where} [{label}]")
            except ScenarioError as e:
                raise ScenarioError(str(e)) from None
            points.append(Point(len(points), tuple(zip(keys, combo)), r, seed, pt, scenario_key(sc.doc)))
    return points


class PointError(RuntimeError):
    """A sweep or plan point that failed: str() is one line naming the point and the failure."""


def run_point(raw: dict, where: str, out_dir: str) -> dict:
    """Run one point (in any process): resolve, simulate, write, mark done (`.done` holds the
    resolved scenario's key); its summary. Any failure becomes a `PointError` naming the point
    (`where`)."""
    from .run import run_scenario

    try:
        sc = resolve(raw, where)
        s = run_scenario(sc, out_dir, progress=False, plots=False)
    except Exception as e:  # noqa: BLE001 -- reported as one line by the command
        text = str(e).strip().splitlines()
        raise PointError(f"{where}: failed: {type(e).__name__}: {text[0] if text else ''}".rstrip(": ")) from None
    s.pop("_wall_s", None)
    Path(out_dir, ".done").write_text(scenario_key(sc.doc) + "\n")
    return s


def done_summary(d: Path, key: str) -> dict | None:
    """The summary of point directory `d` if it holds a finished run of scenario `key`."""
    try:
        if (d / ".done").read_text().strip() != key:
            return None
        with open(d / "summary.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class LocalExecutor:
    """A process pool (default: all cores)."""

    def __init__(self, jobs: int | None = None):
        self.jobs = jobs or os.cpu_count() or 1

    def map(self, tasks, on_done):
        """tasks: [(key, raw, where, out_dir)]; on_done(key, summary) as each finishes."""
        if self.jobs == 1 or len(tasks) == 1:
            for key, raw, where, out in tasks:
                on_done(key, run_point(raw, where, out))
            return
        results = process_map(_run_task, tasks, self.jobs, ordered=False)
        try:
            for key, summary in results:
                on_done(key, summary)
        except BaseException:  # an interrupt or a failed point: the pool ends, then its leftovers go
            results.close()  # the workers are terminated and joined (a no-op if the pool already ended)
            for *_, out in tasks:
                clean_stale(Path(out))  # the temporary directories of the points killed mid-write
            raise


def _run_task(task) -> tuple:
    key, raw, where, out = task
    return key, run_point(raw, where, out)


class RayExecutor:
    """The same points as Ray tasks on an existing cluster (`address`) or a local instance."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        try:
            import ray
        except ImportError:
            raise ScenarioError("--executor ray: Ray is not installed; expected `pip install 'radixsim[ray]'`") from None
        self.ray = ray
        if not ray.is_initialized():
            kw = {"address": address} if address else {"num_cpus": num_cpus}
            ray.init(include_dashboard=False, log_to_driver=False, **kw)
        self._remote = ray.remote(run_point)

    def map(self, tasks, on_done):
        ray = self.ray
        refs = {self._remote.remote(raw, where, out): key for key, raw, where, out in tasks}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    on_done(refs[ref], ray.get(ref))
        except BaseException:  # an interrupt or a failed point: the other points stop too
            for ref in pending:
                ray.cancel(ref, force=True)
            raise


def make_executor(kind: str, jobs: int | None = None, address: str | None = None):
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(address, jobs)
    raise ScenarioError(f"--executor {kind!r}: expected local or ray")


def run_sweep(raw: dict, grid, out_dir, *, repeat: int = 1, executor=None, where: str = "<scenario>",
              progress: bool = True, plot: str | None = None) -> dict:
    """Run (or resume) a sweep; write sweep_points.csv and sweep.csv. Returns
    {"points": n, "ran": n run now, "skipped": n already done, "rows": sweep.csv rows}.
    `plot`: the metric the command will plot from sweep.csv, checked before any point runs."""
    points = make_points(raw, grid, repeat, where)
    if plot is not None:
        check_plot(plot, points, grid, repeat)
    identity = {"scenario": raw, "grid": [[k, v] for k, v in grid], "repeat": repeat}
    with owned_dir(out_dir, identity, "sweep") as out:
        (out / "points").mkdir(exist_ok=True)
        summaries, todo = _pending(out, points, where)
        bar = progress_bar(progress and bool(todo), len(points), len(points) - len(todo), "sweep")

        def done(key, s):
            summaries[key] = s
            if bar is not None:
                bar.update()

        try:
            if todo:
                (executor or LocalExecutor()).map(todo, done)
        finally:
            if bar is not None:
                bar.close()
        rows = _write_tables(out, points, summaries, grid, repeat)
    return {"points": len(points), "ran": len(todo), "skipped": len(points) - len(todo), "rows": rows}


def table_columns(points, grid, repeat: int) -> list:
    """The columns sweep.csv will have (`_write_tables`): the grid keys, then the figures (fleet
    figures when a point is a fleet; with repeat > 1 each figure and its `_ci95`)."""
    fleet = any(p.raw.get("fleet") is not None for p in points)
    figures = FIGURES + (list(FLEET_FIGURES) if fleet else [])
    return [k for k, _ in grid] + [c for fig in figures for c in ([fig, fig + "_ci95"] if repeat > 1 else [fig])]


def check_plot(metric: str, points, grid, repeat: int) -> None:
    """ScenarioError unless `metric` is a column of the sweep's sweep.csv."""
    cols = table_columns(points, grid, repeat)
    if metric not in cols:
        raise ScenarioError(f"--plot {metric!r}: not a column of sweep.csv; expected one of {', '.join(cols)}")


def _pending(out: Path, points, where: str) -> tuple[dict, list]:
    """({index: summary} of the points already done, tasks for the others)."""
    summaries: dict = {}
    todo = []
    for p in points:
        d = out / "points" / p.name
        s = done_summary(d, p.key)
        if s is not None:
            summaries[p.index] = s
        else:
            label = ", ".join(f"{k}={v}" for k, v in p.values) or "base"
            todo.append((p.index, p.raw, f"{where} [{p.name}: {label}]", str(d)))
    return summaries, todo


def progress_bar(enabled: bool, total, initial: int, desc: str):
    """A tqdm bar on stderr when it is a terminal (else None): sweep's and plan's."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="point", desc=desc, file=sys.stderr)


def figure(summary: dict, name: str):
    """Column `name` of a sweep table from a point's summary (None where it has none)."""
    v = summary
    for k in FLEET_FIGURES.get(name, (name,)):
        v = v.get(k) if isinstance(v, dict) else None
    return v


def _write_tables(out: Path, points, summaries, grid, repeat: int) -> list:
    keys = [k for k, _ in grid]
    fleet = any("fleet" in summaries[p.index] for p in points)
    figures = FIGURES + (list(FLEET_FIGURES) if fleet else [])
    write(out / "sweep_points.csv", ([v for _, v in p.values] + [p.repeat, p.seed, f"points/{p.name}"]
                                     + [figure(summaries[p.index], k) for k in figures] for p in points),
          columns=keys + ["repeat", "seed", "dir"] + figures)
    rows = []
    by: dict = {}
    for p in points:
        by.setdefault(p.values, []).append(summaries[p.index])
    for values, ss in by.items():
        row = {k: v for k, v in values}
        for fig in figures:
            if repeat > 1:
                m, ci = mean_ci([figure(s, fig) for s in ss])
                row[fig], row[fig + "_ci95"] = m, ci
            else:
                row[fig] = figure(ss[0], fig)
        rows.append(row)
    cols = keys + [c for fig in figures for c in ([fig, fig + "_ci95"] if repeat > 1 else [fig])]
    write(out / "sweep.csv", rows, columns=cols)
    return rows


__all__ = ["parse_grid", "make_points", "run_point", "PointError", "run_sweep", "done_summary", "progress_bar",
           "LocalExecutor", "RayExecutor", "make_executor", "mean_ci", "FIGURES",
           "FLEET_FIGURES", "figure", "check_plot", "table_columns"]
