"""The L3 store models' registry (`register_l3_model`; store.py registers the built-ins) and the
``mooncake`` model's scenario keys (`MooncakeOptions`, registered with it): their defaults, checks
and docs text, written once (TierConfig and MooncakeStore take their defaults from here; the
scenario schema derives the `cache.l3_*` keys from the registered options)."""
from __future__ import annotations

from dataclasses import dataclass

from ..options import option
from ..registry import Registry

LEASE_TTL_S = 10.0  # Mooncake's DEFAULT_DEFAULT_KV_LEASE_TTL, 10,000 ms (mooncake-store/include/types.h)


@dataclass(frozen=True)
class MooncakeOptions:
    """Mooncake Store's master as SGLang's HiCache uses it (store.py's docstring, docs/store_model.md)."""

    l3_eviction_high_watermark: float = option(0.90, "fraction", "a number in (0, 1] (Mooncake's "
                                               "eviction_high_watermark_ratio)")
    l3_eviction_ratio: float = option(0.05, "fraction", "a number in (0, 1] (Mooncake's eviction_ratio)")
    l3_replicas: int = option(1, "int1", "an integer >= 1")
    l3_lease_ttl_s: float = option(LEASE_TTL_S, "nonneg", "a number >= 0 (seconds; Mooncake's default_kv_lease_ttl)")
    l3_eviction_shards: int = option(1, "int1", "an integer >= 1 (1: pool-wide; 1024: Mooncake's per-shard "
                                     "BatchEvict)")
    l3_objects_per_page: int = option(1, "int1", "an integer >= 1 (objects per page: SGLang's K and V per TP rank)")


MOONCAKE = MooncakeOptions()  # the defaults
MODELS = Registry("L3 model")


def register_l3_model(name: str, config: type | None = None):
    """Decorator: `builder(cfg, capacity_pages, page_size) -> store` is what `l3_model: name`
    builds (cfg: the TierConfig; capacity_pages None = unbounded); `config`: its options
    dataclass (cache_core/options.py), whose keys are `cache:` keys; the builder reads the
    values as `l3_options(cfg)`."""
    return MODELS.register(name, config)


def unregister_l3_model(name: str) -> None:
    """Drop a model (a test's toy, once the test is done)."""
    MODELS.unregister(name)


def l3_model_names() -> list[str]:
    return MODELS.names()


def l3_model_configs() -> list[type]:
    """The registered models' options dataclasses (each once)."""
    return MODELS.configs()


def l3_model_config(name: str) -> type:
    """The options dataclass L3 model `name` registered with."""
    return MODELS.config_of(name)


def l3_options(cfg):
    """The options of `cfg`'s L3 model: the scenario's (`TierConfig.l3_options`), else its defaults."""
    return cfg.l3_options if cfg.l3_options is not None else MODELS.config_of(cfg.l3_model)()


__all__ = ["LEASE_TTL_S", "MODELS", "MOONCAKE", "MooncakeOptions", "register_l3_model", "unregister_l3_model",
           "l3_model_names", "l3_model_config", "l3_model_configs", "l3_options"]
