"""The ``fleet:`` section of a scenario: many engines behind a router (docs/fleet.md).

    fleet:
      engines: 4                 # identical engines (the scenario's own model, hardware, cache, engine)
      groups:                    # or: groups of engines, each overriding the scenario's keys
        - {count: 2, hardware: h100x1, cache: {l1_tokens: 200000}}
        - {count: 2}
      router: round_robin        # or {kind: cache_aware, balance_abs_threshold: 64, ...}
      shared_l3: false           # one L3 store (capacity and links) for every engine
      slo_ttft_s: 2.0            # SLO targets for attainment and goodput
      slo_tpot_s: 0.1
      pd: null                   # P/D: {kv_bytes_per_s, kv_latency_s, decode_router, bootstrap_s, decode_radix}
      dp: 1                      # DP attention: ranks per engine, each with its own tree
      dp_router: round_robin     # the engine's internal dispatcher

A group may override ``model``, ``hardware``, ``tp``, ``cache`` and ``engine`` (nested as in
the scenario) and names its ``role`` (``both``; with ``pd``: ``prefill`` or ``decode``). Each
engine is resolved as a scenario of its own (`resolve_fleet`), so heterogeneous fleets work;
the workload and seed are the fleet's. Router names are checked by the fleet package's registry.
"""
from __future__ import annotations

import copy
import math
import numbers
from dataclasses import dataclass

from .schema import L2_SIZE_KEYS, ScenarioError, as_integer, as_number, replace_l2_size

ROLES = ("both", "prefill", "decode")
MAX_ENGINES = 4096  # engines x dp ranks of one fleet (a sanity limit: the catalog's largest is 16)
GROUP_KEYS = ("count", "role", "model", "hardware", "tp", "cache", "engine")
FLEET_KEYS = ("engines", "groups", "router", "shared_l3", "slo_ttft_s", "slo_tpot_s", "pd", "dp", "dp_router")
PD_KEYS = {"kv_bytes_per_s": 50e9, "kv_latency_s": 20e-6, "decode_router": "least_load",
           "bootstrap_s": 1e-3, "decode_radix": True}  # bootstrap_s: an assumption (docs/fleet.md)


@dataclass(frozen=True)
class FleetSpec:
    """A resolved fleet: one resolved `Scenario` per engine (in order), their roles, and the
    router, SLO, P/D and DP settings (``doc``: the section as config.yaml records it)."""

    engines: tuple  # engine-major: with DP attention each engine's dp ranks in a row
    roles: tuple
    router: dict
    shared_l3: bool
    slo_ttft_s: float
    slo_tpot_s: float
    pd: dict | None
    dp: int
    dp_router: dict
    doc: dict


def _router(v, key: str, where: str) -> dict:
    if isinstance(v, str):
        return {"kind": v}
    if isinstance(v, dict) and isinstance(v.get("kind"), str):
        return dict(v)
    raise ScenarioError(f"{where}: fleet.{key}: got {v!r}; expected a router name or a mapping {{kind: NAME, ...}}")


def _number(v, key: str, where: str, lo_open: float = 0.0) -> float:
    v = as_number(v)
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not v > lo_open:
        raise ScenarioError(f"{where}: fleet.{key}: got {v!r}; expected a number > {lo_open:g}")
    return float(v)


def _seconds(v, key: str, where: str):
    v = as_number(v)
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 <= v < math.inf:
        raise ScenarioError(f"{where}: fleet.{key}: got {v!r}; expected seconds >= 0")
    return v


def _count(v, key: str, where: str) -> int:
    n = as_integer(v)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        integral = isinstance(n, float) and math.isfinite(n)
        raise ScenarioError(f"{where}: fleet.{key}: got {v!r}; {'not integral; ' if integral else ''}"
                            "expected an integer >= 1")
    if n > MAX_ENGINES:
        raise ScenarioError(f"{where}: fleet.{key}: got {v!r}; expected at most {MAX_ENGINES:,} (a sanity limit)")
    return int(n)


def _merge(base: dict, over: dict) -> dict:
    """`over` onto a copy of `base`: mappings merge key by key (cache, engine), the rest replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if k in ("cache", "engine") and isinstance(v, dict) and isinstance(out.get(k), dict):
            if k == "cache":  # a group's L2 size replaces the scenario's (as --set does)
                for key in L2_SIZE_KEYS:
                    if v.get(key) is not None:
                        replace_l2_size(out[k], key)
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _groups(f: dict, where: str) -> list:
    groups = f.get("groups")
    if groups is None:
        return [{"count": _count(f.get("engines", 1), "engines", where)}]
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
        raise ScenarioError(f"{where}: fleet.groups: got {groups!r}; expected a list of mappings")
    for i, g in enumerate(groups):
        for k in g:
            if k not in GROUP_KEYS:
                raise ScenarioError(f"{where}: fleet.groups[{i}].{k}: unknown key; expected one of "
                                    f"{', '.join(GROUP_KEYS)}")
        g["count"] = _count(g.get("count", 1), f"groups[{i}].count", where)
        if g.get("role", "both") not in ROLES:
            raise ScenarioError(f"{where}: fleet.groups[{i}].role: got {g['role']!r}; expected one of "
                                f"{', '.join(ROLES)}")
    total = sum(g.get("count", 1) for g in groups)
    if "engines" in f and as_integer(f["engines"]) != total:
        raise ScenarioError(f"{where}: fleet.engines: {f['engines']!r} differs from the groups' {total} engines; "
                            "expected the same count or no fleet.engines")
    return groups


def resolve_fleet(raw: dict, f, where: str, resolve) -> FleetSpec:
    """The `FleetSpec` of section `f` of scenario `raw` (`resolve`: scenario.resolve, for each engine)."""
    if not isinstance(f, dict):
        raise ScenarioError(f"{where}: fleet: got {f!r}; expected a mapping (docs/fleet.md)")
    for k in f:
        if k not in FLEET_KEYS:
            raise ScenarioError(f"{where}: fleet.{k}: unknown key; expected one of {', '.join(FLEET_KEYS)}")
    base = {k: v for k, v in raw.items() if k not in ("fleet", "events")}  # events: the fleet's, checked once
    dp = _count(f.get("dp", 1), "dp", where)
    groups = _groups(f, where)
    ranks = sum(g.get("count", 1) for g in groups) * dp
    if ranks > MAX_ENGINES:
        raise ScenarioError(f"{where}: fleet.dp: {ranks:,} ranks (engines x dp); expected at most {MAX_ENGINES:,} "
                            "(a sanity limit)")
    engines, roles = [], []
    for g in groups:
        merged = _merge(base, {k: v for k, v in g.items() if k not in ("count", "role")})
        sc = resolve(merged, where)
        if sc.engine.kind == "vllm":
            _vllm_fleet(f, dp, where)
        if dp > sc.tp or sc.tp % dp:
            # DP attention splits an engine's tp ranks into dp attention groups of tp / dp ranks
            # (SGLang's compute_dp_attention_world_info: attn_tp_size = tp_size // dp_size)
            raise ScenarioError(f"{where}: fleet.dp: {dp} with tp {sc.tp}; expected a divisor of tp (DP attention "
                                "splits each engine's tp ranks into dp groups)")
        if dp > 1:
            sc = resolve(_merge(merged, _rank_override(sc, dp)), where)
        engines += [sc] * (g.get("count", 1) * dp)
        roles += [g.get("role", "both")] * (g.get("count", 1) * dp)
    if dp > 1 and f.get("pd") is not None:
        raise ScenarioError(f"{where}: fleet.dp: DP attention with P/D is not built; expected dp: 1 with fleet.pd")
    pd = f.get("pd")
    if pd is not None:
        pd = _pd(pd, roles, where)
        if any(r == "decode" and sc.cache.mamba for sc, r in zip(engines, roles)):
            raise ScenarioError(f"{where}: fleet.groups: a decode engine cannot have a MAMBA component (its state "
                                "has no P/D transfer model); expected cache.components without mamba for role decode")
    elif any(r != "both" for r in roles):
        raise ScenarioError(f"{where}: fleet.groups: prefill/decode roles need fleet.pd; expected fleet.pd: {{}} too")
    if len({sc.engine.kind for sc in engines}) > 1:
        raise ScenarioError(f"{where}: fleet.groups: engines mix engine.kind sglang and vllm; expected one engine.kind")
    if len({getattr(sc.engine, "block_size", None) for sc in engines}) > 1:
        raise ScenarioError(f"{where}: fleet.groups: engines differ in engine.block_size; expected one block size")
    if len({sc.cache.page_size for sc in engines}) > 1:
        raise ScenarioError(f"{where}: fleet.groups: engines differ in cache.page_size; expected one page size")
    shared = f.get("shared_l3", False)
    if not isinstance(shared, bool):
        raise ScenarioError(f"{where}: fleet.shared_l3: got {shared!r}; expected true or false")
    if shared and not all(sc.cache.tiers is not None and sc.cache.tiers.l3 for sc in engines):
        raise ScenarioError(f"{where}: fleet.shared_l3: every engine needs an L3 tier; expected cache.l3_tokens set")
    if shared and len({sc.model.name for sc in engines}) > 1:
        raise ScenarioError(f"{where}: fleet.shared_l3: engines of different models cannot share KV pages; "
                            "expected one model")
    router = _router(f.get("router", "round_robin"), "router", where)
    dp_router = _router(f.get("dp_router", "round_robin"), "dp_router", where)
    ttft = _number(f.get("slo_ttft_s", 2.0), "slo_ttft_s", where)
    tpot = _number(f.get("slo_tpot_s", 0.1), "slo_tpot_s", where)
    doc = {"engines": len(engines) // dp, "groups": f.get("groups"), "roles": roles, "router": router,
           "shared_l3": shared, "slo_ttft_s": ttft, "slo_tpot_s": tpot, "pd": pd, "dp": dp, "dp_router": dp_router}
    return FleetSpec(tuple(engines), tuple(roles), router, shared, ttft, tpot, pd, dp, dp_router, doc)


def _vllm_fleet(f: dict, dp: int, where: str) -> None:
    """What a fleet of engine.kind vllm engines does not build yet: P/D and DP attention (SGLang's)."""
    if f.get("pd") is not None:
        raise ScenarioError(f"{where}: fleet.pd: P/D is not built for engine.kind vllm; expected no fleet.pd")
    if dp > 1:
        raise ScenarioError(f"{where}: fleet.dp: {dp}: DP attention is not built for engine.kind vllm; expected dp: 1")


def _rank_override(sc, dp: int) -> dict:
    """One DP-attention rank of engine `sc`: its L1 (and L2) pool and running-request limit
    split evenly over the `dp` ranks (each rank holds its own requests' KV in its own tree);
    the step time stays the engine's cost model on the rank's own batch (an approximation:
    docs/fleet.md)."""
    P = sc.cache.page_size
    c = sc.doc["cache"]
    cache = {"l1_tokens": sc.cache.capacity_tokens // dp // P * P, "max_total_tokens": None}
    if sc.cache.tiers is not None:
        cache.update(l2_tokens=int(c["l2_tokens"]) // dp // P * P, hicache_ratio=None, hicache_size_gb=None)
    return {"cache": cache, "engine": {"max_running_requests": max(1, sc.engine.max_running_requests // dp)}}


def _pd(pd, roles, where: str) -> dict:
    if not isinstance(pd, dict):
        raise ScenarioError(f"{where}: fleet.pd: got {pd!r}; expected a mapping (kv_bytes_per_s, kv_latency_s, "
                            "decode_router, bootstrap_s, decode_radix)")
    for k in pd:
        if k not in PD_KEYS:
            raise ScenarioError(f"{where}: fleet.pd.{k}: unknown key; expected one of {', '.join(PD_KEYS)}")
    out = {**PD_KEYS, **pd}
    out["kv_bytes_per_s"] = _number(out["kv_bytes_per_s"], "pd.kv_bytes_per_s", where)
    for k in ("kv_latency_s", "bootstrap_s"):
        out[k] = _seconds(out[k], f"pd.{k}", where)
    if not isinstance(out["decode_radix"], bool):
        raise ScenarioError(f"{where}: fleet.pd.decode_radix: got {out['decode_radix']!r}; expected true or false")
    out["decode_router"] = _router(out["decode_router"], "pd.decode_router", where)
    if "prefill" not in roles or "decode" not in roles or "both" in roles:
        raise ScenarioError(f"{where}: fleet.groups: P/D needs groups of role prefill and decode (and no 'both'); "
                            f"got roles {sorted(set(roles))}")
    return out


__all__ = ["FleetSpec", "resolve_fleet", "ROLES"]
