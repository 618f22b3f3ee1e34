"""Result rows and summaries of a simulated run (the engine on the simulator's or the torch
backend's plug-ins): `request_rows` (requests.csv), `round_table` (rounds.csv), `timeline_rows`
(timeline.csv), `summarise` (summary.json); `totals` and `evictions` are shared with replay.
Computed from the finished engine only; radixsim/ writes them."""
from __future__ import annotations

import numpy as np

TIMELINE_MAX_ROWS = 2000


def rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def percentile(a, q) -> float | None:
    """The q-th percentile of `a` (numpy's linear one); None when `a` is empty."""
    return float(np.percentile(a, q)) if len(a) else None


def _tier_split(rows) -> tuple:
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cached_tokens"] for r in rows)
    dev = sum(r["cached_device"] for r in rows)
    host = sum(r["cached_host"] for r in rows)
    sto = sum(r["cached_storage"] for r in rows)
    return prompt, cached, rate(cached, prompt), rate(dev, prompt), rate(host, prompt), rate(sto, prompt)


def round_table(rows) -> list:
    """Per-round sums and hit rates (empty when requests have no round). Time columns are
    filled only when rows carry ttft_s."""
    by: dict = {}
    for r in rows:
        if r.get("round") is not None:
            by.setdefault(r["round"], []).append(r)
    out = []
    for rnd in sorted(by):
        rs = by[rnd]
        prompt, cached, hit, dev, host, sto = _tier_split(rs)
        t = [r["ttft_s"] for r in rs if r.get("ttft_s") is not None]
        out.append({"round": rnd, "requests": len(rs), "prompt_tokens": prompt, "cached_tokens": cached,
                    "hit_rate": hit, "hit_rate_device": dev, "hit_rate_host": host, "hit_rate_storage": sto,
                    "ttft_mean_s": float(np.mean(t)) if t else None,
                    "ttft_p50_s": float(np.percentile(t, 50)) if t else None,
                    "ttft_p90_s": float(np.percentile(t, 90)) if t else None})
    return out


def totals(rows, rounds) -> dict:
    """The hit-rate part of summary.json (hit_rate_last10 over the last 10 rounds)."""
    prompt, cached, hit, dev, host, sto = _tier_split(rows)
    last = None
    if rounds:
        tail = rounds[-10:]
        last = rate(sum(r["cached_tokens"] for r in tail), sum(r["prompt_tokens"] for r in tail))
    return {"requests": len(rows), "total_prompt_tokens": prompt, "total_cached_tokens": cached,
            "hit_rate": hit, "hit_rate_device": dev, "hit_rate_host": host, "hit_rate_storage": sto,
            "hit_rate_last10": last}


def request_rows(eng) -> list:
    rows = []
    front = getattr(eng, "frontend", None)
    for r in sorted(eng.finished, key=lambda x: x.rid):
        ttft = None if r.first_token_s is None else r.first_token_s - r.arrival_s
        row = {"rid": r.rid, "session_id": r.session_id, "round": r.round, "arrival_s": r.arrival_s,
               "start_s": r.admit_s, "first_token_s": r.first_token_s, "finish_s": r.finish_s, "ttft_s": ttft,
               "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_length,
               "cached_tokens": r.cached_tokens, "cached_device": r.cached_device, "cached_host": r.cached_host,
               "cached_storage": r.cached_storage, "evicted_tokens": r.evicted_tokens, "rejected": r.rejected}
        if ttft is not None:
            row.update(queue_s=r.queue_s, load_s=r.load_s, compute_s=ttft - r.queue_s - r.load_s - r.frontend_s)
            if front is not None:  # engine.frontend set: its part of the TTFT (sim/serving_cpu.py)
                row["frontend_s"] = r.frontend_s
        rows.append(row)
    return rows


def _cumulative_busy(points, now: float):
    """(times, busy seconds up to each time) of a link timeline [(t, active), ...]."""
    t = np.array([p[0] for p in points] + [now], dtype=float)
    busy = np.array([1.0 if p[1] > 0 else 0.0 for p in points])
    cum = np.concatenate([[0.0], np.cumsum(np.diff(t) * busy)])
    return t, cum


def _links(eng) -> list:
    """The links the run's tiers use: none without L2, PCIe with L2, and the L3 ones with L3."""
    hier = eng.cache.hier
    if hier is None:  # engine.kind vllm with an L2: its CPU offloading on PCIe
        return [ln for ln in eng.links if ln.name in ("L2->L1", "L1->L2")] if getattr(eng, "offload", None) else []
    names = {"L2->L1", "L1->L2"} | ({"L3->L2", "L2->L3"} if hier.storage is not None else set())
    return [ln for ln in eng.links if ln.name in names]


def timeline_rows(eng, end_s: float) -> tuple[list, list]:
    """timeline.csv: engine samples after each step, at most TIMELINE_MAX_ROWS (the last
    sample of each equal time bin), with each link's busy fraction over the bin."""
    samples = eng.timeline
    links = _links(eng)
    names = [f"util_{ln.name.replace('->', '_to_')}" for ln in links]
    if not samples:
        return ["t_s", "running", "waiting", "l1_used_tokens", "l2_used_tokens", "l3_used_tokens"] + names, []
    ts = np.array([s[0] for s in samples])
    if len(samples) > TIMELINE_MAX_ROWS:
        edges = np.linspace(0.0, end_s, TIMELINE_MAX_ROWS + 1)[1:]
        idx = np.unique(np.clip(np.searchsorted(ts, edges, side="right") - 1, 0, len(ts) - 1))
    else:
        idx = np.arange(len(samples))
    picked = [samples[i] for i in idx]
    times = np.array([p[0] for p in picked])
    prev = np.concatenate([[0.0], times[:-1]])
    cols = []
    for ln in links:
        t, cum = _cumulative_busy(ln.timeline(), max(end_s, float(times[-1])))
        a, b = np.interp(prev, t, cum), np.interp(times, t, cum)
        width = np.where(times > prev, times - prev, 1.0)
        cols.append(np.where(times > prev, (b - a) / width, 0.0))
    rows = []
    for i, p in enumerate(picked):
        rows.append([p[0], p[1], p[2], p[3], p[4], p[5]] + [round(float(c[i]), 6) for c in cols])
    return ["t_s", "running", "waiting", "l1_used_tokens", "l2_used_tokens", "l3_used_tokens"] + names, rows


def summarise(eng, rows, rounds, env_now: float) -> dict:
    ok = [r for r in rows if not r["rejected"] and r["ttft_s"] is not None]
    ttft = np.array([r["ttft_s"] for r in ok]) if ok else np.array([])
    start = min((r["arrival_s"] for r in rows), default=0.0)
    end = max((r["finish_s"] for r in rows if r["finish_s"] is not None), default=0.0)
    duration = end - start
    tpot = [(r["finish_s"] - r["first_token_s"]) / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1]
    e2e = [r["finish_s"] - r["arrival_s"] for r in ok]
    s = {"mode": eng.dataplane.mode, **totals(rows, rounds)}
    s.update({
        "effective_input_tps": s["total_prompt_tokens"] / duration if duration > 0 else None,
        "duration_s": duration,
        "ttft_mean_s": float(ttft.mean()) if len(ttft) else None,
        "ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90), "ttft_p99_s": percentile(ttft, 99),
        "tpot_mean_s": float(np.mean(tpot)) if tpot else None,
        "e2e_p50_s": percentile(e2e, 50),
        "rejected": sum(1 for r in rows if r["rejected"]),
        "queue_mean_s": float(np.mean([r["queue_s"] for r in ok])) if ok else None,
        "load_mean_s": float(np.mean([r["load_s"] for r in ok])) if ok else None,
        "compute_mean_s": float(np.mean([r["compute_s"] for r in ok])) if ok else None,
    })
    cache = eng.cache
    hier = cache.hier
    s["bytes_per_link"] = {ln.name: int(ln.bytes_done) for ln in _links(eng)}
    if eng.dataplane.mode == "torch":  # what the real copies moved
        s["bytes_per_link"] = dict(sorted(eng.dataplane.bytes_moved.items()))
    s["evictions"] = evictions(cache)
    s["engine"] = {"steps": eng.steps, **eng.counters, "busy_s": eng.executor.busy_s,
                   "simulated_end_s": env_now}
    tc = getattr(eng.executor, "tree_cpu", None)
    front = getattr(eng, "frontend", None)
    if front is not None:  # engine.frontend set (sim/serving_cpu.py); absent otherwise
        s["frontend"] = front.summary()
    reads = getattr(eng, "l3_reads", None)
    if reads is not None:  # engine.l3_get_batch_pages set (sim/l3_reads.py); absent otherwise
        s["l3_reads"] = reads.summary()
    if tc is not None:  # engine.tree_core set (sim/tree_cpu.py); absent otherwise
        s["tree_cpu"] = {"core": tc.model.core, "cpu_s": tc.cpu_s, "exposed_s": tc.exposed_s,
                         "ops": dict(sorted(tc.counter.totals.items()))}
    if hier is not None:
        s["tokens_per_link"] = dict(hier.tokens_moved)
    if getattr(eng, "tokens_moved", None) is not None:  # engine.kind vllm with an L2 (cache_core/vllm_engine.py)
        s["tokens_per_link"] = dict(eng.tokens_moved)
        s["evictions"]["full"]["L2"] = cache.stats()["l2_evicted_tokens"]  # CPU chunks evicted, in tokens
    if hier is not None and hier.storage is not None:
        s["storage_fetch"] = storage_fetch(eng.queues.finished)
    s["cache"] = cache.stats()
    return s


def storage_fetch(finished) -> dict:
    """FULL tokens the requests brought from L3 into L2 (at arrival or while loading), the part
    reused as storage hits (``cached_storage``) and the rest, fetched but not reused by the
    request that fetched it (evicted from L2 before its turn, or beyond what it reused)."""
    fetched = sum(r.storage_fetched for r in finished)
    hit = sum(r.cached_storage for r in finished)
    return {"fetched_tokens": fetched, "hit_tokens": hit, "unused_tokens": fetched - hit}


def evictions(cache) -> dict:
    """Tokens (MAMBA: slots) dropped per component and tier; FULL's L1 demotions to L2 (still
    cached) are counted apart, under "L1_demoted_to_L2"."""
    out = {c.name: {"L1": c.stats()["evicted_" + ("slots" if c.name == "mamba" else "tokens")]}
           for c in cache.components}
    if cache.hier is not None:
        # an L1 eviction of a node backed up on L2 is a demotion: the tokens stay cached
        demoted = cache.full.demoted_tokens
        out["full"]["L1"] -= demoted
        out["full"]["L1_demoted_to_L2"] = demoted
        out["full"]["L2"] = cache.hier.evicted_l2_tokens
        if cache.hier.storage is not None:
            out["full"]["L3"] = cache.hier.storage.evicted_pages * cache.page_size
    return out
