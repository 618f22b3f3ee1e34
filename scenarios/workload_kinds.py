"""The workload kinds a scenario's `workload.kind` names: a registry, as eviction and schedule
policies have. A kind is its `workload` section's schema (scenarios/schema.py format: key ->
(default, check, expected)) and a `build(section, ctx)` that turns the validated section into the
`WorkloadSpec` the run uses (a ScenarioError for a bad value). Its simulator feed,
`feed(env, eng, spec) -> (SimPy process, request count or None)`, registers itself against the
kind's name from the simulator's side (`sim.feeds.register_feed(NAME, feed)`), so that this
layer never imports sim/.

Optional hooks:
- `smoke(section)`: shrink the raw `workload` section (a copy, changed in place) to a run of
  about a second (`radixsim run --smoke`; CI runs every catalog scenario so); default: unchanged;
- `replay`: a `ReplayHook` that lets `radixsim replay --workload NAME`
  (and `radixsim curve`) generate the kind's requests with no clock; default: not replayable.

Adding a kind: one module that defines them and calls `register_workload_kind` once (and
`register_feed` once for the simulator; tests/test_workload_kinds.py does both in the test file)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class WorkloadSpec:
    """What a kind's `build` returns (`Scenario.workload`): its validated knobs, read by the
    kind's feed (sim/feeds.py) and, for a replayable kind, its replay hook. A base with no
    fields (`__slots__ = ()`): each kind's dataclass derives from it."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class WorkloadContext:
    """What a build may need besides its section."""

    seed: int
    page_size: int
    l1_tokens: int
    where: str  # the scenario file, for error messages and relative paths


@dataclass(slots=True)
class ReplayRequest:
    """One request for `radixsim replay`: a trace line or a generated request."""

    rid: object
    session_id: object
    round: int | None
    prompt: object  # int64 token array
    output: object  # int64 token array, or None
    seq: object = None  # a cache_core TokenSeq of prompt + output[:-1] (None: replay makes it)
    priority: int | None = None
    times: tuple | None = None  # (timestamp ms, tool-call ms or None) of a timed trace line, for `request_times`


@dataclass(frozen=True, slots=True)
class SessionClose:
    """A session's close event for `radixsim replay`."""

    session_id: object


@dataclass(frozen=True, slots=True)
class ReplayHook:
    """How a kind feeds `radixsim replay --workload NAME`: the generator is `generator(config)`
    with `config` a dataclass of its knobs (`--set workload.KEY=VALUE`; a `page_size` field gets
    the replay's page size); `items(workload, page_size, keyed)` yields `ReplayRequest` and
    `SessionClose` in replay order (`keyed`: an L3 tier will want every sequence's page keys);
    `future(workload)`, if given, lists every prompt's page keys in order (the `belady` oracle;
    default: hashed from the items). A generator with a length is its request count."""

    config: type
    generator: Callable
    items: Callable
    future: Callable | None = None


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    name: str
    schema: dict
    build: Callable[[dict, WorkloadContext], WorkloadSpec]
    smoke: Callable[[dict], None] | None = None
    replay: ReplayHook | None = None


_KINDS: dict[str, WorkloadKind] = {}


def _registry() -> dict[str, WorkloadKind]:
    """The registry with the built-in kinds in it, whatever module was imported first (issue 30:
    `import scenarios.schema` alone left it empty). scenarios/workload_builds.py registers them
    when it is imported; this imports it on first use (a lazy import: it imports this module)."""
    from . import workload_builds  # noqa: F401  (registers the built-in kinds)

    return _KINDS


def register_workload_kind(name: str, schema: dict, build: Callable, *, smoke: Callable | None = None,
                           replay: ReplayHook | None = None) -> WorkloadKind:
    kinds = _registry()
    if name in kinds:
        raise ValueError(f"workload kind {name!r} is already registered")
    kind = WorkloadKind(name, schema, build, smoke, replay)
    kinds[name] = kind
    return kind


def unregister_workload_kind(name: str) -> None:
    del _registry()[name]


def workload_kind(name: str) -> WorkloadKind | None:
    return _registry().get(name)


def workload_kind_names() -> list[str]:
    return list(_registry())


def replay_kind_names() -> list[str]:
    """The kinds `radixsim replay --workload` accepts (those with a replay hook)."""
    return [name for name, kind in _registry().items() if kind.replay is not None]
