"""What the built-in trace, azure, program and agentic kinds' builds return (scenarios/workload_builds.py):
their knobs and defaults, which the scenario schema reads (scenarios/schema.py) rather than copies."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .workload_kinds import WorkloadSpec


@dataclass(frozen=True)
class TraceSpec(WorkloadSpec):
    """An open-loop source read from a file (workload.kind trace or azure)."""

    kind: str
    path: str
    block_size: int | None = None
    speedup: float = 1.0
    max_requests: int | None = None


@dataclass(frozen=True)
class ProgramSpec(WorkloadSpec):
    """An LM-program workload: instances of one DAG program, calls sent as their parents finish."""

    config: object  # scenarios.programs.ProgramConfig
    max_parallel: int = 16
    request_rate: float = math.inf
    kind: str = "program"


@dataclass(frozen=True)
class AgenticSpec(WorkloadSpec):
    config: object  # scenarios.agentic.AgenticConfig
    speedup: float = 1.0
    kind: str = "agentic"
    closed_loop: bool = True
