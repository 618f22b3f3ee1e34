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
MAMBA pools rank by LRU.

Tool-call durations, when the trace has them (a request line's ``tool_ms``: how long the
session's tool call runs after it; replay passes each timed line's timestamp and tool_ms to
`request_times`): the session is predicted back after the requests expected during its tool
call, a_k + max(1, tool_ms x r), r = the requests per ms seen so far ((requests - 1) / (last
timestamp - first)); its mean gap is used when its last request carried no tool_ms, or before
any time has passed.
"""
from __future__ import annotations

from ..eviction import Policy, register_policy
from .stamped import FullRanked

_INF = float("inf")


@register_policy("session-next")
class SessionNextUse(FullRanked, Policy):
    uses_sessions = True
    volatile = True
    reads_hits = reads_priority = False

    def __init__(self):
        self.now = 0  # session arrivals so far
        self.registry = None
        self._last: dict = {}  # sid -> last arrival
        self._gap: dict = {}  # sid -> (sum of gaps, count)
        self._all = [0, 0]  # over all sessions
        self._tool: dict = {}  # sid -> tool-call ms after its last request (timed traces)
        self._times = None  # (first timestamp, last timestamp, requests timed) in ms

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

    def request_times(self, sid, timestamp_ms: float, tool_ms) -> None:
        """Replay hook after a timed request of `sid`: its timestamp and the tool call's
        duration after it (None: not known)."""
        first, _, n = self._times or (timestamp_ms, timestamp_ms, 0)
        self._times = (first, timestamp_ms, n + 1)
        if tool_ms is None:
            self._tool.pop(sid, None)
        else:
            self._tool[sid] = tool_ms

    def predicted(self, sid) -> float:
        last = self._last.get(sid)
        if last is None:
            return _INF
        tool = self._tool.get(sid)
        if tool is not None and self._times[1] > self._times[0]:
            first, latest, n = self._times
            return last + max(1.0, tool * (n - 1) / (latest - first))
        s, n = self._gap.get(sid, self._all)
        return last + (s / n if n else 0.0)

    def key(self, node):
        sids = self.registry.sessions_at(node) if node.srefs > 0 and self.registry is not None else ()
        if not sids:
            return (0, 0.0, node.tick)
        return (1, -min(self.predicted(s) for s in sids), node.tick)

