"""Building a fleet from a scenario's `fleet:` section: the engines (on a shared L3 store when
``fleet.shared_l3``), the routers, and the `Fleet` or `PDFleet` front. Its own module so that
`fleet.py` and `pd.py` do not import each other (issue 30: the fleet <-> pd circle)."""
from __future__ import annotations

from cache_core.actions import L2, L3
from cache_core.tiers.store import make_store

from .fleet import Fleet
from .pd import PDFleet
from .routers import make_router


def shared_store(sc) -> object:
    """The one L3 store of a fleet's shared L3 (engine scenario `sc`'s configuration), built
    before the engines so that every engine's cache is built on it."""
    return make_store(sc.cache.tiers, sc.cache.page_size)


def share_l3(engines: list, sc, store) -> None:
    """One pair of L3 links and one SSD read link for every engine (see fleet/fleet.py's docstring); every engine's cache
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


def rebuild_engine(env, sc, fleet, store, i: int, make_engine):
    """Engine i of fleet scenario `sc` built anew (a restart after engine_down: empty caches),
    on the shared store and the shared L3 links when the fleet has them."""
    new, _ = make_engine(env, sc.fleet.engines[i], store)
    if store is not None:
        donor = next(e for j, e in enumerate(fleet.engines) if j != i)
        for pair in ((L3, L2), (L2, L3)):
            new.links.links[pair] = donor.links.links[pair]
        new.links.ssd = donor.links.ssd
    return new


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
    router = make_router(kind, len(scs), page_size=_page_size(scs[0]), seed=seed, where=where)
    if hasattr(router, "capacity_pages"):
        router.capacity_pages = [_capacity_pages(esc) * ranks for esc in scs]
    return router


def _capacity_pages(sc) -> int | None:
    """L1 + L2 pages of an engine (what a KV-event indexer can see it hold)."""
    l2 = 0 if sc.cache.tiers is None else int(sc.doc["cache"]["l2_tokens"] or 0)
    return (sc.cache.capacity_tokens + l2) // _page_size(sc)


def _page_size(sc) -> int:
    """The unit a router counts an engine's KV in: vLLM's block (the unit of its KV events and
    prefix hashes, engine.kind vllm), else the cache's page."""
    return sc.engine.block_size if sc.engine.kind == "vllm" else sc.cache.page_size


__all__ = ["build_fleet", "rebuild_engine", "share_l3", "shared_store"]
