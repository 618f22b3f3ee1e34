"""`radixsim calibrate`: time on this device the operators the simulator prices (or whole steps
of the reduced torch model) into a cost table."""
from __future__ import annotations

import sys
import time

from .args import EXIT_BAD_INPUT, torch_device


def add_calibrate(sub) -> None:
    k = sub.add_parser("calibrate", help="time the operators the simulator prices into a cost table",
                       description=(
                           "Time, on this device, the operators the simulator's step-time model prices for the "
                           "scenario's model and TP: GEMMs by shape (rows x N x K), one attention layer per "
                           "(prefix, new) prefill and per decode KV length, and host->device copies by size; write "
                           "them as an operator table (JSON) for `cost: {kind: table, table: FILE}` "
                           "(sim/optable.py interpolates it). --kind steps instead times whole prefill and decode "
                           "forwards of the scenario's reduced torch model (a step-time table)."))
    k.add_argument("scenario", help="scenario file or catalog name")
    k.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    k.add_argument("--device", default=None, help="cpu or cuda (default: the scenario's torch.device)")
    k.add_argument("--kind", choices=["operators", "steps"], default="operators",
                   help="operators (default): per-operator table; steps: step-time table of the torch model")
    k.add_argument("--quick", action="store_true", help="fewer points (a rough table in seconds)")
    k.add_argument("--out", required=True, help="the cost table to write (.json)")


def _cmd_calibrate(args) -> int:
    import dataclasses

    from scenarios.scenario import ScenarioError, from_file

    from .outputs import OutputError, check_out_file

    try:
        check_out_file(args.out, "--out")  # before the work, not after it
        sc = from_file(args.scenario, args.sets)
        from gpu_backend.backend import DTYPES, TorchOptions
    except (ScenarioError, OutputError) as e:
        sys.stderr.write(f"radixsim calibrate: {e}\n")
        return EXIT_BAD_INPUT
    except ImportError as e:
        sys.stderr.write(f"radixsim calibrate: needs torch (pip install torch==2.13.0): {e}\n")
        return EXIT_BAD_INPUT
    opts = dataclasses.replace(TorchOptions(**sc.doc.get("torch", {})), device=torch_device(args, sc))
    t0 = time.perf_counter()
    table = (_operator_table if args.kind == "operators" else _step_table)(sc, opts, DTYPES[opts.dtype], args.quick)
    from .outputs import write

    write(args.out, table)
    points = (f"{sum(len(g['points']) for g in table['gemm'])} GEMM, {len(table['prefill_attention'])} prefill "
              f"attention, {len(table['decode_attention'])} decode attention and {len(table['copy'])} copy"
              if args.kind == "operators" else f"{len(table['prefill'])} prefill and {len(table['decode'])} decode")
    print(f"{points} points on {opts.device} in {time.perf_counter() - t0:.1f} s -> {args.out} "
          f"(use: --set cost.kind=table --set cost.table={args.out})")
    return 0


def _operator_table(sc, opts, dtype, quick: bool) -> dict:
    from gpu_backend.calibrate import QUICK, measure_operators
    from sim.cost_models import operator_cost_model
    from sim.optable import calibration_plan

    cost = operator_cost_model(sc)
    say = (lambda m: sys.stderr.write(f"radixsim calibrate: {m}\n")) if sys.stderr.isatty() else None
    return measure_operators(calibration_plan(cost), device=opts.device, dtype=dtype, progress=say,
                             **(QUICK if quick else {}))


def _step_table(sc, opts, dtype, quick: bool) -> dict:
    from gpu_backend.calibrate import measure_table, scenario_model

    kw = dict(prefill_tokens=(16, 256), cached=(0, 1024), batches=(1, 8), contexts=(64, 1024), repeats=1) \
        if quick else {}
    model, scale = scenario_model(sc, opts)
    return measure_table(model, scale=scale, **kw)


COMMANDS = {"calibrate": _cmd_calibrate}
