"""Model and hardware presets: the names the rest of the code imports, and the scenario's
overrides of a preset (``model: {base: ..., weight_dtype: ...}``, ``hardware: {base: ..., <field>: ...}``).

Where things live (issue 30 item 2, presets as data):
- the values, each with its source: ``scenarios/data/presets/models/<family>.yaml`` and
  ``scenarios/data/presets/hardware/<gpu>.yaml``, read and checked by `scenarios.preset_data`
  (``get_model``, ``get_hardware``; ``MODELS`` and ``HARDWARE`` are read on first use);
- the preset classes and their checks: `scenarios.preset_models` (``ModelPreset``,
  ``bytes_per_token``, ``describe``) and `scenarios.preset_hardware` (``HardwarePreset``);
- L1 sizing (``l1_tokens: auto``, TP shards): `scenarios.l1_sizing`.
"""
from __future__ import annotations

import dataclasses
import math

from .l1_sizing import (DEFAULT_MAMBA_FULL_MEMORY_RATIO, L1Plan, host_pool_tokens, kv_shards, l1_plan,
                        l1_tokens_auto, transfer_shards)
from .preset_data import get_hardware, get_model, tables
from .preset_hardware import CHOICES, SELECTOR, HardwarePreset, rate_field
from .preset_models import ATTENTION_KINDS, GB, GiB, ModelPreset, bytes_per_token, describe, is_number


def __getattr__(name: str):
    """``MODELS`` / ``HARDWARE``: {key: preset} of every preset file, read on first use."""
    if name in ("MODELS", "HARDWARE"):
        return tables()[name == "HARDWARE"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the bf16 presets ignore them) and per KV element of `model.kv_dtype`
WEIGHT_DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
KV_DTYPE_BYTES = {"bf16": 2, "fp8": 1}
MODEL_OVERRIDES = ("weight_dtype", "kv_dtype", "kernel_factor")
HARDWARE_FIELDS = tuple(f.name for f in dataclasses.fields(HardwarePreset) if f.name not in ("name", "sources"))
HARDWARE_OVERRIDES = HARDWARE_FIELDS + HardwarePreset.RATES_IN_USE


def override_keys(what: str) -> tuple:
    """The keys a scenario's `what` ("model" or "hardware") mapping may hold, "base" first."""
    return ("base",) + (MODEL_OVERRIDES if what == "model" else HARDWARE_OVERRIDES)


def _split_spec(spec, what: str) -> tuple[str, dict]:
    """(preset name, {field: value}) of a plain name or a ``{base: name, field: value}`` mapping."""
    if isinstance(spec, str):
        return spec, {}
    fields = {k: v for k, v in spec.items() if k != "base"}
    unknown = sorted(set(fields) - set(override_keys(what)))
    if unknown:
        raise ValueError(f"{what}.{unknown[0]}: unknown field; expected one of {', '.join(override_keys(what))}")
    if not isinstance(spec.get("base"), str):
        raise ValueError(f"{what}.base: got {spec.get('base')!r}; expected a {what} preset name")
    return spec["base"], fields


def _overridden_source(what: str, key: str, note: str = "") -> str:
    return f"assumption: set by the scenario ({what}.{key}){note}"


def resolve_model(spec) -> tuple[ModelPreset, list]:
    """The model preset a scenario's ``model`` names, with its overrides applied, and the
    overridden keys. ``weight_dtype`` (bf16/fp8/fp4) sets ``weight_bytes`` = total_params x 2/1/0.5
    B; ``kv_dtype`` (bf16/fp8; GQA and MLA rows) sets ``kv_dtype_bytes`` 2/1 and recomputes the
    FULL and SWA KV bytes per token from the row (sidecars and MAMBA state keep their dtypes);
    ``kernel_factor`` (a number > 0) multiplies the model's kernel times (sim/operators.py)."""
    name, fields = _split_spec(spec, "model")
    m = get_model(name)
    src, kw = dict(m.sources), {}
    if "kernel_factor" in fields:
        v = _number_text(fields["kernel_factor"])
        if not (is_number(v) and 0 < v < math.inf):
            raise ValueError(f"model.kernel_factor: got {fields['kernel_factor']!r}; expected a number > 0")
        kw["kernel_factor"] = float(v)
        src["kernel_factor"] = _overridden_source("model", "kernel_factor")
    if "weight_dtype" in fields:
        dt = _dtype(fields["weight_dtype"], WEIGHT_DTYPE_BYTES, "model.weight_dtype")
        kw.update(weight_dtype=dt, weight_bytes=int(m.total_params * WEIGHT_DTYPE_BYTES[dt]))
        src["weight_bytes"] = _overridden_source("model", "weight_dtype", f": {dt}, {WEIGHT_DTYPE_BYTES[dt]:g} "
                                                 "B/param x total_params, scales ignored")
    if "kv_dtype" in fields:
        dt = _dtype(fields["kv_dtype"], KV_DTYPE_BYTES, "model.kv_dtype")
        if m.attention == "dsv4":
            raise ValueError(f"model.kv_dtype: {m.name}'s KV rows have a fixed mixed layout (fp8 + bf16 rope + "
                             "scales); expected no kv_dtype for it")
        row = m.kv_row_bytes // m.kv_dtype_bytes * KV_DTYPE_BYTES[dt]  # GQA and MLA rows scale with the dtype
        kw.update(kv_dtype=dt, kv_dtype_bytes=KV_DTYPE_BYTES[dt], full_kv_bytes_per_token=row * m.full_layers,
                  swa_kv_bytes_per_token=row * m.swa_layers)
        for key in ("kv_dtype_bytes", "full_kv_bytes_per_token", "swa_kv_bytes_per_token"):
            src[key] = _overridden_source("model", "kv_dtype", f": {dt}, {KV_DTYPE_BYTES[dt]} B per KV element")
    if not kw:
        return m, []
    return dataclasses.replace(m, sources=src, **kw), sorted(fields)


def _dtype(value, table: dict, key: str) -> str:
    if value not in table:
        raise ValueError(f"{key}: got {value!r}; expected one of {', '.join(table)}")
    return value


def resolve_hardware(spec) -> tuple[HardwarePreset, list]:
    """The hardware preset a scenario's ``hardware`` names, with any of its fields (except the
    name) overridden, and the overridden keys. Integer fields take integral numbers; every
    value is checked as the preset's own (``HardwarePreset.__post_init__``)."""
    name, fields = _split_spec(spec, "hardware")
    hw = get_hardware(name)
    if not fields:
        return hw, []
    kinds = {f.name: f.type for f in dataclasses.fields(HardwarePreset)}
    kinds.update(dict.fromkeys(HardwarePreset.RATES_IN_USE, "float"))
    kw = {}
    for key, v in fields.items():
        v = _number_text(v) if not kinds[key].startswith("str") else v
        if key in CHOICES:
            ok, expected = v in CHOICES[key], "one of " + ", ".join(CHOICES[key])
        elif kinds[key].startswith("str"):
            ok, expected = isinstance(v, str) and v, "a name"
        elif kinds[key] == "int":
            ok, expected = is_number(v) and float(v).is_integer() and v >= 1, "an integer >= 1"
            v = int(v) if ok else v
        else:
            ok, expected = is_number(v) and v > 0 and math.isfinite(v), "a finite number > 0"
        if not ok:
            raise ValueError(f"hardware.{key}: got {v!r}; expected {expected}")
        kw[key] = v
    _rates_in_use(hw, kw)
    # every overridden field cites the scenario (also one the preset left unset: operator_fit)
    src = dict(hw.sources, **{k: _overridden_source("hardware", k) for k in kw})
    return dataclasses.replace(hw, sources=src, **kw), sorted(fields)  # ValueError: fields that disagree


def _rates_in_use(hw: HardwarePreset, kw: dict) -> None:
    """``pcie_bytes_per_s`` / ``l3_bytes_per_s`` in `kw` -> the field of the io backend (protocol)
    in use, the scenario's choice or else the preset's."""
    for rate in HardwarePreset.RATES_IN_USE:
        if rate not in kw:
            continue
        selector = SELECTOR[rate]
        target = rate_field(rate, kw.get(selector, getattr(hw, selector)))
        if target in kw:
            raise ValueError(f"hardware.{rate}: conflicts with hardware.{target} (the rate of {selector} "
                             f"{target.split('_')[1]}); expected one of them")
        kw[target] = kw.pop(rate)


def _number_text(v):
    """A number written as text that YAML reads as a string (``20e9``) -> the number; else `v`."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def preset_doc(preset, base: str, overridden: list) -> dict:
    """A resolved preset for config.yaml: its base name, every field (sources left out) and
    which fields the scenario overrode."""
    fields = {f.name: getattr(preset, f.name) for f in dataclasses.fields(preset) if f.name != "sources"}
    fields.update({k: getattr(preset, k) for k in getattr(preset, "RATES_IN_USE", ())})
    if "sidecars" in fields:
        fields["sidecars"] = [dataclasses.asdict(s) for s in fields["sidecars"]]
    return {"base": base, **fields, "overridden": list(overridden)}


__all__ = ["ATTENTION_KINDS", "CHOICES", "DEFAULT_MAMBA_FULL_MEMORY_RATIO", "GB", "GiB", "HARDWARE_FIELDS",
           "HARDWARE_OVERRIDES", "HardwarePreset", "KV_DTYPE_BYTES", "L1Plan", "MODEL_OVERRIDES", "ModelPreset",
           "WEIGHT_DTYPE_BYTES", "bytes_per_token", "describe", "get_hardware", "get_model", "host_pool_tokens",
           "kv_shards", "l1_plan", "l1_tokens_auto", "override_keys", "preset_doc", "rate_field",
           "resolve_hardware", "resolve_model", "transfer_shards"]
