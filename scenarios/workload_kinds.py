"""The workload kinds a scenario's `workload.kind` names: a registry, as eviction and schedule
policies have. A kind is its `workload` section's schema (scenarios/schema.py format: key ->
(default, check, expected)), a `build(section, ctx)` that turns the validated section into the
object the run uses (a ScenarioError for a bad value), and its `feed`: "module:function" of
`feed(env, eng, spec) -> (SimPy process, request count or None)` (sim/feeds.py for the
built-in ones, named there so that this layer never imports sim/; or the function).

Adding a kind: one module that defines the three and calls `register_workload_kind` once
(tests/test_workload_kinds.py does it in the test file)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True, slots=True)
class WorkloadContext:
    """What a build may need besides its section."""

    seed: int
    page_size: int
    l1_tokens: int
    where: str  # the scenario file, for error messages and relative paths


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    name: str
    schema: dict
    build: Callable[[dict, WorkloadContext], object]
    feed: str | Callable  # "module:function", or the function itself

    def feed_function(self) -> Callable:
        if callable(self.feed):
            return self.feed
        module, _, func = self.feed.partition(":")
        return getattr(importlib.import_module(module), func)


_KINDS: dict[str, WorkloadKind] = {}


def register_workload_kind(name: str, schema: dict, build: Callable, feed) -> WorkloadKind:
    if name in _KINDS:
        raise ValueError(f"workload kind {name!r} is already registered")
    kind = WorkloadKind(name, schema, build, feed)
    _KINDS[name] = kind
    return kind


def unregister_workload_kind(name: str) -> None:
    del _KINDS[name]


def workload_kind(name: str) -> WorkloadKind | None:
    return _KINDS.get(name)


def workload_kind_names() -> list[str]:
    return list(_KINDS)
