"""The staged-load feed of the ``shared_prefix`` workload (scenarios/shared_prefix.py): each
stage's requests at its timer's times, the stage held until its nominal end and until its last
request has finished, then the pause between stages (inference-perf's LoadGenerator.mp_run)."""
from __future__ import annotations

from .sources import FreshTokens, engine_request


def staged_arrivals(env, engine, workload):
    """A SimPy process sending `workload`'s requests stage by stage. Request k (counted over the
    whole run) is rid k, its own session, round = stage + 1 (so rounds.csv is per stage)."""
    cfg = workload.config
    fresh = FreshTokens()
    state = {"left": 0, "wake": None}
    mine: set = set()

    def finished(r):
        if id(r) in mine:
            mine.discard(id(r))
            state["left"] -= 1
            ev = state["wake"]
            if state["left"] == 0 and ev is not None and not ev.triggered:
                ev.succeed()

    engine.listeners.append(finished)
    k = 0
    stages = cfg.stage_list
    for s, stage in enumerate(stages):
        start = env.now
        first = start + cfg.stage_lead_s
        for t in workload.arrival_offsets(s):
            at = first + float(t)
            if at > env.now:
                yield env.timeout(at - env.now)
            req = engine_request(k, k, s + 1, workload.prompt(k), fresh.output(cfg.output_len))
            req.arrival_s = env.now
            state["left"] += 1
            mine.add(id(req))
            engine.arrive(req)
            k += 1
        end = first + stage.duration
        if end > env.now:
            yield env.timeout(end - env.now)
        if state["left"]:
            state["wake"] = env.event()
            yield state["wake"]
        if s < len(stages) - 1 and cfg.stage_interval_s > 0:
            yield env.timeout(cfg.stage_interval_s)
    engine.close_input()


def stage_windows(cfg, rows) -> list:
    """[(start_s, end_s)] of each stage, as `staged_arrivals` ran them, from the result rows
    (round = stage + 1): stage 0 starts at 0; a stage ends at the later of start + lead +
    duration and its last finish; the next starts stage_interval_s later."""
    last: dict = {}
    for r in rows:
        if r.get("round") is not None and r.get("finish_s") is not None:
            last[r["round"]] = max(last.get(r["round"], 0.0), r["finish_s"])
    out, start = [], 0.0
    for s, stage in enumerate(cfg.stage_list):
        end = max(start + cfg.stage_lead_s + stage.duration, last.get(s + 1, 0.0))
        out.append((start, end))
        start = end + cfg.stage_interval_s
    return out


STAGE_COLUMNS = ["stage", "rate", "duration_s", "start_s", "end_s", "requests", "completed", "output_tok_s",
                 "requests_s", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "itl_mean_s", "hit_rate"]


def stage_table(cfg, rows) -> list:
    """stages.csv: one row per stage, as the routing benchmarks report a load stage. Over the
    stage's window (`stage_windows`): output tokens/s and completed requests/s; over its
    completed requests: TTFT mean/p50/p90, ITL mean (decode time / decode gaps, all requests'
    gaps together: token-weighted, as a per-token ITL list averages), and the hit rate (cached
    / prompt tokens of every request of the stage)."""
    import numpy as np

    by: dict = {}
    for r in rows:
        if r.get("round") is not None:
            by.setdefault(r["round"], []).append(r)
    out = []
    for s, (stage, (start, end)) in enumerate(zip(cfg.stage_list, stage_windows(cfg, rows))):
        rs = by.get(s + 1, [])
        ok = [r for r in rs if not r.get("rejected") and r.get("ttft_s") is not None and r.get("finish_s") is not None]
        ttft = np.array([r["ttft_s"] for r in ok], dtype=float)
        span = end - start
        gaps = sum(r["output_tokens"] - 1 for r in ok if r["output_tokens"] > 1)
        decode = sum(r["finish_s"] - r["first_token_s"] for r in ok if r["output_tokens"] > 1)
        prompt = sum(r["prompt_tokens"] for r in rs)
        out.append({
            "stage": s + 1, "rate": stage.rate, "duration_s": stage.duration, "start_s": start, "end_s": end,
            "requests": len(rs), "completed": len(ok),
            "output_tok_s": sum(r["output_tokens"] for r in ok) / span if span > 0 else None,
            "requests_s": len(ok) / span if span > 0 else None,
            "ttft_mean_s": float(ttft.mean()) if len(ttft) else None,
            "ttft_p50_s": float(np.percentile(ttft, 50)) if len(ttft) else None,
            "ttft_p90_s": float(np.percentile(ttft, 90)) if len(ttft) else None,
            "itl_mean_s": decode / gaps if gaps else None,
            "hit_rate": sum(r["cached_tokens"] for r in rs) / prompt if prompt else None,
        })
    return out
