"""`radixsim validate --backend torch`: the simulator against the torch backend on this machine.

Each scenario runs from the same seed: on the torch backend with the measured clock
(`torch.clock: measured`: every step and copy lasts what it took here, times the preset's layers
over the model's when `torch.layers` reduced them), on the simulator with the scenario's own cost
model, and, with `--table FILE`, on the simulator priced by that table (`cost: {kind: table,
table: FILE}`: what `radixsim calibrate` writes, either kind). Compared per request (TTFT, matched
by request id) and per round (mean TTFT, and its ratio simulator / torch). The torch run's steps
are also priced by each cost model, step by step, so the step-time error is reported apart from
queueing (median and p90 of |predicted - measured| / measured), beside the measured steps' own
noise (`step_noise`: each step of a repeated shape against that shape's median, the floor of
any step-time model on this machine) and, in the JSON, every step with each model's price.

Cached tokens are compared where they are defined identically. Which request reuses what is a
function of the clock: a request whose host (L2) hit meets an L1 with no room for its load at
that moment recomputes (as SGLang's HiCache does when device memory for the load-back is short),
so requests that overlap differently meet different L1s. On the measured clock the overlaps
follow this machine's load: two measured runs of the same hybrid L2 scenario gave different
hits. So each cost model's simulator run is compared with a torch run on the clock that cost
model drives (`torch.clock: modelled`, paced by it: real pools, copies and forwards, the
simulator's times): same clock, so any difference in cached tokens is the torch backend's own
(a transfer it failed, a decision it took apart) and fails the command (exit 1). The measured
run's cached tokens are reported beside them (how many requests differ), never failed on.

Writes DIR/validate_torch_rounds.csv (one row per scenario and round), DIR/validate_torch_requests.csv
and DIR/validate_torch.json (everything, with the step errors).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

from .args import EXIT_BAD_INPUT

EXIT_DIFFERENT_HITS = 1  # the simulator and the torch backend reused different prefixes

ROUND_COLUMNS = ["scenario", "round", "requests", "torch_ttft_s", "sim_ttft_s", "sim_ratio", "sim_rel_err",
                 "table_ttft_s", "table_ratio", "table_rel_err"]
# torch_cached: the measured run's; sim_paced_cached / table_paced_cached: the torch backend on the
# clock that cost model drives (what sim_cached / table_cached are compared with)
REQUEST_COLUMNS = ["scenario", "rid", "round", "torch_ttft_s", "sim_ttft_s", "table_ttft_s", "torch_cached",
                   "sim_cached", "sim_paced_cached", "table_cached", "table_paced_cached"]


def _rel(a, b):
    return None if a is None or not b else abs(a - b) / b


def _ratio(a, b):
    return None if a is None or not b else a / b


def record_steps(ex, log: list) -> list:
    """Wrap executor `ex` (measured clock) so each step's (prefill batch, decode contexts,
    seconds it lasted on the engine's clock: measured, times the executor's layer scale) is
    appended to `log` (returned)."""
    run = ex.execute

    def execute(step):
        before = ex.env.now
        yield from run(step)
        log.append((tuple(step.prefill_cost), tuple(step.decode_contexts), ex.env.now - before))

    ex.execute = execute
    return log


def step_errors(steps: list, cost) -> dict:
    """Median and p90 relative error of `cost`'s step times against the measured ones."""
    err = [abs(cost.step_time_s(p, d) - t) / t for p, d, t in steps if t > 0]
    if not err:
        return {"steps": 0, "median_rel_err": None, "p90_rel_err": None}
    return {"steps": len(err), "median_rel_err": float(np.median(err)), "p90_rel_err": float(np.percentile(err, 90))}


def step_noise(steps: list) -> dict:
    """How far the measured steps are from themselves: steps of one shape (the same prefill
    (new, cached) entries and decode contexts in blocks of 8 tokens: one request's consecutive
    decodes) against their shape's median, over the shapes met more than once. No step-time
    model can do better on those steps than their own median, so on a loaded machine this is
    the floor of the step error (median, p90), and ``max_spread`` the largest max/min within
    a shape."""
    groups: dict = {}
    for p, d, t in steps:
        if t > 0:
            groups.setdefault((tuple(p), tuple(int(c) // 8 for c in d)), []).append(t)
    many = [ts for ts in groups.values() if len(ts) > 1]
    err = [abs(t - statistics.median(ts)) / t for ts in many for t in ts]
    if not err:
        return {"steps": 0, "median_rel_err": None, "p90_rel_err": None, "max_spread": None}
    return {"steps": len(err), "median_rel_err": float(np.median(err)), "p90_rel_err": float(np.percentile(err, 90)),
            "max_spread": max(max(ts) / min(ts) for ts in many)}


def _torch_run(name: str, sets: list, smoke: bool, device: str | None):
    """(scenario, request rows, recorded steps, attention calls per SDPA backend) of the torch run
    on the measured clock."""
    from scenarios.scenario import from_file

    from .run import request_rows, simulate

    sc = from_file(name, list(sets) + ["torch.clock=measured"], smoke_run=smoke)
    steps: list = []
    eng, *_ = simulate(sc, backend="torch", device=device, setup=lambda e: record_steps(e.executor, steps))
    dp = eng.dataplane
    loads = {"l2_to_l1_bytes": int(dp.bytes_moved.get("L2->L1", 0)), "overlapped": int(dp.overlapped),
             "load_batches": int(dp.load_batches)}
    return sc, request_rows(eng), steps, dict(sorted(eng.executor.model.sdpa_calls.items())), loads


def _paced_rows(name: str, sets: list, smoke: bool, device: str | None) -> list:
    """Request rows of the torch backend on the modelled clock (paced by the cost model `sets` name)."""
    from scenarios.scenario import from_file

    from .run import request_rows, simulate

    sc = from_file(name, list(sets) + ["torch.clock=modelled"], smoke_run=smoke)
    return request_rows(simulate(sc, backend="torch", device=device)[0])


def compare(name: str, *, sets=(), table: str | None = None, smoke: bool = False, device: str | None = None) -> dict:
    """One scenario on torch (measured clock), on the simulator, and on the simulator with `table`."""
    from scenarios.scenario import from_file

    from .results import round_table
    from .run import make_cost, request_rows, simulate

    sc, torch_rows, steps, sdpa, loads = _torch_run(name, sets, smoke, device)
    runs = {"torch": torch_rows}
    cost_sets = {"sim": list(sets)}
    if table:
        cost_sets["table"] = list(sets) + ["cost.kind=table", f"cost.table={table}"]
    costs, paced = {}, {}
    for k, ks in cost_sets.items():
        ksc = from_file(name, ks, smoke_run=smoke)
        costs[k] = make_cost(ksc)
        runs[k] = request_rows(simulate(ksc)[0])
        paced[k] = {r["rid"]: r["cached_tokens"] for r in _paced_rows(name, ks, smoke, device)}
    label = sc.doc["name"]
    by_rid = {k: {r["rid"]: r for r in rows} for k, rows in runs.items()}
    requests = []
    for rid, t in sorted(by_rid["torch"].items()):
        row = {"scenario": label, "rid": rid, "round": t["round"], "torch_ttft_s": t["ttft_s"],
               "torch_cached": t["cached_tokens"]}
        for k in ("sim", "table"):
            other = by_rid.get(k, {}).get(rid)
            row[f"{k}_ttft_s"] = None if other is None else other["ttft_s"]
            row[f"{k}_cached"] = None if other is None else other["cached_tokens"]
            row[f"{k}_paced_cached"] = paced.get(k, {}).get(rid)
        requests.append(row)
    tables = {k: {r["round"]: r for r in round_table(rows)} for k, rows in runs.items()}
    rounds = []
    for rnd, t in sorted(tables["torch"].items()):
        row = {"scenario": label, "round": rnd, "requests": t["requests"], "torch_ttft_s": t["ttft_mean_s"]}
        for k in ("sim", "table"):
            v = tables.get(k, {}).get(rnd, {}).get("ttft_mean_s")
            row[f"{k}_ttft_s"], row[f"{k}_rel_err"] = v, _rel(v, t["ttft_mean_s"])
            row[f"{k}_ratio"] = _ratio(v, t["ttft_mean_s"])
        rounds.append(row)
    summary = {}
    for k in costs:
        errs = [_rel(r[f"{k}_ttft_s"], r["torch_ttft_s"]) for r in requests]
        errs = [e for e in errs if e is not None]
        summary[k] = {"cost": _describe(costs[k]), "request_median_rel_err": statistics.median(errs) if errs else None,
                      # same clock: the torch backend paced by this cost model (module docstring)
                      "same_hits": all(r[f"{k}_cached"] == r[f"{k}_paced_cached"] for r in requests),
                      "differing_rids": [r["rid"] for r in requests if r[f"{k}_cached"] != r[f"{k}_paced_cached"]],
                      # the measured clock's own decisions (reported, never failed on)
                      "measured_differing": sum(r[f"{k}_cached"] != r["torch_cached"] for r in requests),
                      "step": step_errors(steps, costs[k])}
    per_step = [{"prefill": [list(map(int, x)) for x in p], "decode": [int(c) for c in d], "torch_s": t,
                 **{f"{k}_s": costs[k].step_time_s(p, d) for k in costs}} for p, d, t in steps]
    return {"scenario": label, "rounds": rounds, "requests": requests, "summary": summary, "sdpa_backends": sdpa,
            "loads": loads, "step_noise": step_noise(steps), "steps": per_step}


def _describe(cost) -> str:
    if type(cost).__repr__ is not object.__repr__:
        return repr(cost)
    return f"{type(cost).__name__}({getattr(cost, 'source', '')!r})"


def table_text(results: list) -> str:
    """The printed table: per scenario its rounds, then per cost model the summary line."""
    from .outputs import fmt_or_dash as _fmt, ruled

    head = (f"{'scenario':<24} {'round':>5} {'torch TTFT':>11} {'sim TTFT':>10} {'ratio':>6} {'table TTFT':>11} "
            f"{'ratio':>6}")
    lines = ruled(head)
    for res in results:
        for r in res["rounds"]:
            lines.append(f"{r['scenario']:<24} {r['round']:>5} {_fmt(r['torch_ttft_s'], '.4f'):>11} "
                         f"{_fmt(r['sim_ttft_s'], '.4f'):>10} {_fmt(r['sim_ratio'], '.2f'):>6} "
                         f"{_fmt(r['table_ttft_s'], '.4f'):>11} {_fmt(r['table_ratio'], '.2f'):>6}")
        n = len(res["requests"])
        for k, s in res["summary"].items():
            st = s["step"]
            lines.append(f"    {k}: {s['cost']}: per request median TTFT error "
                         f"{_fmt(s['request_median_rel_err'], '.0%')}; step time error "
                         f"median {_fmt(st['median_rel_err'], '.0%')}, p90 {_fmt(st['p90_rel_err'], '.0%')} "
                         f"over {st['steps']} steps; cached tokens identical to the torch backend on this clock: "
                         f"{'yes' if s['same_hits'] else 'NO, requests ' + ', '.join(map(str, s['differing_rids']))}"
                         f" (on the measured clock {s['measured_differing']} of {n} requests differ)")
        sn = res.get("step_noise")
        if sn and sn["steps"]:
            lines.append(f"    torch steps against their own shape's median ({sn['steps']} steps of repeated shapes, "
                         f"the floor of any step-time model here): median {sn['median_rel_err']:.0%}, p90 "
                         f"{sn['p90_rel_err']:.0%}; up to x{sn['max_spread']:.2f} within a shape")
        ld = res.get("loads")
        if ld:
            lines.append(f"    torch L2 -> L1 loads: {ld['l2_to_l1_bytes'] / 2**20:.2f} MiB (the preset's KV bytes), "
                         f"{ld['overlapped']} overlapped with compute")
        if res.get("sdpa_backends"):
            lines.append("    torch attention calls by SDPA backend: "
                         + ", ".join(f"{k} {v}" for k, v in res["sdpa_backends"].items()))
    return "\n".join(lines)


def write_outputs(out_dir, results: list) -> Path:
    from .outputs import write

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "validate_torch_rounds.csv", [r for res in results for r in res["rounds"]], columns=ROUND_COLUMNS)
    write(out / "validate_torch_requests.csv", [r for res in results for r in res["requests"]],
          columns=REQUEST_COLUMNS)
    write(out / "validate_torch.json", {"scenarios": results})
    return out


def run(args) -> int:
    """`radixsim validate --backend torch SCENARIO...` (arguments of `validate.add_parser`)."""
    from scenarios.scenario import ScenarioError

    from .args import DeviceError, check_device

    if not args.cases:
        sys.stderr.write("radixsim validate: --backend torch: expected one or more scenarios (a file or a "
                         "catalog name)\n")
        return EXIT_BAD_INPUT
    try:
        if args.device:
            check_device(args.device, "--device")
        res = [compare(name, sets=args.sets, table=args.table, smoke=args.smoke, device=args.device)
               for name in args.cases]
    except (ScenarioError, DeviceError, ValueError, OSError) as e:
        sys.stderr.write(f"radixsim validate: {e}\n")
        return EXIT_BAD_INPUT
    print(table_text(res))
    print(f"wrote {write_outputs(args.out, res)}/validate_torch_rounds.csv, validate_torch_requests.csv, "
          "validate_torch.json")
    bad = [f"{r['scenario']} ({k}: requests {', '.join(map(str, s['differing_rids']))})"
           for r in res for k, s in r["summary"].items() if not s["same_hits"]]
    if bad:
        sys.stderr.write("radixsim validate: --backend torch: cached tokens differ between the simulator and the "
                         f"torch backend on the same clock: {'; '.join(bad)}\n")
        return EXIT_DIFFERENT_HITS
    return 0


__all__ = ["EXIT_DIFFERENT_HITS", "compare", "record_steps", "step_errors", "step_noise", "table_text", "write_outputs",
           "run"]
