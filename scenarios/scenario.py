"""Scenario files: model preset + hardware preset + cache + engine + workload + seed (YAML).

A scenario is read (`load`), optionally overridden with ``--set`` dotted keys (`apply_sets`),
validated against `SCHEMA` and resolved (`resolve`) into ready-to-run configuration objects
plus ``doc``: every value, defaults and derived numbers included (``l1_tokens: auto`` becomes
a number), which `radixsim run` writes to ``config.yaml``; a run's config.yaml (or its result
directory) reads back as the scenario it ran (`scenarios/run_record.py`).

Keys (DESIGN.md's dotted names; the same for ``--set`` and ``--grid``)::

    name, description, seed, tp
    model (a preset name, or {base: NAME, weight_dtype: bf16|fp8|fp4, kv_dtype: bf16|fp8}),
    hardware (a preset name, or {base: NAME, FIELD: VALUE}: any HardwarePreset field but its name)
    cache.page_size, l1_tokens (auto | tokens | bytes), mem_fraction_static, max_total_tokens,
          swa_full_tokens_ratio, mamba_full_memory_ratio, swa_tokens, mamba_slots,
          mamba_every_tokens, components, l2_tokens, hicache_ratio, hicache_size_gb (GB per
          rank, SGLang's --hicache-size; one of these three), l3_tokens (null: no L3;
          unbounded; tokens; bytes), policy, write_policy, l3_write, prefetch_policy,
          min_prefetch_tokens, l3_model (prefix | mooncake: cache_core/tiers/store.py),
          l3_eviction_high_watermark, l3_eviction_ratio, l3_replicas, l3_ssd_tokens, l3_lease_ttl_s,
          l3_eviction_shards, l3_objects_per_page (mooncake)
    engine.max_running_requests, max_prefill_tokens, chunked_prefill_tokens, schedule_policy,
           new_token_ratio, mixed_chunk, load_overlap (layerwise | none), ep_size (1 | tp: MoE
           expert parallelism, priced by sim/operators.py), attention_backend (null | a backend
           of sim/opdata/attention_backends.json: prefill attention on its measured curve);
           kind (sglang | vllm); under vllm instead: block_size, max_num_seqs,
           max_num_batched_tokens, enable_chunked_prefill (vLLM's; scenarios/engine_kinds.py),
           with cache.l2_tokens offload_block_size, offload_eviction_policy (its CPU offloading)
    workload.kind (multiturn) and its knobs: num_clients, num_rounds, request_length,
             output_length, max_parallel, request_rate, round_barrier, ready_queue_policy,
             vocab_size
    cost.kind (operators | roofline | table), cost.table (a file), cost.efficiency.* (sim/cost.py Efficiency)

Sizes in bytes ("500GiB") become tokens through the model's FULL KV bytes per token with its
FULL sidecars (`presets.bytes_per_token(model, "full")`): the SWA and MAMBA payloads stored
alongside are not charged (assumption; small next to FULL for the seed's models).

Every problem raises `ScenarioError("FILE: KEY: problem; expected ...")` (one line).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import yaml

from cache_core.config import CacheConfig
from cache_core.engine_types import EngineConfig
from cache_core.eviction import policy_config
from cache_core.options import build
from cache_core.scheduling import schedule_policy_config

from . import cache_pools as pools
from . import engine_kinds as kinds
from . import presets
from .cost_section import resolve_cost
from .schema import SCHEMA, WORKLOAD_SCHEMAS, ScenarioError, validate_document, set_key  # noqa: F401
from .schema import L2_SIZE_KEYS
from .workload_kinds import WorkloadContext, WorkloadSpec, workload_kind
from .run_record import RECORD_FILE, RunRecord, is_record, record_path, recorded_scenario, rename_where
from .yamlfile import DuplicateKeyError, load_yaml, read_mapping

CATALOG_DIR = Path(__file__).parent / "catalog"


# -- reading ------------------------------------------------------------------------------------
def load(path) -> dict:
    """The raw mapping of a scenario file (no validation yet). A catalog name (without
    .yaml) is looked up in scenarios/catalog/; a run's config.yaml (or its result directory)
    gives the scenario it recorded (scenarios/run_record.py)."""
    return read(path)[0]


def read(path) -> tuple[dict, RunRecord | None]:
    """`load`'s mapping and, for a run record, where its scenario came from (else None)."""
    p = scenario_path(path)
    try:
        raw = read_mapping(p, "a scenario", allow_empty=False)
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file (catalog: {', '.join(catalog_names())})") from None
    except ValueError as e:
        raise ScenarioError(str(e)) from None
    except IsADirectoryError:
        raise ScenarioError(f"{path}: is a directory; expected a scenario file (YAML), a catalog name or a "
                            f"result directory (with {RECORD_FILE})") from None
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read: {e.strerror}") from None
    if is_record(raw):
        return recorded_scenario(raw, p)
    raw.setdefault("name", p.stem)
    return raw, None


def scenario_path(path) -> Path:
    """The file a scenario argument names: the path itself, or a catalog name."""
    p = record_path(Path(path))
    if not p.exists() and p.suffix not in (".yaml", ".yml") and (CATALOG_DIR / f"{p.name}.yaml").exists():
        p = CATALOG_DIR / f"{p.name}.yaml"
    return p


def apply_sets(raw: dict, sets, where: str = "--set") -> dict:
    """Apply ``KEY=VALUE`` overrides (dotted keys, YAML values) to a copy of `raw`."""
    out = copy.deepcopy(raw)
    l2_set = None  # the L2 size an earlier item set (an override replaces the scenario's: set_key)
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ScenarioError(f"{where} {item!r}: expected KEY=VALUE (e.g. cache.l2_tokens=4000000)")
        if key in (f"cache.{k}" for k in L2_SIZE_KEYS) and value.strip() not in ("null", "~", ""):
            if l2_set is not None and l2_set != key:
                raise ScenarioError(f"{where} {key}: conflicts with {where} {l2_set}; expected one L2 size "
                                    "(l2_tokens, hicache_ratio or hicache_size_gb)")
            l2_set = key
        try:
            v = load_yaml(value)
        except DuplicateKeyError as e:
            raise ScenarioError(f"{where} {item!r}: {e}") from None
        except yaml.YAMLError:
            v = value
        set_key(out, key, v, where)
    return out


def catalog_names() -> list[str]:
    return sorted(p.stem for p in CATALOG_DIR.glob("*.yaml"))


def catalog() -> list[tuple[str, str]]:
    """(name, one-line description) of every catalog scenario."""
    out = []
    for name in catalog_names():
        raw = load(CATALOG_DIR / f"{name}.yaml")
        out.append((name, str(raw.get("description", "")).strip().splitlines()[0] if raw.get("description") else ""))
    return out


# -- resolving ------------------------------------------------------------------------------------
@dataclass
class Scenario:
    """A resolved scenario: what the run needs, and ``doc`` (every value) for config.yaml."""

    doc: dict
    model: object  # presets.ModelPreset
    hardware: object  # presets.HardwarePreset
    tp: int
    cache: CacheConfig
    engine: EngineConfig
    workload: WorkloadSpec  # what its kind's build made (scenarios/workload_builds.py): MultiTurnConfig | TraceSpec | ...
    efficiency: dict
    cost_table: str | None
    source: str
    warnings: tuple = ()  # legal but odd settings (tier sizes), one line each, for the command to show once
    fleet: object = None  # scenarios.fleet.FleetSpec of a `fleet:` section (None: one engine)
    workload_kind: str = "multiturn"  # scenarios/workload_kinds.py
    events: tuple = ()  # scenarios.events.Event of the `events:` timeline (fault what-ifs)
    raw: dict | None = None  # the document as given (after --smoke, --set), which config.yaml records to rerun
    recorded_mode: str | None = None  # a rerun's: the mode its run record names (sim | torch)

    @property
    def seed(self) -> int:
        return self.doc["seed"]


def resolve(raw: dict, where: str = "<scenario>") -> Scenario:
    """Validate and resolve a raw scenario mapping (ScenarioError on any problem). Each step
    returns what it resolved (the `cache:` section's in scenarios/cache_pools.py); `doc`, what
    config.yaml records, is assembled from them at the end, the validated sections untouched."""
    doc = validate_document(raw, SCHEMA, where)
    model, model_doc = _preset(doc, "model", presets.resolve_model, where)
    hw, hw_doc = _preset(doc, "hardware", presets.resolve_hardware, where)
    tp = _tp(doc["tp"], model, hw, where)
    c, e = doc["cache"], doc["engine"]
    comps = pools.components(c, model, where)
    kinds.check_kind_keys(raw, doc, comps, where, ScenarioError)
    l1 = pools.l1_pool(c, model, hw, tp, where)
    swa = pools.swa_pool(c, model, l1, where) if "swa" in comps else None
    mamba = pools.mamba_pool(c, model, l1, where) if "mamba" in comps else None
    tiers = pools.tiers(c, model, tp, l1.l1_tokens, swa, mamba, where)
    cache = _cache_config(c, model, l1.l1_tokens, swa, mamba, tiers.config, where, pools.extra_components(comps, where))
    engine = (_engine_config(e, c, doc["seed"], where) if e["kind"] == "sglang"
              else kinds.vllm_config(doc, hw, model, where, ScenarioError,
                                     None if tiers.config is None else tiers.config.l2_tokens))
    _check_fits(e, c["page_size"], model, swa, where)
    wl = _workload(doc["workload"], doc["seed"], c["page_size"], l1.l1_tokens, where)
    cost = resolve_cost(doc["cost"], model, tp, e["ep_size"], where, attention_backend=e["attention_backend"])
    _check_attention_curve(e["attention_backend"], tp, model, hw, where)
    out = {**doc, "model": model_doc, "hardware": hw_doc, "tp": tp, "engine": kinds.engine_doc(e, engine),
           "cache": pools.cache_doc(c, comps, l1, swa, mamba, tiers), "cost": {**doc["cost"], "efficiency": cost.efficiency}}
    del out["fleet"]  # None: one engine (config.yaml as before)
    spec = None
    if doc["fleet"] is not None:
        from .fleet import resolve_fleet

        spec = resolve_fleet(raw, doc["fleet"], where, resolve)
        out["fleet"] = spec.doc
    events = _events(doc["events"], spec, tiers.config, where)
    if not events:
        del out["events"]  # config.yaml as before for a run without events
    return Scenario(doc=out, model=model, hardware=hw, tp=tp, cache=cache, engine=engine, workload=wl,
                    efficiency=dict(cost.efficiency), cost_table=cost.table, source=where, warnings=tiers.warnings,
                    fleet=spec, workload_kind=doc["workload"]["kind"], events=events, raw=copy.deepcopy(raw))


def _events(events, spec, tiers, where: str) -> tuple:
    """The `events:` timeline (scenarios/events.py), checked against the engines it names."""
    from .events import parse_events

    kind = None if spec is None else "pd" if spec.pd is not None else "dp" if spec.dp > 1 else "plain"
    return parse_events(events, where, len(spec.engines) if spec is not None else 1, kind,
                        l3=tiers is not None and tiers.l3)


def _tp(tp, model, hw, where: str) -> int:
    """The TP degree (default: every GPU of the hardware preset), checked against GPUs and heads."""
    tp = hw.num_gpus if tp is None else tp
    if tp > hw.num_gpus:
        raise ScenarioError(f"{where}: tp: {tp} exceeds the {hw.num_gpus} GPUs of {hw.name}; expected 1..{hw.num_gpus}")
    _check_tp_heads(model, tp, hw.num_gpus, where)
    return tp


def _cache_config(c: dict, model, l1_tokens: int, swa, mamba, tiers, where: str, extra: tuple = ()) -> CacheConfig:
    sidecars = tuple(s for s in model.sidecars if s.follows == "full" or swa is not None)
    try:
        return CacheConfig(page_size=c["page_size"], capacity_tokens=l1_tokens, policy=c["policy"], swa=swa,
                           policy_options=build(policy_config(c["policy"]), c), mamba=mamba, sidecars=sidecars, tiers=tiers, extra_components=extra)
    except ValueError as err:
        raise ScenarioError(f"{where}: {err}") from None


def _engine_config(e: dict, c: dict, seed: int, where: str) -> EngineConfig:
    try:
        return EngineConfig(max_running_requests=e["max_running_requests"],
                            max_prefill_tokens=e["max_prefill_tokens"],
                            chunked_prefill_tokens=e["chunked_prefill_tokens"],
                            schedule_policy=e["schedule_policy"], new_token_ratio=e["new_token_ratio"],
                            mixed_chunk=e["mixed_chunk"], prefetch_policy=c["prefetch_policy"],
                            load_overlap=e["load_overlap"], tree_core=e["tree_core"],
                            overlap_schedule=e["overlap_schedule"], frontend=e["frontend"],
                            l3_get_batch_pages=e["l3_get_batch_pages"], seed=seed,
                            schedule_options=build(schedule_policy_config(e["schedule_policy"]), e))
    except ValueError as err:
        raise ScenarioError(f"{where}: {err}") from None


def _check_fits(e: dict, P: int, model, swa, where: str) -> None:
    """Whole-page chunks, and an SWA pool that holds one request's window."""
    C = e["chunked_prefill_tokens"]
    if C is not None and C % P:
        raise ScenarioError(f"{where}: engine.chunked_prefill_tokens: {C} is not a multiple of cache.page_size "
                            f"({P}); expected a multiple")
    window = (-(-model.swa_window_tokens // P) + 1) * P if swa is not None else 0
    if swa is not None and swa.capacity_tokens < window:
        raise ScenarioError(f"{where}: cache.swa_tokens: {swa.capacity_tokens} tokens cannot hold one request's "
                            f"window ({window}); expected at least that")


def _check_attention_curve(backend, tp: int, model, hw, where: str) -> None:
    """engine.attention_backend as sim/attention_backends.py models it: a measured curve for the model's
    per-GPU head layout on the hardware's GPU generation (scenarios/attention_backend_data.py; the
    cost kind is checked by scenarios/cost_section.py first)."""
    if backend is None:
        return
    from .attention_backend_data import model_curve_index

    try:
        model_curve_index(model, hw, tp, backend)
    except ValueError as err:
        raise ScenarioError(f"{where}: engine.attention_backend: {err}") from None


def _check_tp_heads(model, tp: int, gpus: int, where: str) -> None:
    """tp must split the attention heads as SGLang's attention layers require (e.g.
    python/sglang/srt/models/qwen3.py Qwen3Attention): query heads % tp == 0; GQA KV heads
    either split (kv_heads % tp == 0) or, with fewer heads than ranks, are replicated
    (tp % kv_heads == 0)."""
    q, kv = model.num_q_heads, model.num_kv_heads
    ok = [t for t in range(1, gpus + 1)
          if q % t == 0 and (model.attention != "gqa" or (kv % t if kv >= t else t % kv) == 0)]
    if tp in ok:
        return
    if q % tp:
        why = f"does not divide the {q} query heads of {model.name}"
    else:
        why = f"does not {'divide' if kv >= tp else 'split evenly into'} the {kv} KV heads of {model.name}"
    raise ScenarioError(f"{where}: tp: {tp} {why}; expected one of {', '.join(map(str, ok))}")


def _workload(w: dict, seed: int, P: int, l1: int, where: str) -> WorkloadSpec:
    """The workload object of a validated `workload` section (its kind's build)."""
    kind = workload_kind(w["kind"])
    wl = kind.build(w, WorkloadContext(seed, P, l1, where))
    if not isinstance(wl, WorkloadSpec):  # a plug-in's mistake, not the scenario's
        raise TypeError(f"workload kind {kind.name!r}: its build returned a {type(wl).__name__}; expected a "
                        f"scenarios.workload_kinds.WorkloadSpec")
    return wl


def _preset(doc: dict, what: str, resolver, where: str):
    """(preset, its record) of `doc[what]` (a name or ``{base: NAME, ...}``); the record, what
    config.yaml keeps, is the base name, every field, the overridden ones."""
    try:
        preset, overridden = resolver(doc[what])
    except ValueError as e:
        text = str(e)
        raise ScenarioError(f"{where}: {text if text.startswith(what + '.') else what + ': ' + text}") from None
    base = doc[what] if isinstance(doc[what], str) else doc[what]["base"]
    return preset, presets.preset_doc(preset, base, overridden)


def smoke(raw: dict) -> dict:
    """A copy of `raw` at a size that runs in about a second (CI runs every catalog scenario
    this way, so none can rot): its workload kind's `smoke` hook shrinks the `workload` section
    (scenarios/workload_kinds.py; a kind without one runs as written). Everything else (model,
    tiers, policies) is kept."""
    out = copy.deepcopy(raw)
    w = out.setdefault("workload", {})
    kind = workload_kind(w.get("kind", "multiturn"))
    if kind is not None and kind.smoke is not None:
        kind.smoke(w)
    return out


def from_file(path, sets=(), smoke_run: bool = False) -> Scenario:
    raw, rec = read(path)
    if smoke_run:
        raw = smoke(raw)
    if sets:
        raw = apply_sets(raw, sets)
    if rec is None:
        p = scenario_path(path)
        return resolve(raw, str(p if p.exists() else path))
    try:  # relative files resolve beside the recorded scenario file, as on the first run
        sc = resolve(raw, rec.scenario_file or rec.path)
    except ScenarioError as e:
        raise rename_where(e, rec) from None
    sc.recorded_mode = rec.mode
    return sc


__all__ = ["Scenario", "ScenarioError", "SCHEMA", "load", "smoke", "apply_sets", "set_key", "resolve", "from_file",
           "catalog", "catalog_names", "CATALOG_DIR"]
