"""How each built-in workload kind feeds the simulator: `feed(env, eng, spec)` returns the
SimPy process that sends the requests of `spec` (the object the kind's `build` made, see
scenarios/workload_kinds.py) to the engine, and the request count when known up front
(else None). A kind names its feed as "module:function", so scenarios/ never imports sim/."""
from __future__ import annotations

from . import sources
from .simulator import multiturn_clients, timed_arrivals


def multiturn(env, eng, spec):
    from scenarios.workloads import MultiTurnWorkload

    w = MultiTurnWorkload(spec)
    return multiturn_clients(env, eng, w), len(w)


def program(env, eng, spec):
    from scenarios.programs import ProgramWorkload

    from .program_clients import program_clients

    w = ProgramWorkload(spec.config)
    return program_clients(env, eng, w, max_parallel=spec.max_parallel, request_rate=spec.request_rate), \
        w.total_calls()


def agentic(env, eng, spec):
    if not spec.closed_loop:
        return timed_arrivals(env, eng, sources.agentic_items(spec.config), speedup=spec.speedup), None
    from scenarios.agentic import AgenticWorkload

    from .agent_clients import agentic_clients

    w = AgenticWorkload(spec.config)
    return agentic_clients(env, eng, w), w.summary()["requests"]


def azure(env, eng, spec):
    return timed_arrivals(env, eng, sources.azure_items(spec.path, spec.max_requests), speedup=spec.speedup), None


def trace(env, eng, spec):
    items = sources.trace_items(spec.path, spec.block_size, spec.max_requests)
    return timed_arrivals(env, eng, items, speedup=spec.speedup), None


def shared_prefix(env, eng, spec):
    from scenarios.shared_prefix import SharedPrefixWorkload

    from .staged import staged_arrivals

    w = SharedPrefixWorkload(spec)
    return staged_arrivals(env, eng, w), spec.total_requests
