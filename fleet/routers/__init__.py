"""The router registry (`fleet.routers.base.ROUTERS`): one small module per router, registered by
`@register_router(NAME)` (docs/fleet.md compares them)."""
from __future__ import annotations

import inspect

# The built-in routers register themselves (`@register_router`) when imported, in this order (the
# order error messages list them in): adding a router is its module plus its name here.
from . import round_robin, least_load, session_affinity, cache_aware, kv_overlap, cache_aware_exact, llm_d  # noqa: F401, I001
from .base import ROUTERS, register_router, unregister_router


def make_router(spec: dict, n: int, *, page_size: int, seed: int = 0, where: str = "fleet.router"):
    """A router from ``{kind: NAME, param: value, ...}``; ValueError (one line) for a bad one."""
    kind = spec.get("kind")
    if kind not in ROUTERS:
        renamed = " ('oracle' is now 'cache_aware_exact': it is no upper bound)" if kind == "oracle" else ""
        raise ValueError(f"{where}: unknown router {kind!r}; expected one of {', '.join(ROUTERS)}{renamed}")
    params = {k: v for k, v in spec.items() if k != "kind"}
    known = parameters(ROUTERS[kind])
    for k in params:
        if k not in known:
            raise ValueError(f"{where}.{k}: unknown parameter of {kind}; expected one of "
                             f"{', '.join(known) or '(none)'}")
    try:
        return ROUTERS[kind](n, page_size=page_size, seed=seed, **params)
    except TypeError as e:
        raise ValueError(f"{where}: {kind}: {e}") from None


def parameters(cls) -> list:
    """The keyword parameters a router class takes (its own and its bases'), but the fleet's."""
    names: list = []
    for c in cls.__mro__:
        if "__init__" in vars(c) and c is not object:
            names += [p.name for p in inspect.signature(c.__init__).parameters.values()
                      if p.kind is p.KEYWORD_ONLY and p.name not in ("page_size", "seed") and p.name not in names]
    return names


__all__ = ["ROUTERS", "make_router", "parameters", "register_router", "unregister_router"]
