"""The torch pools of each cache component, one hook per component name (issue 30 item 5).

`build_plugins` (backend.py) asks the hook of every component after FULL for its share of the
`KVPools` and of the executor's scratch: ``hook(comp, max_running=, chunk_tokens=, page_size=)``
returns (`KVPools` keywords, `TorchExecutor` keywords). A component without a hook is refused
in one line (the synthetic model has layers for FULL, SWA and recurrent state only). Adding one
is `@register_torch_pool("NAME")` on a function; tests/test_component_hooks.py registers a toy.
No torch import here.
"""
from __future__ import annotations

from typing import Callable

_HOOKS: dict[str, Callable] = {}


def register_torch_pool(name: str):
    """Decorator: the torch pools of the component named `name`."""

    def deco(fn):
        if name in _HOOKS:
            raise ValueError(f"torch pools for component {name!r} are already registered")
        _HOOKS[name] = fn
        return fn

    return deco


def unregister_torch_pool(name: str) -> None:
    del _HOOKS[name]


def torch_pool_names() -> list[str]:
    return ["full", *_HOOKS]


def pages(pool) -> int:
    """A pool's page (slot) count; 0 for none or an unbounded one."""
    return 0 if pool is None or pool.capacity_pages is None else pool.capacity_pages


def component_pools(voters, *, max_running: int, chunk_tokens: int, page_size: int) -> tuple[dict, dict]:
    """(KVPools keywords, TorchExecutor keywords) of every component after FULL, each from its
    hook; ValueError naming a component the torch backend has no pools for."""
    for c in voters:
        if c.name not in _HOOKS:
            raise ValueError(f"the torch backend has no pools for component {c.name!r}; expected components "
                             f"among {', '.join(torch_pool_names())} (gpu_backend/pool_kinds.py: register_torch_pool)")
    pools: dict = {}
    executor: dict = {}
    for c in voters:
        p, e = _HOOKS[c.name](c, max_running=max_running, chunk_tokens=chunk_tokens, page_size=page_size)
        pools.update(p)
        executor.update(e)
    return pools, executor


@register_torch_pool("swa")
def swa_pools(comp, *, max_running: int, chunk_tokens: int, page_size: int) -> tuple[dict, dict]:
    """SWA pages: the core's L1 pool plus a ring of scratch pages per running request (+1: the
    positions before a request's kept window while it computes, `chunk_tokens` the longest
    prefill of one forward); L2 as the core's."""
    core = pages(comp.pool)
    scratch = comp.window_pages + -(-chunk_tokens // page_size) + 2
    return ({"swa_pages": {"L1": core + (max_running + 1) * scratch, "L2": pages(comp.host_pool)}},
            {"swa_scratch_base": core, "swa_scratch_pages": scratch})


@register_torch_pool("mamba")
def mamba_pools(comp, *, max_running: int, chunk_tokens: int, page_size: int) -> tuple[dict, dict]:
    """Recurrent state slots: the core's L1 slots plus one scratch slot per running request (+1)."""
    core = pages(comp.pool)
    return {"state_slots": {"L1": core + max_running + 1, "L2": pages(comp.host_pool)}}, {"scratch_base": core}


__all__ = ["register_torch_pool", "unregister_torch_pool", "torch_pool_names", "component_pools", "pages"]
