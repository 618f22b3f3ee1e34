"""A fleet: many engines, each its own cache core, behind a router, in ONE SimPy environment.

`Fleet` stands where a single engine stands for the clients (sim/simulator.py, sim/agent_clients.py,
sim/program_clients.py): ``arrive``, ``close_input``, ``close_session``, ``listeners``, ``P``.
Each arrival is routed (`fleet.routers`) and handed to that engine's ``arrive`` unchanged, so a
fleet of one engine is the single-engine run exactly.

A shared L3 (``fleet.shared_l3``, built in `fleet/build.py`): one store object (cache_core.tiers.store,
the first engine's configuration: capacity, model) is built first and every engine's cache is built on it
(``RadixCache(storage=...)``: its hierarchy and every component, SWA and MAMBA payloads too, use
it from the start), and one pair of L3 links and the SSD read link of the store's SSD tier (the
first engine's hardware numbers) replace each engine's own, so capacity and bandwidth are shared
and a page one engine stored is a storage hit for every other.
"""
from __future__ import annotations

import collections



class Fleet:
    """The engines (with DP attention: every engine's ``dp`` ranks, engine-major) behind the
    router. ``router`` picks an engine; with ``dp`` > 1 that engine's dispatcher (a router
    over its ranks, SGLang's DP-attention load balancer) picks the rank. A router's
    ``engines`` are lists: the ranks of each engine it routes to."""

    def __init__(self, engines: list, router, roles=None, dp: int = 1, dispatchers=None):
        self.engines = engines
        self.router = router
        self.roles = roles or ["both"] * len(engines)
        self.dp = dp
        self.dispatchers = dispatchers  # one router per engine over its dp ranks (None: dp 1)
        self.P = engines[0].P
        self.listeners: list = []
        self.engine_of: dict = {}  # rid -> index in engines (the rank, with DP attention)
        self.arrived = 0
        self.completed = 0  # user requests finished (or rejected)
        self.seq_keys: list = []  # (prompt pages, page keys of prompt + output) of every user request (`hit_bound`)
        self.inflight: dict = {}  # rid -> the request, routed and not finished (fleet/faults.py retries them)
        self.hold_input = False  # faults: engines' input stays open until every request completed
        self.input_closed = False
        units = [engines[u * dp:(u + 1) * dp] for u in range(len(engines) // dp)]
        router.engines = units
        for u, d in enumerate(dispatchers or []):
            d.engines = [[e] for e in units[u]]
        for i, e in enumerate(engines):
            self.listen(e, i)

    def listen(self, engine, i: int) -> None:
        """Hear of each request `engine` (engine i, or rank i) finishes (a restarted one too)."""
        engine.listeners.append(lambda r, i=i: self._finished(r, i))

    def now(self) -> float:
        return self.engines[0].clock.now()

    def arrive(self, req) -> None:
        self.arrived += 1
        self.record(req)
        self.route(req)

    def route(self, req) -> None:
        """Pick `req`'s engine (and rank) and hand it over (an arrival, or a retry)."""
        now = self.now()
        self.inflight[req.rid] = req
        i = self.router.pick(req, now)
        self.router.routed(req, i, now)
        if self.dispatchers is not None:
            d = self.dispatchers[i]
            j = d.pick(req, now)
            d.routed(req, j, now)
            i = i * self.dp + j
        self.engine_of[req.rid] = i
        self.engines[i].arrive(req)

    def record(self, req) -> None:
        """Keep user request `req`'s page keys for `hit_bound`."""
        self.seq_keys.append((req.prompt_tokens // self.P, req.seq.page_keys(self.P)))

    def hit_bound(self) -> int:
        """Prompt tokens that no router can beat as hits: per request, its prompt's longest
        prefix of whole pages that some OTHER request's tokens (prompt + output) contain. A hit
        reuses KV some other request computed (a request's own chunks count no hit), and a page
        key names its whole prefix (cache_core.keys), so each request's cached tokens are at
        most this, whatever the routing, timing or cache sizes. An upper reference, loose where
        the first request of a shared prefix is counted as if another had computed it first."""
        count: collections.Counter = collections.Counter()
        for _, keys in self.seq_keys:
            count.update(set(keys.tolist()))
        total = 0
        for pages, keys in self.seq_keys:
            n = 0
            for k in keys[:pages].tolist():
                if count[k] < 2:  # only this request holds it
                    break
                n += 1
            total += n * self.P
        return total

    def _finished(self, r, i: int) -> None:
        self.inflight.pop(r.rid, None)
        u, j = divmod(i, self.dp)
        self.router.finished(r, u, self.now())
        if self.dispatchers is not None:
            self.dispatchers[u].finished(r, j, self.now())
        self.complete(r)

    def complete(self, r) -> None:
        """User request r is done: the clients' listeners hear of it."""
        self.completed += 1
        for f in self.listeners:
            f(r)
        if self.hold_input and self.input_closed and self.completed == self.arrived:
            self._close_engines()

    def close_input(self) -> None:
        self.input_closed = True
        if not self.hold_input or self.completed == self.arrived:
            self._close_engines()

    def _close_engines(self) -> None:
        for e in self.engines:
            e.close_input()

    def close_session(self, session_id) -> None:
        for e in self.engines:
            e.close_session(session_id)

    def check_finished(self, expected: int | None = None) -> None:
        for e in self.engines:
            e.check_finished()
        n = self.arrived if expected is None else expected
        if self.completed != n or self.arrived != n:
            from cache_core.engine import EngineStalled

            raise EngineStalled(f"the fleet finished {self.completed} of {n} requests")


__all__ = ["Fleet"]
