"""Fault what-ifs: a scenario's `events:` timeline (issue 32 item 5), parsed and checked here;
sim/events.py carries them out during the run.

Each event is a mapping with ``at_s`` (seconds of simulated time) and ``kind``:

- ``link_slow``: the link named ``link`` (``L2->L1``, ``L1->L2``, ``L3->L2``, ``L2->L3`` or
  ``SSD->L3``) moves bytes ``factor`` times slower from ``at_s`` for ``duration_s`` seconds
  (null: to the end of the run), on engine ``engine`` (an index of the fleet's engines; null:
  every engine; a fleet's shared L3 links are slowed once).
- ``engine_down``: fleet engine ``engine`` goes down at ``at_s`` (caches lost, its unfinished
  requests routed again) and comes back empty ``duration_s`` later (null: never); a fleet
  without P/D or DP attention, and never every engine at once (fleet/faults.py).

- ``l3_outage``: every L3 store of the run is unreachable from ``at_s`` for ``duration_s``
  seconds (required): each L3 read (prefetch) and write (store) issued then fails at once (a
  read's pages are forgotten by the reader and recomputed, as a failed read always is; a write
  is dropped); in-flight transfers finish. When it ends the store's index is rebuilt from what
  the store still holds: the pages forgotten only because their reads failed during the outage
  are found again (nothing else left it: no write, so no eviction, happened meanwhile).
- ``store_restart``: the L3 store's master restarts at ``at_s``: its index is lost, so every
  page it held is gone for the run's requests (in-flight transfers finish).

Both need an L3 tier (cache.l3_tokens)."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

KINDS = ("link_slow", "engine_down", "l3_outage", "store_restart")
LINKS = ("L2->L1", "L1->L2", "L3->L2", "L2->L3", "SSD->L3")
_KEYS = {"link_slow": ("at_s", "kind", "link", "factor", "duration_s", "engine"),
         "engine_down": ("at_s", "kind", "engine", "duration_s"),
         "l3_outage": ("at_s", "kind", "duration_s"), "store_restart": ("at_s", "kind")}


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
        if self.kind == "engine_down":
            return f"engine_down {on}, {self.at_s:g} s to {until}"
        if self.kind == "store_restart":
            return f"store_restart at {self.at_s:g} s"
        if self.kind == "l3_outage":
            return f"l3_outage {self.at_s:g} s to {until}"
        return f"{self.kind} {self.link} x{self.factor:g} on {on}, {self.at_s:g} s to {until}"


def _num(v):
    from .schema import as_number

    v = as_number(v)
    return v if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) else None


def parse_events(raw, where: str, engines: int | None = None, fleet: str | None = None,
                 l3: bool | None = None) -> tuple:
    """The events of a scenario's `events` list (ScenarioError, one line naming the file and
    ``events[i].FIELD``, for anything else). `engines`: how many engines the run has (a fleet's
    count, 1 for one engine); None skips the engine check (a fleet's engine scenarios).
    `fleet`: None (one engine), "plain", "pd" or "dp" (what engine_down may apply to). `l3`:
    whether the run has an L3 tier (None: not checked)."""
    from .schema import ScenarioError

    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ScenarioError(f"{where}: events: got {raw!r}; expected a list of events (mappings with at_s and kind)")
    out = []
    for i, ev in enumerate(raw):
        at = f"{where}: events[{i}]"
        t, kind = _head(ev, at)
        if kind == "engine_down":
            out.append(_engine_down(ev, at, t, engines, fleet))
        elif kind == "link_slow":
            out.append(_link_slow(ev, at, t, engines))
        else:
            if l3 is False:
                raise ScenarioError(f"{at}.kind: {kind} needs an L3 tier; expected a scenario with cache.l3_tokens")
            dur = _duration(ev, at)
            if kind == "l3_outage" and dur is None:
                raise ScenarioError(f"{at}.duration_s: missing; expected the outage's seconds > 0")
            out.append(Event(t, kind, None, 1.0, dur, None))
    _check_someone_up(out, where, engines)
    return tuple(out)


def _head(ev, at: str) -> tuple:
    """(at_s, kind) of event mapping `ev`, its keys checked against its kind's."""
    from .schema import ScenarioError

    if not isinstance(ev, dict):
        raise ScenarioError(f"{at}: got {ev!r}; expected a mapping with at_s and kind")
    kind = ev.get("kind")
    if kind not in KINDS:
        raise ScenarioError(f"{at}.kind: got {kind!r}; expected one of {', '.join(KINDS)}")
    for k in ev:
        if k not in _KEYS[kind]:
            raise ScenarioError(f"{at}.{k}: unknown key of {kind}; expected {', '.join(_KEYS[kind])}")
    t = _num(ev.get("at_s"))
    if t is None or t < 0:
        raise ScenarioError(f"{at}.at_s: got {ev.get('at_s')!r}; expected seconds >= 0")
    return float(t), kind


def _link_slow(ev: dict, at: str, t: float, engines: int | None) -> Event:
    from .schema import ScenarioError

    if ev.get("link") not in LINKS:
        raise ScenarioError(f"{at}.link: got {ev.get('link')!r}; expected one of {', '.join(LINKS)}")
    factor = _num(ev.get("factor"))
    if factor is None or factor <= 0:
        raise ScenarioError(f"{at}.factor: got {ev.get('factor')!r}; expected a number > 0 (bandwidth / factor)")
    eng = ev.get("engine")
    if eng is not None and (isinstance(eng, bool) or not isinstance(eng, int) or eng < 0):
        raise ScenarioError(f"{at}.engine: got {eng!r}; expected an engine index >= 0 or null (every engine)")
    if eng is not None and engines is not None and eng >= engines:
        raise ScenarioError(f"{at}.engine: {eng} names no engine; the run has {engines} "
                            f"(expected 0..{engines - 1} or null)")
    return Event(t, "link_slow", ev["link"], float(factor), _duration(ev, at), eng)


def _duration(ev: dict, at: str):
    from .schema import ScenarioError

    dur = ev.get("duration_s")
    if dur is None:
        return None
    dur = _num(dur)
    if dur is None or dur <= 0:
        raise ScenarioError(f"{at}.duration_s: got {ev.get('duration_s')!r}; expected seconds > 0 or null "
                            "(to the end of the run)")
    return float(dur)


def _engine_down(ev: dict, at: str, t: float, engines: int | None, fleet: str | None) -> Event:
    from .schema import ScenarioError

    if fleet is None and engines is not None:
        raise ScenarioError(f"{at}.kind: engine_down needs a fleet (a run of one engine has nowhere to "
                            "send its requests); expected a scenario with a fleet: section")
    if fleet in ("pd", "dp"):
        raise ScenarioError(f"{at}.kind: engine_down in a {'P/D' if fleet == 'pd' else 'DP-attention'} fleet is "
                            "not modelled; expected a fleet of plain engines")
    eng = ev.get("engine")
    if isinstance(eng, bool) or not isinstance(eng, int) or eng < 0:
        raise ScenarioError(f"{at}.engine: got {eng!r}; expected the index of the engine that goes down")
    if engines is not None and eng >= engines:
        raise ScenarioError(f"{at}.engine: {eng} names no engine; the run has {engines} (expected 0..{engines - 1})")
    return Event(t, "engine_down", None, 1.0, _duration(ev, at), eng)


def _check_someone_up(events, where: str, engines: int | None) -> None:
    """ScenarioError when engine_down windows leave no engine up at some moment."""
    from .schema import ScenarioError

    downs = [(i, e) for i, e in enumerate(events) if e.kind == "engine_down"]
    if engines is None or not downs:
        return
    for i, e in downs:
        at = {o.engine for _, o in downs if o.at_s <= e.at_s < o.end_s}
        if len(at) >= engines:
            raise ScenarioError(f"{where}: events[{i}]: at {e.at_s:g} s every engine would be down; expected at "
                                "least one engine up")


__all__ = ["Event", "KINDS", "LINKS", "parse_events"]
