"""The agentic workload's plan (scenarios/agentic.py): every session's structure and request
times, drawn from the config before any token (`Planner`).

Sessions and prompts
    Session k (0 <= k < num_sessions) draws its repository context length R from
    ``repo_context_tokens`` and its number of turns T from ``turns`` (ranges are inclusive
    [lo, hi], drawn uniformly). Turn t appends a tool output of ``tool_output_tokens`` tokens
    (at turn 1: the task statement) and the model answers with ``output_tokens`` tokens::

        prompt(1)   = system + repo + tool(1)
        prompt(t+1) = prompt(t) + output(t) + tool(t+1)

    Outputs are explicit tokens, fixed up front, so every later prompt contains them.

Sub-agents
    After each turn t < T of a top-level session, with probability ``subagent_prob``, the
    agent forks a sub-agent: a NEW session whose context starts as the parent's whole context
    ``prompt(t) + output(t)``; it runs ``subagent_turns`` (default 1-5) turns of its own with
    the same per-turn ranges (its turn 1 appends its task, written by the parent) and is then
    closed. The parent waits for it: its turn t+1 comes a think time after the sub-agent's
    close. Sub-agents never fork (one level) and do not count against ``concurrency``.

Session ids
    Top-level sessions are 0 .. num_sessions-1; sub-agents are num_sessions, num_sessions+1,
    ... in (parent, fork turn) order. `sessions()` gives every session's plan (parent, fork
    turn, inherited length, request times).


Timeline (deterministic, integer milliseconds)
    Session starts form a Poisson process at ``arrival_rate`` sessions/s (a_0 = 0,
    a_{k+1} = a_k + Exp(1/rate), spawn key (1,); rate inf: all at 0). At most ``concurrency``
    top-level sessions are active (from their first request to their close); session k, in
    arrival order, starts at max(a_k, the earliest close among the active ones) (FIFO
    admission). Within a session::

        time(1)   = start
        service(t) = service_base_s + service_s_per_output_token * len(output(t))   (nominal,
                     no contention: a prefill/TTFT constant plus a 20 ms/token decode)
        time(t+1) = time(t) + service(t) [+ the forked sub-agent's whole run] + think(t)
        close     = time(T) + service(T)        (the close_session event)

    A sub-agent forked after turn t starts at time(t) + service(t) and follows the same
    rules. Think times are heavy-tailed: lognormal with median sqrt(lo * hi) and sigma
    ln(hi / lo) / 4, clipped to ``think_time_s`` = [lo, hi] (for the default 0.5-20 s: median
    3.2 s, mean ~4.6 s, about 2% of the draws sit at each clip). Every time is rounded to whole
    milliseconds (a service time is at least 1 ms).

    Records come in timestamp order; at equal times a close comes before a request (a freed
    slot is reused at once), then by session id.

"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from .agentic_config import AgenticConfig
from .seeding import rng as _rng

# SeedSequence spawn keys: one independent stream per purpose.
STREAM_STRUCTURE, STREAM_ARRIVALS, STREAM_TOKENS, STREAM_SYSTEM = 0, 1, 2, 3
CLOSE, REQUEST = 0, 1  # sort rank at equal timestamps


@dataclass(frozen=True, slots=True, eq=False)
class SessionPlan:
    """A session's structure and times (no tokens). Arrays are read-only."""

    session_id: int
    parent: int | None  # the parent session of a sub-agent
    fork_turn: int | None  # the parent's turn after whose output the sub-agent forked
    inherited: int  # tokens the session starts with: the system prompt, or the parent's context
    context: int  # own leading context (the repo for top-level sessions, 0 for sub-agents)
    tool: np.ndarray  # tool output lengths per turn
    output: np.ndarray  # output lengths per turn
    prompt_end: np.ndarray  # len(prompt(t)) per turn
    request_ms: np.ndarray  # timestamp of each turn's request
    close_ms: int
    think_ms: np.ndarray = None  # idle gap after each turn but the last (a closed-loop client waits it)
    arrival_ms: int | None = None  # a top-level session's arrival (before waiting for a slot)

    @property
    def turns(self) -> int:
        return len(self.tool)

    @property
    def is_subagent(self) -> bool:
        return self.parent is not None

    @property
    def own_tokens(self) -> int:
        """Tokens the session writes from its block: context, tool outputs and outputs."""
        return self.context + int(self.tool.sum()) + int(self.output.sum())


@dataclass(frozen=True, slots=True)
class AgenticPlan:
    """Every session of a workload and the order of its records (no tokens)."""

    sessions: tuple  # SessionPlan by session id
    order: tuple  # (timestamp_ms, kind, session_id, turn) in record order
    span: int  # ids per token block


class Planner:
    """Draws the plan of `config` (structure, times, admission; module docstring)."""

    def __init__(self, config: AgenticConfig):
        self.config = config

    def _think_ms(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.rint(_clipped_lognormal(rng, self.config.think_time_s, n) * 1000).astype(np.int64)

    def _lengths(self, rng: np.random.Generator, bounds: tuple, n: int) -> np.ndarray:
        """`n` integer lengths in [lo, hi]: uniform, or (`lengths: lognormal`) clipped lognormal."""
        lo, hi = bounds
        if self.config.lengths == "uniform":
            return rng.integers(lo, hi + 1, size=n, dtype=np.int64)
        return np.rint(_clipped_lognormal(rng, bounds, n)).astype(np.int64)

    def _service_ms(self, out: np.ndarray) -> np.ndarray:
        c = self.config
        s = c.service_base_s + c.service_s_per_output_token * out
        return np.maximum(np.rint(s * 1000).astype(np.int64), 1)

    def _draw_turns(self, rng, n: int):
        c = self.config
        tool = self._lengths(rng, c.tool_output_tokens, n)
        out = self._lengths(rng, c.output_tokens, n)
        return tool, out, self._think_ms(rng, n - 1)

    def _arrivals(self) -> np.ndarray:
        """Session arrivals (ms): a Poisson process, or all at 0."""
        c = self.config
        N = c.num_sessions
        if math.isinf(c.arrival_rate) or N == 1:
            return np.zeros(N, dtype=np.int64)
        gaps = _rng(c.seed, STREAM_ARRIVALS).exponential(1000.0 / c.arrival_rate, size=N - 1)
        return np.rint(np.concatenate([[0.0], np.cumsum(gaps)])).astype(np.int64)

    def _structure(self) -> tuple[list, list]:
        """Each top-level session and its sub-agents, times relative to the session's start:
        tops (repo, tool, out, rel_times, rel_close, think) and subs (parent k, fork turn, tool,
        out, rel_times, rel_close, think)."""
        c = self.config
        tops, subs = [], []
        for k in range(c.num_sessions):
            rng = _rng(c.seed, STREAM_STRUCTURE, k)
            repo = int(rng.integers(c.repo_context_tokens[0], c.repo_context_tokens[1] + 1))
            T = int(self._lengths(rng, c.turns, 1)[0])
            tool, out, think = self._draw_turns(rng, T)
            forks = np.flatnonzero(rng.random(T - 1) < c.subagent_prob)  # 0-based turns < T-1
            my_subs = {}
            for i in forks.tolist():
                n = int(self._lengths(rng, c.subagent_turns, 1)[0])
                st, so, sth = self._draw_turns(rng, n)
                rel, close = self._timeline(st, so, sth, {})
                my_subs[i] = (st, so, rel, close, sth)
            svc = self._service_ms(out)
            rel, close = self._timeline(tool, out, think, {i: s[3] for i, s in my_subs.items()})
            tops.append((repo, tool, out, rel, close, think))
            fin = rel + svc
            for i, (st, so, srel, sclose, sth) in sorted(my_subs.items()):
                subs.append((k, i, st, so, srel + fin[i], sclose + fin[i], sth))
        return tops, subs

    def _admit(self, arrivals: np.ndarray, tops: list) -> list[int]:
        """Start times: FIFO, at most `concurrency` top-level sessions between start and close."""
        free = [0] * self.config.concurrency
        starts = []
        for k in range(self.config.num_sessions):
            s = max(int(arrivals[k]), heapq.heappop(free))
            starts.append(s)
            heapq.heappush(free, s + tops[k][4])
        return starts

    def build(self) -> AgenticPlan:
        c = self.config
        N = c.num_sessions
        arrivals = self._arrivals()
        tops, subs = self._structure()
        starts = self._admit(arrivals, tops)
        total = N + len(subs)
        span = c.vocab_size // (total + 1)
        if span < 1:
            raise ValueError(
                f"AgenticConfig.vocab_size {c.vocab_size} is too small for {total} sessions "
                f"({N} + {len(subs)} sub-agents) plus the system prompt: each needs its own ids")

        S = c.system_prompt_tokens
        plans: list[SessionPlan] = []
        for k, (repo, tool, out, rel, close, think) in enumerate(tops):
            plans.append(_session_plan(k, None, None, S, repo, tool, out, rel + starts[k], close + starts[k],
                                       think, int(arrivals[k])))
        for j, (k, i, st, so, srel, sclose, sth) in enumerate(subs):
            parent = plans[k]
            fork_len = int(parent.prompt_end[i] + parent.output[i])
            plans.append(_session_plan(N + j, k, i + 1, fork_len, 0, st, so,
                                       srel + starts[k], sclose + starts[k], sth, None))

        events = []
        for p in plans:
            events.extend((t, REQUEST, p.session_id, turn) for turn, t in enumerate(p.request_ms.tolist(), 1))
            events.append((p.close_ms, CLOSE, p.session_id, 0))
        events.sort()
        return AgenticPlan(tuple(plans), tuple(events), span)

    def _timeline(self, tool, out, think, sub_duration: dict):
        """Request times relative to the session's start, and the close time."""
        svc = self._service_ms(out).tolist()
        th = think.tolist()
        times, t = [], 0
        for i in range(len(tool)):
            times.append(t)
            nxt = t + svc[i]
            if i in sub_duration:
                nxt += sub_duration[i]  # the sub-agent starts as turn i finishes; the parent waits
            if i < len(tool) - 1:
                t = nxt + th[i]
        return np.array(times, dtype=np.int64), times[-1] + svc[-1]


def _clipped_lognormal(rng: np.random.Generator, bounds: tuple, n: int) -> np.ndarray:
    """Lognormal with median sqrt(lo * hi) and sigma ln(hi / lo) / 4, clipped to [lo, hi] (the
    bounds sit at the median x exp(-+2 sigma): about 2.3% of the draws at each clip)."""
    lo, hi = bounds
    if lo == hi:
        return np.full(n, float(lo))
    return np.clip(rng.lognormal(math.log(math.sqrt(lo * hi)), math.log(hi / lo) / 4, size=n), lo, hi)


def _session_plan(sid, parent, fork_turn, inherited, context, tool, out, request_ms, close_ms, think,
                  arrival) -> SessionPlan:
    # prompt(t) ends after tool(t): base + sum(tool[:t+1]) + sum(out[:t])
    prompt_end = (inherited + context + np.cumsum(tool)
                  + np.concatenate([[0], np.cumsum(out)[:-1]])).astype(np.int64)
    for a in (tool, out, prompt_end, request_ms, think):
        a.flags.writeable = False
    return SessionPlan(sid, parent, fork_turn, inherited, context, tool, out, prompt_end,
                       request_ms, int(close_ms), think, arrival)
