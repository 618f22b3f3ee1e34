"""The LM-program client (a SimPy process): calls go out as soon as their DAG allows.

`program_clients` drives a `scenarios.programs.ProgramWorkload` through the engine the way a
frontend runtime (SGLang's interpreter) drives an LM program: a call is ready when every
predecessor in its instance's DAG has finished (data parents and control edges alike); ready
calls are sent in the order they became ready (initially: instance 0's roots in id order, then
instance 1's, ...; a call becoming ready joins the back of the queue), with at most
``max_parallel`` calls of the workload in flight and, for a finite ``request_rate``, an
exponential gap (seeded, ``SeedSequence(seed, spawn_key=(2,))``) after each send.

Requests are built exactly as `sim.simulator.multiturn_clients` builds them: a `TokenSeq` of
prompt + output[:-1] with its incrementally built page keys, ``session_id`` = the call's
global session (instance or sub-agent), ``rid`` = send order, ``round`` = the call's depth in
its DAG + 1. An instance is built (its tokens drawn) when its first call is sent and dropped
when its last call finishes; a session is closed on the engine (``close_sessions``) when its
last call has finished. A rejected request counts as finished (its output is fixed up front,
so its children can still be sent). When every call has finished the process calls
``engine.close_input()``.
"""
from __future__ import annotations

import math
import numbers
from collections import deque

import numpy as np
import simpy

from cache_core.engine import Engine
from cache_core.engine_types import EngineRequest
from cache_core.records import TokenSeq
from scenarios.programs import ProgramWorkload

_STREAM_SEND = 2  # scenarios.programs uses 0 (tokens) and 1 (structure)


class _Instance:
    """A program instance in progress: unfinished predecessor counts, calls left per session."""

    __slots__ = ("prog", "preds", "left", "by_session")

    def __init__(self, prog):
        g = prog.graph
        self.prog = prog
        self.preds = {c: g.in_degree(c) for c in prog.order}
        self.left = len(prog.order)
        self.by_session: dict = {}
        for c in prog.order:
            s = prog.session(c)
            self.by_session[s] = self.by_session.get(s, 0) + 1

    def roots(self) -> list:
        return [c for c in self.prog.order if self.preds[c] == 0]

    def finish(self, c) -> tuple[list, bool]:
        """Call `c` finished: (children now ready, whether its session has no call left)."""
        ready = []
        for ch in sorted(self.prog.graph.successors(c)):
            self.preds[ch] -= 1
            if self.preds[ch] == 0:
                ready.append(ch)
        self.left -= 1
        s = self.prog.session(c)
        self.by_session[s] -= 1
        return ready, self.by_session[s] == 0


def _check(max_parallel, request_rate) -> None:
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, numbers.Integral) or max_parallel < 1:
        raise ValueError(f"max_parallel must be an integer >= 1, got {max_parallel!r}")
    if (isinstance(request_rate, bool) or not isinstance(request_rate, numbers.Real) or math.isnan(request_rate)
            or request_rate <= 0):
        raise ValueError(f"request_rate must be a number > 0 (calls/s; inf: no pacing), got {request_rate!r}")


def make_request(prog, c: int, rid: int, now: float, page_size: int) -> EngineRequest:
    """Call `c` of `prog` as an EngineRequest (as multiturn_clients builds one)."""
    call = prog.call(c)
    seq = TokenSeq(call.sequence, call.sequence_keys(page_size), page_size)
    return EngineRequest(rid=rid, session_id=call.session_id, prompt=call.prompt, output_length=len(call.output),
                         arrival_s=now, seq=seq, round=call.depth + 1)


def program_clients(env: simpy.Environment, engine: Engine, workload: ProgramWorkload, *, max_parallel: int = 16,
                    request_rate: float = math.inf, page_size: int | None = None, close_sessions: bool = True,
                    on_finish=None):
    """Send every call of `workload` when its DAG predecessors have finished (module
    docstring); `page_size` defaults to the engine's. `on_finish(request, instance, call)` is
    called for each of this client's requests when it finishes."""
    _check(max_parallel, request_rate)
    P = engine.P if page_size is None else page_size
    rng = np.random.default_rng(np.random.SeedSequence(workload.config.seed, spawn_key=(_STREAM_SEND,)))
    gap = None if math.isinf(request_rate) else 1.0 / request_rate
    total = workload.total_calls()
    ready = deque((i, None) for i in range(workload.config.num_instances))  # None: not built yet
    live: dict = {}  # instance -> _Instance
    sent: dict = {}  # id(request) -> (instance, call)
    state = {"inflight": 0, "sent": 0, "wake": None}

    def finished(r):
        key = sent.pop(id(r), None)
        if key is None:
            return
        i, c = key
        inst = live[i]
        children, session_done = inst.finish(c)
        ready.extend((i, ch) for ch in children)
        if session_done and close_sessions:
            engine.close_session(inst.prog.session(c))
        if inst.left == 0:
            del live[i]
        state["inflight"] -= 1
        if on_finish is not None:
            on_finish(r, i, c)
        ev = state["wake"]
        if ev is not None and not ev.triggered:
            ev.succeed()

    engine.listeners.append(finished)
    while state["sent"] < total:
        while not ready or state["inflight"] >= max_parallel:
            if not ready and not state["inflight"]:  # cannot happen in a DAG
                raise RuntimeError(f"program_clients: {total - state['sent']} calls can never become ready")
            state["wake"] = env.event()
            yield state["wake"]
        i, c = ready.popleft()
        if c is None:  # first call of instance i: build it, its roots take its place in the queue
            inst = live[i] = _Instance(workload.instance(i))
            ready.extendleft((i, r) for r in reversed(inst.roots()))
            continue
        req = make_request(live[i].prog, c, state["sent"], env.now, P)
        sent[id(req)] = (i, c)
        state["sent"] += 1
        state["inflight"] += 1
        engine.arrive(req)
        if gap is not None and state["sent"] < total:
            yield env.timeout(float(rng.exponential(gap)))
    while state["inflight"]:
        state["wake"] = env.event()
        yield state["wake"]
    engine.close_input()


__all__ = ["program_clients", "make_request"]
