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
    keys = router_keys(ROUTERS[kind])
    for k, v in params.items():
        if k not in keys:
            raise ValueError(f"{where}.{k}: unknown parameter of {kind}; expected one of "
                             f"{', '.join(keys) or '(none)'}")
        check, expected = _TYPES.get(_annotation(keys[k]), (None, ""))
        if check is not None and not check(v):
            raise ValueError(f"{where}.{k}: got {v!r}; expected {expected} ({kind}'s default: {keys[k].default!r})")
    try:
        return ROUTERS[kind](n, page_size=page_size, seed=seed, **params)
    except TypeError as e:
        raise ValueError(f"{where}: {kind}: {e}") from None


_TYPES = {  # a router parameter's annotation -> its value check and what is expected (others: unchecked)
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
}


def _annotation(p: inspect.Parameter) -> str:
    return p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")


def router_keys(cls) -> dict:
    """A router's scenario keys, derived from its constructor's signature (its own and its bases'
    keyword-only parameters, but the fleet's page_size and seed): name -> inspect.Parameter (its
    default and annotation; an int, float, str or bool annotation is checked by `make_router`)."""
    keys: dict = {}
    for c in cls.__mro__:
        if "__init__" in vars(c) and c is not object:
            keys.update((p.name, p) for p in inspect.signature(c.__init__).parameters.values()
                        if p.kind is p.KEYWORD_ONLY and p.name not in ("page_size", "seed") and p.name not in keys)
    return keys


def parameters(cls) -> list:
    """The keyword parameters a router class takes (its own and its bases'), but the fleet's."""
    return list(router_keys(cls))


__all__ = ["ROUTERS", "make_router", "parameters", "register_router", "router_keys", "unregister_router"]
