"""The `torch:` section of a scenario (`TorchOptions`: the torch backend's synthetic model, its
clock and its L3 page store): every key's default, check and docs text written once, here; the
scenario schema derives the section from it and gpu_backend/backend.py builds from it.

The page stores' names are declared here (`declare_page_store`), one floor below the torch
backend that builds them (gpu_backend/backend.py `register_page_store` declares a new one), so
the schema knows them without importing torch (as scenarios/cost_kinds.py does for cost models).
"""
from __future__ import annotations

from dataclasses import dataclass

from cache_core.options import option
from cache_core.registry import changed

CLOCKS = ("modelled", "measured", "realtime")
DTYPE_NAMES = ("float32", "bfloat16", "float16")
LAYOUTS = ("page_first", "layer_first")
_STORES: dict[str, str] = {}  # page store name -> what it is (the docs text), in declaration order


def declare_page_store(name: str, what: str) -> None:
    """Make `torch.store: name` valid (`what`: a few words for the docs)."""
    if name in _STORES:
        raise ValueError(f"page store {name!r} is already declared")
    _STORES[name] = what
    changed()


def forget_page_store(name: str) -> None:
    """Drop a declared store (a test's toy, once the test is done)."""
    del _STORES[name]
    changed()


def page_store_names() -> list[str]:
    """The declared page stores, in declaration order."""
    return list(_STORES)


def _stores_text() -> str:
    return " or ".join(f"{n} ({w})" for n, w in _STORES.items())


declare_page_store("local", "a directory")
declare_page_store("mooncake", "Mooncake Store")

_WIDTH = "an integer >= 1 or null (the preset's)"


@dataclass(frozen=True, kw_only=True)
class TorchOptions:
    """The `torch:` section (sizes of the synthetic model; small on CPU)."""

    device: str = option("cpu", "str", "cpu or cuda")
    # layers of the synthetic model, the preset's mix scaled down (`spec.scale_counts`); with
    # fewer layers than the preset, measured step and copy times are multiplied by preset
    # layers / these layers (`layer_scale`) before they advance the measured/realtime clock
    layers: int = option(4, "int1", "an integer >= 1 (layers of the reduced model, the preset's mix; measured "
                         "times are scaled by the preset's layers / these)")
    # widths; None = the preset's (hidden_size, KV heads, head_dim, hidden, vocab_size): the
    # real dimensions, for a GPU; the small defaults suit a CPU
    hidden: int | None = option(64, "int1_or_none", _WIDTH)
    num_heads: int | None = option(4, "int1_or_none", "an integer >= 1 or null (the preset's KV heads)")
    head_dim: int | None = option(16, "int1_or_none", _WIDTH)
    state_dim: int | None = option(32, "int1_or_none", "an integer >= 1 or null (the hidden size)")
    vocab: int | None = option(4096, "int1_or_none", _WIDTH)
    dtype: str = option("float32", ("choice", DTYPE_NAMES), "float32, bfloat16 or float16")
    layout: str = option("page_first", ("choice", LAYOUTS), "page_first or layer_first")
    store: str = option("local", ("choice", page_store_names), _stores_text)  # the L3 page store
    store_path: str | None = option(None, "str_or_none", "null (a temporary directory) or the L3 page store "
                                    "directory")  # local: the directory
    mooncake_master: str = option("127.0.0.1:50051", "str", "HOST:PORT of mooncake_master")
    mooncake_metadata: str = option("http://127.0.0.1:8080/metadata", "str", "the HTTP metadata server's URL")
    seed: int = option(0, "int0", "an integer >= 0")
    # the engine's clock: "modelled" (logical, advanced by `pace` data plane and executor: the
    # simulator's links and cost model, so decisions equal the simulator's on any machine load),
    # "measured" (logical, advanced by each step's and transfer's measured duration) or
    # "realtime" (the same on SimPy's real-time environment: idle gaps are slept; demos)
    clock: str = option("modelled", ("choice", CLOCKS), "modelled (steps and transfers last what the simulator "
                        "gives them), measured or realtime")

    def __post_init__(self):
        if self.clock not in CLOCKS:
            raise ValueError(f"torch.clock {self.clock!r}: expected {', '.join(CLOCKS)}")


__all__ = ["CLOCKS", "DTYPE_NAMES", "LAYOUTS", "TorchOptions", "declare_page_store", "forget_page_store",
           "page_store_names"]
