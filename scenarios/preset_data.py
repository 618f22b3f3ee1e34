"""Preset data files -> `ModelPreset` / `HardwarePreset` (issue 30 item 2: presets as data).

The presets live in YAML files, one per model family and one per GPU:

- ``scenarios/data/presets/models/<family>.yaml``: ``family``, then ``models: {key: entry}``; an
  entry holds ``name``, the text fields (``attention``, ``kv_dtype``, ``weight_dtype``,
  ``recurrent_kind``), ``fields`` (every number: ``{value, source}`` or ``{rule, source}``),
  ``sidecars`` (``[{name, follows, bytes_per_token, source}]``) and an optional ``order``;
- ``scenarios/data/presets/hardware/<gpu>.yaml``: ``gpu`` (the key stem: presets ``<gpu>x<n>``),
  ``gpu_name``, ``node_slices`` (the ``n``s), ``fields`` as above and an optional ``order``.

A ``rule`` is a value computed here from the other fields (`MODEL_RULES`, `HARDWARE_RULES`):
SGLang's KV-row and state rules, and the H200's measured/peak ratios. Every other number is
written in the file with its ``source`` (the citation `check_sources` accepts).

More directories: the environment variable ``RADIXSIM_PRESET_DIRS`` (paths joined by
``os.pathsep``), each holding ``models/`` and/or ``hardware/``, searched after the built-in one;
adding a GPU or a model is one file there (tests/test_preset_data.py). Files are read on the
first lookup and cached (`load`), so importing the presets reads nothing.

Errors are one line: ``<file>: <key>.<field>: got ...; expected ...`` (ValueError).
"""
from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from cache_core.config import SidecarConfig

from .preset_hardware import HardwarePreset
from .preset_models import ModelPreset, row_bytes, state_bytes_per_layer
from .yamlfile import read_mapping

BUILTIN_DIR = Path(__file__).resolve().parent / "data" / "presets"
PATH_ENV = "RADIXSIM_PRESET_DIRS"

# rule name (as written in a file) -> value from the other fields (defaults included)
MODEL_RULES = {
    "kv_row_bytes x full_layers": lambda f: row_bytes(f) * f["full_layers"],
    "kv_row_bytes x swa_layers": lambda f: row_bytes(f) * f["swa_layers"],
    "state_bytes_per_layer x state_layers": lambda f: state_bytes_per_layer(f) * f["state_layers"],
}
HARDWARE_RULES = {
    "bf16_flops x 790 / 989": lambda f: f["bf16_flops"] * 790 / 989,
    "hbm_bytes_per_s x 4.3 / 4.8 / 2": lambda f: f["hbm_bytes_per_s"] * 4.3 / 4.8 / 2,
    "node slice": lambda f: f["num_gpus"],  # the slice's GPU count, set per preset
}
MODEL_TEXT = ("attention", "kv_dtype", "weight_dtype", "recurrent_kind")
MODEL_KEYS = ("order", "name", *MODEL_TEXT, "fields", "sidecars")
HARDWARE_KEYS = ("gpu", "order", "gpu_name", "node_slices", "fields")
SIDECAR_KEYS = ("name", "follows", "bytes_per_token", "source")


class PresetFileError(ValueError):
    """A preset data file that cannot be read: one line naming the file and the field."""


def _fail(path, where: str, got, expected: str):
    raise PresetFileError(f"{path}: {where}: got {got!r}; expected {expected}")


def _mapping(path, where: str, v, keys: tuple, required: tuple) -> dict:
    if not isinstance(v, dict):
        _fail(path, where, v, "a mapping")
    unknown = [k for k in v if k not in keys]
    if unknown:
        at = f"{where}.{unknown[0]}" if where else str(unknown[0])
        _fail(path, at, "an unknown key", "one of " + ", ".join(keys))
    missing = [k for k in required if k not in v]
    if missing:
        raise PresetFileError(f"{path}: {where + '.' if where else ''}{missing[0]}: missing; expected it")
    return v


def _typed(path, where: str, v, kind: str):
    """`v` checked (and converted) for a dataclass field of type `kind`."""
    if v is None and kind.endswith("| None"):
        return None
    base = kind.split(" |")[0]
    if base == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if base == "float" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if base == "str" and isinstance(v, str) and v:
        return v
    if base == "tuple" and isinstance(v, list) and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in p)
            for p in v):
        return tuple(tuple(p) for p in v)
    expected = {"int": "an integer", "float": "a number", "str": "a non-empty string",
                "tuple": "a list of [integer, integer] pairs"}[base]
    _fail(path, where, v, expected + (" or null" if kind.endswith("| None") else ""))


def _fields(path, where: str, doc, cls, rules: dict, skip: tuple) -> tuple[dict, dict, dict]:
    """({field: value}, {field: rule}, {field: source}) of a ``fields`` mapping."""
    kinds = {f.name: f.type for f in dataclasses.fields(cls) if f.name not in skip}
    if not isinstance(doc, dict):
        _fail(path, where, doc, "a mapping of field: {value, source} or {rule, source}")
    values, rule_of, sources = {}, {}, {}
    for name, entry in doc.items():
        at = f"{where}.{name}"
        if name not in kinds:
            _fail(path, at, "an unknown field", "one of " + ", ".join(kinds))
        if not (isinstance(entry, dict) and set(entry) in ({"value", "source"}, {"rule", "source"})):
            _fail(path, at, entry, "{value, source} or {rule, source}")
        if not (isinstance(entry["source"], str) and entry["source"]):
            _fail(path, f"{at}.source", entry["source"], "a citation (non-empty string)")
        sources[name] = entry["source"]
        if "rule" in entry:
            if entry["rule"] not in rules:
                _fail(path, f"{at}.rule", entry["rule"], "one of " + ", ".join(rules))
            rule_of[name] = entry["rule"]
        else:
            values[name] = _typed(path, f"{at}.value", entry["value"], kinds[name])
    return values, rule_of, sources


def _apply_rules(path, where: str, cls, values: dict, rule_of: dict, rules: dict) -> dict:
    f = {x.name: x.default for x in dataclasses.fields(cls) if x.default is not dataclasses.MISSING}
    f.update(values)
    for name, rule in rule_of.items():
        try:
            f[name] = rules[rule](f)
        except (KeyError, TypeError) as e:
            raise PresetFileError(f"{path}: {where}.{name}.rule: {rule} needs {e}; expected the fields it "
                                  "is computed from") from None
    return {k: f[k] for k in list(values) + list(rule_of)}


def _order(path, where: str, v) -> float:
    if v is None:
        return float("inf")
    if isinstance(v, bool) or not isinstance(v, int):
        _fail(path, f"{where}.order" if where else "order", v, "an integer (the place in listings)")
    return v


def _sidecars(path, where: str, doc) -> tuple[tuple, dict]:
    if not isinstance(doc, list):
        _fail(path, where, doc, "a list of {name, follows, bytes_per_token, source}")
    out, sources = [], {}
    for i, s in enumerate(doc):
        s = _mapping(path, f"{where}[{i}]", s, SIDECAR_KEYS, SIDECAR_KEYS)
        b = _typed(path, f"{where}[{i}].bytes_per_token", s["bytes_per_token"], "float")
        for key in ("name", "follows", "source"):
            _typed(path, f"{where}[{i}].{key}", s[key], "str")
        try:
            out.append(SidecarConfig(name=s["name"], follows=s["follows"], bytes_per_token=b))
        except ValueError as e:
            raise PresetFileError(f"{path}: {where}[{i}]: {e}") from None
        sources[f"sidecar:{s['name']}"] = s["source"]
    return tuple(out), sources


def _read(path, what: str) -> dict:
    try:
        return read_mapping(path, what, False, fast=True)
    except ValueError as e:  # one line naming the file (and the line), as read_mapping words it
        raise PresetFileError(str(e)) from None


def _build(path, where: str, cls, kw: dict):
    try:
        return cls(**kw)
    except (ValueError, TypeError) as e:
        raise PresetFileError(f"{path}: {where}: {e}") from None


def read_models(path) -> list[tuple[float, str, ModelPreset]]:
    """[(order, key, preset)] of one model-family file."""
    doc = _mapping(path, "", _read(path, "a model family (family, models)"),
                   ("family", "models"), ("family", "models"))
    family = _typed(path, "family", doc["family"], "str")
    if not isinstance(doc["models"], dict) or not doc["models"]:
        _fail(path, "models", doc["models"], "a mapping of preset key: model")
    out = []
    for key, entry in doc["models"].items():
        entry = _mapping(path, f"models.{key}", entry, MODEL_KEYS, ("name", "attention", "fields"))
        values, rule_of, sources = _fields(path, f"models.{key}.fields", entry["fields"], ModelPreset, MODEL_RULES,
                                           ("name", "family", "sources", "sidecars", *MODEL_TEXT))
        text = {k: _typed(path, f"models.{key}.{k}", entry[k], "str") for k in ("name", *MODEL_TEXT) if k in entry}
        sidecars, sc_sources = _sidecars(path, f"models.{key}.sidecars", entry.get("sidecars", []))
        kw = _apply_rules(path, f"models.{key}.fields", ModelPreset, dict(text, **values), rule_of, MODEL_RULES)
        kw.update(family=family, sidecars=sidecars)
        preset = _build(path, f"models.{key}", ModelPreset, dict(kw, sources={**sources, **sc_sources}))
        out.append((_order(path, f"models.{key}", entry.get("order")), str(key), preset))
    return out


def read_hardware(path) -> list[tuple[float, str, HardwarePreset]]:
    """[(order, key, preset)] of one GPU file: one preset per node slice."""
    doc = _mapping(path, "", _read(path, "a GPU (gpu, gpu_name, node_slices, fields)"),
                   HARDWARE_KEYS, ("gpu", "gpu_name", "node_slices", "fields"))
    gpu = _typed(path, "gpu", doc["gpu"], "str")
    gpu_name = _typed(path, "gpu_name", doc["gpu_name"], "str")
    slices = doc["node_slices"]
    if not (isinstance(slices, list) and slices and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                                                        for n in slices)):
        _fail(path, "node_slices", slices, "a list of GPU counts >= 1")
    values, rule_of, sources = _fields(path, "fields", doc["fields"], HardwarePreset, HARDWARE_RULES,
                                       ("name", "gpu_name", "sources"))
    order = _order(path, "", doc.get("order"))
    out = []
    for n in slices:
        kw = _apply_rules(path, "fields", HardwarePreset, dict(values, num_gpus=n), rule_of, HARDWARE_RULES)
        kw.update(num_gpus=n)
        out.append((order, f"{gpu}x{n}", _build(path, f"{gpu}x{n}", HardwarePreset,
                                                dict(kw, name=f"{gpu}x{n}", gpu_name=gpu_name,
                                                     sources=dict(sources)))))
    return out


def search_dirs() -> tuple[Path, ...]:
    """The built-in preset directory, then those of ``RADIXSIM_PRESET_DIRS``."""
    extra = [Path(p) for p in os.environ.get(PATH_ENV, "").split(os.pathsep) if p]
    return (BUILTIN_DIR, *extra)


def _table(dirs: tuple, sub: str, reader) -> dict:
    rows, where = [], {}
    for d in dirs:
        for path in sorted((Path(d) / sub).glob("*.yaml")):
            for order, key, preset in reader(path):
                if key in where:
                    raise PresetFileError(f"{path}: {key}: a preset of that key is already in {where[key]}; "
                                          "expected a new key")
                where[key] = path
                rows.append((order, len(rows), key, preset))
    return {key: preset for _, _, key, preset in sorted(rows, key=lambda r: r[:2])}


@functools.lru_cache(maxsize=8)
def load(dirs: tuple) -> tuple[dict, dict]:
    """({key: ModelPreset}, {key: HardwarePreset}) of the preset files in `dirs` (cached)."""
    return _table(dirs, "models", read_models), _table(dirs, "hardware", read_hardware)


def tables() -> tuple[dict, dict]:
    """({key: ModelPreset}, {key: HardwarePreset}) of every preset file on the search path, read
    once per search path and cached."""
    return load(search_dirs())


def lookup(table: dict, name, what: str):
    if isinstance(name, str):
        if name in table:
            return table[name]
        low = name.strip().lower()
        for key, preset in table.items():
            if low in (key.lower(), preset.name.lower()):
                return preset
    raise ValueError(f"unknown {what} preset {name!r}; known: {', '.join(table)}")


def get_model(name: str) -> ModelPreset:
    """The model preset `name` (a registry key, or a preset's name in any case)."""
    return lookup(tables()[0], name, "model")




def get_hardware(name: str) -> HardwarePreset:
    """The hardware preset `name`: a GPU and a node slice, "h200x1" .. "h200x8", "a100-40gbx1",
    "a100-80gbx4", "h100x8", "h800x8", "b200x2", "h20x8", ... (`HARDWARE` lists them)."""
    return lookup(tables()[1], name, "hardware")

