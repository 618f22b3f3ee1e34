"""The built-in workload kinds' builds and smoke sizes (multiturn, trace, azure, agentic,
program), registered with scenarios/workload_kinds.py, which imports this module on first use.
A build turns a validated `workload:` section into what its feed runs (sim/feeds.py); a smoke
hook shrinks a raw section to about a second of simulation (`radixsim run --smoke`)."""
from __future__ import annotations

import math
from pathlib import Path

from . import agentic, workloads
from .schema import LIMITS, WORKLOAD_SCHEMAS, ScenarioError, as_integer
from .workload_kinds import WorkloadContext, register_workload_kind
from .workload_specs import AgenticSpec, ProgramSpec, TraceSpec
from .workloads import MultiTurnConfig


def _a(word: str) -> str:
    """`word` with its indefinite article ("a trace", "an azure")."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def _not_a_file(path: Path) -> str:
    """Why `path` is not a readable file, for a one-line error: a directory or missing."""
    return "is a directory" if path.is_dir() else "no such file"


def _file_workload(w: dict, ctx: WorkloadContext) -> TraceSpec:
    kind, where = w["kind"], ctx.where
    if not w["path"]:
        raise ScenarioError(f"{where}: workload.path: missing; expected {_a(kind)} file")
    path = Path(w["path"])
    if not path.is_file() and (Path(where).parent / path).is_file():
        path = Path(where).parent / path
    if not path.is_file():
        raise ScenarioError(f"{where}: workload.path: {w['path']}: {_not_a_file(path)}; expected {_a(kind)} file")
    if kind == "trace":
        _check_trace_has_requests(path, w.get("block_size"), where)
    return TraceSpec(kind, str(path), w.get("block_size"), float(w["speedup"]), w["max_requests"])


def _file_smoke(w: dict) -> None:
    """trace and azure at smoke size: the first 40 requests."""
    w["max_requests"] = min(40, w.get("max_requests") or 40)


def _program_workload(w: dict, ctx: WorkloadContext) -> ProgramSpec:
    from .programs import program_config

    knobs = {k: as_integer(v) for k, v in w["knobs"].items()}  # every knob is an integer: 2e1 reads as 20
    knobs.setdefault("seed", ctx.seed)
    try:
        cfg = program_config(w["program"], **knobs)
    except (ValueError, TypeError) as err:
        raise ScenarioError(f"{ctx.where}: workload.knobs: {err}") from None
    rate = w["request_rate"]
    return ProgramSpec(cfg, w["max_parallel"], math.inf if isinstance(rate, str) else float(rate))


def _program_smoke(w: dict) -> None:
    """A program at smoke size: one instance."""
    w["knobs"] = {**(w.get("knobs") or {}), "num_instances": 1}


def _agentic_workload(w: dict, ctx: WorkloadContext) -> AgenticSpec:
    from .agentic import AgenticConfig

    rate = w["arrival_rate"]
    knobs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in w.items()
             if k not in ("kind", "speedup", "closed_loop")}
    knobs["arrival_rate"] = math.inf if isinstance(rate, str) else float(rate)
    try:
        cfg = AgenticConfig(seed=ctx.seed, **knobs)
    except ValueError as err:
        raise ScenarioError(f"{ctx.where}: workload.{str(err).removeprefix('AgenticConfig.')}") from None
    return AgenticSpec(cfg, float(w["speedup"]), closed_loop=w["closed_loop"])


def _agentic_smoke(w: dict) -> None:
    """Agentic at smoke size: sessions / 16 (at least 2), concurrency / 16 (at least 1), 2-3 turns."""
    d = WORKLOAD_SCHEMAS["agentic"]
    _shrink(w, "num_sessions", d, lambda n: max(2, n // 16))
    _shrink(w, "concurrency", d, lambda n: max(1, n // 16))
    w["turns"] = [2, 3]
    w["subagent_turns"] = [1, 2]


def _shrink(w: dict, key: str, schema: dict, how) -> None:
    """w[key] (or its default) through `how`, when it is an integer (else left for validation
    to refuse with its one line)."""
    n = as_integer(w.get(key, schema[key][0]))
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= LIMITS[f"workload.{key}"]:
        w[key] = how(n)


def _multiturn_workload(w: dict, ctx: WorkloadContext) -> MultiTurnConfig:
    P, l1, where = ctx.page_size, ctx.l1_tokens, ctx.where
    rate = w["request_rate"]
    rate = math.inf if isinstance(rate, str) else float(rate)
    try:
        wl = MultiTurnConfig(num_clients=w["num_clients"], num_rounds=w["num_rounds"],
                             request_length=w["request_length"], output_length=w["output_length"],
                             max_parallel=w["max_parallel"], request_rate=rate, round_barrier=w["round_barrier"],
                             ready_queue_policy=w["ready_queue_policy"], seed=ctx.seed, page_size=P,
                             vocab_size=w["vocab_size"])
    except ValueError as err:
        raise ScenarioError(f"{where}: workload.{str(err).removeprefix('MultiTurnConfig.')}") from None
    longest = wl.max_prompt_tokens + wl.output_length
    if -(-longest // P) * P >= l1:
        raise ScenarioError(f"{where}: cache.l1_tokens: {l1} tokens cannot hold the longest request "
                            f"({longest} tokens); expected more L1, or fewer rounds")
    return wl


def _multiturn_smoke(w: dict) -> None:
    """Multi-turn at smoke size: clients / 8 (at least 2), at most 3 rounds."""
    d = WORKLOAD_SCHEMAS["multiturn"]
    _shrink(w, "num_clients", d, lambda n: max(2, -(-n // 8)))
    _shrink(w, "num_rounds", d, lambda n: min(3, n))
    clients = w.get("num_clients", d["num_clients"][0])
    if isinstance(clients, int):
        _shrink(w, "max_parallel", d, lambda n: min(n, clients))


for _name, _build, _smoke, _replay in (
        ("multiturn", _multiturn_workload, _multiturn_smoke, workloads.REPLAY),
        ("trace", _file_workload, _file_smoke, None), ("azure", _file_workload, _file_smoke, None),
        ("agentic", _agentic_workload, _agentic_smoke, agentic.REPLAY),
        ("program", _program_workload, _program_smoke, None)):
    register_workload_kind(_name, WORKLOAD_SCHEMAS[_name], _build, smoke=_smoke, replay=_replay)
from . import shared_prefix as _shared_prefix  # noqa: E402,F401  (registers the shared_prefix kind)


def _check_trace_has_requests(path: Path, block_size, where: str) -> None:
    """Refuse a trace without a single request (reads up to its first request line)."""
    from .traces import JsonlTrace, TraceError, TraceRequest

    try:
        found = any(isinstance(rec, TraceRequest) for rec in JsonlTrace(path, block_size))
    except TraceError as err:
        raise ScenarioError(f"{where}: workload.path: {err}") from None
    if not found:
        raise ScenarioError(f"{where}: workload.path: {path}: no requests in the trace; expected at least one")


__all__ = ["TraceSpec", "ProgramSpec", "AgenticSpec"]
