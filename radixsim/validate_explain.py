"""`radixsim validate --explain`: where each case's simulated TTFT goes, beside the published one.

A diagnosis, printed and never applied: nothing in the model changes, no file is written.
Each full case of `validation/` is simulated as `radixsim validate` does (same scenario, same
seed) with a `sim.ttft_split.TtftRecorder` attached, which splits every request's TTFT into
queue, load by link and compute by operator (its docstring says how, including how a step's
operator split is charged to the requests in it). Per round, the printed figures are the means
over the round's requests with a first token (the requests `radixsim validate`'s sim TTFT
averages), in ms, so a round's parts add up to its simulated mean TTFT; ``new`` and ``cached``
are the round's mean new (prompt - cached) and cached tokens per request in the simulation.

Then the residual that would close the gap, over the rounds compared (both TTFTs present and
> 0): published - simulated mean TTFT ~ a + b x new + c x cached (a per request, b per new
token, c per cached token), fitted two ways with numpy:

- ``nnls``: non-negative least squares, solved exactly by trying every subset of the three
  terms (unconstrained least squares on the subset; the best fit whose coefficients are all
  >= 0: the NNLS optimum is the least-squares fit on its own support, so one of the 8 is it).
  No scipy needed (scipy.optimize.nnls would give the same; scipy is not a dependency);
- ``lstsq``: plain least squares (``numpy.linalg.lstsq``), negative coefficients named.

A term added to a request's service time also lengthens the queue of the requests behind it,
which the direct fit ignores. So a second fit scales each round's row by m = sim / (sim -
queue), the round's simulated TTFT over its TTFT without the queue: to first order, when the
queue is made of other requests' service (a burst of arrivals served in turn), a service time
longer by d lengthens the mean TTFT by m d. Both are printed; neither is exact (the simulation
is not linear). Within one multi-turn case ``new`` varies little across rounds, so a and b are
nearly collinear: the rank and the condition number of the (scaled) design are printed.
"""
from __future__ import annotations

import itertools
import sys

import numpy as np

from .args import EXIT_BAD_INPUT
from .validate_cases import CaseError, case_files, scenario_of, skip_reason

TERMS = ("a", "b", "c")  # per request, per new token, per cached token
_SCALE = np.array([1.0, 1e-3, 1e-3])  # the design's columns in requests, k tokens, k tokens


def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a few columns: the best of the unconstrained fits on
    every subset of the columns whose coefficients are all >= 0 (exact; module docstring)."""
    best, best_rss = np.zeros(x.shape[1]), float(y @ y)
    for k in range(1, x.shape[1] + 1):
        for cols in itertools.combinations(range(x.shape[1]), k):
            coef = np.linalg.lstsq(x[:, cols], y, rcond=None)[0]
            if np.any(coef < 0):
                continue
            rss = float(np.sum((x[:, cols] @ coef - y) ** 2))
            if rss < best_rss - 1e-15:
                best, best_rss = np.zeros(x.shape[1]), rss
                best[list(cols)] = coef
    return best


def residual_fit(new, cached, gap, amplification=None) -> dict:
    """The fits of gap ~ a + b new + c cached (module docstring): {"nnls": (a, b, c),
    "lstsq": (a, b, c), "rank", "cond", "rms_nnls", "rms_lstsq", "rounds"}; a in s per request,
    b and c in s per token. With `amplification` (one m per round), the design's rows are
    scaled by m: gap ~ m (a + b new + c cached)."""
    y = np.asarray(gap, dtype=float)
    x = np.column_stack([np.ones_like(y), np.asarray(new, float), np.asarray(cached, float)]) * _SCALE
    if amplification is not None:
        x = x * np.asarray(amplification, dtype=float)[:, None]
    out = {"rounds": len(y)}
    if len(y) == 0:
        return out
    ls, _, rank, sv = np.linalg.lstsq(x, y, rcond=None)
    nn = nnls(x, y)
    out.update(nnls=tuple(float(v) for v in nn * _SCALE), lstsq=tuple(float(v) for v in ls * _SCALE),
               rank=int(rank), cond=float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf"),
               rms_nnls=float(np.sqrt(np.mean((x @ nn - y) ** 2))),
               rms_lstsq=float(np.sqrt(np.mean((x @ ls - y) ** 2))))
    return out


def explain_case(case: dict, *, smoke: bool = False, seed: int = 0) -> dict:
    """Simulate one full case with the recorder; its per-round split and the residual fit."""
    from scenarios.scenario import ScenarioError, resolve
    from scenarios.scenario import smoke as smoke_raw
    from sim.recorder import request_rows
    from sim.ttft_split import BETWEEN, TtftRecorder

    from .run import simulate

    raw, _notes = scenario_of(case, seed)
    if smoke:
        raw = smoke_raw(raw)
    try:
        sc = resolve(raw, f"{case['_file']}: {case['id']}")
    except ScenarioError as e:
        raise CaseError(str(e)) from None
    rec = TtftRecorder()
    eng, _env, _cost, _wall = simulate(sc, setup=rec.attach)
    split = rec.split(eng)
    by_round: dict = {}
    for row in request_rows(eng):
        if row["round"] is not None and row["ttft_s"] is not None:
            by_round.setdefault(row["round"], []).append(row)
    pub = case["published"]["ttft_mean_s_per_round"]
    rounds = []
    for i, rnd in enumerate(sorted(by_round)):
        rows = by_round[rnd]
        parts: dict = {"queue": 0.0}
        for row in rows:
            s = split[row["rid"]]
            parts["queue"] += s["queue"]
            for kind in ("load", "compute"):
                for k, v in s[kind].items():
                    parts[(kind, k)] = parts.get((kind, k), 0.0) + v
        n = len(rows)
        rounds.append({"round": rnd, "requests": n, "sim_ttft": float(np.mean([r["ttft_s"] for r in rows])),
                       "pub_ttft": pub[i] if i < len(pub) else None,
                       "new": sum(r["prompt_tokens"] - r["cached_tokens"] for r in rows) / n,
                       "cached": sum(r["cached_tokens"] for r in rows) / n,
                       "parts": {k: v / n for k, v in parts.items()}})
    fitted = [r for r in rounds if r["pub_ttft"] and r["sim_ttft"] > 0]
    args = ([r["new"] for r in fitted], [r["cached"] for r in fitted], [r["pub_ttft"] - r["sim_ttft"] for r in fitted])
    amp = [r["sim_ttft"] / (r["sim_ttft"] - r["parts"]["queue"]) for r in fitted]
    checks = {"load_s": max((abs(s["load_unsplit"]) for s in split.values()), default=0.0),
              "between": min((s["compute"][BETWEEN] for s in split.values()), default=0.0)}
    return {"case": case["id"], "setup": f"{sc.model.name} on {sc.hardware.name} tp={sc.tp}", "rounds": rounds,
            "fit": residual_fit(*args), "fit_queued": residual_fit(*args, amplification=amp), "checks": checks,
            "requests": len(split)}


def explain(names=(), *, smoke: bool = False, seed: int = 0) -> list:
    """Every named full case (default: all of validation/), in file order; skipped ones as
    {"case", "skipped": reason}."""
    out = []
    for _path, case in case_files(names):
        reason = skip_reason(case)
        out.append({"case": case["id"], "skipped": reason} if reason else
                   explain_case(case, smoke=smoke, seed=seed))
    return out


# -- output -----------------------------------------------------------------------------------
def _columns(rounds: list) -> list:
    """The split's columns present in a case: queue, the load links, the compute parts."""
    from sim.operators import OPERATOR_PARTS
    from sim.ttft_split import BETWEEN, FRONTEND, OTHERS_LOADS, STEP

    keys = {k for r in rounds for k, v in r["parts"].items() if v != 0.0 or k == "queue"}
    loads = sorted(k for k in keys if k != "queue" and k[0] == "load")
    order = list(OPERATOR_PARTS) + [STEP, OTHERS_LOADS, FRONTEND, BETWEEN]
    comp = [("compute", k) for k in order if ("compute", k) in keys]
    return ["queue"] + loads + comp


def _label(col) -> str:
    return "queue" if col == "queue" else ("load " if col[0] == "load" else "") + col[1].replace(" ", "_")


def _ms(v) -> str:
    return "-" if v is None else f"{1e3 * v + 0.0:.1f}".replace("-0.0", "0.0")


def format_case(res: dict) -> list:
    """The printed lines of one case."""
    if "skipped" in res:
        return [f"{res['case']}: skipped: {res['skipped']}"]
    cols = _columns(res["rounds"])
    head = ["round", "new", "cached", "pub", "sim"] + [_label(c) for c in cols]
    table = [[str(r["round"]), f"{r['new']:.0f}", f"{r['cached']:.0f}", _ms(r["pub_ttft"]), _ms(r["sim_ttft"])]
             + [_ms(r["parts"].get(c, 0.0)) for c in cols] for r in res["rounds"]]
    widths = [max(len(row[i]) for row in [head] + table) for i in range(len(head))]
    lines = [f"{res['case']} ({res['setup']}): per round, mean per request; times in ms "
             f"(sim = queue + load + compute parts)"]
    lines += ["  " + " ".join(v.rjust(w) for v, w in zip(row, widths)) for row in [head] + table]
    ch = res["checks"]
    lines.append(f"  split check over {res['requests']} requests: max |load parts - engine load_s| = "
                 f"{_ms(ch['load_s'])} ms, min between steps = {_ms(ch['between'])} ms (>= 0 up to round-off)")
    lines += _fit_lines(res["fit"], "residual published - sim ~ a + b new + c cached")
    lines += _fit_lines(res["fit_queued"], "queue-scaled: published - sim ~ m (a + b new + c cached), m = sim / "
                        "(sim - queue) per round")
    return lines


def _coefs(c) -> str:
    return (f"a = {1e3 * c[0]:.1f} ms/request, b = {1e6 * c[1]:.2f} us/new token, "
            f"c = {1e6 * c[2]:.2f} us/cached token")


def _fit_lines(fit: dict, what: str) -> list:
    n = fit["rounds"]
    if not n:
        return [f"  {what}: no round to fit"]
    neg = [t for t, v in zip(TERMS, fit["lstsq"]) if v < 0]
    return [f"  {what}, over {n} rounds (diagnosis, not applied):",
            f"    nnls:  {_coefs(fit['nnls'])}; rms left {1e3 * fit['rms_nnls']:.1f} ms",
            f"    lstsq: {_coefs(fit['lstsq'])}; rms left {1e3 * fit['rms_lstsq']:.1f} ms"
            + (f"; negative: {', '.join(neg)}" if neg else ""),
            f"    design rank {fit['rank']} of 3, condition number {fit['cond']:.3g} (columns: 1, new/1000, "
            "cached/1000)" + ("; the terms are not separable in this case: lstsq gives the least-norm fit, nnls "
                              "the first best subset (a, b, c in that order)" if fit["rank"] < 3 else "")]


def run(args) -> int:
    """`radixsim validate --explain` (cli): print every case's split and residual fit (a CaseError
    or OSError is for the caller, validate.dispatch, to report)."""
    if args.backend != "published":
        sys.stderr.write("radixsim validate: error: --explain: only with --backend published "
                         f"(got --backend {args.backend})\n")
        return EXIT_BAD_INPUT
    for res in explain(args.cases, smoke=args.smoke, seed=args.seed):
        print("\n".join(format_case(res)))
    return 0


__all__ = ["explain", "explain_case", "format_case", "nnls", "residual_fit", "run", "TERMS"]
