"""The router registry: one small module per router (docs/fleet.md compares them)."""
from __future__ import annotations

from .cache_aware import CacheAware
from .kv_overlap import KvOverlap
from .least_load import LeastLoad
from .oracle import Oracle
from .round_robin import RoundRobin
from .session_affinity import SessionAffinity

ROUTERS = {cls.name: cls for cls in (RoundRobin, LeastLoad, SessionAffinity, CacheAware, KvOverlap, Oracle)}


def make_router(spec: dict, n: int, *, page_size: int, seed: int = 0, where: str = "fleet.router"):
    """A router from ``{kind: NAME, param: value, ...}``; ValueError (one line) for a bad one."""
    kind = spec.get("kind")
    if kind not in ROUTERS:
        raise ValueError(f"{where}: unknown router {kind!r}; expected one of {', '.join(ROUTERS)}")
    params = {k: v for k, v in spec.items() if k != "kind"}
    try:
        return ROUTERS[kind](n, page_size=page_size, seed=seed, **params)
    except TypeError as e:
        raise ValueError(f"{where}: {kind}: {e}") from None


__all__ = ["ROUTERS", "make_router"]
