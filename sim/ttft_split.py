"""Where a simulated request's time to first token goes (`radixsim validate --explain`).

A request's TTFT is already split by the engine into ``queue_s`` (waiting queue), ``load_s``
(waiting for its transfers: the prefetch gate, loading, and with layerwise overlap the part of a
step that ran past its compute waiting for its loads) and compute (the rest; sim/recorder.py).
`TtftRecorder` watches one simulated run (it wraps the engine's phase clock, its step executor,
its loader and its data plane, changing no decision and no time) and splits those further:

- queue: as the engine counts it;
- load, by link: each stretch a request spends in a load phase (prefetching, loading) is cut at
  the completions of the transfers it waits for (those the loader hands over with it as owner);
  each piece goes to the link of the transfer that finishes last among those still in flight
  then (the one the request is waiting for), ``"<src>-><dst>"`` as the data plane names its
  links, ``+SSD`` when a prefetch reads SSD pages first; a piece with none in flight is
  ``other``. The exposed part of layerwise-overlapped loads (a step running past its compute)
  is ``L2->L1 exposed``;
- compute, by operator: every step a request takes part in before its first token (its prefill
  chunks) delays that token by the step's whole duration, so the request is charged each such
  step's whole executor time, divided among the operators in the proportions of the step's
  operator split (`sim.operators.OperatorCostModel.breakdown`: part / sum of parts x the step's
  time, so the parts add up to the time exactly); a cost model without a split (a table)
  charges it as ``step``. What the request waits past a step's compute for other requests'
  overlapped loads is ``others' loads``; the rest of its compute time (ready, but waiting for a
  step it is not in: another request's chunk, or the step in progress when it became ready) is
  ``between steps``.

So queue + the load parts + the compute parts = TTFT per request (to float round-off).
"""
from __future__ import annotations

from collections import defaultdict
from math import inf

from cache_core.actions import LOAD, PREFETCH
from cache_core.engine_types import LOADING, PREFETCHING, WAITING

BETWEEN, OTHERS_LOADS, STEP = "between steps", "others' loads", "step"
FRONTEND = "frontend"  # engine.frontend: tokenization, fixed cost, the first token's way out (sim/serving_cpu.py)
EXPOSED, OTHER_LOAD = "L2->L1 exposed", "other"
_LOAD_PHASES = (PREFETCHING, LOADING)


def _stretch(phase) -> str | None:
    return "queue" if phase == WAITING else "load" if phase in _LOAD_PHASES else None


class TtftRecorder:
    """Records a simulated run's phases, steps and transfers; `split()` afterwards. Attach with
    ``radixsim.run.simulate(sc, setup=rec.attach)``."""

    def __init__(self):
        self._split = None  # the executor's cost model's `breakdown`, if it has one
        self._memo: dict = {}
        self.load_stretches: dict = defaultdict(list)  # rid -> [(start, end)] in a load phase
        self.owned: dict = defaultdict(list)  # rid -> [transfer id]
        self.transfers: dict = {}  # transfer id -> [label, submitted, done (None until then)]
        self.steps: list = []  # (duration, stall, key, [(rid, loaded)] of requests before their first token)
        self._pending: dict = {}  # id(step) -> (start, exec end, loaded rids)

    # -- hooks ------------------------------------------------------------------------------
    def attach(self, eng) -> None:
        """Wrap `eng`'s phase clock, executor, loader and data plane (instance attributes only)."""
        q, loader, ex, plane = eng.queues, eng.loader, eng.executor, eng.dataplane
        self._split = getattr(ex.cost, "breakdown", None)
        now = eng.clock.now
        set_phase, execute, complete, drain = q.set_phase, ex.execute, loader.complete, loader.drain
        submit = plane.submit
        link_for = plane.plane.link_for
        ssd = plane.links.ssd is not None

        def on_set_phase(r, phase):
            old = _stretch(r.phase)
            if old == "load" and _stretch(phase) != old and r.first_token_s is None:
                self.load_stretches[r.rid].append((r.phase_since_s, now()))
            return set_phase(r, phase)

        def on_execute(step):
            t0 = now()
            yield from execute(step)
            self._pending[id(step)] = (t0, now(), {r.rid for r, _, _ in step.prefill if r.load_start_s is not None})

        def on_complete(step):
            t0, t1, loaded = self._pending.pop(id(step))
            end = now()
            firsts = [(r.rid, r.rid in loaded) for r, _, _ in step.prefill if r.first_token_s is None]
            if firsts:
                self.steps.append((t1 - t0, end - t1, (step.prefill_cost, step.decode_contexts), firsts))
            return complete(step)

        def on_drain(owner=None):
            batch = drain(owner)
            if owner is not None:
                self.owned[owner.rid] += [t.id for t in batch if t.kind in (LOAD, PREFETCH)]
            return batch

        def on_submit(t, on_done):
            label = link_for(t).name + ("+SSD" if ssd and t.ssd_pages else "")
            rec = self.transfers[t.id] = [label, now(), None]

            def done(tid, ok=True):
                rec[2] = now()
                return on_done(tid, ok)

            return submit(t, done)

        q.set_phase, ex.execute, loader.complete, loader.drain = on_set_phase, on_execute, on_complete, on_drain
        plane.submit = on_submit

    # -- split ------------------------------------------------------------------------------
    def step_split(self, key) -> dict:
        """A step's operator split, in fractions of its time (memoised by batch shape)."""
        shares = self._memo.get(key)
        if shares is None:
            parts = self._split(*key) if self._split is not None else {STEP: 1.0}
            total = sum(parts.values())
            shares = self._memo[key] = {k: v / total for k, v in parts.items()} if total > 0 else {STEP: 1.0}
        return shares

    def _load_parts(self, rid) -> dict:
        out: dict = defaultdict(float)
        owned = [self.transfers[t] for t in self.owned.get(rid, ()) if t in self.transfers]
        for a, b in self.load_stretches.get(rid, ()):
            cuts = sorted({a, b} | {t for _, s, d in owned for t in (s, d) if t is not None and a < t < b})
            for lo, hi in zip(cuts, cuts[1:]):
                live = [(inf if d is None else d, lab) for lab, s, d in owned if s <= lo and (d is None or d >= hi)]
                out[max(live)[1] if live else OTHER_LOAD] += hi - lo
        return out

    def split(self, eng) -> dict:
        """rid -> {"ttft", "queue", "load": {link: s}, "compute": {part: s}} for every finished
        request with a first token (see the module docstring)."""
        compute: dict = defaultdict(lambda: defaultdict(float))
        exposed: dict = defaultdict(float)
        for duration, stall, key, firsts in self.steps:
            shares = self.step_split(key)
            for rid, loaded in firsts:
                c = compute[rid]
                for k, f in shares.items():
                    c[k] += f * duration
                if loaded:
                    exposed[rid] += stall
                else:
                    c[OTHERS_LOADS] += stall
        out = {}
        for r in eng.finished:
            if r.first_token_s is None:
                continue
            ttft = r.first_token_s - r.arrival_s
            load = self._load_parts(r.rid)
            if exposed.get(r.rid):
                load[EXPOSED] += exposed[r.rid]
            comp = dict(compute.get(r.rid, {}))
            if r.frontend_s:
                comp[FRONTEND] = r.frontend_s
            comp[BETWEEN] = ttft - r.queue_s - r.load_s - sum(comp.values())
            out[r.rid] = {"ttft": ttft, "queue": r.queue_s, "load": dict(load), "compute": comp,
                          "load_unsplit": r.load_s - sum(load.values())}
        return out


__all__ = ["BETWEEN", "EXPOSED", "OTHERS_LOADS", "OTHER_LOAD", "STEP", "TtftRecorder"]
