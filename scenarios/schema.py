"""The scenario schema: every key, its default, its check and what is expected (one place
for validation, `--set` and `--grid` key names). `scenarios/scenario.py` reads, resolves and
documents the keys."""
from __future__ import annotations

import copy
import math
import numbers
import re

from cache_core.eviction import policy_names
from cache_core.registry import generation
from cache_core.scheduling import schedule_policy_names
from cache_core.tiers.store import l3_model_names

from .agentic import LENGTHS, AgenticConfig
from .cost_kinds import cost_kind_names
from .engine_kinds import KIND_LIMITS
from .program_names import PROGRAM_NAMES
from .schema_sections import defaults as _defaults, plugin_sections
from .workload_kinds import workload_kind, workload_kind_names
from .workload_specs import AgenticSpec, ProgramSpec, TraceSpec
from .workloads import READY_QUEUE_POLICIES, MultiTurnConfig

REPLAY_ONLY_POLICIES = ("belady-node",)  # needs every future request up front
FREE_FORM = ("mapping", "fleet")  # sections whose keys `set_key` does not check (their readers do)


class ScenarioError(ValueError):
    """A bad scenario file or override: one line naming the file, the key and what was expected."""


def _keys_of(defaults: dict, specs) -> dict:
    """Schema entries of (key, checker name, what is expected) `specs`, each with its default."""
    return {k: (defaults[k], check, expected) for k, check, expected in specs}


_MT, _AG = _defaults(MultiTurnConfig), _defaults(AgenticConfig)
_TR, _AS, _PS = _defaults(TraceSpec), _defaults(AgenticSpec), _defaults(ProgramSpec)

# -- schema -------------------------------------------------------------------------------------
# key -> (default, checker name, what is expected); nested dicts are sections.
SCHEMA = {
    "name": (None, "str_or_none", "a string"),
    "description": ("", "str", "a string"),
    "seed": (0, "int0", "an integer >= 0"),
    "model": ("qwen3-32b", "model", "a model preset name, or a mapping {base: NAME, weight_dtype, kv_dtype}"),
    "hardware": ("h200x1", "hardware", "a hardware preset name, or a mapping {base: NAME, FIELD: VALUE, ...}"),
    "tp": (None, "int1_or_none", "an integer >= 1 (default: the hardware's GPU count)"),
    "cache": {},  # `refresh` fills the sections of scenarios/schema_sections.py
    "engine": {},
    "workload": {
        "kind": ("multiturn", "workload_kind", "a registered workload kind (scenarios/workload_kinds.py)"),
        **_keys_of(_MT, (
            ("num_clients", "int1", "an integer >= 1"), ("num_rounds", "int1", "an integer >= 1"),
            ("request_length", "int1", "an integer >= 1"), ("output_length", "int0", "an integer >= 0"),
            ("max_parallel", "int1", "an integer >= 1"), ("request_rate", "rate", "a number > 0 or inf"),
            ("round_barrier", "bool", "true or false"),
            ("ready_queue_policy", ("choice", READY_QUEUE_POLICIES), "fifo or random"),
            ("vocab_size", "int1", "an integer >= 1"))),
    },
    "torch": {},  # the torch backend's synthetic model (scenarios/torch_options.py TorchOptions)
    "cost": {},
    "fleet": (None, "fleet", "null or a mapping: engines, groups, router, ... (scenarios/fleet.py, docs/fleet.md)"),
    "events": ([], lambda v: v is None or isinstance(v, list),
               "a list of fault events {at_s, kind, ...} (scenarios/events.py)"),
}


_BUILT = [None]  # the registries' generation the sections were built at


def refresh() -> None:
    """Rebuild the `cache:`, `engine:`, `torch:` and `cost:` sections after a registration (in place)."""
    if _BUILT[0] == generation():
        return
    for name, section in plugin_sections().items():
        SCHEMA[name].clear()
        SCHEMA[name].update(section)
    _BUILT[0] = generation()


refresh()


_KIND = SCHEMA["workload"]["kind"]
_SPEEDUP = (_TR["speedup"], "pos", "a number > 0 (arrival times are divided by it)")
_MAX_REQUESTS = (_TR["max_requests"], "int1_or_none", "null or an integer >= 1")
_RANGE = "a list [lo, hi]"
WORKLOAD_SCHEMAS = {
    "multiturn": SCHEMA["workload"],
    "trace": {"kind": _KIND, "path": (None, "str", "a JSONL trace file (Mooncake hash_ids or tokens)"),
              "block_size": (_TR["block_size"], "int1_or_none", "null or tokens per hash_ids block"),
              "speedup": _SPEEDUP, "max_requests": _MAX_REQUESTS},
    "azure": {"kind": _KIND, "path": (None, "str", "an Azure LLM-inference CSV (TIMESTAMP,ContextTokens,GeneratedTokens)"),
              "speedup": _SPEEDUP, "max_requests": _MAX_REQUESTS},
    "agentic": {"kind": _KIND, "speedup": (_AS["speedup"], *_SPEEDUP[1:]),
                "closed_loop": (_AS["closed_loop"], "bool", "true (next turn after the previous completes + think time) "
                                "or false (the workload's nominal timestamps, open loop)"),
                **_keys_of(_AG, (
                    ("num_sessions", "int1", "an integer >= 1"), ("concurrency", "int1", "an integer >= 1"),
                    ("system_prompt_tokens", "int0", "an integer >= 0"), ("repo_context_tokens", "range", _RANGE),
                    ("turns", "range", _RANGE), ("tool_output_tokens", "range", _RANGE),
                    ("output_tokens", "range", _RANGE), ("think_time_s", "range", _RANGE),
                    ("subagent_prob", "nonneg", "a probability"), ("subagent_turns", "range", _RANGE),
                    ("arrival_rate", "rate", "a number > 0 or inf"), ("service_base_s", "nonneg", "seconds >= 0"),
                    ("service_s_per_output_token", "nonneg", "seconds >= 0"),
                    ("vocab_size", "int1", "an integer >= 1"),
                    ("lengths", ("choice", LENGTHS), " or ".join(LENGTHS))))},
    "program": {"kind": _KIND, "program": ("few_shot", ("choice", PROGRAM_NAMES),
                                           ", ".join(PROGRAM_NAMES[:-1]) + " or " + PROGRAM_NAMES[-1]),
                "max_parallel": (_PS["max_parallel"], "int1", "an integer >= 1 (calls in flight)"),
                "request_rate": ("inf", "rate", "a number > 0 or inf (calls/s)"),
                "knobs": ({}, "mapping", "the program's knobs (scenarios/programs.py; `radixsim workload show`)")},
}


def _workload_union() -> dict:
    """Every key of every registered workload kind (what `--set workload.KEY` may name)."""
    return {k: v for name in workload_kind_names() for k, v in workload_kind(name).schema.items()}


def _cost_model_names() -> list[str]:
    return cost_kind_names()  # (sim/cost_models.py registers a builder for each)


def _ok(check, v) -> bool:
    if isinstance(check, tuple):
        return v in check[1]
    if callable(check):  # a kind's own check (scenarios/shared_prefix.py: stages)
        return bool(check(v))
    num = isinstance(v, numbers.Real) and not isinstance(v, bool)
    integer = isinstance(v, numbers.Integral) and not isinstance(v, bool)
    return {
        "str": lambda: isinstance(v, str),
        "str_or_none": lambda: v is None or isinstance(v, str),
        "int0": lambda: integer and v >= 0,
        "int1": lambda: integer and v >= 1,
        "int1_or_none": lambda: v is None or (integer and v >= 1),
        "fraction": lambda: num and 0 < v <= 1,
        "pos_or_none": lambda: v is None or (num and v > 0 and math.isfinite(v)),
        "nonneg": lambda: num and v >= 0 and math.isfinite(v),
        "rate": lambda: (num and v > 0) or (isinstance(v, str) and v.lower() in ("inf", "infinity")),
        "bool": lambda: isinstance(v, bool),
        "mapping": lambda: isinstance(v, dict),
        "fleet": lambda: v is None or isinstance(v, dict),
        "pos": lambda: num and v > 0 and math.isfinite(v),
        "range": lambda: (isinstance(v, (list, tuple)) and len(v) == 2 and all(
            isinstance(x, numbers.Real) and not isinstance(x, bool) for x in v)),
        "model": lambda: isinstance(v, (str, dict)),
        "hardware": lambda: isinstance(v, (str, dict)),
        "policy": lambda: isinstance(v, str) and v in policy_names() and v not in REPLAY_ONLY_POLICIES,
        "schedule_policy": lambda: isinstance(v, str) and v in schedule_policy_names(),
        "workload_kind": lambda: isinstance(v, str) and workload_kind(v) is not None,
        "l3_model": lambda: isinstance(v, str) and v in l3_model_names(),
        "cost_kind": lambda: isinstance(v, str) and v in _cost_model_names(),
        "components": lambda: v is None or (isinstance(v, list) and v and "full" in v and
                                            all(isinstance(c, (str, dict)) for c in v)),
        "size_auto": lambda: v == "auto" or _size_syntax(v),
        "size_or_none": lambda: v is None or _size_syntax(v),
        "size_l3": lambda: v is None or _size_syntax(v),
    }[check]()


def _size_syntax(v) -> bool:
    from .units import is_size_text

    if isinstance(v, bool):
        return False
    if isinstance(v, numbers.Integral):
        return v >= 0
    return isinstance(v, str) and is_size_text(v)


# -- numbers -------------------------------------------------------------------------------------
_E_NUMBER = re.compile(r"[+-]?(\d[\d_]*\.?\d*|\.\d+)[eE][+-]?\d+")
INT_CHECKS = ("int0", "int1", "int1_or_none")
NUMBER_CHECKS = ("fraction", "pos_or_none", "nonneg", "rate", "pos")
SIZE_CHECKS = ("size_auto", "size_or_none", "size_l3")
# upper bounds of count-like keys (dotted key -> the largest value accepted): far above any real
# run (the catalog's largest: 16 engines, 192 clients, 8 rounds), low enough that what a run
# allocates per client, round, engine or token cannot exhaust memory before it starts
LIMITS = {
    "cache.page_size": 2**20, "cache.mamba_every_tokens": 2**40, "cache.min_prefetch_tokens": 2**40,
    "cache.l3_replicas": 1024, "cache.l3_eviction_shards": 2**20, "cache.l3_objects_per_page": 2**20,
    "engine.max_running_requests": 10**5, "engine.max_prefill_tokens": 2**30,
    "engine.chunked_prefill_tokens": 2**30, "engine.ep_size": 1024,
    **KIND_LIMITS,
    "workload.num_clients": 10**5, "workload.num_rounds": 10**5, "workload.request_length": 2**28,
    "workload.output_length": 2**28, "workload.max_parallel": 10**5, "workload.vocab_size": 2**40,
    "workload.num_sessions": 10**5, "workload.concurrency": 10**5, "workload.system_prompt_tokens": 2**28,
    "workload.block_size": 2**28, "workload.num_groups": 10**5, "workload.num_prompts_per_group": 10**5,
    "workload.system_prompt_len": 2**28, "workload.question_len": 2**28, "workload.output_len": 2**28,
    "torch.layers": 1024, "torch.hidden": 2**17, "torch.num_heads": 1024, "torch.head_dim": 2**14,
    "torch.state_dim": 2**17, "torch.vocab": 2**24,
}
RANGE_LIMITS = {"workload.repo_context_tokens": 2**28, "workload.turns": 10**5, "workload.tool_output_tokens": 2**28,
                "workload.output_tokens": 2**28, "workload.subagent_turns": 10**5}


def as_number(v):
    """A number written in e-notation that YAML 1.1 (PyYAML) reads as a string (``2e1``,
    ``1e-3``, ``20e9``; ``1.0e+1`` is already a float) -> the float; anything else unchanged."""
    if isinstance(v, str) and _E_NUMBER.fullmatch(v.strip()):
        return float(v.strip().replace("_", ""))
    return v


def as_integer(v):
    """`as_number`, then an integral float (``2e1``, ``1.0e+6``, ``20.0``) -> the int; a
    non-integral or non-finite float stays a float (the caller refuses it)."""
    v = as_number(v)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    return v


def _coerce(check, v):
    """The value a number key holds: e-notation read, an integral float of an integer or size
    key made an int (a non-integral one stays a float, which the check refuses)."""
    if isinstance(check, tuple) or isinstance(v, bool):
        return v
    if check in NUMBER_CHECKS:
        return as_number(v)
    if check in INT_CHECKS or check in SIZE_CHECKS:
        return as_integer(v)
    if check == "range" and isinstance(v, (list, tuple)):
        return [as_integer(x) for x in v]
    return v


def _limit(key: str, v):
    """The problem of a count-like value above its `LIMITS` bound, or None."""
    if key in LIMITS and isinstance(v, numbers.Real) and not isinstance(v, bool) and v > LIMITS[key]:
        return f"expected at most {LIMITS[key]:,} (a sanity limit)"
    if key in RANGE_LIMITS and isinstance(v, (list, tuple)) and any(
            isinstance(x, numbers.Real) and not isinstance(x, bool) and not -math.inf < x <= RANGE_LIMITS[key]
            for x in v):
        return f"expected finite values of at most {RANGE_LIMITS[key]:,} (a sanity limit)"
    return None


def validate_document(raw: dict, schema: dict, where: str, prefix: str = "") -> dict:
    """Defaults filled in, unknown keys and bad values rejected."""
    refresh()
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: {prefix.rstrip('.') or 'top level'}: expected a mapping, got {raw!r}")
    out = {}
    for k in raw:
        if k not in schema:
            raise ScenarioError(f"{where}: {prefix}{k}: unknown key; expected one of "
                                f"{', '.join(sorted(schema))}")
    for k, spec in schema.items():
        if k == "workload" and not prefix:
            sub = raw.get(k) or {}
            kind = sub.get("kind", "multiturn") if isinstance(sub, dict) else "multiturn"
            if workload_kind(kind) is None:
                raise ScenarioError(f"{where}: workload.kind: got {kind!r}; expected one of "
                                    f"{', '.join(workload_kind_names())}")
            spec = workload_kind(kind).schema
        if isinstance(spec, dict):
            out[k] = validate_document(raw.get(k) or {}, spec, where, f"{prefix}{k}.")
            continue
        default, check, expected = spec
        v = raw.get(k, copy.deepcopy(default))
        n = _coerce(check, v)
        problem = None if _ok(check, n) else f"expected {expected}"
        if problem is not None and isinstance(n, float) and math.isfinite(n) and not n.is_integer() and (
                check in INT_CHECKS or check in SIZE_CHECKS):
            problem = f"not integral; {problem}"
        problem = problem or _limit(prefix + k, n)
        if problem is not None:
            raise ScenarioError(f"{where}: {prefix}{k}: got {v!r}; {problem}")
        out[k] = n
    return out


def set_key(raw: dict, key: str, value, where: str = "--set") -> None:
    refresh()
    parts = key.split(".")
    node, schema = raw, SCHEMA
    for i, part in enumerate(parts):
        if isinstance(schema, tuple) and schema[1] in FREE_FORM:  # free-form mapping (cost.efficiency, fleet)
            for p in parts[i:-1]:
                if not isinstance(node.get(p), dict):  # a value there (fleet.router: NAME) becomes a mapping
                    node[p] = {}
                node = node[p]
            node[parts[-1]] = value
            return
        if schema is SCHEMA["workload"]:
            schema = _workload_union()
        if not isinstance(schema, dict) or part not in schema:
            known = ", ".join(sorted(schema)) if isinstance(schema, dict) else "(none)"
            raise ScenarioError(f"{where} {key}: unknown key {'.'.join(parts[:i + 1])!r}; expected one of {known}")
        schema = schema[part]
        if isinstance(schema, tuple) and schema[1] in ("model", "hardware") and i < len(parts) - 1:
            _set_preset_field(node, part, ".".join(parts[i + 1:]), value, schema[0], f"{where} {key}")
            return
        if i == len(parts) - 1:
            node[part] = value
            if parts[0] == "cache" and part in L2_SIZE_KEYS and value is not None:
                replace_l2_size(node, part)
        elif isinstance(schema, dict) or schema[1] in FREE_FORM:  # a section, or a free-form mapping
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]


L2_SIZE_KEYS = ("l2_tokens", "hicache_ratio", "hicache_size_gb")  # one L2 size per scenario


def replace_l2_size(cache: dict, key: str) -> None:
    """An override of one L2 size (`key`) replaces the scenario's: the other two are dropped."""
    for other in L2_SIZE_KEYS:
        if other != key:
            cache.pop(other, None)


def is_size_key(key: str) -> bool:
    """Whether dotted `key` is a size (tokens, or bytes with a unit: cache.l2_tokens)."""
    refresh()
    node = SCHEMA
    for part in key.split("."):
        if node is SCHEMA["workload"]:
            node = _workload_union()
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return isinstance(node, tuple) and node[1] in SIZE_CHECKS


def _set_preset_field(node: dict, what: str, field: str, value, default: str, where: str) -> None:
    """``--set hardware.FIELD=V``: the plain preset name becomes ``{base: NAME}``, then FIELD is set."""
    from .presets import override_keys

    if field not in override_keys(what):
        raise ScenarioError(f"{where}: unknown key {what + '.' + field!r}; expected one of "
                            f"{', '.join(override_keys(what))}")
    current = node.get(what, default)
    node[what] = dict(current) if isinstance(current, dict) else {"base": current}
    node[what][field] = value
