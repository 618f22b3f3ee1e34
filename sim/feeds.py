"""How each built-in workload kind feeds the simulator: `feed(env, eng, spec)` returns the
SimPy process that sends the requests of `spec` (the object the kind's `build` made, see
scenarios/workload_kinds.py) to the engine, and the request count when known up front
(else None). A feed registers itself here against its kind's name (`register_feed`), so that
scenarios/ never imports sim/; the runner looks it up by the scenario's `workload.kind`."""
from __future__ import annotations

from typing import Callable

from . import sources
from .simulator import multiturn_clients, timed_arrivals

_FEEDS: dict[str, Callable] = {}


def register_feed(name: str, feed: Callable) -> Callable:
    """`feed(env, eng, spec)` feeds the simulator for workload kind `name`; returns `feed`."""
    if name in _FEEDS:
        raise ValueError(f"workload feed {name!r} is already registered")
    _FEEDS[name] = feed
    return feed


def unregister_feed(name: str) -> None:
    del _FEEDS[name]


def feed_for(name: str) -> Callable:
    """The feed of workload kind `name`; a ValueError (one line) when none is registered."""
    try:
        return _FEEDS[name]
    except KeyError:
        raise ValueError(f"workload kind {name!r} has no simulator feed; expected one registered with "
                         f"sim.feeds.register_feed (registered: {', '.join(_FEEDS)})") from None


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


for _feed in (multiturn, trace, azure, agentic, program, shared_prefix):  # the built-in kinds' feeds, each named as its kind
    register_feed(_feed.__name__, _feed)
