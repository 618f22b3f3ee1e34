"""`radixsim run`: a scenario under the SimPy clock -> the result schema (+ default plots).

Ties the layers together: scenarios (resolved scenario, workload) -> cache_core (cache,
engine loop) -> sim (links, cost model, clients) -> results files -> analysis (plots).
"""
from __future__ import annotations

import time
from pathlib import Path

from cache_core import RadixCache, invariants

from sim.cost_models import make_cost
from sim.recorder import TIMELINE_MAX_ROWS, request_rows, summarise, timeline_rows  # noqa: F401

from . import results
from .sim_wiring import progress_bar, progress_listener, sim_engine, workload_source, write_result_dir  # noqa: F401

DEFAULT_SCENARIO = "quickstart"


def simulate(sc, *, progress: bool = False, backend: str = "sim", device: str | None = None,
             record_logits: bool = False, store=None, setup=None):
    """Run scenario `sc` to completion. Returns (engine, env, cost, wall seconds).

    backend "sim": the SimPy clock, modelled links, the cost model. backend "torch": the same
    engine and clients with real pools, copies and page store, and the synthetic model as the
    step executor (gpu_backend/), on the clock `torch.clock` names: "modelled" (default: each
    step and transfer lasts what the simulator gives it, so the decisions are the simulator's
    on any machine load), "measured" (each lasts its measured duration) or "realtime" (the
    same on SimPy's real-time environment: idle gaps are slept). `setup(engine)`, if given,
    is called once the engine is built, before the run (e.g. to record its steps)."""
    import simpy

    t0 = time.perf_counter()
    if sc.events and backend != "sim":
        raise ValueError(f"events: fault what-ifs run on the sim backend only, not {backend!r}")
    if backend != "sim" and sc.engine.kind == "vllm":
        raise ValueError(f"engine.kind vllm runs on the sim backend only, not {backend!r}")
    if backend == "torch":
        cache = RadixCache(sc.cache, record_actions="transfers", auto_ack=sc.cache.tiers is None)
        env, eng, cost = _torch_engine(sc, cache, device, record_logits, store)
    elif backend == "sim":
        env = simpy.Environment()
        eng, cost = sim_engine(env, sc)
        cache = eng.cache
    else:
        raise ValueError(f"backend {backend!r}: expected sim or torch")
    if setup is not None:
        setup(eng)
    source, total = workload_source(env, eng, sc)
    bar = progress_bar(total, progress, sc.doc.get("name") or "run")
    if bar is not None:
        eng.listeners.append(progress_listener(bar, env))
    env.process(source)
    env.process(eng.loop())
    if sc.events:
        from sim.events import start_events

        eng.event_stats = start_events(env, [eng], sc.events)
    env.run()
    if bar is not None:
        bar.close()
    eng.check_finished(total)
    if sc.engine.kind == "vllm":
        cache.check()  # the block pool's recount (cache_core/vllm_blocks.py)
    else:
        invariants.check(cache)
    return eng, env, cost, time.perf_counter() - t0


def _torch_engine(sc, cache, device, record_logits, store=None):
    import dataclasses

    import simpy.rt

    from cache_core.engine import Engine
    from gpu_backend.backend import TorchOptions, build_plugins
    from scenarios.presets import transfer_shards
    from sim.links import LinkSet
    from sim.simulator import CostExecutor, SimDataPlane, sim_clock

    opts = TorchOptions(**sc.doc.get("torch", {}))
    if device:
        opts = dataclasses.replace(opts, device=device)
    env = simpy.rt.RealtimeEnvironment(factor=1.0, strict=False) if opts.clock == "realtime" else simpy.Environment()
    links = LinkSet.from_hardware(env, sc.hardware)  # modelled: they time transfers; else idle
    label = f"torch {opts.device} {opts.dtype}, {opts.clock} clock"
    pace = (None, None)
    if opts.clock == "modelled":  # the simulator's links and cost model time every transfer and step
        cost = make_cost(sc)
        pace = (SimDataPlane(links, transfer_shards(sc.model, sc.tp)), CostExecutor(env, cost, layers=sc.model.num_layers))
        label += f" ({cost!r})"
    _, _, plane, ex = build_plugins(env, cache, sc.model, opts, sc.engine.max_running_requests,
                                    record_logits=record_logits, store=store, pace=pace,
                                    load_overlap=sc.engine.load_overlap,
                                    chunk_tokens=sc.engine.chunked_prefill_tokens or sc.engine.max_prefill_tokens)
    if sc.engine.l3_get_batch_pages is not None:
        raise ValueError("engine.l3_get_batch_pages: the sim backend only (sim/l3_reads.py wraps the simulated "
                         "data plane); expected null with --backend torch")
    eng = Engine(cache, sc.engine, sim_clock(env, cache), plane, ex)
    eng.listeners.append(ex.release)
    eng.links = links
    if sc.engine.frontend is not None:  # the serving front end wraps any engine (sim/serving_cpu.py)
        from sim.serving_cpu import install

        install(env, eng, sc.engine.frontend, sc.model.family, sc.hardware.host_cpu_speed)
    return env, eng, label


def write_timeline(out: Path, header, rows) -> None:
    results.write(out / "timeline.csv", rows, columns=header)


def run_scenario(sc, out_dir, *, command: str | None = None, progress: bool = True, plots: bool = True,
                 backend: str = "sim", device: str | None = None) -> dict:
    """Simulate `sc` and write config.yaml, requests.csv, rounds.csv, timeline.csv,
    summary.json, tree.json (and the per-round plots and report.html) to out_dir, which then
    holds exactly this run (`outputs.result_dir`: written beside it, renamed into place at
    the end; checked before simulating). Returns the summary (plus wall time under the key
    "_wall_s", not written to summary.json so that runs compare byte for byte). A scenario
    with a `fleet:` section runs as a fleet (`fleet_run.run_fleet`)."""
    if sc.fleet is not None:
        from .fleet_run import run_fleet

        if backend != "sim":
            raise ValueError(f"a fleet scenario runs on the sim backend only, not {backend!r}")
        return run_fleet(sc, out_dir, command=command, progress=progress, plots=plots)
    return write_result_dir(out_dir, lambda: simulate(sc, progress=progress, backend=backend, device=device),
                            lambda out, eng, env, cost: write_run(out, sc, eng, env, cost, backend, command),
                            progress=progress, plots=plots)


def write_run(out: Path, sc, eng, env, cost, backend: str, command: str | None) -> tuple[dict, list]:
    """The result files of a finished simulation (each through `results.write`); (summary, rounds)."""
    from cache_core.snapshot import snapshot

    rows = request_rows(eng)
    results.write_requests(out, rows)
    rounds = results.round_table(rows)
    if rounds:
        results.write_rounds(out, rounds)
    summary = summarise(eng, rows, rounds, env.now)
    header, trows = timeline_rows(eng, summary["duration_s"] + min(r["arrival_s"] for r in rows) if rows else 0.0)
    if sc.events:
        from sim.events import timeline_events

        header, trows = timeline_events(sc.events, header, trows)
    write_timeline(out, header, trows)
    results.write_stages(out, sc.workload, rows, summary)
    results.write_events(sc.events, rows, summary, stats=getattr(eng, "event_stats", None))
    results.write_summary(out, summary)
    doc = {"mode": backend, **sc.doc, "cost": {**sc.doc["cost"], "model": repr(cost)}}
    results.write_config(out, doc, seed=sc.seed, command=command, sc=sc)
    if sc.engine.kind != "vllm":  # vLLM keeps no tree
        results.write(out / "tree.json", snapshot(eng.cache))  # the cache at the end, for `radixsim plot --kind tree`
    return summary, rounds


__all__ = ["run_scenario", "write_result_dir", "simulate", "sim_engine", "make_cost", "request_rows", "summarise", "DEFAULT_SCENARIO"]
