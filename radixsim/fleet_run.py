"""`radixsim run` on a scenario with a `fleet:` section: every engine in one SimPy environment
(fleet/), then the usual result files with an ``engine`` column, plus ``engines.csv`` (one row
per engine) and ``fleet.json`` (load balance, hit by tier, TTFT/TPOT percentiles, SLO
attainment and goodput, per engine and for the fleet; summary.json carries it as ``fleet``).

A fleet of one engine writes what the single-engine run writes, byte for byte, apart from the
``engine`` column (last in requests.csv and timeline.csv), summary.json's ``fleet`` key and
config.yaml's ``fleet`` section (tests/test_fleet.py)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from . import results
from sim.recorder import request_rows, summarise, timeline_rows

from .sim_wiring import progress_bar, progress_listener, sim_engine, workload_source, write_result_dir

ENGINE_COLUMNS = ["engine", "role", "requests", "prompt_tokens", "hit_rate", "hit_rate_device", "hit_rate_host",
                  "hit_rate_storage", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s",
                  "slo_attainment", "goodput_rps", "busy_s", "utilisation"]


def simulate_fleet(sc, *, progress: bool = False):
    """Run fleet scenario `sc` to completion: (fleet, env, costs, shared store or None, wall s)."""
    import simpy

    from cache_core import invariants
    from fleet.build import build_fleet

    t0 = time.perf_counter()
    env = simpy.Environment()
    fleet, costs, store = build_fleet(env, sc, sim_engine)
    source, total = workload_source(env, fleet, sc)
    bar = progress_bar(total, progress, sc.doc.get("name") or "fleet")
    if bar is not None:
        fleet.listeners.append(progress_listener(bar, env))
    env.process(source)
    faults = None
    if any(ev.kind == "engine_down" for ev in sc.events):
        from fleet.build import rebuild_engine
        from fleet.faults import FaultController, FaultLog

        fleet.fault_log = FaultLog()
        faults = FaultController(env, fleet, lambda i: rebuild_engine(env, sc, fleet, store, i, sim_engine),
                                 fleet.fault_log)
    else:
        for e in fleet.engines:
            env.process(e.loop())
    if sc.events:
        from sim.events import start_events

        fleet.event_stats = start_events(env, fleet.engines, sc.events, faults)
    env.run()
    if bar is not None:
        bar.close()
    fleet.check_finished(total)
    for e in fleet.engines:
        if sc.engine.kind == "vllm":
            e.cache.check()  # the block pool's recount (cache_core/vllm_blocks.py), as run.py
        else:
            invariants.check(e.cache)
    return fleet, env, costs, store, time.perf_counter() - t0


PD_COLUMNS = ["decode_engine", "bootstrap_s", "prealloc_wait_s", "kv_bytes", "kv_transfer_s", "decode_queue_s", "decode_s", "decode_cached_tokens"]


def fleet_rows(fleet, per_engine: list | None = None) -> list:
    """requests.csv rows of the fleet, by rid, each with its ``engine`` (P/D: the prefill
    engine's row with the decode side's columns, `pd_rows`). `per_engine`: each engine's
    `request_rows`, when already made."""
    per_engine = per_engine if per_engine is not None else [request_rows(e) for e in fleet.engines]
    if hasattr(fleet, "decode"):
        return pd_rows(fleet, per_engine)
    rows = []
    for i, rs in enumerate(per_engine):
        for row in rs:
            rows.append({**row, **_where(fleet, i)})
    rows.sort(key=lambda r: r["rid"])
    return rows


def _where(fleet, i: int) -> dict:
    """The engine (and, with DP attention, the rank) of index i of fleet.engines."""
    return {"engine": i} if fleet.dp == 1 else {"engine": i // fleet.dp, "dp_rank": i % fleet.dp}


def pd_rows(fleet, per_engine: list) -> list:
    """One row per user request of a P/D fleet (fleet/pd.py): times until the first token from
    its prefill engine, then the KV transfer, the decode queue and the decode."""
    dec = {row["rid"]: row for i in fleet.decode for row in per_engine[i]}
    rows = []
    for i in fleet.prefill:
        for row in per_engine[i]:
            part = fleet.parts[row["rid"]]
            boot = part["bootstrap_done_s"] - row["arrival_s"]
            wait = part["prealloc_done_s"] - part["bootstrap_done_s"]
            row = {**row, "engine": i, "decode_engine": fleet.decode[part["d"]],
                   "output_tokens": part["user"].output_length, "bootstrap_s": boot, "prealloc_wait_s": wait,
                   "kv_bytes": part.get("kv_bytes")}
            if row.get("compute_s") is not None:  # the engine's queue starts when the prefill arrives there
                row["compute_s"] -= boot + wait
            d = dec.get(row["rid"])
            if d is not None:
                kv = part["kv_done_s"]
                row.update(finish_s=d["finish_s"], rejected=row["rejected"] or d["rejected"],
                           kv_transfer_s=kv - row["first_token_s"], decode_queue_s=d["first_token_s"] - kv,
                           decode_s=d["finish_s"] - d["first_token_s"], decode_cached_tokens=d["cached_tokens"])
            rows.append(row)
    rows.sort(key=lambda r: r["rid"])
    return rows


def _tpot(r) -> float | None:
    if r["rejected"] or r["ttft_s"] is None or r["output_tokens"] <= 1:
        return None
    return (r["finish_s"] - r["first_token_s"]) / (r["output_tokens"] - 1)


def slo_metrics(rows, ttft_s: float, tpot_s: float, duration: float) -> dict:
    """Latency percentiles, SLO attainment (share of requests with TTFT <= ttft_s and TPOT <=
    tpot_s; rejected ones fail; one output token: TTFT only) and goodput (requests, and their
    prompt + output tokens, meeting both per second of the run: DistServe's goodput)."""
    ok = [r for r in rows if not r["rejected"] and r["ttft_s"] is not None]
    ttft = [r["ttft_s"] for r in ok]
    tpots = [t for t in (_tpot(r) for r in ok) if t is not None]
    good = [r for r in ok if r["ttft_s"] <= ttft_s and (_tpot(r) is None or _tpot(r) <= tpot_s)]
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: None)
    pct = results.percentile
    return {"ttft_p50_s": pct(ttft, 50), "ttft_p90_s": pct(ttft, 90), "ttft_p99_s": pct(ttft, 99),
            "tpot_p50_s": pct(tpots, 50), "tpot_p90_s": pct(tpots, 90), "tpot_p99_s": pct(tpots, 99),
            "slo_attainment": results.rate(len(good), len(rows)), "goodput_rps": per_s(len(good)),
            "goodput_tokens_per_s": per_s(sum(r["prompt_tokens"] + r["output_tokens"] for r in good))}


NOT_SUMMED = ("page_size", "simulated_end_s")  # the same for every engine of a fleet: kept once


def _sum_tree(values: list, key: str | None = None):
    """Numbers summed (but `NOT_SUMMED` keys), mappings key by key, anything else the first
    value (one value: itself)."""
    if len(values) == 1 or key in NOT_SUMMED:
        return values[0]
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: _sum_tree([v[k] for v in values if k in v], k) for k in keys}
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return sum(values)
    return values[0]


def _shared_stats(tree, stats: dict):
    """`tree` with every key of the shared store's `stats` set to its value once (not summed)."""
    if not isinstance(tree, dict):
        return tree
    return {k: stats[k] if k in stats else _shared_stats(v, stats) for k, v in tree.items()}


def engine_table(fleet, per_engine: list, summaries: list, spec, duration: float) -> list:
    """engines.csv: one row per engine from its request rows and its `summarise` summary
    (whose hit-rate totals it reuses)."""
    out = []
    for i, e in enumerate(fleet.engines):
        mine, t = per_engine[i], summaries[i]
        m = slo_metrics(mine, spec.slo_ttft_s, spec.slo_tpot_s, duration)
        busy = e.executor.busy_s
        out.append({**_where(fleet, i), "role": fleet.roles[i], "requests": t["requests"],
                    "prompt_tokens": t["total_prompt_tokens"], **{k: t[k] for k in ENGINE_COLUMNS[4:8]},
                    **{k: m[k] for k in ENGINE_COLUMNS[8:15]}, "busy_s": busy,
                    "utilisation": busy / duration if duration > 0 else None})
    return out


def _balance(values) -> dict:
    a = np.asarray(values, dtype=float)
    mean = float(a.mean()) if len(a) else 0.0
    return {"max_over_mean": float(a.max() / mean) if mean > 0 else None,
            "cv": float(a.std() / mean) if mean > 0 else None, "min": float(a.min()), "max": float(a.max())}


def fleet_summary(fleet, rows, engines: list, spec, duration: float) -> dict:
    t = results.totals(rows, [])
    router = fleet.router
    stats = {k: v if not isinstance(v, list) else len(v) for k, v in
             (("moves", getattr(router, "moves", None)), ("balanced_picks", getattr(router, "balanced_picks", None)),
              ("imbalanced_picks", getattr(router, "imbalanced_picks", None))) if v is not None}
    return {"engines": len(fleet.engines) // fleet.dp, "dp": fleet.dp, "router": spec.router, "router_stats": stats,
            "shared_l3": spec.shared_l3, "slo_ttft_s": spec.slo_ttft_s, "slo_tpot_s": spec.slo_tpot_s,
            **{k: t[k] for k in ("requests", "hit_rate", "hit_rate_device", "hit_rate_host", "hit_rate_storage")},
            "hit_rate_bound": results.rate(fleet.hit_bound(), t["total_prompt_tokens"]),
            **slo_metrics(rows, spec.slo_ttft_s, spec.slo_tpot_s, duration),
            "load_balance": {"requests": _balance([e["requests"] for e in engines]),
                             "prompt_tokens": _balance([e["prompt_tokens"] for e in engines]),
                             "busy_s": _balance([e["busy_s"] for e in engines])},
            "per_engine": engines}


def pd_breakdown(rows) -> dict:
    """Mean seconds of each part of a P/D request: TTFT = bootstrap + pre-allocation wait +
    queue + load + compute on the prefill engine; after it, KV transfer, decode queue, decode."""
    ok = [r for r in rows if not r["rejected"] and r.get("kv_transfer_s") is not None]
    parts = ("bootstrap_s", "prealloc_wait_s", "queue_s", "load_s", "compute_s", "kv_transfer_s", "decode_queue_s", "decode_s")
    return {f"{k[:-2]}_mean_s": float(np.mean([r[k] for r in ok])) if ok else None for k in parts}


def write_fleet(out: Path, sc, fleet, env, costs, store, command: str | None) -> tuple[dict, list]:
    """The result files of a finished fleet run; (summary, rounds)."""
    from cache_core.snapshot import snapshot

    per_engine = [request_rows(e) for e in fleet.engines]
    rows = fleet_rows(fleet, per_engine)
    pd = hasattr(fleet, "decode")
    extra = ["engine"] + (PD_COLUMNS if pd else []) + (["dp_rank"] if fleet.dp > 1 else [])
    log = getattr(fleet, "fault_log", None)
    if log is not None:  # engine_down: how many times each request was routed again
        extra.append("retries")
        for r in rows:
            r["retries"] = log.retries.get(r["rid"], 0)
    results.write(out / "requests.csv", rows, columns=results.REQUEST_COLUMNS + extra)
    rounds = results.round_table(rows)
    if rounds:
        results.write_rounds(out, rounds)
    per = [summarise(e, rs, [], env.now) for e, rs in zip(fleet.engines, per_engine)]
    summary = summarise(fleet.engines[0], rows, rounds, env.now)
    for k in ("bytes_per_link", "evictions", "engine", "tokens_per_link", "storage_fetch", "cache"):
        if k in summary:
            summary[k] = _sum_tree([p[k] for p in per])
    if store is not None:
        summary["cache"] = _shared_stats(summary["cache"], store.stats())
    start = min((r["arrival_s"] for r in rows), default=0.0)
    header, trows = None, []
    for i, e in enumerate(fleet.engines):
        h, tr = timeline_rows(e, summary["duration_s"] + start if rows else 0.0)
        header = h + ["engine"]
        trows += [row + [i] for row in tr]
    if sc.events:
        from sim.events import timeline_events

        header, trows = timeline_events(sc.events, header, trows)
    results.write(out / "timeline.csv", trows, columns=header)
    engines = engine_table(fleet, per_engine, per, sc.fleet, summary["duration_s"])
    results.write(out / "engines.csv", engines, columns=ENGINE_COLUMNS[:1] + (["dp_rank"] if fleet.dp > 1 else [])
                  + ENGINE_COLUMNS[1:])
    fs = fleet_summary(fleet, rows, engines, sc.fleet, summary["duration_s"])
    if pd:
        fs["pd"] = pd_breakdown(rows)
    results.write_events(sc.events, rows, summary, sc.fleet.slo_ttft_s, fs, getattr(fleet, "fault_log", None),
                         getattr(fleet, "event_stats", None))
    results.write(out / "fleet.json", fs)
    summary["fleet"] = {k: v for k, v in fs.items() if k != "per_engine"}
    results.write_stages(out, sc.workload, rows, summary)
    results.write_summary(out, summary)
    doc = {"mode": "sim", **sc.doc, "cost": {**sc.doc["cost"], "model": repr(costs[0])}}
    results.write_config(out, doc, seed=sc.seed, command=command, sc=sc)
    if sc.engine.kind != "vllm":  # vLLM keeps no tree
        results.write(out / "tree.json", snapshot(fleet.engines[0].cache))  # engine 0's cache at the end
    return summary, rounds


def run_fleet(sc, out_dir, *, command: str | None = None, progress: bool = True, plots: bool = True) -> dict:
    """Simulate fleet scenario `sc` and write its result directory (as `run.run_scenario`)."""
    return write_result_dir(out_dir, lambda: simulate_fleet(sc, progress=progress),
                            lambda out, *state: write_fleet(out, sc, *state, command),
                            progress=progress, plots=plots)


__all__ = ["run_fleet", "simulate_fleet", "fleet_rows", "pd_rows", "pd_breakdown", "slo_metrics", "ENGINE_COLUMNS"]
