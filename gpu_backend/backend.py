"""Building the torch backend's plug-ins for one cache: pools sized from the cache's pools, the
synthetic model from the model preset (reduced), the data plane and the step executor."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .dataplane import TorchDataPlane
from .executor import TorchExecutor
from .model import SyntheticHybridModel
from .pool_kinds import component_pools, pages
from .pools import KVPools
from .spec import HybridSpec, preset_counts
from .store import LocalDirStore

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True, kw_only=True)
class TorchOptions:
    """The `torch:` section of a scenario (sizes of the synthetic model; small on CPU)."""

    device: str = "cpu"
    # layers of the synthetic model, the preset's mix scaled down (`spec.scale_counts`); with
    # fewer layers than the preset, measured step and copy times are multiplied by preset
    # layers / these layers (`layer_scale`) before they advance the measured/realtime clock
    layers: int = 4
    # widths; None = the preset's (hidden_size, KV heads, head_dim, hidden, vocab_size): the
    # real dimensions, for a GPU; the small defaults suit a CPU
    hidden: int | None = 64
    num_heads: int | None = 4
    head_dim: int | None = 16
    state_dim: int | None = 32
    vocab: int | None = 4096
    dtype: str = "float32"
    layout: str = "page_first"
    store: str = "local"  # the L3 page store: "local" (a directory) or "mooncake" (Mooncake Store)
    store_path: str | None = None  # local: the directory (default: a temporary one)
    mooncake_master: str = "127.0.0.1:50051"
    mooncake_metadata: str = "http://127.0.0.1:8080/metadata"
    seed: int = 0
    # the engine's clock: "modelled" (logical, advanced by `pace` data plane and executor: the
    # simulator's links and cost model, so decisions equal the simulator's on any machine load),
    # "measured" (logical, advanced by each step's and transfer's measured duration) or
    # "realtime" (the same on SimPy's real-time environment: idle gaps are slept; demos)
    clock: str = "modelled"

    def __post_init__(self):
        if self.clock not in CLOCKS:
            raise ValueError(f"torch.clock {self.clock!r}: expected {', '.join(CLOCKS)}")


CLOCKS = ("modelled", "measured", "realtime")


def make_page_store(opts: TorchOptions):
    """The L3 page store the options name."""
    if opts.store == "mooncake":
        from .store_mooncake import MooncakeClientStore

        return MooncakeClientStore(opts.mooncake_master, opts.mooncake_metadata)
    if opts.store != "local":
        raise ValueError(f"torch.store {opts.store!r}: expected local or mooncake")
    import tempfile

    return LocalDirStore(opts.store_path or tempfile.mkdtemp(prefix="radixsim-l3-"))


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


__all__ = ["TorchOptions", "CLOCKS", "build_plugins", "make_page_store", "synthetic_model", "DTYPES"]
