"""Fault what-ifs: a scenario's `events:` timeline (issue 32 item 5), parsed and checked here;
sim/events.py carries them out during the run.

Each event is a mapping with ``at_s`` (seconds of simulated time) and ``kind``:

- ``link_slow``: the link named ``link`` (``L2->L1``, ``L1->L2``, ``L3->L2``, ``L2->L3`` or
  ``SSD->L3``) moves bytes ``factor`` times slower from ``at_s`` for ``duration_s`` seconds
  (null: to the end of the run), on engine ``engine`` (an index of the fleet's engines; null:
  every engine; a fleet's shared L3 links are slowed once).

Not modelled yet, and refused by name: ``engine_down`` (caches lost, in-flight requests retried
through the router), ``l3_outage`` (reads fail and are recomputed, writes dropped, index
rebuilt) and ``store_restart`` (the store master's index lost)."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

KINDS = ("link_slow",)
NOT_MODELLED = ("engine_down", "l3_outage", "store_restart")
LINKS = ("L2->L1", "L1->L2", "L3->L2", "L2->L3", "SSD->L3")
_KEYS = {"link_slow": ("at_s", "kind", "link", "factor", "duration_s", "engine")}


@dataclass(frozen=True, slots=True)
class Event:
    at_s: float
    kind: str
    link: str | None = None
    factor: float = 1.0
    duration_s: float | None = None  # None: to the end of the run
    engine: int | None = None  # None: every engine

    @property
    def end_s(self) -> float:
        return math.inf if self.duration_s is None else self.at_s + self.duration_s

    def label(self) -> str:
        on = "every engine" if self.engine is None else f"engine {self.engine}"
        until = "the end" if self.duration_s is None else f"{self.end_s:g} s"
        return f"{self.kind} {self.link} x{self.factor:g} on {on}, {self.at_s:g} s to {until}"


def _num(v):
    from .schema import as_number

    v = as_number(v)
    return v if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) else None


def parse_events(raw, where: str, engines: int | None = None) -> tuple:
    """The events of a scenario's `events` list (ScenarioError, one line naming the file and
    ``events[i].FIELD``, for anything else). `engines`: how many engines the run has (a fleet's
    count, 1 for one engine); None skips the engine check (a fleet's engine scenarios)."""
    from .schema import ScenarioError

    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ScenarioError(f"{where}: events: got {raw!r}; expected a list of events (mappings with at_s and kind)")
    out = []
    for i, ev in enumerate(raw):
        at = f"{where}: events[{i}]"
        if not isinstance(ev, dict):
            raise ScenarioError(f"{at}: got {ev!r}; expected a mapping with at_s and kind")
        kind = ev.get("kind")
        if kind in NOT_MODELLED:
            raise ScenarioError(f"{at}.kind: {kind} is not modelled yet; expected one of {', '.join(KINDS)}")
        if kind not in KINDS:
            raise ScenarioError(f"{at}.kind: got {kind!r}; expected one of {', '.join(KINDS)}")
        for k in ev:
            if k not in _KEYS[kind]:
                raise ScenarioError(f"{at}.{k}: unknown key of {kind}; expected {', '.join(_KEYS[kind])}")
        t = _num(ev.get("at_s"))
        if t is None or t < 0:
            raise ScenarioError(f"{at}.at_s: got {ev.get('at_s')!r}; expected seconds >= 0")
        if ev.get("link") not in LINKS:
            raise ScenarioError(f"{at}.link: got {ev.get('link')!r}; expected one of {', '.join(LINKS)}")
        factor = _num(ev.get("factor"))
        if factor is None or factor <= 0:
            raise ScenarioError(f"{at}.factor: got {ev.get('factor')!r}; expected a number > 0 (bandwidth / factor)")
        dur = ev.get("duration_s")
        if dur is not None:
            dur = _num(dur)
            if dur is None or dur <= 0:
                raise ScenarioError(f"{at}.duration_s: got {ev.get('duration_s')!r}; expected seconds > 0 or null "
                                    "(to the end of the run)")
        eng = ev.get("engine")
        if eng is not None and (isinstance(eng, bool) or not isinstance(eng, int) or eng < 0):
            raise ScenarioError(f"{at}.engine: got {eng!r}; expected an engine index >= 0 or null (every engine)")
        if eng is not None and engines is not None and eng >= engines:
            raise ScenarioError(f"{at}.engine: {eng} names no engine; the run has {engines} "
                                f"(expected 0..{engines - 1} or null)")
        out.append(Event(float(t), kind, ev["link"], float(factor), None if dur is None else float(dur), eng))
    return tuple(out)


__all__ = ["Event", "KINDS", "LINKS", "parse_events"]
