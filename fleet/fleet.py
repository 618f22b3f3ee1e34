"""A fleet: many engines, each its own cache core, behind a router, in ONE SimPy environment.

`Fleet` stands where a single engine stands for the clients (sim/simulator.py, sim/agent_clients.py,
sim/program_clients.py): ``arrive``, ``close_input``, ``close_session``, ``listeners``, ``P``.
Each arrival is routed (`fleet.routers`) and handed to that engine's ``arrive`` unchanged, so a
fleet of one engine is the single-engine run exactly.

A shared L3 (``fleet.shared_l3``): one store object (cache_core.store, the first engine's
configuration: capacity, model) is built first and every engine's cache is built on it
(``RadixCache(storage=...)``: its hierarchy and every component, SWA and MAMBA payloads too, use
it from the start), and one pair of L3 links and the SSD read link of the store's SSD tier (the
first engine's hardware numbers) replace each engine's own, so capacity and bandwidth are shared
and a page one engine stored is a storage hit for every other.
"""
from __future__ import annotations

import collections

from cache_core.actions import L2, L3
from cache_core.store import make_store

from .routers import make_router


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
        units = [engines[u * dp:(u + 1) * dp] for u in range(len(engines) // dp)]
        router.engines = units
        for u, d in enumerate(dispatchers or []):
            d.engines = [[e] for e in units[u]]
        for i, e in enumerate(engines):
            e.listeners.append(lambda r, i=i: self._finished(r, i))

    def now(self) -> float:
        return self.engines[0].clock.now()

    def arrive(self, req) -> None:
        self.arrived += 1
        self.record(req)
        now = self.now()
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

    def close_input(self) -> None:
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


def shared_store(sc) -> object:
    """The one L3 store of a fleet's shared L3 (engine scenario `sc`'s configuration), built
    before the engines so that every engine's cache is built on it."""
    return make_store(sc.cache.tiers, sc.cache.page_size)


def share_l3(engines: list, sc, store) -> None:
    """One pair of L3 links and one SSD read link for every engine (see the module docstring); every engine's cache
    must have been built on `store` (`shared_store`)."""
    from sim.links import Link

    if any(e.cache.hier.storage is not store for e in engines):
        raise ValueError("share_l3: every engine's cache must be built on the shared store")
    env, hw = engines[0].links.links[(L3, L2)].env, sc.hardware
    down = Link(env, "L3->L2", hw.l3_bytes_per_s, hw.l3_latency_s, hw.l3_block_overhead_s)
    up = Link(env, "L2->L3", hw.l3_bytes_per_s, hw.l3_latency_s, hw.l3_block_overhead_s)
    ssd = Link(env, "SSD->L3", hw.ssd_bytes_per_s, hw.ssd_latency_s)  # the store's SSD tier is shared too
    for e in engines:
        e.links.links[(L3, L2)] = down
        e.links.links[(L2, L3)] = up
        e.links.ssd = ssd


def build_fleet(env, sc, make_engine):
    """(Fleet, costs, shared store or None) of scenario `sc` with a `fleet:` section;
    ``make_engine(env, engine_scenario, storage) -> (engine, cost)`` builds each engine (each DP
    rank) on `storage`, the shared L3 store (None: the engine's own, if any)."""
    spec = sc.fleet
    store = shared_store(spec.engines[0]) if spec.shared_l3 else None
    built = [make_engine(env, esc, store) for esc in spec.engines]
    engines = [e for e, _ in built]
    costs = [c for _, c in built]
    if store is not None:
        share_l3(engines, spec.engines[0], store)
    groups = [[i for i, r in enumerate(spec.roles) if r == role] for role in ("prefill", "decode")]
    dp = spec.dp
    front = groups[0] if spec.pd is not None else list(range(0, len(engines), dp))
    router = _router(spec.router, "fleet.router", [spec.engines[i] for i in front], sc.seed, dp)
    if spec.pd is None:
        dispatchers = None if dp == 1 else [
            _router(spec.dp_router, "fleet.dp_router", spec.engines[u:u + dp], sc.seed, 1) for u in front]
        return Fleet(engines, router, list(spec.roles), dp, dispatchers), costs, store
    from sim.links import Link

    from .pd import PDFleet

    pd = spec.pd
    decode_router = _router(pd["decode_router"], "fleet.pd.decode_router", [spec.engines[i] for i in groups[1]],
                            sc.seed, 1)
    links = [Link(env, f"KV P{i}->D", pd["kv_bytes_per_s"], pd["kv_latency_s"]) for i in groups[0]]
    fleet = PDFleet(engines, router, list(spec.roles), decode_router, links,
                    _kv_bytes_per_token(spec.engines[0].model), pd)
    return fleet, costs, store


def _kv_bytes_per_token(model) -> tuple:
    """(FULL bytes per token, SWA bytes per token, SWA window tokens) of a P/D KV transfer."""
    from scenarios.presets import bytes_per_token

    if not model.swa_layers:
        return bytes_per_token(model, "full"), 0.0, 0
    return bytes_per_token(model, "full"), bytes_per_token(model, "swa"), model.swa_window_tokens


def _router(kind: dict, where: str, scs: list, seed: int, ranks: int):
    """A router over engines whose first ranks' scenarios are `scs` (each of `ranks` ranks)."""
    router = make_router(kind, len(scs), page_size=scs[0].cache.page_size, seed=seed, where=where)
    if hasattr(router, "capacity_pages"):
        router.capacity_pages = [_capacity_pages(esc) * ranks for esc in scs]
    return router


def _capacity_pages(sc) -> int | None:
    """L1 + L2 pages of an engine (what a KV-event indexer can see it hold)."""
    l2 = 0 if sc.cache.tiers is None else int(sc.doc["cache"]["l2_tokens"] or 0)
    return (sc.cache.capacity_tokens + l2) // sc.cache.page_size


__all__ = ["Fleet", "build_fleet", "share_l3", "shared_store"]
