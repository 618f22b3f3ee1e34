"""Building the torch backend's plug-ins for one cache: pools sized from the cache's pools, the
synthetic model from the model preset (reduced), the data plane and the step executor."""
from __future__ import annotations

import torch

from scenarios.torch_options import (CLOCKS, DTYPE_NAMES, TorchOptions, declare_page_store, forget_page_store,  # noqa: F401
                                     page_store_names)

from .dataplane import TorchDataPlane
from .executor import TorchExecutor
from .model import SyntheticHybridModel
from .pool_kinds import component_pools, pages
from .pools import KVPools
from .spec import HybridSpec, preset_counts
from .store import LocalDirStore

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}  # torch.dtype names
_PAGE_STORES: dict = {}  # torch.store name -> builder(opts) -> PageStore


def register_page_store(name: str, what: str | None = None):
    """Decorator: `builder(opts: TorchOptions) -> PageStore` is what `torch.store: name` builds; a
    name the scenario floor has not declared is declared there (`what`: its docs text)."""

    def deco(builder):
        if name in _PAGE_STORES:
            raise ValueError(f"page store {name!r} is already registered")
        if name not in page_store_names():
            declare_page_store(name, what or name)
        _PAGE_STORES[name] = builder
        return builder

    return deco


def unregister_page_store(name: str) -> None:
    """Drop a builder and its declaration (a test's toy, once the test is done)."""
    del _PAGE_STORES[name]
    forget_page_store(name)


@register_page_store("local")
def _local_dir_store(opts: TorchOptions):
    import tempfile

    return LocalDirStore(opts.store_path or tempfile.mkdtemp(prefix="radixsim-l3-"))


@register_page_store("mooncake")
def _mooncake_client_store(opts: TorchOptions):
    from .store_mooncake import MooncakeClientStore

    return MooncakeClientStore(opts.mooncake_master, opts.mooncake_metadata)


def make_page_store(opts: TorchOptions):
    """The L3 page store the options name (its registered builder)."""
    if opts.store not in _PAGE_STORES:
        raise ValueError(f"torch.store {opts.store!r}: expected {' or '.join(_PAGE_STORES)}")
    return _PAGE_STORES[opts.store](opts)


def synthetic_model(preset, config, opts: TorchOptions) -> tuple:
    """(the synthetic model the torch backend runs for a cache of `config` (a `CacheConfig`: its
    SWA window, page size and sidecars) with model preset `preset` and options `opts`, its layer
    scale: the preset's layers over the model's)."""
    window = config.swa.window_tokens if config.swa is not None else None
    spec = HybridSpec.from_preset(preset, max_layers=opts.layers, hidden=opts.hidden, num_heads=opts.num_heads,
                                  head_dim=opts.head_dim, state_dim=opts.state_dim, vocab=opts.vocab,
                                  window=window, page_size=config.page_size, sidecars=config.sidecars)
    model = SyntheticHybridModel(spec, seed=opts.seed, device=opts.device, dtype=DTYPES[opts.dtype])
    return model, sum(preset_counts(preset).values()) / spec.num_layers


def build_plugins(env, cache, preset, opts: TorchOptions, max_running: int, *, record_logits: bool = False,
                  store=None, chunk_tokens: int = 8192, pace=(None, None), load_overlap: str = "none"):
    """(model, pools, data plane, executor) for `cache` (built with record_actions and, with
    tiers, auto_ack=False). Pools mirror the cache's pools per tier, each component's from its
    hook (pool_kinds.py: MAMBA gets one scratch state slot and SWA a ring of scratch pages per
    running request beyond the core's; `chunk_tokens`: the longest prefill of one forward; a
    component without a hook is refused). `pace`: (data plane, executor)
    that time transfers and steps on the engine's clock (None: their measured durations, times
    preset layers / model layers when `opts.layers` reduced the model). `load_overlap`: the
    engine's (``layerwise``: the loads stay in flight until the forward waits for them layer by
    layer; ``none``: those of a step move together and are waited for before it computes)."""
    P = cache.page_size
    if cache.config.capacity_tokens is None:
        raise ValueError("the torch backend needs a bounded L1 (cache.l1_tokens)")
    comp_pools, comp_ex = component_pools(cache.voters, max_running=max_running, chunk_tokens=chunk_tokens,
                                          page_size=P)  # each component's hook (pool_kinds.py)
    model, scale = synthetic_model(preset, cache.config, opts)
    spec = model.spec
    hier = cache.hier
    full = {"L1": cache.full.pool.capacity_pages, "L2": pages(hier.pool) if hier is not None else 0}
    dtype = DTYPES[opts.dtype]
    pools = KVPools(spec, full_pages=full, **comp_pools, layout=opts.layout, device=opts.device, dtype=dtype)
    if store is None and hier is not None and hier.storage is not None:
        store = make_page_store(opts)
    plane = TorchDataPlane(env, pools, store, pace=pace[0], layer_scale=scale, overlap=load_overlap)
    ex = TorchExecutor(env, model, pools, cache, **comp_ex, record_logits=record_logits, pace=pace[1],
                       layer_scale=scale)
    plane.already_taken = ex.snapshot_taken
    ex.loads = plane
    return model, pools, plane, ex


__all__ = ["TorchOptions", "CLOCKS", "build_plugins", "make_page_store", "register_page_store", "unregister_page_store",
           "synthetic_model", "DTYPES"]
