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


def start_events(env, engines: list, events, faults=None) -> dict:
    """Schedule every event on `env`; returns what they did as they happen: event index ->
    {figure: value} (the L3 events' counts; `event_table` adds them to its rows). `faults`: a
    fleet's `fleet.faults.FaultController` (engine_down events)."""
    stats: dict = {i: {} for i in range(len(events))}
    for i, ev in enumerate(events):
        if ev.kind == "engine_down":
            env.process(_engine_down(env, faults, ev, i, stats[i]))
        elif ev.kind == "l3_outage":
            env.process(_l3_outage(env, engines, ev, stats[i]))
        elif ev.kind == "store_restart":
            env.process(_store_restart(env, engines, ev, stats[i]))
        else:
            env.process(_link_slow(env, _links(engines, ev), ev, stats[i]))
    return stats


def _stores(engines: list) -> list:
    """The distinct L3 stores of `engines` (a fleet's shared one once)."""
    out: dict = {}
    for e in engines:
        hier = e.cache.hier
        if hier is not None and hier.storage is not None:
            out.setdefault(id(hier.storage), hier.storage)
    return list(out.values())


def _l3_outage(env, engines, ev, stats):
    """Every L3 transfer issued in the window fails at once; then the index is rebuilt from
    what the store holds (the pages forgotten only because their reads failed come back)."""
    yield env.timeout(ev.at_s)
    stats["started_s"] = env.now
    planes = [e.dataplane for e in engines]
    before = [dict(p.l3_failed) for p in planes]
    held = [(s, s.pages()) for s in _stores(engines)]
    for p in planes:
        p.l3_down = True
    yield env.timeout(ev.duration_s)
    stats["ended_s"] = env.now
    for p in planes:
        p.l3_down = False
    stats["l3_reads_failed"] = sum(p.l3_failed["read"] - b["read"] for p, b in zip(planes, before))
    stats["l3_writes_dropped"] = sum(p.l3_failed["write"] - b["write"] for p, b in zip(planes, before))
    restored = 0
    for store, pages in held:
        now = set(store.pages())
        missing = [k for k in pages if k not in now]
        if missing:
            store.put_many(missing)
        restored += len(missing)
    stats["l3_pages_restored"] = restored


def _store_restart(env, engines, ev, stats):
    yield env.timeout(ev.at_s)
    stats["started_s"] = env.now
    lost = 0
    for store in _stores(engines):
        lost += len(store.pages())
        store.clear()
    stats["l3_pages_lost"] = lost


def _engine_down(env, faults, ev, i, stats):
    yield env.timeout(ev.at_s)
    faults.down(ev.engine, i)
    stats["started_s"] = env.now
    if ev.duration_s is None:
        return
    yield env.timeout(ev.duration_s)
    faults.up(ev.engine)
    stats["ended_s"] = env.now


def _link_slow(env, links, ev, stats):
    yield env.timeout(ev.at_s)
    base = [ln.bandwidth_Bps for ln in links]
    for ln, bw in zip(links, base):
        ln.set_bandwidth(bw / ev.factor)
    stats["started_s"], stats["links_slowed"] = env.now, len(links)
    if ev.duration_s is None:
        return
    yield env.timeout(ev.duration_s)
    for ln, bw in zip(links, base):
        ln.set_bandwidth(bw)
    stats["ended_s"] = env.now


def timeline_events(events, header: list, rows: list) -> tuple:
    """timeline.csv with an ``events`` column: per row, the indices (``;``-joined) of the events
    whose window holds its time (a store_restart: the instant it happened and after)."""
    t = header.index("t_s")
    out = []
    for row in rows:
        active = [str(i) for i, ev in enumerate(events) if ev.at_s <= row[t] < ev.end_s]
        out.append(list(row) + [";".join(active)])
    return header + ["events"], out


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


def event_table(events, rows, slo_ttft_s: float | None = None, faults=None, stats=None) -> list:
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
        row.update((stats or {}).get(k, {}))
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
