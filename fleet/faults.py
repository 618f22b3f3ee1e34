"""Engine faults of a fleet (scenarios/events.py ``engine_down``), carried out in the SimPy run.

At ``at_s`` engine i goes down: its serving loop stops where it is (the process is interrupted;
transfers it had in flight finish on their links, unheard), its caches are lost with it (L1,
L2 and, unless the fleet shares one, its L3), and the router takes it out of the pool
(`Router.down`). Every request the fleet had routed to it and not finished is lost there and
routed again at once (`Router.failed`, then `Fleet.route`), keeping its arrival time: its TTFT
counts from the user's first send. ``duration_s`` later (null: never) the engine comes back
as a new engine of the same scenario with empty caches (a fleet's shared L3 links and store
again); the router forgets what it had learnt about it (`Router.forget`) and may pick it
again. The requests the engine had finished before it went down stay its results.

What each fault did is logged (`FaultLog`): requests retried, the tokens of KV they had on
the dead engine (computed again elsewhere), the tokens of cache lost (L1 + L2 in use).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cache_core.engine_types import EngineRequest


@dataclass
class FaultLog:
    """Per event index: what the fault did."""

    retried: dict = field(default_factory=dict)  # event -> requests routed again
    lost_tokens: dict = field(default_factory=dict)  # event -> KV tokens those requests had on the dead engine
    cache_lost_tokens: dict = field(default_factory=dict)  # event -> L1 + L2 tokens in use at the crash
    retries: dict = field(default_factory=dict)  # rid -> times routed again


def guarded(loop):
    """An engine loop that a fault may interrupt (the engine is abandoned where it stands)."""
    import simpy

    try:
        yield from loop
    except simpy.Interrupt:
        return


class FaultController:
    """Starts and stops engines of `fleet` on `env`; `make_engine(i) -> engine` builds engine
    i anew (its scenario, the shared store if any)."""

    def __init__(self, env, fleet, make_engine, log: FaultLog):
        self.env, self.fleet, self.make_engine, self.log = env, fleet, make_engine, log
        self.procs = [env.process(guarded(e.loop())) for e in fleet.engines]
        self.dead: dict = {}  # engine index -> (the abandoned engine, its finished requests)
        fleet.hold_input = True

    def down(self, i: int, k: int) -> None:
        """Event k takes engine i down."""
        fleet, now = self.fleet, self.env.now
        old = fleet.engines[i]
        if self.procs[i].is_alive:
            self.procs[i].interrupt("engine_down")
        old.listeners.clear()
        fleet.router.down.add(i)
        used = old.timeline[-1][3] + old.timeline[-1][4] if old.timeline else 0
        self.log.cache_lost_tokens[k] = used
        self.dead[i] = (old, list(old.finished))  # its results so far (nothing finishes on it after)
        lost = [r for rid, r in list(fleet.inflight.items()) if fleet.engine_of.get(rid) == i]
        self.log.retried[k] = len(lost)
        self.log.lost_tokens[k] = sum(_work(r) for r in lost)
        for r in lost:
            fleet.router.failed(r, i, now)
            self.log.retries[r.rid] = self.log.retries.get(r.rid, 0) + 1
            fleet.route(_again(r))

    def up(self, i: int) -> None:
        """Engine i comes back: a new engine with empty caches, the old one's results kept."""
        fleet = self.fleet
        old, finished = self.dead.pop(i)
        new = self.make_engine(i)
        new.queues.finished.extend(finished)
        new.arrived = len(new.queues.finished)
        new.timeline[:0] = old.timeline
        fleet.listen(new, i)
        fleet.engines[i] = new
        fleet.router.engines[i] = [new]
        fleet.router.forget(i)
        fleet.router.down.discard(i)
        self.procs[i] = self.env.process(guarded(new.loop()))
        if fleet.input_closed and fleet.completed == fleet.arrived:
            new.close_input()


def _work(r) -> int:
    """Tokens of KV the dead engine had computed for `r` (prefilled beyond its reused prefix,
    and generated): what its retry computes again."""
    return max(0, r.computed_tokens - r.cached_tokens) + r.generated_tokens


def _again(r) -> EngineRequest:
    """A fresh request for `r` (lost with its engine): the same tokens and arrival time."""
    return EngineRequest(rid=r.rid, session_id=r.session_id, prompt=r.prompt, output_length=r.output_length,
                         arrival_s=r.arrival_s, priority=r.priority, seq=r.seq, round=r.round)


__all__ = ["FaultController", "FaultLog", "guarded"]
