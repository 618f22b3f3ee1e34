"""Closed-loop agent sessions (the agentic workload of scenarios/agentic.py) as SimPy processes.

The workload's plan fixes every session's structure (turns, tool output and answer lengths,
think times, which turns fork a sub-agent) and tokens; the clock is the simulator's:

- top-level sessions start in id order once their arrival time has passed and fewer than
  ``concurrency`` are active (FIFO admission, as the workload's nominal timeline);
- turn t+1 is sent ``think(t)`` after turn t *completes* (its last output token), or after the
  sub-agent forked at turn t closes (the parent waits for it);
- a sub-agent starts when its parent's fork turn completes, runs its own turns the same way,
  and does not count against ``concurrency``;
- a session's close_session goes to the engine after its last turn completes; the engine's
  input closes when every top-level session has closed.

So response times feed back into arrivals (unlike `sources.agentic_items`, which replays the
nominal timestamps open-loop).
"""
from __future__ import annotations

from cache_core.engine_types import EngineRequest
from cache_core.records import TokenSeq


def agentic_clients(env, engine, workload):
    """A SimPy process driving `engine` with `workload` (an AgenticWorkload)."""
    cfg = workload.config
    sessions = workload.sessions()
    subs_of: dict = {}
    for sp in sessions:
        if sp.parent is not None:
            subs_of.setdefault((sp.parent, sp.fork_turn), []).append(sp)
    tops = [sp for sp in sessions if sp.parent is None]
    waiters: dict = {}
    state = {"rid": 0, "active": 0, "slot": None}

    def on_finish(r):
        ev = waiters.pop(id(r), None)  # by object: another source's rids may repeat ours
        if ev is not None:
            ev.succeed()

    engine.listeners.append(on_finish)

    def send(sp, turn, buf):
        end = int(sp.prompt_end[turn - 1])
        out = int(sp.output[turn - 1])
        prompt = buf[:end]
        seq = TokenSeq(buf[: end + max(out - 1, 0)])
        r = EngineRequest(rid=state["rid"], session_id=sp.session_id, prompt=prompt, output_length=out,
                          arrival_s=env.now, seq=seq, round=turn)
        state["rid"] += 1
        ev = waiters[id(r)] = env.event()
        engine.arrive(r)
        return ev

    def session(sp, parent_buf=None):
        buf = workload.session_buffer(sp, parent_buf)
        for turn in range(1, sp.turns + 1):
            yield send(sp, turn, buf)
            for sub in subs_of.get((sp.session_id, turn), ()):
                yield env.process(session(sub, buf))
            if turn < sp.turns:
                yield env.timeout(int(sp.think_ms[turn - 1]) / 1000.0)
        engine.close_session(sp.session_id)
        if sp.parent is None:
            state["active"] -= 1
            ev = state["slot"]
            if ev is not None and not ev.triggered:
                ev.succeed()

    procs = []
    for sp in tops:
        t = (sp.arrival_ms or 0) / 1000.0
        if t > env.now:
            yield env.timeout(t - env.now)
        while state["active"] >= cfg.concurrency:
            state["slot"] = env.event()
            yield state["slot"]
        state["active"] += 1
        procs.append(env.process(session(sp)))
    yield env.all_of(procs)
    engine.close_input()


__all__ = ["agentic_clients"]
