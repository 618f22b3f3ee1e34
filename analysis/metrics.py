"""Metrics of loaded runs (`analysis.load.Run`), computed from the result files only.

Definitions follow DESIGN.md / SPEC.md section 5: hit rate = cached prompt tokens / prompt
tokens (by tier: tokens found on the device, loaded from host, prefetched from storage);
effective input throughput = sum of full prompt lengths / duration; TTFT = first token -
arrival; TPOT = (finish - first token) / (output tokens - 1) for outputs longer than one
token; E2E = finish - arrival. Rejected requests and requests without a TTFT are left out of
the latency statistics, as `radixsim/run.py: summarise` does. Percentiles are numpy's
(linear interpolation), the same as the summary's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .runs import flatten

ROUND_COLUMNS = ["round", "requests", "prompt_tokens", "cached_tokens", "hit_rate", "hit_rate_device",
                 "hit_rate_host", "hit_rate_storage", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s"]
HIT_KEYS = ("hit_rate", "hit_rate_device", "hit_rate_host", "hit_rate_storage")
TIERS = ("device", "host", "storage")


def _rate(num, den):
    return None if den == 0 else num / den


def _col(df, name) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(np.nan, index=df.index)


def per_round(run) -> pd.DataFrame:
    """Per-round table with `ROUND_COLUMNS`: rounds.csv as written when present, else
    recomputed from requests.csv exactly as `radixsim/results.py: round_table` does (sums per
    round, rates of the sums, TTFT mean/p50/p90 over requests with a TTFT). Empty when the
    requests have no round."""
    if run.rounds is not None:
        df = run.rounds.copy()
        for c in ROUND_COLUMNS:
            if c not in df.columns:
                df[c] = np.nan
        return df
    req = run.requests
    if req is None or "round" not in req.columns or req["round"].isna().all():
        return pd.DataFrame({c: pd.Series(dtype=float) for c in ROUND_COLUMNS})
    rows = []
    for rnd, g in req[req["round"].notna()].groupby("round", sort=True):
        prompt = int(g["prompt_tokens"].sum())
        ttft = _col(g, "ttft_s").dropna().to_numpy(dtype=float)
        row = {"round": rnd, "requests": len(g), "prompt_tokens": prompt,
               "cached_tokens": int(g["cached_tokens"].sum())}
        row["hit_rate"] = _rate(row["cached_tokens"], prompt)
        for t in TIERS:
            row[f"hit_rate_{t}"] = _rate(int(_col(g, f"cached_{t}").fillna(0).sum()), prompt)
        row["ttft_mean_s"] = float(np.mean(ttft)) if len(ttft) else None
        row["ttft_p50_s"] = float(np.percentile(ttft, 50)) if len(ttft) else None
        row["ttft_p90_s"] = float(np.percentile(ttft, 90)) if len(ttft) else None
        rows.append(row)
    return pd.DataFrame(rows, columns=ROUND_COLUMNS).astype(float)


def hit_rate_by_tier(run) -> dict:
    """{'hit_rate', 'hit_rate_device', 'hit_rate_host', 'hit_rate_storage'}: summary.json's
    values, recomputed from requests.csv where the summary lacks one (None if unknown)."""
    s = run.summary or {}
    out = {k: s.get(k) for k in HIT_KEYS}
    req = run.requests
    if any(v is None for v in out.values()) and req is not None and len(req):
        prompt = int(req["prompt_tokens"].sum())
        cols = {"hit_rate": "cached_tokens", **{f"hit_rate_{t}": f"cached_{t}" for t in TIERS}}
        for k, c in cols.items():
            if out[k] is None and c in req.columns and req[c].notna().any():
                out[k] = _rate(int(req[c].fillna(0).sum()), prompt)
    return out


def effective_input_tps(run) -> float | None:
    """Sum of prompt tokens / duration (summary.json's value; else from requests.csv's
    first arrival to last finish). None for a clockless run."""
    v = (run.summary or {}).get("effective_input_tps")
    if v is not None:
        return float(v)
    req = run.requests
    if req is None or not len(req) or not {"arrival_s", "finish_s"} <= set(req.columns):
        return None
    if req["arrival_s"].isna().all() or req["finish_s"].isna().all():
        return None
    duration = req["finish_s"].max() - req["arrival_s"].min()
    return float(req["prompt_tokens"].sum() / duration) if duration > 0 else None


def _ok_requests(req: pd.DataFrame) -> pd.DataFrame:
    ok = _col(req, "ttft_s").notna()
    if "rejected" in req.columns:
        ok &= req["rejected"].fillna(0) == 0
    return req[ok]


def latency_percentiles(run, qs=(50, 90, 99)) -> pd.DataFrame:
    """Rows ttft_s, tpot_s, e2e_s; columns n, mean and p<q> for each q (seconds). From
    requests.csv; for a run without per-request rows (an external log) from its summary."""
    cols = ["n", "mean"] + [f"p{q}" for q in qs]
    out = pd.DataFrame(np.nan, index=["ttft_s", "tpot_s", "e2e_s"], columns=cols)
    req = run.requests
    if req is None:
        s = run.summary or {}
        out.loc["ttft_s", "mean"] = s.get("ttft_mean_s")
        for q in qs:
            out.loc["ttft_s", f"p{q}"] = s.get(f"ttft_p{q}_s")
        out.loc["e2e_s", "p50"] = s.get("e2e_p50_s")
        return out.astype(float)
    ok = _ok_requests(req)
    series = {"ttft_s": ok["ttft_s"].to_numpy(dtype=float)}
    if {"finish_s", "first_token_s", "output_tokens"} <= set(ok.columns):
        multi = ok[ok["output_tokens"] > 1]
        series["tpot_s"] = ((multi["finish_s"] - multi["first_token_s"]) / (multi["output_tokens"] - 1)).to_numpy()
    if {"finish_s", "arrival_s"} <= set(ok.columns):
        series["e2e_s"] = (ok["finish_s"] - ok["arrival_s"]).to_numpy(dtype=float)
    for name, a in series.items():
        a = a[~np.isnan(a)]
        out.loc[name, "n"] = len(a)
        if len(a):
            out.loc[name, "mean"] = float(np.mean(a))
            for q in qs:
                out.loc[name, f"p{q}"] = float(np.percentile(a, q))
    return out.astype(float)


def link_bytes(run) -> dict:
    """Bytes moved per link ({'L2->L1': bytes, ...}; summary.json's bytes_per_link)."""
    return dict((run.summary or {}).get("bytes_per_link") or {})


def link_name(column: str) -> str:
    """timeline.csv's 'util_L2_to_L1' -> the link name 'L2->L1'."""
    return column[len("util_"):].replace("_to_", "->")


def link_utilisation(run) -> pd.DataFrame | None:
    """Busy fraction of each link over time: column t_s, then one column per link (named
    'L2->L1', ...), from timeline.csv's util_* columns. None without a timeline."""
    tl = run.timeline
    if tl is None:
        return None
    util = [c for c in tl.columns if c.startswith("util_")]
    df = tl[["t_s"] + util].copy()
    return df.rename(columns={c: link_name(c) for c in util})


def evictions(run) -> pd.DataFrame:
    """summary.json's evictions as rows (component, tier, amount, unit): tokens, except the
    MAMBA pool which counts state slots."""
    rows = []
    for comp, tiers in ((run.summary or {}).get("evictions") or {}).items():
        for tier, amount in (tiers or {}).items():
            rows.append({"component": comp, "tier": tier, "amount": amount,
                         "unit": "slots" if comp == "mamba" else "tokens"})
    return pd.DataFrame(rows, columns=["component", "tier", "amount", "unit"])


def time_breakdown(run) -> pd.DataFrame:
    """Per request: rid, round, queue_s, load_s, compute_s, ttft_s (queue + load + compute
    = TTFT), for requests that have the split (timed modes). Empty otherwise."""
    cols = ["rid", "round", "queue_s", "load_s", "compute_s", "ttft_s"]
    req = run.requests
    if req is None or not {"queue_s", "load_s", "compute_s"} <= set(req.columns):
        return pd.DataFrame(columns=cols)
    df = req[[c for c in cols if c in req.columns]]
    return df[df[["queue_s", "load_s", "compute_s"]].notna().all(axis=1)].reset_index(drop=True)


def match_ttft(sim, hw, by: str = "rid") -> pd.DataFrame:
    """Pairs of TTFTs of two runs: columns key, hw_ttft_s, sim_ttft_s. by='rid': per request
    (requests.csv ttft_s, matched on rid); by='round': per round (mean TTFT). Keys present in
    both runs with a TTFT in both, in key order."""
    if by == "rid":
        for r in (sim, hw):
            if r.requests is None:
                raise ValueError(f"{r.label}: has no per-request rows; match by round instead")
        a = _ok_requests(sim.requests)[["rid", "ttft_s"]]
        b = _ok_requests(hw.requests)[["rid", "ttft_s"]]
        key = "rid"
    elif by == "round":
        a, b = per_round(sim)[["round", "ttft_mean_s"]], per_round(hw)[["round", "ttft_mean_s"]]
        a, b = a.rename(columns={"ttft_mean_s": "ttft_s"}), b.rename(columns={"ttft_mean_s": "ttft_s"})
        key = "round"
    else:
        raise ValueError(f"by={by!r}: expected 'rid' or 'round'")
    m = b.merge(a, on=key, suffixes=("_hw", "_sim")).dropna()
    m = m.rename(columns={key: "key", "ttft_s_hw": "hw_ttft_s", "ttft_s_sim": "sim_ttft_s"})
    return m.sort_values("key").reset_index(drop=True)[["key", "hw_ttft_s", "sim_ttft_s"]]


def error_table(pairs: pd.DataFrame) -> dict:
    """Errors of simulated vs measured TTFT over matched pairs: n, mean_abs_error_s =
    mean |sim - hw|, mean_rel_error = mean |sim - hw| / hw, p90_rel_error = 90th
    percentile (numpy, linear) of |sim - hw| / hw. Pairs with hw <= 0 count only in the
    absolute error."""
    hw = pairs["hw_ttft_s"].to_numpy(dtype=float)
    sim = pairs["sim_ttft_s"].to_numpy(dtype=float)
    err = np.abs(sim - hw)
    pos = hw > 0
    rel = err[pos] / hw[pos]
    return {"n": int(len(err)),
            "mean_abs_error_s": float(err.mean()) if len(err) else None,
            "mean_rel_error": float(rel.mean()) if len(rel) else None,
            "p90_rel_error": float(np.percentile(rel, 90)) if len(rel) else None}


def sim_hw_errors(sim, hw, by: str = "rid") -> dict:
    """`error_table(match_ttft(sim, hw, by))`."""
    return error_table(match_ttft(sim, hw, by))


def runs_table(runs) -> pd.DataFrame:
    """One row per run: label, every flattened config key (provenance left out) and every
    scalar summary field: the input of capacity curves built from runs."""
    rows = []
    for r in runs:
        row = {"label": r.label}
        row.update({k: v for k, v in flatten(r.config).items()
                    if not k.startswith("provenance.") and not isinstance(v, (list, dict))})
        row.update({k: v for k, v in (r.summary or {}).items() if not isinstance(v, (list, dict))})
        rows.append(row)
    return pd.DataFrame(rows)


__all__ = ["per_round", "hit_rate_by_tier", "effective_input_tps", "latency_percentiles", "link_bytes",
           "link_utilisation", "link_name", "evictions", "time_breakdown", "match_ttft", "error_table",
           "sim_hw_errors", "runs_table", "ROUND_COLUMNS"]
