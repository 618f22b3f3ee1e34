"""The scenario schema's sections that plug-ins and their consumers' config dataclasses give
(issue 30 item 1): `cache:` (defaults: CacheConfig's and TierConfig's; each eviction policy's
option keys after `policy`, each L3 model's after `l3_model`), `engine:` (EngineConfig's; each
schedule policy's keys after `schedule_policy`), `cost:` (each cost kind's keys after `kind`) and
`torch:` (scenarios/torch_options.py TorchOptions). scenarios/schema.py rebuilds them after every
registration (`refresh`); nothing here writes a default a dataclass already holds."""
from __future__ import annotations

from cache_core.config import CacheConfig
from cache_core.engine_types import FRONTENDS, LOAD_OVERLAPS, TREE_CORES, EngineConfig
from cache_core.eviction import policy_configs
from cache_core.options import defaults, schema_entries
from cache_core.scheduling import schedule_policy_configs, schedule_policy_names
from cache_core.tiers import L3_WRITES, PREFETCH_POLICIES, WRITE_POLICIES, TierConfig
from cache_core.tiers.store import l3_model_configs, l3_model_names
from .attention_backend_data import backend_names as attention_backend_names

from .cost_kinds import cost_kind_names, cost_kinds
from .engine_kinds import KIND_KEYS
from .torch_options import TorchOptions

ANY_SIZE = "a token count, a size like 500GiB"
_ANY_SIZE = ANY_SIZE
_CC, _TC, _EC = defaults(CacheConfig), defaults(TierConfig), defaults(EngineConfig)


def _cache_section() -> dict:
    """`cache:`: the pools and tiers (defaults: CacheConfig's and TierConfig's), each eviction
    policy's keys after `policy`, each L3 model's after `l3_model` (their options dataclasses)."""
    return _spliced({
        "page_size": (64, "int1", "an integer >= 1"),
        "l1_tokens": ("auto", "size_auto", f"'auto' or {_ANY_SIZE}"),
        "mem_fraction_static": (0.88, "fraction", "a number in (0, 1]"),
        "max_total_tokens": (None, "size_or_none", f"null or {_ANY_SIZE}"),
        "swa_full_tokens_ratio": (None, "pos_or_none", "null or a number > 0"),
        "mamba_full_memory_ratio": (None, "pos_or_none", "null or a number > 0"),
        "swa_tokens": (None, "size_or_none", f"null or {_ANY_SIZE}"),
        "mamba_slots": (None, "int1_or_none", "null or an integer >= 1"),
        "mamba_every_tokens": (None, "int1_or_none", "null or an integer >= 1"),
        "components": (None, "components", "null or a list with full: swa, mamba (sized from the model) and any "
                                           "registered component kind, by name or as {kind: NAME, FIELD: VALUE}"),
        "l2_tokens": (_TC["l2_tokens"], "size_or_none", f"null or {_ANY_SIZE}"),
        "hicache_ratio": (_TC["hicache_ratio"], "pos_or_none", "null or a number > 0"),
        "hicache_size_gb": (None, "pos_or_none", "null or a number > 0 (GB of 1e9 bytes per rank)"),
        "l3_tokens": (None, "size_l3", f"null (no L3), 'unbounded', or {_ANY_SIZE}"),
        "policy": (_CC["policy"], "policy", "an eviction policy name (belady-node needs the whole future: replay only)"),
        "write_policy": (_TC["write_policy"], ("choice", WRITE_POLICIES), "one of " + ", ".join(WRITE_POLICIES)),
        "l3_write": (_TC["l3_write"], ("choice", L3_WRITES), "one of " + ", ".join(L3_WRITES)),
        "l3_model": (_TC["l3_model"], "l3_model", "one of " + ", ".join(l3_model_names())),
        "l3_ssd_tokens": (_TC["l3_ssd_tokens"], "size_or_none", f"null (no SSD tier) or {_ANY_SIZE}"),
        "prefetch_policy": (_TC["prefetch_policy"], ("choice", PREFETCH_POLICIES), "one of " + ", ".join(PREFETCH_POLICIES)),
        "min_prefetch_tokens": (_TC["min_prefetch_tokens"], "int0", "an integer >= 0"),
    }, {"policy": policy_configs(), "l3_model": l3_model_configs()})


def _engine_section() -> dict:
    """`engine:` (defaults: EngineConfig's), each schedule policy's keys after `schedule_policy`."""
    return _spliced({
        **KIND_KEYS,  # engine.kind and the vLLM kind's keys (scenarios/engine_kinds.py)
        "max_running_requests": (_EC["max_running_requests"], "int1", "an integer >= 1"),
        "max_prefill_tokens": (_EC["max_prefill_tokens"], "int1", "an integer >= 1"),
        "chunked_prefill_tokens": (_EC["chunked_prefill_tokens"], "int1_or_none", "null or an integer >= 1"),
        "schedule_policy": (_EC["schedule_policy"], "schedule_policy", "one of " + ", ".join(schedule_policy_names())),
        "new_token_ratio": (_EC["new_token_ratio"], "nonneg", "a number >= 0"),
        "mixed_chunk": (_EC["mixed_chunk"], "bool", "true or false"),
        "load_overlap": (_EC["load_overlap"], ("choice", LOAD_OVERLAPS), "one of " + ", ".join(LOAD_OVERLAPS)),
        "ep_size": (1, "int1", "an integer >= 1 (SGLang's --ep-size: 1, or tp for an MoE model)"),
        "tree_core": (_EC["tree_core"], ("choice", (None, *TREE_CORES)), "null or one of " + ", ".join(TREE_CORES)),
        "overlap_schedule": (_EC["overlap_schedule"], "bool", "true or false (SGLang's overlap scheduler, its default)"),
        "attention_backend": (None, ("choice", (None, *attention_backend_names())),
                              "null (the model's own attention curve) or one of " + ", ".join(attention_backend_names())
                              + " (SGLang's --attention-backend; sim/opdata/attention_backends.json)"),
        "frontend": (_EC["frontend"], ("choice", (None, *FRONTENDS)), "null or one of " + ", ".join(FRONTENDS)),
        "l3_get_batch_pages": (_EC["l3_get_batch_pages"], "int1_or_none", "null or an integer >= 1 (SGLang's STORAGE_BATCH_SIZE: 128)"),
    }, {"schedule_policy": schedule_policy_configs()})


def _cost_section() -> dict:
    """`cost:`: the kind, each kind's keys (its options dataclass: the table kind's `table`), efficiency."""
    names = cost_kind_names()
    return _spliced({
        "kind": ("operators", "cost_kind", "a registered cost model (sim/cost_models.py): "
                 + ", ".join(names[:-1]) + " or " + names[-1]),
        "efficiency": ({}, "mapping", "a mapping of sim/cost.py Efficiency fields"),
    }, {"kind": [k.config for k in cost_kinds()]})


def _spliced(static: dict, after: dict) -> dict:
    """`static`'s entries, with after each key in `after` the option keys of its config classes
    (a plug-in's keys sit beside the key that names it); a key two classes give differently, or
    that is already a key of the section, is refused."""
    out = {}
    for k, entry in static.items():
        out[k] = entry
        for cls in after.get(k, ()):
            for key, option in schema_entries(cls).items():
                if (key in static or key in out) and out.get(key) != option:
                    raise ValueError(f"{cls.__name__}.{key}: already a key of this scenario section; expected "
                                     "a new name")
                out[key] = option
    return out


def torch() -> dict:
    """`torch:` (TorchOptions: every key's default, check and text)."""
    return schema_entries(TorchOptions)


def plugin_sections() -> dict:
    """The sections as the registries stand now."""
    return {"cache": _cache_section(), "engine": _engine_section(), "cost": _cost_section(), "torch": torch()}


__all__ = ["ANY_SIZE", "defaults", "plugin_sections"]
