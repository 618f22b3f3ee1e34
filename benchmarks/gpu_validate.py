"""Validate the simulator against the torch backend on this machine: the one script for a lent
H200 (at most 8 minutes: `--budget-s`, default 480; nothing downloaded). `--quick` (CPU sizes,
the default with `--device cpu`) is what CI runs (tests/test_validate_torch.py).

Before anything runs it checks the imports, the torch and CUDA versions and the free device and
host memory (`preflight`; a shortfall is one line each on stderr, exit 2). Then each part runs in
its own guard (an exception is recorded with its traceback, and the next part runs) under what is
left of the time budget (SIGALRM), and writes OUT/part_<x>.json, and OUT/gpu_validate.json so
far, as soon as it ends (radixsim/outputs.py; OUT: --out, default runs/gpu_validate):

(a) copy bandwidth: batched, scattered KV-page copies device<->host as the data plane makes them
    (gpu_backend/staging.py: one copy per run of pages) for the `page_first` and `layer_first`
    layouts, small and large pages, both directions, beside one plain copy of as many bytes and
    the hardware preset's modelled host link (`sim.cost.transfer_time_s(hw, bytes, "pcie")`);
    target: the batched copy >= 85% of the plain copy on a GPU (>= 50% on CPU);
(b) prefill time against the cached fraction of one prompt (8K tokens, hidden 4096, bf16 on a
    GPU), and the speed-up at 90% cached;
(c) the operator table (`radixsim calibrate`'s, for a dense preset at its real widths: GEMMs by
    shape, prefill attention by (prefix, new), decode attention by keys, copies by bytes) ->
    OUT/operators_<model>.json, each operator beside `sim/operators.py`'s prediction for it
    (measured / predicted; reported, no target: on CPU the prediction is an H200's);
(d) the loop of `radixsim validate --backend torch` (radixsim/validate_torch.py) on two small
    multi-turn scenarios WITH L2 (an L1 smaller than the sessions, so later rounds load from L2),
    one dense (Llama-3.1-8B's layer mix) and one hybrid (Qwen3-Next-80B: full attention + gated
    delta-rule layers): a step table of the torch model measured first (`radixsim calibrate
    --kind steps`), then the torch backend (measured clock) against the simulator priced by it:
    per-step error (targets: median <= 10%, p90 <= 25%), per-round TTFT ratio (target within
    +-15%), cached tokens identical on the same clock (any difference fails).

Exit status: 0 when every part ran and met its targets; 1 on any failed or skipped part, missed
target or differing hits (the reasons: "failures" in gpu_validate.json and the last lines
printed); 2 when the preflight or the arguments fail.

The GPU machine may lack simpy and a network: on a connected machine run
`pip download simpy -d wheels/` in the repository root (wheels/ is git-ignored; ~20 KB), carry
wheels/ along, then `pip install --no-index wheels/*.whl` there (or let this script import the
wheel from wheels/ directly). Run from the repository root:

    python benchmarks/gpu_validate.py [--device cuda|cpu] [--quick] [--out DIR] [--budget-s S]
"""
from __future__ import annotations

import argparse
import glob
import os
import signal
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIMPY_HELP = ("gpu_validate: simpy is missing (the engine's clock needs it). On a machine with a network, in the "
              "repository root: pip download simpy -d wheels/ ; carry wheels/ to this machine, then: "
              "pip install --no-index wheels/*.whl")

SIZES = Path(__file__).with_name("gpu_validate_sizes.yaml")  # per device: the parts' sizes (read in main)
SCENARIOS = {"dense": "llama-3.1-8b", "hybrid": "qwen3-next-80b"}


# targets (issue 28): batched page copies against a plain copy of the same bytes; the loop (d)
TARGETS = {"copy_pct": {"cuda": 85.0, "cpu": 50.0}, "step_median": 0.10, "step_p90": 0.25, "round_ttft": 0.15}
IMPORTS = ("numpy", "yaml", "simpy", "torch", "scenarios.scenario", "sim.operators", "sim.cost",
           "gpu_backend.calibrate",
           "gpu_backend.backend", "radixsim.validate_torch", "radixsim.outputs")


def log(msg: str) -> None:
    print(msg, flush=True)


def need_simpy() -> bool:
    """True when simpy imports (from site-packages or a wheel in wheels/); else prints how to get it."""
    try:
        import simpy  # noqa: F401
        return True
    except ImportError:
        for whl in sorted(glob.glob(str(ROOT / "wheels" / "simpy-*.whl"))):
            sys.path.insert(0, whl)  # a pure-Python wheel is importable straight from the zip
        try:
            import simpy  # noqa: F401,F811
            return True
        except ImportError:
            print(SIMPY_HELP, file=sys.stderr)
            return False


def host_available_bytes() -> int:
    """MemAvailable of /proc/meminfo (Linux), else the free physical pages: the figure the L2 pools
    check (gpu_backend.pools.host_memory_available)."""
    from gpu_backend.pools import host_memory_available

    return host_memory_available()


def preflight(device: str, size: dict) -> tuple:
    """(what this machine has, problems: one line each) before anything runs: the imports, the
    torch and CUDA versions, free device and host memory against what the sizes need."""
    import importlib

    import torch

    info: dict = {"torch": str(torch.__version__), "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    problems = []
    for mod in IMPORTS:
        try:
            importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001 - any import failure is reported, not raised
            problems.append(f"import {mod}: {type(e).__name__}: {e}")
    need = size["memory"]
    info["host_free_gib"] = host_available_bytes() / 2**30
    if info["host_free_gib"] < need["host_gib"]:
        problems.append(f"host memory: {info['host_free_gib']:.1f} GiB available; expected >= {need['host_gib']} GiB")
    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        info.update(gpu=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
                    cudnn=torch.backends.cudnn.version(), device_free_gib=free / 2**30, device_total_gib=total / 2**30)
        if free / 2**30 < need["device_gib"]:
            problems.append(f"device memory: {free / 2**30:.1f} GiB free of {total / 2**30:.1f}; expected >= "
                            f"{need['device_gib']} GiB")
    return info, problems


def part_copy(device: str, size: dict) -> dict:
    import torch

    from gpu_backend.calibrate import copy_bandwidth
    from gpu_backend.pools import KVPools
    from gpu_backend.spec import HybridSpec
    from scenarios.presets import get_hardware
    from sim.cost import transfer_time_s

    c, hw = size["copy"], get_hardware("h200x1")
    target = TARGETS["copy_pct"]["cuda" if device == "cuda" else "cpu"]
    rows, failures = [], []
    for layout in ("page_first", "layer_first"):
        for ps in c["page_sizes"]:
            pages = c["pages"] * max(c["page_sizes"]) // ps  # the same bytes with smaller pages
            spec = HybridSpec(kinds=("full",) * c["layers"], hidden=c["heads"] * c["head_dim"], num_heads=c["heads"],
                              head_dim=c["head_dim"], window=None, state_dim=8, vocab=32, page_size=ps)
            pools = KVPools(spec, full_pages={"L1": pages, "L2": pages}, layout=layout, device=device,
                            dtype=getattr(torch, c["dtype"]))
            r = copy_bandwidth(pools, "full", pages=pages // 2)
            del pools
            r.update(layout=layout, page_size=ps, target_pct=target,
                     modelled_GBps=r["bytes"] / transfer_time_s(hw, r["bytes"], "pcie") / 1e9)
            r["meets_target"] = min(r["d2h_pct_of_baseline"], r["h2d_pct_of_baseline"]) >= target
            if not r["meets_target"]:
                failures.append(f"(a) {layout}, {ps}-token pages: batched copy {r['d2h_pct_of_baseline']:.0f}% (D2H), "
                                f"{r['h2d_pct_of_baseline']:.0f}% (H2D) of a plain copy; target >= {target:.0f}%")
            rows.append(r)
            log(f"(a) {layout:<11} {r['pages']:>4} pages of {r['page_bytes'] / 2**20:6.3f} MiB: "
                f"D2H {r['d2h_GBps']:6.2f} GB/s = {r['d2h_pct_of_baseline']:3.0f}% of plain "
                f"({r['baseline_d2h_GBps']:.2f}), H2D {r['h2d_GBps']:6.2f} GB/s = {r['h2d_pct_of_baseline']:3.0f}% "
                f"({r['baseline_h2d_GBps']:.2f}); "
                f"modelled {hw.name} link {r['modelled_GBps']:.1f} GB/s")
    return {"rows": rows, "failures": failures}


def part_prefill(device: str, size: dict) -> dict:
    import torch

    from gpu_backend.calibrate import prefill_seconds
    from gpu_backend.model import SyntheticHybridModel
    from gpu_backend.spec import HybridSpec

    p = size["prefill"]
    spec = HybridSpec(kinds=("full",) * p["layers"], hidden=p["hidden"], num_heads=p["heads"], head_dim=p["head_dim"],
                      window=None, state_dim=8, vocab=1000, page_size=64)
    model = SyntheticHybridModel(spec, seed=0, device=device, dtype=getattr(torch, p["dtype"]))
    total, rows = p["tokens"], []
    for frac in (0.0, 0.25, 0.5, 0.75, 0.9):
        cached = int(total * frac) // 64 * 64
        rows.append({"cached_fraction": cached / total, "new_tokens": total - cached,
                     "seconds": prefill_seconds(model, total - cached, cached, repeats=3)})
    speedup = rows[0]["seconds"] / rows[-1]["seconds"]
    log(f"(b) prefill of a {total}-token prompt ({p['layers']} layers, hidden {p['hidden']}): "
        + ", ".join(f"{r['cached_fraction']:.0%} cached {r['seconds'] * 1e3:.1f} ms" for r in rows)
        + f"; x{speedup:.2f} faster at 90% cached")
    return {"prompt_tokens": total, "rows": rows, "speedup_at_90pct": speedup, "failures": []}


def operator_predictions(table: dict, cost) -> list:
    """Each measured operator of `table` beside `cost`'s (an `OperatorCostModel`) price for it:
    a GEMM at its shape (bf16 weights), one layer's attention (the model's attention time over
    its full layers), a host -> device copy on the preset's modelled host link."""
    import numpy as np

    from sim.cost import transfer_time_s

    layers = max(cost.model.full_layers, 1)

    def attention(new: int, cached: int, decode: bool) -> float:
        w = {**cost.request_work(np.array([new]), np.array([cached]), decode=decode), "decode": decode}
        return cost.attention_core_s(w, new) / layers

    rows = []
    for g in table["gemm"]:
        for m, sec in g["points"]:
            pred = cost.gemm_s(m, g["n"], g["k"], 2.0 * g["n"] * g["k"])  # bf16 weights
            rows.append(("gemm", f"{g['n']}x{g['k']} M={m}", sec, pred))
    rows += [("prefill_attention", f"prefix {c} new {n}", sec, attention(n, c, False))
             for c, n, sec in table["prefill_attention"]]
    rows += [("decode_attention", f"keys {c}", sec, attention(1, c, True)) for c, sec in table["decode_attention"]]
    rows += [("copy_h2d", f"{b} B", sec, transfer_time_s(cost.hw, b, "pcie")) for b, sec in table["copy"]]
    return [{"operator": op, "at": at, "measured_s": sec, "predicted_s": pred, "ratio": sec / pred if pred else None}
            for op, at, sec, pred in rows]


def part_operators(device: str, size: dict, out_dir: Path) -> dict:
    import statistics

    import torch

    from gpu_backend.calibrate import measure_operators
    from radixsim.outputs import write
    from sim.operators import OperatorCostModel
    from sim.optable import calibration_plan

    cost = OperatorCostModel(SCENARIOS["dense"], "h200x1", 1)
    t0 = time.perf_counter()
    table = measure_operators(calibration_plan(cost), device=device,
                              dtype=torch.bfloat16 if device == "cuda" else torch.float32, **size["operators"])
    path = out_dir / f"operators_{SCENARIOS['dense']}.json"
    write(path, table)
    rows = operator_predictions(table, cost)
    by_op: dict = {}
    for r in rows:
        by_op.setdefault(r["operator"], []).append(r["ratio"])
    medians = {op: statistics.median(v) for op, v in by_op.items() if None not in v}
    log(f"(c) operator table of {table['model']} in {time.perf_counter() - t0:.1f} s -> {path}; measured / "
        f"sim/operators.py's {cost.hw.name} price, median per operator: "
        + ", ".join(f"{op} x{m:.2f} ({len(by_op[op])})" for op, m in medians.items()))
    return {"file": str(path), "seconds": time.perf_counter() - t0, "rows": rows, "median_ratio": medians,
            "failures": []}


def scenario(model: str, device: str, size: dict) -> dict:
    return {"name": f"gpu-validate-{model}", "seed": 11, "model": model, "hardware": "h200x1",
            "cache": {"page_size": 64, "mamba_slots": 64, **size["cache"]},
            "engine": {"max_running_requests": size["workload"]["max_parallel"], "chunked_prefill_tokens": 512},
            "workload": {"kind": "multiturn", "request_rate": "inf", **size["workload"]},
            "torch": {**size["torch"], "device": device}}


def loop_failures(kind: str, res: dict) -> list:
    """The targets (d) missed on one scenario's `compare` result."""
    out = []
    for k, s in res["summary"].items():
        if not s["same_hits"]:
            out.append(f"(d) {kind}: cached tokens differ between the simulator ({k}) and the torch backend on the "
                       f"same clock: requests {', '.join(map(str, s['differing_rids']))}")
    if not res["loads"]["l2_to_l1_bytes"]:
        out.append(f"(d) {kind}: no L2 -> L1 load ran (the copy path is not exercised)")
    st = res["summary"]["table"]["step"]
    if st["median_rel_err"] is None or st["median_rel_err"] > TARGETS["step_median"] or \
            st["p90_rel_err"] > TARGETS["step_p90"]:
        sn = res.get("step_noise") or {}
        floor = "" if not sn.get("steps") else \
            (f" (the torch steps against their own shape's median: median {sn['median_rel_err']:.0%}, "
             f"p90 {sn['p90_rel_err']:.0%})")
        out.append(f"(d) {kind}: step time error (table) median {st['median_rel_err'] or 0:.0%}, p90 "
                   f"{st['p90_rel_err'] or 0:.0%}; targets <= {TARGETS['step_median']:.0%}, "
                   f"<= {TARGETS['step_p90']:.0%}{floor}")
    off = [f"round {r['round']} x{r['table_ratio']:.2f}" for r in res["rounds"]
           if r["table_ratio"] is None or abs(r["table_ratio"] - 1) > TARGETS["round_ttft"]]
    if off:
        out.append(f"(d) {kind}: per-round TTFT (table / torch) outside +-{TARGETS['round_ttft']:.0%}: "
                   + ", ".join(off))
    return out


def part_scenarios(device: str, size: dict, out_dir: Path) -> dict:
    import yaml

    from gpu_backend.backend import TorchOptions
    from gpu_backend.calibrate import measure_table, scenario_model
    from radixsim.outputs import write
    from radixsim.validate_torch import compare, table_text
    from scenarios.scenario import from_file

    results, failures = {}, []
    for kind, model in SCENARIOS.items():
        path = out_dir / f"scenario_{kind}.yaml"
        path.write_text(yaml.safe_dump(scenario(model, device, size)))
        sc = from_file(str(path))
        t0 = time.perf_counter()
        table = out_dir / f"steps_{kind}.json"
        torch_model, scale = scenario_model(sc, TorchOptions(**sc.doc["torch"]))
        write(table, measure_table(torch_model, scale=scale, **size["steps"]))
        log(f"(d) {kind} ({model}): step table of the torch model in {time.perf_counter() - t0:.1f} s")
        results[kind] = compare(str(path), table=str(table))
        failures += loop_failures(kind, results[kind])
        log(table_text([results[kind]]))
    return {**results, "failures": failures}


class BudgetSpent(Exception):
    pass


def run_part(key: str, fn, deadline: float) -> dict:
    """`fn()` in its own guard, stopped (SIGALRM) when the time budget ends: its result, or
    {"error": ..., "failures": [one line]} when it raised or ran out of time."""
    left = deadline - time.monotonic()
    if left <= 1:
        return {"skipped": "time budget spent", "failures": [f"({key}) skipped: the time budget was spent"]}
    alarm = hasattr(signal, "SIGALRM")
    if alarm:
        def spent(_sig, _frame):
            raise BudgetSpent(f"time budget spent after {left:.0f} s")

        signal.signal(signal.SIGALRM, spent)
        signal.alarm(max(1, int(left)))
    t0 = time.perf_counter()
    try:
        res = fn()
    except (Exception, BudgetSpent) as e:  # noqa: BLE001 - a part's failure is recorded, the next part runs
        res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
               "failures": [f"({key}) failed: {type(e).__name__}: {e}"]}
        log(f"({key}) FAILED: {type(e).__name__}: {e}")
    finally:
        if alarm:
            signal.alarm(0)
    res["part_s"] = time.perf_counter() - t0
    return res


PARTS = (("a", "a_copy_bandwidth"), ("b", "b_prefill_vs_cached"), ("c", "c_operator_table"), ("d", "d_sim_vs_torch"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "runs/gpu_validate")
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available")
    ap.add_argument("--quick", action="store_true", help="CPU sizes (the default on --device cpu)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="time budget of all parts (default 480 s)")
    ap.add_argument("--parts", default="abcd", help="which parts to run (default abcd)")
    args = ap.parse_args()
    t_start = time.monotonic()
    if not need_simpy():
        return 2
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_validate: --device cuda: CUDA is not available here; expected --device cpu", file=sys.stderr)
        return 2
    if set(args.parts) - set("abcd") or not args.parts:
        print(f"gpu_validate: --parts {args.parts!r}: expected letters of abcd", file=sys.stderr)
        return 2
    import yaml  # (the preflight names it when missing; simpy was checked above)

    size = yaml.safe_load(SIZES.read_text())["cpu" if args.quick or device == "cpu" else "cuda"]
    info, problems = preflight(device, size)
    from radixsim.outputs import write

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = {"device": device, "quick": args.quick, "budget_s": args.budget_s, "preflight": info, "failures": []}
    log(f"gpu_validate on {info.get('gpu') or 'cpu'} (torch {info['torch']}, CUDA {info['cuda']}, "
        f"host {info['host_free_gib']:.1f} GiB free"
        + (f", device {info['device_free_gib']:.1f} GiB free" if device == "cuda" else "")
        + f"){', quick sizes' if args.quick else ''}; budget {args.budget_s:.0f} s")
    if problems:
        out["failures"] = [f"preflight: {p}" for p in problems]
        write(out_dir / "gpu_validate.json", out)
        for p in problems:
            print(f"gpu_validate: preflight: {p}", file=sys.stderr)
        return 2
    deadline = t_start + args.budget_s
    runs = {"a": lambda: part_copy(device, size), "b": lambda: part_prefill(device, size),
            "c": lambda: part_operators(device, size, out_dir), "d": lambda: part_scenarios(device, size, out_dir)}
    for key, name in PARTS:
        if key not in args.parts:
            continue
        res = run_part(key, runs[key], deadline)
        out[name] = res
        out["failures"] += res["failures"]
        out["wall_s"] = time.monotonic() - t_start
        write(out_dir / f"part_{key}.json", res)
        write(out_dir / "gpu_validate.json", out)  # what has run so far, at once
    for f in out["failures"]:
        log(f"FAILED {f}")
    log(f"done in {out['wall_s']:.0f} s -> {out_dir / 'gpu_validate.json'}: "
        + (f"{len(out['failures'])} failures" if out["failures"] else "every part ran and met its targets"))
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
