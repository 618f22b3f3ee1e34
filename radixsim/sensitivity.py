"""`radixsim sensitivity`: how far a run's headline figures move when its uncertain inputs do.

A command of its own, not ``run --sensitivity``: like sweep and plan it runs many variants in a
process pool and writes its own files (sensitivity.json/.csv), while ``run`` stays one run into
one result directory of a fixed file set. It takes the same SCENARIO, --set and --smoke as run.

Each uncertain input is a set of scenario keys scaled together by a factor f (the same keys
`--set` takes, so any variant can be rerun by hand; sensitivity.csv lists them):

- capacities, per tier: ``l1`` (cache.l1_tokens with the SWA and MAMBA pools that follow it),
  ``l2`` (cache.l2_tokens), ``l3`` (cache.l3_tokens when bounded) x f;
- bandwidths: ``pcie`` (every hardware.pcie_*bytes_per_s field: the rate and its peak), ``l3_link``
  (hardware.l3_*bytes_per_s; with L3), ``hbm`` (hardware.hbm_bytes_per_s, d2d_copy_bytes_per_s),
  ``nvlink`` (hardware.nvlink_*bytes_per_s; tp > 1) x f;
- ``efficiency``: every ``mfu_*`` and ``*_efficiency`` field of sim/cost.py ``Efficiency`` that
  the cost model reads x f (capped at 1; roofline: all of them; operators, the default: only
  ``hbm_efficiency``, its other curves are fitted);
- ``kv_bytes``: KV bytes per token x f, through what it changes: pools sized in bytes (L1
  ``auto`` with its SWA pool, L2 by ratio, by GB per rank or in bytes, L3 in bytes) hold 1/f the
  tokens (MAMBA slots keep their count: a state's bytes do not follow the KV's) and the PCIe
  and L3 links move 1/f the tokens per second (assumption: decode's KV read time in the step
  model is not perturbed).

Runs: the nominal scenario; every input at 1 - p and 1 + p alone; the corners ``all_low``
(every input at its unfavourable end: capacities, bandwidths and efficiencies at 1 - p, KV bytes
at 1 + p) and ``all_high`` (the opposite); and the cliff check, every capacity at 0.9 and 1.1.
A run is "near a capacity cliff" when one of those moves the hit rate more than 10 points
from the nominal run. Every run uses the scenario's seed: the table is deterministic.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

HEADLINE = ["hit_rate", "hit_rate_device", "hit_rate_host", "hit_rate_storage", "ttft_mean_s", "ttft_p90_s",
            "effective_input_tps"]
DEFAULT_PCT = 20.0
CLIFF_PCT = 10.0
CLIFF_POINTS = 10.0


@dataclasses.dataclass(frozen=True)
class Input:
    """An uncertain input: scenario keys -> (nominal value, exponent of the factor)."""

    name: str
    keys: dict
    worse_high: bool = False  # a larger value is unfavourable (KV bytes per token)


def inputs(raw: dict, sc) -> list[Input]:
    """The uncertain inputs of resolved scenario `sc` (from `raw`), those with keys only."""
    from scenarios.presets import HARDWARE_FIELDS  # (imports here: `radixsim --help` stays light)

    hw, tiers = sc.hardware, sc.cache.tiers
    caps = capacity_keys(sc)
    out = [Input(tier, keys) for tier, keys in caps.items()]
    links = {"pcie": ("pcie",), "l3_link": ("l3",), "hbm": ("hbm", "d2d_copy"), "nvlink": ("nvlink",)}
    used = {"pcie": tiers is not None, "l3_link": tiers is not None and tiers.l3, "hbm": True, "nvlink": sc.tp > 1}
    for name, prefixes in links.items():
        fields = [f for f in HARDWARE_FIELDS if f.startswith(prefixes) and f.endswith("bytes_per_s")]
        if used[name] and fields:
            out.append(Input(name, {f"hardware.{f}": (getattr(hw, f), 1) for f in fields}))
    eff = {f"cost.efficiency.{k}": (v, 1) for k, v in _efficiencies(sc).items()}
    if sc.cost_table is None and eff:
        out.append(Input("efficiency", eff))
    kv = {k: (v, -1) for tier in _sized_in_bytes(raw, sc, caps) for k, (v, _) in caps[tier].items()
          if k != "cache.mamba_slots"}  # a MAMBA state's bytes do not follow the KV bytes
    kv.update({k: (v, -1) for i in out if i.name in ("pcie", "l3_link") for k, (v, _) in i.keys.items()})
    if kv:
        out.append(Input("kv_bytes", kv, worse_high=True))
    return out


def capacity_keys(sc) -> dict:
    """{tier: {key: (resolved value, 1)}} of the scenario's bounded pools; L2 pinned in tokens
    (its ratio and GB keys cleared)."""
    c, tiers = sc.doc["cache"], sc.cache.tiers
    l1 = {"cache.l1_tokens": c["l1_tokens"]}
    if sc.cache.swa is not None:
        l1["cache.swa_tokens"] = c["swa_tokens"]
    if sc.cache.mamba is not None:
        l1["cache.mamba_slots"] = c["mamba_slots"]
    out = {"l1": l1}
    if tiers is not None:
        out["l2"] = {"cache.l2_tokens": c["l2_tokens"], "cache.hicache_ratio": None, "cache.hicache_size_gb": None}
        if isinstance(c["l3_tokens"], int):
            out["l3"] = {"cache.l3_tokens": c["l3_tokens"]}
    return {tier: {k: (v, 1) for k, v in keys.items()} for tier, keys in out.items()}


def _sized_in_bytes(raw: dict, sc, caps: dict) -> list[str]:
    """The tiers whose token count follows the KV bytes per token: L1 auto; L2 by GB per rank,
    in bytes, or by ratio of an L1 in bytes; L3 in bytes."""
    rc = raw.get("cache") or {}
    l1 = sc.doc["cache"]["l1_plan"] is not None
    l2 = (rc.get("hicache_size_gb") is not None or isinstance(rc.get("l2_tokens"), str)
          or (rc.get("l2_tokens") is None and rc.get("hicache_ratio") is not None and l1))
    l3 = isinstance(rc.get("l3_tokens"), str) and rc["l3_tokens"] != "unbounded"
    return [t for t, by in (("l1", l1), ("l2", l2), ("l3", l3)) if by and t in caps]


def _efficiencies(sc) -> dict:
    from sim.cost import Efficiency
    from sim.operators import EFFICIENCY_FIELDS

    eff = dataclasses.asdict(Efficiency(**sc.efficiency))
    used = EFFICIENCY_FIELDS if sc.doc["cost"]["kind"] == "operators" else eff
    return {k: v for k, v in eff.items() if (k.startswith("mfu_") or k.endswith("_efficiency")) and k in used}


def variant_sets(factors: list[tuple[Input, float]]) -> dict:
    """{key: value} for the inputs at their factors (a key shared by several: the product)."""
    scale: dict = {}
    nominal: dict = {}
    for inp, f in factors:
        for key, (v, e) in inp.keys.items():
            nominal[key] = v
            scale[key] = scale.get(key, 1.0) * f ** e
    return {k: _scaled(k, nominal[k], scale[k]) for k in nominal}


def _scaled(key: str, v, f: float):
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return int(math.floor(v * f))
    v = float(f"{v * f:.12g}")  # 12 significant digits: no float noise in the --set text
    return min(v, 1.0) if key.startswith("cost.efficiency.") else v


def plan_runs(raw: dict, sc, pct: float) -> list[tuple[str, float | None, dict]]:
    """[(label, factor, {key: value})]: nominal, each input low/high, the corners, the cliff pair."""
    p = pct / 100
    ins = inputs(raw, sc)
    runs = [("nominal", 1.0, {})]
    for inp in ins:
        runs += [(inp.name, 1 - p, variant_sets([(inp, 1 - p)])), (inp.name, 1 + p, variant_sets([(inp, 1 + p)]))]
    for label, bad in (("all_low", True), ("all_high", False)):
        runs.append((label, None, variant_sets([(i, (1 + p if i.worse_high else 1 - p) if bad else
                                                    (1 - p if i.worse_high else 1 + p)) for i in ins])))
    caps = [i for i in ins if i.name in ("l1", "l2", "l3")]
    q = CLIFF_PCT / 100
    runs += [("capacity", 1 - q, variant_sets([(i, 1 - q) for i in caps])),
             ("capacity", 1 + q, variant_sets([(i, 1 + q) for i in caps]))]
    return runs


def headline(task) -> dict:
    """The headline figures of one run (a worker: task = (raw, where))."""
    from . import results
    from .run import request_rows, simulate, summarise
    from scenarios.scenario import resolve

    raw, where = task
    sc = resolve(raw, where)
    eng, env, _, _ = simulate(sc)
    rows = request_rows(eng)
    s = summarise(eng, rows, results.round_table(rows), env.now)
    return {k: s.get(k) for k in HEADLINE}


def sensitivity(raw: dict, pct: float = DEFAULT_PCT, *, where: str = "<scenario>", jobs: int = 1,
                progress: bool = False) -> dict:
    """Run every variant of `raw` (ScenarioError before any runs if one does not resolve) and
    return {"pct", "runs": [{input, factor, sets, figures...}], "band", "cliff"}."""
    from scenarios.scenario import ScenarioError, resolve

    if not (isinstance(pct, (int, float)) and 0 < pct < 100):
        raise ScenarioError(f"--pct {pct!r}: expected a number in (0, 100)")
    sc = resolve(raw, where)
    runs = plan_runs(raw, sc, pct)
    figures = _run_all(_tasks(raw, runs, where), jobs, progress)
    rows = [{"input": label, "factor": f, "sets": _set_text(sets), **fig}
            for (label, f, sets), fig in zip(runs, figures)]
    return {"scenario": sc.doc["name"] or "scenario", "pct": pct, "runs": rows, "band": _band(rows[:-2]),
            "cliff": _cliff(rows)}


def _tasks(raw: dict, runs, where: str) -> list[tuple[dict, str]]:
    """(scenario mapping, name) of every run, each resolved once here so that a bad variant
    stops the command before anything runs."""
    from scenarios.scenario import resolve, set_key

    tasks = []
    for label, f, sets in runs:
        r = copy.deepcopy(raw)
        for key, v in sets.items():
            set_key(r, key, v)
        name = f"{where} [{label}" + ("" if f is None else f" x{f:g}") + "]"
        resolve(r, name)
        tasks.append((r, name))
    return tasks


def _run_all(tasks, jobs: int, progress: bool) -> list[dict]:
    """`headline` of every task, in task order (a process pool when jobs > 1; a bar on a TTY)."""
    from .sweep import progress_bar
    from .workers import process_map

    bar = progress_bar(progress, len(tasks), 0, "sensitivity")
    figures = []
    try:
        for fig in (map(headline, tasks) if jobs == 1 else process_map(headline, tasks, jobs)):
            figures.append(fig)
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    return figures


def _set_text(sets: dict) -> str:
    """The variant as --set items (KEY=VALUE, space-separated; None as YAML's null)."""
    return " ".join(f"{k}={'null' if v is None else v}" for k, v in sets.items())


def _band(rows) -> dict:
    """{figure: [min, max]} over the nominal, one-at-a-time and corner runs."""
    out = {}
    for k in HEADLINE:
        xs = [r[k] for r in rows if r[k] is not None]
        out[k] = [min(xs), max(xs)] if xs else [None, None]
    return out


def _cliff(rows) -> dict:
    nominal, low, high = rows[0]["hit_rate"], rows[-2]["hit_rate"], rows[-1]["hit_rate"]
    moved = max(abs(low - nominal), abs(high - nominal)) * 100
    return {"pct": CLIFF_PCT, "hit_rate": nominal, "hit_rate_low": low, "hit_rate_high": high,
            "moved_points": moved, "near_capacity_cliff": moved > CLIFF_POINTS}


def write_outputs(res: dict, out_dir) -> None:
    """sensitivity.json (everything) and sensitivity.csv (one row per run) in `out_dir`."""
    from .outputs import write

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "sensitivity.json", res)
    write(out / "sensitivity.csv", res["runs"], columns=["input", "factor", *HEADLINE, "sets"])


_FORMATS = {"hit_rate": ("hit", "{:.4f}"), "hit_rate_device": ("L1", "{:.4f}"), "hit_rate_host": ("L2", "{:.4f}"),
            "hit_rate_storage": ("L3", "{:.4f}"), "ttft_mean_s": ("TTFT mean s", "{:.4f}"),
            "ttft_p90_s": ("TTFT p90 s", "{:.4f}"), "effective_input_tps": ("tok/s", "{:,.0f}")}


def format_table(res: dict) -> str:
    """The printed report: one line per run, the band of each figure, the cliff verdict."""
    from .outputs import plural

    def cells(values):
        return "".join(f"{('-' if v is None else _FORMATS[k][1].format(v)):>13}" for k, v in zip(HEADLINE, values))

    lines = [f"sensitivity of {res['scenario']} at +-{res['pct']:g}% ({plural(len(res['runs']), 'run')})",
             f"{'input':<12}{'factor':>7}" + "".join(f"{_FORMATS[k][0]:>13}" for k in HEADLINE)]
    for r in res["runs"]:
        f = "corner" if r["factor"] is None else f"{r['factor']:.2f}"
        lines.append(f"{r['input']:<12}{f:>7}" + cells(r[k] for k in HEADLINE))
    lines.append(f"{'band min':<19}" + cells(res["band"][k][0] for k in HEADLINE))
    lines.append(f"{'band max':<19}" + cells(res["band"][k][1] for k in HEADLINE))
    c = res["cliff"]
    verdict = "NEAR A CAPACITY CLIFF" if c["near_capacity_cliff"] else "not near a capacity cliff"
    lines.append(f"{verdict}: capacity x{1 - c['pct'] / 100:.2f} / x{1 + c['pct'] / 100:.2f} moves the hit rate "
                 f"{c['hit_rate']:.4f} to {c['hit_rate_low']:.4f} / {c['hit_rate_high']:.4f} "
                 f"({c['moved_points']:.1f} points; the flag is > {CLIFF_POINTS:g})")
    return "\n".join(lines)


__all__ = ["sensitivity", "plan_runs", "inputs", "format_table", "write_outputs", "HEADLINE", "DEFAULT_PCT"]
