"""A run's config.yaml read back as the scenario it ran (`radixsim run DIR/config.yaml`, or `radixsim run DIR`).

config.yaml is a run record: the resolved document (every default and derived number: `cache.l1_plan`,
`cost.model`, the preset fields) plus ``mode`` and ``provenance``. Rather than making the resolved
document re-readable (every derived key accepted and checked against what it derives from: one check
per derived key, each a chance to drift from the resolver), a run records the scenario document as
given, after ``--smoke`` and ``--set``, under ``provenance.scenario``, and the file it came from under
``provenance.scenario_file`` (relative `cost.table`, trace and inference_perf paths are looked up beside
it, as on the first run). Reading a record takes that document, so the rerun resolves exactly what the
first run resolved: same seed, same results; ``--set`` and ``--smoke`` apply on top as on any file.
provenance is left out of reports and comparisons (analysis/), so nothing else a run writes changes.

A record is recognised by its top-level ``provenance`` and ``mode`` keys (neither is a scenario key).
A replay's record (mode: replay) has no scenario: it reruns with `radixsim replay` and the options its
``provenance.command`` records. A record from an older radixsim (no ``provenance.scenario``) is refused
in one line naming the file and the missing key."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from .schema import ScenarioError

RECORD_FILE = "config.yaml"  # the record inside a result directory
RUN_MODES = ("sim", "torch")  # the modes `radixsim run` writes


@dataclass(frozen=True)
class RunRecord:
    """Where a recorded scenario came from: the record file, the scenario file, the run's mode."""

    path: str
    scenario_file: str | None
    mode: str


def record_path(p: Path) -> Path:
    """A result directory's config.yaml in place of the directory; any other path as it is."""
    return p / RECORD_FILE if p.is_dir() and (p / RECORD_FILE).is_file() else p


def is_record(raw: dict) -> bool:
    return "provenance" in raw and "mode" in raw


def recorded_scenario(raw: dict, path) -> tuple[dict, RunRecord]:
    """The scenario document a run record holds (a copy) and where it came from; ScenarioError
    (one line) for a replay's record, an older record without the document, or a malformed one."""
    prov, mode = raw["provenance"], raw["mode"]
    command = prov.get("command") if isinstance(prov, dict) else None
    if mode == "replay":
        raise ScenarioError(f"{path}: mode: replay; a replay's record reruns with `radixsim replay` and the recorded "
                            f"options ({command or 'provenance.command'}), not `radixsim run`")
    if mode not in RUN_MODES:
        raise ScenarioError(f"{path}: mode: {mode!r}; expected a `radixsim run` record (mode: "
                            f"{' or '.join(RUN_MODES)})")
    if not isinstance(prov, dict) or "scenario" not in prov:
        raise ScenarioError(f"{path}: provenance.scenario: missing (a record from an older radixsim); expected the "
                            f"scenario document a run records; rerun its scenario file instead "
                            f"({command or 'see provenance.command'})")
    doc, source = prov["scenario"], prov.get("scenario_file")
    if not isinstance(doc, dict):
        raise ScenarioError(f"{path}: provenance.scenario: {type(doc).__name__}; expected a mapping (a scenario)")
    if source is not None and not isinstance(source, str):
        raise ScenarioError(f"{path}: provenance.scenario_file: {source!r}; expected a path or null")
    return copy.deepcopy(doc), RunRecord(str(path), source, mode)


def rename_where(e: ScenarioError, rec: RunRecord) -> ScenarioError:
    """A problem the recorded scenario (or a --set on it) raised under its original file's name,
    named after the record instead."""
    text = str(e)
    if rec.scenario_file and text.startswith(rec.scenario_file + ":"):
        text = f"{rec.path}: provenance.scenario{text[len(rec.scenario_file):]}"
    return ScenarioError(text)


__all__ = ["RunRecord", "RECORD_FILE", "RUN_MODES", "record_path", "is_record", "recorded_scenario", "rename_where"]
