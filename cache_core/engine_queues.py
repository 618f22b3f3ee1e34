"""Where an engine's requests are (`RequestQueues`): the state the `Engine` (engine.py), its
`StepBuilder` (engine_steps.py) and its `Loader` (engine_loading.py) share, and the phase
clock that splits a request's time to first token into queue, load and compute."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from .admission import RunningBatch
from .engine_types import LOADING, PREFETCHING, WAITING, EngineRequest
from .scheduling import WAITING as Q_WAITING

_STRETCH = {WAITING: "queue_s", PREFETCHING: "load_s", LOADING: "load_s"}  # the rest of a TTFT is compute


def _counters() -> dict:
    return {"transfers": 0, "retractions": 0, "prefill_steps": 0, "decode_steps": 0,
            "shared_prefill_tokens": 0, "alloc_waits": 0}


@dataclass(kw_only=True, eq=False)
class RequestQueues:
    """One engine's requests by where they are: ``prefetching`` (gated by an L3 prefetch),
    ``waiting`` (the schedule policy orders it at admission), ``loading`` (admitted, its
    transfers in flight), ``ready`` (admitted, loads done), ``chunked`` (its prefill goes on
    in the next step), ``running`` (decoding), ``finished``; the loop's ``counters``. `now`
    reads the engine's clock (phase times)."""

    now: Callable[[], float]
    running: RunningBatch
    waiting: list = field(default_factory=list)
    prefetching: list = field(default_factory=list)
    loading: list = field(default_factory=list)
    ready: deque = field(default_factory=deque)
    chunked: EngineRequest | None = None
    finished: list = field(default_factory=list)
    counters: dict = field(default_factory=_counters)

    def idle(self) -> bool:
        """No request anywhere (finished ones aside)."""
        return not (self.waiting or self.prefetching or self.loading or self.ready or self.chunked
                    or len(self.running))

    def set_phase(self, r: EngineRequest, phase: str) -> None:
        """Move r to `phase`. Until its first token, a stretch in the waiting queue adds to
        ``queue_s`` and one waiting for transfers (prefetch gate, loads) to ``load_s``; the
        rest of its TTFT is compute (ready, prefill), so queue + load + compute = TTFT."""
        old, new = _STRETCH.get(r.phase), _STRETCH.get(phase)
        if old != new:
            now = self.now()
            if old is not None and r.first_token_s is None:
                setattr(r, old, getattr(r, old) + (now - r.phase_since_s))
            r.phase_since_s = now
        r.phase = phase

    def to_waiting(self, r: EngineRequest, front: bool = False) -> None:
        self.set_phase(r, WAITING)
        r.state = Q_WAITING
        if front:
            self.waiting.insert(0, r)
        else:
            self.waiting.append(r)
