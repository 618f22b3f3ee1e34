"""Every model and hardware preset, every field (sources included), pinned to the values the
code held before the presets became data files (issue 30 item 2): the fixture
tests/data/presets_pinned.json was written by `dump()` from the pre-data-file code, and a
preset may only change together with it, deliberately."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from scenarios import presets

FIXTURE = Path(__file__).resolve().parent / "data" / "presets_pinned.json"


def _plain(v):
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _typed(v):
    """A value with its Python type, so 1 and 1.0 (or a tuple and a list) differ."""
    if isinstance(v, dict):
        return {k: _typed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_typed(x) for x in v]
    return [type(v).__name__, v]


def _preset(p) -> dict:
    out = {f.name: [type(getattr(p, f.name)).__name__, _typed(_plain(getattr(p, f.name)))]
           for f in dataclasses.fields(p)}
    out["sources"] = dict(sorted(p.sources.items()))  # their order is not used
    return out


def dump() -> dict:
    return {"models": {k: _preset(m) for k, m in presets.MODELS.items()},
            "hardware": {k: _preset(h) for k, h in presets.HARDWARE.items()}}


def test_every_preset_field_is_pinned():
    want = json.loads(FIXTURE.read_text())
    got = json.loads(json.dumps(dump()))
    assert list(got["models"]) == list(want["models"])
    assert list(got["hardware"]) == list(want["hardware"])
    for kind in ("models", "hardware"):
        for key in want[kind]:
            assert got[kind][key] == want[kind][key], (kind, key)


if __name__ == "__main__":  # regenerate (only with a deliberate preset change)
    d = dump()
    FIXTURE.write_text("{\n" + ",\n".join(
        f" {json.dumps(kind)}: {{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in d[kind].items())
        + "\n }" for kind in d) + "\n}\n")
