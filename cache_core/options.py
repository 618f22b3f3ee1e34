"""Scenario keys a plug-in owns (issue 30 item 1): a config dataclass whose fields, made with
`option`, are its scenario keys. The scenario schema (scenarios/schema.py) derives each key's
default, check and `--help`/docs text from the field, so none is written twice.

`check` names one of the schema's value checks (`CHECKS`); `expected` is what the one-line
refusal and the docs say is expected; `key` is the scenario key when it differs from the field
name. A registered family (eviction policy, schedule policy, L3 store model, cost model) names its
config class when it registers (`Registry.register(name, config=...)`); without one it has
`NoOptions`, no keys.
"""
from __future__ import annotations

import copy
import dataclasses

# The schema's generic value checks (scenarios/schema.py `_ok` implements them; a plug-in's key
# names one; a choice among fixed values is a tuple ("choice", VALUES)). Not the size checks: a
# size with a unit becomes tokens only in the keys the resolver converts (scenarios/cache_pools.py).
CHECKS = ("str", "str_or_none", "int0", "int1", "int1_or_none", "fraction", "pos_or_none", "nonneg", "rate",
          "bool", "mapping", "pos", "range")


def option(default, check, expected: str, *, key: str | None = None):
    """A dataclass field that is a scenario key (see the module docstring)."""
    if not (check in CHECKS or isinstance(check, tuple) and len(check) == 2 and check[0] == "choice"):
        raise ValueError(f"option check {check!r}: expected one of {', '.join(CHECKS)} or ('choice', VALUES)")
    # VALUES and `expected` may be callables (a registry's names): read each time the schema is built
    meta = {"check": check, "expected": expected, "key": key}
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A plug-in without scenario keys."""


def default_of(f: dataclasses.Field):
    """A field's default as a scenario file writes it (a tuple as a list)."""
    factory = f.default_factory
    v = factory() if f.default is dataclasses.MISSING and callable(factory) else f.default
    return list(v) if isinstance(v, tuple) else v


def option_fields(cls) -> list:
    """(scenario key, field) of every `option` field of config class `cls`, in field order."""
    return [(f.metadata.get("key") or f.name, f) for f in dataclasses.fields(cls) if "check" in f.metadata]


def schema_entries(cls) -> dict:
    """Scenario key -> (default, check, expected) of `cls`'s option fields."""
    out = {}
    for k, f in option_fields(cls):
        check, expected = f.metadata["check"], f.metadata["expected"]
        if isinstance(check, tuple) and callable(check[1]):
            check = ("choice", tuple(check[1]()))
        out[k] = (default_of(f), check, expected() if callable(expected) else expected)
    return out


def defaults(cls) -> dict:
    """Field name -> default (as a scenario file writes it) of every field of dataclass `cls`."""
    return {f.name: default_of(f) for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}


def build(cls, section: dict):
    """An instance of config class `cls` from a validated scenario section (its keys' values)."""
    return cls(**{f.name: section[k] for k, f in option_fields(cls) if k in section})


__all__ = ["CHECKS", "NoOptions", "build", "default_of", "defaults", "option", "option_fields", "schema_entries"]
