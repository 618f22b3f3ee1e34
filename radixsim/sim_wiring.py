"""The pieces the single-engine run (`run.py`) and the fleet run (`fleet_run.py`) share: one
engine on the simulated plug-ins, the workload feed, the progress bar, the result directory. Its
own module so that neither run imports the other (issue 30: the run <-> fleet_run circle)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from cache_core import RadixCache
from sim.cost_models import make_cost
from sim.feeds import feed_for

from .outputs import result_dir


def sim_engine(env, sc, storage=None):
    """One engine of scenario `sc` on the simulated plug-ins (links, cost model): (engine, cost).
    `storage`: a prebuilt L3 store its cache uses (a fleet's shared L3), else one of its own."""
    from scenarios.presets import transfer_shards
    from sim.simulator import build

    if sc.engine.kind == "vllm":  # engine.kind: vllm (cache_core/vllm_engine.py)
        from scenarios.engine_kinds import num_blocks
        from sim.simulator import build_vllm

        cost = make_cost(sc)
        B = sc.engine.block_size
        return build_vllm(env, sc.engine, num_blocks(sc.cache.capacity_tokens, B), cost, sc.hardware,
                          layers=sc.model.num_layers, offload=vllm_offload(sc),
                          shards=transfer_shards(sc.model, sc.tp)), cost
    cache = RadixCache(sc.cache, record_actions="transfers", auto_ack=sc.cache.tiers is None, storage=storage)
    cost = make_cost(sc)
    eng = build(env, cache, sc.engine, cost, sc.hardware, shards=transfer_shards(sc.model, sc.tp),
                layers=sc.model.num_layers)
    if sc.engine.frontend is not None:  # unset: nothing wrapped (sim/serving_cpu.py)
        from sim.serving_cpu import install

        install(env, eng, sc.engine.frontend, sc.model.family, sc.hardware.host_cpu_speed)
    if sc.engine.l3_get_batch_pages is not None:  # unset: nothing wrapped (sim/l3_reads.py)
        from sim import l3_reads

        l3_reads.install(env, eng, sc.engine.l3_get_batch_pages)
    return eng, cost


def vllm_offload(sc):
    """vLLM's CPU offloading connector of an engine.kind vllm scenario with cache.l2_tokens
    (cache_core/vllm_offload.py: L2 tokens // offload block size chunks), else None."""
    t, e = sc.cache.tiers, sc.engine
    if t is None:
        return None
    from cache_core.vllm_offload import VllmCpuOffload, VllmOffloadConnector

    tpc = e.offload_block_size
    return VllmOffloadConnector(VllmCpuOffload(t.l2_tokens // tpc, e.offload_eviction_policy), e.block_size,
                                tpc // e.block_size, t.kv_bytes_per_token)


def workload_source(env, eng, sc):
    """The SimPy process that feeds `eng` (an engine or a fleet front) with the scenario's
    workload, and the request count when known up front: its kind's feed."""
    return feed_for(sc.workload_kind)(env, eng, sc.workload)


def progress_bar(total, enabled: bool, desc: str):
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="req", desc=desc, file=sys.stderr, mininterval=0.5)


def progress_listener(bar, env):
    """An engine listener that counts a finished request on `bar` (tqdm: requests done / total
    and the wall time) and shows the simulated time reached beside it."""
    def done(_request) -> None:
        bar.set_postfix_str(f"simulated {env.now:,.2f} s", refresh=False)
        bar.update()

    return done


def write_result_dir(out_dir, simulate_fn, write_fn, *, progress: bool, plots: bool) -> dict:
    """Run ``simulate_fn() -> (*state, wall s)`` and ``write_fn(out, *state) -> (summary,
    rounds)`` into result directory out_dir (`outputs.result_dir`), then the plots; returns the
    summary with the wall time under "_wall_s" (the single-engine and the fleet run)."""
    with result_dir(out_dir) as out:
        *state, wall = simulate_fn()
        _status(progress, f"writing the results to {out_dir}")
        summary, rounds = write_fn(out, *state)
        if plots:
            _status(progress, "drawing the plots and report.html")
            _plots(out, Path(os.path.abspath(out_dir)), bool(rounds))
    summary["_wall_s"] = wall
    return summary


def _plots(out: Path, final: Path, rounds: bool) -> None:
    """The per-round plots and report.html of the run in `out`, which will be `final`."""
    import dataclasses

    from analysis.load import load_run
    from analysis.plots import plot_run
    from analysis.report import write_report

    if rounds:
        plot_run(out)
    run = dataclasses.replace(load_run(out), path=final)  # the report names the final directory
    write_report([run], out / "report.html")  # one self-contained page: tables and every figure


def _status(enabled: bool, text: str) -> None:
    """What a long command is doing, on a terminal only."""
    if enabled and sys.stderr.isatty():
        sys.stderr.write(f"radixsim: {text}\n")
