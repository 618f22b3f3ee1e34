"""`session-next`: a per-session next-use predictor — Belady's rule (evict what is needed
furthest in the future; Belady 1966) with each session's next request predicted from its own
inter-arrival history, as learned-caching work does with predicted reuse distances
(e.g. Song et al., "Learning Relaxed Belady for CDN caching", NSDI 2020; and the workload-aware
eviction of KVFlow, arXiv 2507.07400, which ranks an agent's prefix by its steps-to-execution).

Time is logical: one unit per request that carries a session id (`SessionRegistry.begin`). A
session that arrived at a_1 < ... < a_k is predicted back at a_k + mean(a_i+1 - a_i); with one
arrival so far, at a_k + the mean gap over all sessions (0 before any gap is seen). FULL leaves
that no open session references go first (LRU among them, as `session` does: a closed session's
pages lose their references); a referenced leaf (a session's frontier) ranks by the earliest
predicted return of the sessions ending there, the furthest first; ties by LRU. A session's
prediction moves at each of its arrivals, so keys are volatile (re-ranked when popped). SWA and
MAMBA pools rank by LRU. Tool-call durations (when a trace carries them) are not used: replay
has no clock.
"""
from __future__ import annotations

from ..eviction import Policy, register_policy

_INF = float("inf")


@register_policy("session-next")
class SessionNextUse(Policy):
    uses_sessions = True
    volatile = True
    reads_hits = reads_priority = False

    def __init__(self):
        self.now = 0  # session arrivals so far
        self.registry = None
        self._last: dict = {}  # sid -> last arrival
        self._gap: dict = {}  # sid -> (sum of gaps, count)
        self._all = [0, 0]  # over all sessions

    def session_arrival(self, sid, registry) -> None:
        self.registry = registry
        last = self._last.get(sid)
        if last is not None:
            s, n = self._gap.get(sid, (0, 0))
            self._gap[sid] = (s + self.now - last, n + 1)
            self._all[0] += self.now - last
            self._all[1] += 1
        self._last[sid] = self.now
        self.now += 1

    def predicted(self, sid) -> float:
        last = self._last.get(sid)
        if last is None:
            return _INF
        s, n = self._gap.get(sid, self._all)
        return last + (s / n if n else 0.0)

    def key(self, node):
        sids = self.registry.sessions_at(node) if node.srefs > 0 and self.registry is not None else ()
        if not sids:
            return (0, 0.0, node.tick)
        return (1, -min(self.predicted(s) for s in sids), node.tick)

    def key_for(self, component: str):
        return self.key if component == "full" else (lambda node: node.tick)
