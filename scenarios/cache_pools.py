"""The `cache:` section of a scenario resolved into pools, in steps (scenarios/scenario.py `resolve`):
components, the L1 pool, the SWA and MAMBA pools, the tiers. Each step reads the validated
section and returns what it resolved; none writes into the section. `cache_doc` then gives the
section as config.yaml records it (sizes floored to whole pages, `l1_tokens: auto` resolved).

`l1_tokens` keeps its name here from the YAML key to `L1Pool.l1_tokens`; the core's pool
takes it as `CacheConfig.capacity_tokens`.
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

from cache_core.config import MambaConfig, SwaConfig, component_kinds, component_spec_class
from cache_core.options import build
from cache_core.tiers import TierConfig
from cache_core.tiers.store import l3_model_config

from . import presets
from .schema import L2_SIZE_KEYS, ScenarioError
from .units import check_pool, floor_pages, parse_size, tier_warnings


@dataclass(frozen=True)
class L1Pool:
    """The device pool: `l1_tokens` (floored to whole pages), the plan that sized it
    (`l1_tokens: auto`; None when given), the SWA and MAMBA ratios in force."""

    l1_tokens: int
    plan: object  # presets.L1Plan | None
    swa_ratio: float | None
    mamba_ratio: float


@dataclass(frozen=True)
class Tiers:
    """The L2/L3 tiers (None: L1 only), what config.yaml records of their sizes, the warnings."""

    config: TierConfig | None
    doc: dict
    warnings: tuple


def size(c: dict, key: str, bpt: float, where: str, unbounded: bool = False):
    """cache.KEY in tokens (a count or bytes with a unit through `bpt`; None stays None)."""
    try:
        return parse_size(c[key], f"cache.{key}", bpt, unbounded)
    except ValueError as err:
        raise ScenarioError(f"{where}: {err}") from None


def pool(key: str, tokens, page, where: str, at_least_one_page: bool = True) -> None:
    try:
        check_pool(tokens, page, f"cache.{key}", at_least_one_page)
    except ValueError as err:
        raise ScenarioError(f"{where}: {err}") from None


BUILT_IN = ("full", "swa", "mamba")  # sized from the model preset and the cache.* keys


def components(c: dict, model, where: str) -> list:
    """cache.components, or the model's own (full, then swa and mamba where it has them)."""
    comps = c["components"] or ["full"] + (["swa"] if model.swa_layers else []) + (["mamba"] if model.state_bytes else [])
    comps = [x["kind"] if isinstance(x, dict) and list(x) == ["kind"] and x["kind"] in BUILT_IN else x for x in comps]
    bad = [i for i, x in enumerate(comps) if isinstance(x, str) and x not in BUILT_IN and x not in component_kinds()]
    if bad:
        raise ScenarioError(f"{where}: cache.components[{bad[0]}]: {comps[bad[0]]!r} is not a component; expected "
                            f"one of {', '.join(dict.fromkeys(BUILT_IN + tuple(component_kinds())))}")
    if "swa" in comps and not model.swa_layers or "mamba" in comps and not model.state_bytes:
        raise ScenarioError(f"{where}: cache.components: {comps} names a component {model.name} does not have; "
                            f"expected a subset of its own")
    return comps


def extra_components(comps: list, where: str) -> tuple:
    """The specs of cache.components' registered kinds other than full/swa/mamba (a name, or
    {kind: NAME, FIELD: VALUE}: the kind's spec class built with those fields), in order."""
    out = []
    for i, item in enumerate(comps):
        at = f"{where}: cache.components[{i}]"
        kind, fields = (item, {}) if isinstance(item, str) else (item.get("kind"), {k: v for k, v in item.items()
                                                                                      if k != "kind"})
        if kind in BUILT_IN:
            if fields:
                raise ScenarioError(f"{at}: {kind} is sized from the model preset and the cache.* keys; "
                                    f"expected the name {kind!r} alone")
            continue
        try:
            cls = component_spec_class(kind)
        except ValueError:
            others = [k for k in component_kinds() if k not in BUILT_IN]
            raise ScenarioError(f"{at}.kind: {kind!r} is not a registered component kind; expected "
                                + (f"one of {', '.join(others)}" if others else "a registered kind (none is, "
                                   "besides full, swa, mamba)")) from None
        known = spec_fields(cls)
        for k in fields:
            if k not in known:
                raise ScenarioError(f"{at}.{k}: not a field of component {kind!r}; expected one of {', '.join(known)}")
        try:
            out.append(cls(**fields))
        except (TypeError, ValueError) as err:
            raise ScenarioError(f"{at}: component {kind!r}: {err}") from None
    return tuple(out)


def spec_fields(cls) -> list:
    """A component spec class's fields (a dataclass's, else its constructor's keywords)."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    return [n for n in inspect.signature(cls).parameters if n not in ("self", "args", "kwargs")]


def l1_pool(c: dict, model, hw, tp: int, where: str) -> L1Pool:
    """cache.l1_tokens: a size (capped by max_total_tokens) or `auto` (presets.l1_plan, SGLang's
    sizing from the GPU memory left), checked and floored to whole pages."""
    P = c["page_size"]
    swa_ratio = c["swa_full_tokens_ratio"] if c["swa_full_tokens_ratio"] is not None else model.swa_full_tokens_ratio
    mamba_ratio = (c["mamba_full_memory_ratio"] if c["mamba_full_memory_ratio"] is not None
                   else presets.DEFAULT_MAMBA_FULL_MEMORY_RATIO)
    bpt = presets.bytes_per_token(model, "full")
    max_total = size(c, "max_total_tokens", bpt, where)
    plan = None
    if c["l1_tokens"] == "auto":
        try:
            plan = presets.l1_plan(model, hw, tp, c["mem_fraction_static"], swa_full_tokens_ratio=swa_ratio,
                                   mamba_full_memory_ratio=mamba_ratio, page_size=P, max_total_tokens=max_total)
        except ValueError as err:
            raise ScenarioError(f"{where}: cache.l1_tokens: auto: {err}") from None
        l1_tokens = plan.full_tokens
    else:
        l1_tokens = size(c, "l1_tokens", bpt, where)
        if max_total is not None:
            l1_tokens = min(l1_tokens, max_total)
    pool("l1_tokens", l1_tokens, P, where)
    return L1Pool(floor_pages(l1_tokens, P), plan, swa_ratio, mamba_ratio)


def swa_pool(c: dict, model, l1: L1Pool, where: str) -> SwaConfig:
    """The SWA pool: cache.swa_tokens, else the plan's, else swa_full_tokens_ratio x L1."""
    P = c["page_size"]
    swa_tokens = size(c, "swa_tokens", presets.bytes_per_token(model, "full"), where)
    if swa_tokens is None:
        swa_tokens = l1.plan.swa_tokens if l1.plan is not None else int(l1.l1_tokens * l1.swa_ratio)
    pool("swa_tokens", swa_tokens, P, where, at_least_one_page=False)
    return SwaConfig(window_tokens=model.swa_window_tokens, capacity_tokens=floor_pages(swa_tokens, P))


def mamba_pool(c: dict, model, l1: L1Pool, where: str) -> MambaConfig:
    """The MAMBA state slots: cache.mamba_slots, else the plan's, else mamba_full_memory_ratio x
    L1's KV bytes / state size (at least 1); checkpoints every cache.mamba_every_tokens."""
    slots = c["mamba_slots"]
    if slots is None:
        slots = (l1.plan.mamba_slots if l1.plan is not None else
                 int(l1.mamba_ratio * l1.l1_tokens * presets.bytes_per_token(model, "full")
                     // max(model.state_bytes, 1)))
    slots = max(1, slots)
    pool("mamba_slots", slots, None, where, at_least_one_page=False)
    every = c["mamba_every_tokens"]
    if every is not None and every % c["page_size"]:
        raise ScenarioError(f"{where}: cache.mamba_every_tokens: {every} is not a multiple of cache.page_size "
                            f"({c['page_size']}); expected a multiple")
    return MambaConfig(slots=slots, every_tokens=every)


def tiers(c: dict, model, tp: int, l1_tokens: int, swa, mamba, where: str) -> Tiers:
    """L2 (one of l2_tokens, hicache_ratio, hicache_size_gb) and L3 (needs L2; an SSD tier needs
    a mooncake L3), floored to whole pages."""
    P, bpt = c["page_size"], presets.bytes_per_token(model, "full")
    l2_given = [k for k in L2_SIZE_KEYS if c[k] is not None]
    if len(l2_given) > 1:
        raise ScenarioError(f"{where}: cache.{l2_given[1]}: conflicts with cache.{l2_given[0]}; expected one "
                            "L2 size (l2_tokens, hicache_ratio or hicache_size_gb)")
    l2 = floor_pages(size(c, "l2_tokens", bpt, where) if c["hicache_size_gb"] is None
                     else presets.host_pool_tokens(model, tp, c["hicache_size_gb"]), P)
    l3_given = c["l3_tokens"] is not None
    l3 = floor_pages(size(c, "l3_tokens", bpt, where, unbounded=True) if l3_given else None, P)
    if l2 is None and c["hicache_ratio"] is None and not l3_given:
        return Tiers(None, {}, ())
    if l2 is None and c["hicache_ratio"] is None:
        raise ScenarioError(f"{where}: cache.l3_tokens: an L3 tier needs L2 (cache.l2_tokens, "
                            "cache.hicache_ratio or cache.hicache_size_gb); expected one of them too")
    ssd = floor_pages(size(c, "l3_ssd_tokens", bpt, where), P)
    if ssd is not None and (not l3_given or c["l3_model"] != "mooncake"):
        raise ScenarioError(f"{where}: cache.l3_ssd_tokens: an SSD tier needs an L3 with cache.l3_model "
                            "mooncake; expected both")
    config = TierConfig(l2_tokens=l2, hicache_ratio=c["hicache_ratio"], l3=l3_given, l3_tokens=l3,
                        l3_model=c["l3_model"], l3_high_watermark=c["l3_eviction_high_watermark"],
                        l3_eviction_ratio=c["l3_eviction_ratio"], l3_replicas=c["l3_replicas"],
                        l3_ssd_tokens=ssd, l3_lease_ttl_s=c["l3_lease_ttl_s"],
                        l3_eviction_shards=c["l3_eviction_shards"], l3_objects_per_page=c["l3_objects_per_page"],
                        l3_options=build(l3_model_config(c["l3_model"]), c),
                        write_policy=c["write_policy"], l3_write=c["l3_write"],
                        prefetch_policy=c["prefetch_policy"], min_prefetch_tokens=c["min_prefetch_tokens"],
                        kv_bytes_per_token=int(bpt),
                        swa_bytes_per_token=int(presets.bytes_per_token(model, "swa")) if swa else 0,
                        state_bytes=int(model.state_bytes) if mamba else 0)
    l2_tokens = floor_pages(config.l2_size(l1_tokens), P)
    pool("hicache_size_gb" if c["hicache_size_gb"] is not None else "l2_tokens" if l2 is not None
         else "hicache_ratio", l2_tokens, P, where, at_least_one_page=False)
    doc = {"l2_tokens": l2_tokens, "l3_tokens": "unbounded" if l3_given and l3 is None else l3, "l3_ssd_tokens": ssd}
    return Tiers(config, doc, tuple(tier_warnings(l1_tokens, l2_tokens, l3, l3_given)))


def cache_doc(c: dict, comps: list, l1: L1Pool, swa, mamba, tier: Tiers) -> dict:
    """The `cache:` section as config.yaml records it: the resolved values in the section's own
    key order, `l1_plan` (what `auto` computed) last."""
    plan = l1.plan
    out = {**c, "components": comps, "l1_tokens": l1.l1_tokens}
    if swa is not None:
        out["swa_tokens"] = swa.capacity_tokens
    if mamba is not None:
        out["mamba_slots"] = mamba.slots
    out.update({"swa_full_tokens_ratio": l1.swa_ratio, "mamba_full_memory_ratio": l1.mamba_ratio}, **tier.doc)
    out["l1_plan"] = None if plan is None else {
        "budget_bytes_per_gpu": plan.budget_bytes_per_gpu, "cell_bytes_per_gpu": plan.cell_bytes_per_gpu,
        "kv_shards": plan.kv_shards, "uncapped_full_tokens": plan.uncapped_full_tokens}
    return out


__all__ = ["L1Pool", "Tiers", "components", "extra_components", "spec_fields", "l1_pool", "swa_pool", "mamba_pool", "tiers", "cache_doc"]
