"""Carrying out a scenario's fault events (scenarios/events.py) during a simulated run, and
what each did: requests before, during and after its window."""
from __future__ import annotations

import math

import numpy as np


def _links(engines: list, ev) -> list:
    """The distinct Link objects named by `ev` (a fleet's shared L3 links once)."""
    picked = engines if ev.engine is None else [engines[ev.engine]]
    out, seen = [], set()
    for e in picked:
        cands = list(e.links) + ([e.links.ssd] if e.links.ssd is not None else [])
        for ln in cands:
            if ln.name == ev.link and id(ln) not in seen:
                seen.add(id(ln))
                out.append(ln)
    return out


def start_events(env, engines: list, events, faults=None) -> list:
    """Schedule every event on `env`; returns the log that fills as they happen:
    [(t_s, event index, "start" | "end")]. `faults`: a fleet's `fleet.faults.FaultController`
    (engine_down events)."""
    log: list = []
    for i, ev in enumerate(events):
        if ev.kind == "engine_down":
            env.process(_engine_down(env, faults, ev, i, log))
        else:
            env.process(_link_slow(env, _links(engines, ev), ev, i, log))
    return log


def _engine_down(env, faults, ev, i, log):
    yield env.timeout(ev.at_s)
    faults.down(ev.engine, i)
    log.append((env.now, i, "start"))
    if ev.duration_s is None:
        return
    yield env.timeout(ev.duration_s)
    faults.up(ev.engine)
    log.append((env.now, i, "end"))


def _link_slow(env, links, ev, i, log):
    yield env.timeout(ev.at_s)
    base = [ln.bandwidth_Bps for ln in links]
    for ln, bw in zip(links, base):
        ln.set_bandwidth(bw / ev.factor)
    log.append((env.now, i, "start"))
    if ev.duration_s is None:
        return
    yield env.timeout(ev.duration_s)
    for ln, bw in zip(links, base):
        ln.set_bandwidth(bw)
    log.append((env.now, i, "end"))


def check_within_run(events, rows) -> None:
    """ValueError (one line, ``events[i].at_s``) for an event that starts after the run's last
    request finished, or a window that ends after it: it could have changed nothing."""
    end = max((r["finish_s"] for r in rows if r.get("finish_s") is not None), default=0.0)
    for i, ev in enumerate(events):
        if ev.at_s >= end:
            raise ValueError(f"events[{i}].at_s: {ev.at_s:g} s is after the run (its last request finished at "
                             f"{end:.3f} s); expected a time within the run")
        if ev.end_s != math.inf and ev.end_s > end:
            raise ValueError(f"events[{i}].duration_s: the window {ev.at_s:g}-{ev.end_s:g} s ends after the run "
                             f"(its last request finished at {end:.3f} s); expected a window within the run, or "
                             "null (to the end)")


def event_table(events, rows, slo_ttft_s: float | None = None, faults=None) -> list:
    """Per event: its window and, for the requests that arrived before, during and after it,
    the count, TTFT mean and p90, and (with an SLO) the fraction within the TTFT target; an
    engine_down also what it cost (`faults`, a `fleet.faults.FaultLog`): requests retried, the
    KV tokens they had on the dead engine (recomputed), the cache tokens lost."""
    out = []
    for k, ev in enumerate(events):
        row = {"at_s": ev.at_s, "end_s": None if ev.end_s == math.inf else ev.end_s, "kind": ev.kind,
               "link": ev.link, "factor": ev.factor, "engine": ev.engine, "label": ev.label()}
        if ev.kind == "engine_down" and faults is not None:
            row.update(requests_retried=faults.retried.get(k, 0), tokens_recomputed=faults.lost_tokens.get(k, 0),
                       cache_tokens_lost=faults.cache_lost_tokens.get(k, 0))
        parts = {"before": [r for r in rows if r["arrival_s"] < ev.at_s],
                 "during": [r for r in rows if ev.at_s <= r["arrival_s"] < ev.end_s],
                 "after": [r for r in rows if r["arrival_s"] >= ev.end_s]}
        for name, rs in parts.items():
            t = np.array([r["ttft_s"] for r in rs if r.get("ttft_s") is not None], dtype=float)
            row[f"{name}_requests"] = len(rs)
            row[f"{name}_ttft_mean_s"] = float(t.mean()) if len(t) else None
            row[f"{name}_ttft_p90_s"] = float(np.percentile(t, 90)) if len(t) else None
            if slo_ttft_s is not None:
                row[f"{name}_slo_ttft"] = float(np.mean(t <= slo_ttft_s)) if len(t) else None
        out.append(row)
    return out
