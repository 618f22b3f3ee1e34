"""`radixsim run` (one scenario under the SimPy clock, or on the torch backend) and `radixsim
scenarios` (the catalog)."""
from __future__ import annotations

import sys

from .args import EXIT_BAD_INPUT, torch_device, warn


def add_run(sub) -> None:
    u = sub.add_parser("run", help="simulate a scenario under the SimPy clock (the main job)",
                       description=(
                           "Simulate a scenario (YAML: model and hardware presets, cache, engine, workload, "
                           "seed) with the shared engine loop on modelled links and an operator-level cost model. "
                           "Writes config.yaml (fully resolved, with provenance), requests.csv (with the "
                           "queue/load/compute split of each TTFT), rounds.csv, timeline.csv, summary.json "
                           "and per-round TTFT and hit-rate plots to --out. Without a scenario it runs the "
                           "small 'quickstart' one. Catalog names (radixsim scenarios) work without a path."))
    u.add_argument("scenario", nargs="?", default=None,
                   help="scenario file, or a catalog name such as fig4-dsv4-flash-l3 (default: quickstart), or a "
                        "result directory (or its config.yaml) to rerun the scenario it records")
    u.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key, e.g. --set cache.l2_tokens=4000000 or --set "
                        "workload.num_rounds=20 (a dotted key of the scenario file: README.md 'Simulate "
                        "a scenario', SCHEMA in scenarios/schema.py; repeatable)")
    u.add_argument("--out", default=None, help="result directory (default: runs/NAME)")
    u.add_argument("--backend", choices=["sim", "torch"], default=None,
                   help="sim: the SimPy clock with modelled links and cost (default; a rerun: the recorded mode); "
                        "torch: the same engine "
                        "with real pools, copies, L3 page store and the synthetic model (sizes: the "
                        "scenario's torch.* keys; torch.clock: modelled (default, the simulator's "
                        "timing), measured or realtime)")
    u.add_argument("--device", default=None, help="torch backend: cpu or cuda (default: torch.device)")
    u.add_argument("--smoke", action="store_true",
                   help="run the scenario at a tiny size (about a second; what CI does with every catalog scenario)")
    u.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    u.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_scenarios(sub) -> None:
    c = sub.add_parser("scenarios", help="list the scenario catalog",
                       description="List the bundled scenarios (scenarios/catalog/*.yaml), one line each.")
    c.set_defaults()


def _cmd_run(args) -> int:
    from scenarios.scenario import ScenarioError, from_file

    from .run import DEFAULT_SCENARIO, run_scenario

    name = args.scenario or DEFAULT_SCENARIO
    try:
        sc = from_file(name, args.sets, smoke_run=args.smoke)
    except ScenarioError as e:
        sys.stderr.write(f"radixsim run: {e}\n")
        return EXIT_BAD_INPUT
    out = args.out or f"runs/{sc.doc['name']}"
    args.backend = args.backend or sc.recorded_mode or "sim"  # a rerun keeps its record's mode
    warn("radixsim run", sc.warnings)
    if args.backend == "torch":
        torch_device(args, sc)
    try:
        s = run_scenario(sc, out, command=args.command_line, progress=not args.no_progress,
                         plots=not args.no_plots, backend=args.backend, device=args.device)
    except (ValueError, OSError) as e:
        sys.stderr.write(f"radixsim run: {name}: {e}\n")
        return EXIT_BAD_INPUT
    from .outputs import fmt_or_dash, plural
    c = sc.cache
    tiers = "L1" if c.tiers is None else ("L1+L2+L3" if c.tiers.l3 else "L1+L2")
    print(f"{sc.doc['name']}: {sc.model.name} TP{sc.tp}, {tiers}, L1 {c.capacity_tokens:,} tokens"
          + ("" if c.tiers is None else f", L2 {sc.doc['cache']['l2_tokens']:,}")
          + ("" if c.tiers is None or not c.tiers.l3 else f", L3 {sc.doc['cache']['l3_tokens']}"))
    print(f"{s['requests']} requests, {s['total_prompt_tokens']:,} prompt tokens: hit rate {s['hit_rate']:.4f} "
          f"(device {s['hit_rate_device']:.4f}, host {s['hit_rate_host']:.4f}, storage "
          f"{s['hit_rate_storage']:.4f}), last 10 rounds {fmt_or_dash(s['hit_rate_last10'], '.4f')}")
    print(f"simulated {s['duration_s']:,.1f} s: mean TTFT {s['ttft_mean_s']:.3f} s (p90 {s['ttft_p90_s']:.3f}), "
          f"effective input throughput {s['effective_input_tps']:,.0f} tok/s; wall {s['_wall_s']:.2f} s -> {out}")
    f = s.get("fleet")
    if f:
        print(f"fleet: {plural(f['engines'], 'engine')}, router {f['router']['kind']}: SLO attainment {f['slo_attainment']:.3f}, "
              f"goodput {f['goodput_rps']:.2f} req/s, requests per engine max/mean "
              f"{f['load_balance']['requests']['max_over_mean']:.2f} (engines.csv, fleet.json)")
    return 0


def _cmd_scenarios(args) -> int:
    from scenarios.scenario import catalog

    rows = catalog()
    width = max(len(n) for n, _ in rows)
    for name, desc in rows:
        print(f"{name:<{width}}  {desc}")
    return 0


COMMANDS = {"run": _cmd_run, "scenarios": _cmd_scenarios}
