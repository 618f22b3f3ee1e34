"""`Run`: one run's files as read (analysis/load.py reads result directories into it,
analysis/external.py SGLang bench_multiturn logs), and `flatten` for its config."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Run:
    """One run, as read from its files. DataFrames are None when the file is absent."""

    name: str
    label: str
    config: dict
    summary: dict
    requests: pd.DataFrame | None = None
    rounds: pd.DataFrame | None = None
    timeline: pd.DataFrame | None = None
    tree: dict | None = None
    mode: str = "unknown"  # sim, replay, torch; "sglang" for an external bench_multiturn log
    path: Path | None = None
    extra: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Run({self.label!r}, mode={self.mode!r}, path={str(self.path)!r})"


def flatten(doc: dict, prefix: str = "") -> dict:
    """{'cache': {'page_size': 64}} -> {'cache.page_size': 64} (lists kept as values)."""
    out = {}
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
