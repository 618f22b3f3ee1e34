"""Agentic multi-session workload: SWE-bench-like agent trajectories (SPEC.md 5).

Many agent sessions run a tool-call loop over one repository each; a few turns fork a
sub-agent. The cache-relevant shape is: one system prompt shared by every session, a long
per-session repository context, prompts that grow by the previous model output plus a tool
output every turn, idle gaps while tools run, and sub-agents whose first prompt is their
parent's whole context.

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

Lengths from published statistics (``lengths: lognormal``)
    By default turns, tool outputs and answers are uniform in their ranges. With
    ``lengths: lognormal`` each is drawn like the think times: lognormal with median
    sqrt(lo * hi) and sigma ln(hi / lo) / 4, clipped to [lo, hi] (so a range is chosen as
    median x exp(-+2 sigma) of a fitted distribution). The realistic SWE-bench-style agent
    (`SWE_AGENT`, docs/figure6.md "Realistic agentic lengths") fits:

    - turns per session [12, 105]: median 36, p95 87 (lognormal sigma 0.54), the turn counts of
      ~15k SWE-agent / OpenHands trajectories on SWE-bench (thoughtworks/agentic-coding-trajectories
      on Hugging Face, dataset card: p50 36, p95 87, max 120 turns);
    - tool output (context growth per step) [40, 2000] tokens: median 283, mean ~450: with the
      answers, a trajectory's deepest prompt at the median turn count lands near that dataset's
      p50 max-ISL of 23,840 tokens; the shape (sigma ~1, a heavy tail) follows TraceLab's
      per-step append lengths of coding agents (Zhu et al., arXiv 2606.30560, tab.
      append_by_prefix: p90 / p50 = 5.6 at 32-64k-token prefixes);
    - repository context [1000, 4000]: SWE-agent / OpenHands send the task, not the repository,
      up front (the agent reads files with tools: that is the growth above);
    - tool-call durations (think times) [0.1, 30] s, median 1.7 s: tool calls "take milliseconds
      to tens of seconds" (Continuum, Li et al., arXiv 2511.02230, sec. 2, on SWE-bench and
      BFCL agents); no published percentiles were found, so this is the stated range;
    - answers [50, 400] tokens and sub-agents (probability 0.1, 1-5 turns) keep the generic
      values: no published statistic was found for them (TraceLab reports 1.2 tool calls per
      step on average, i.e. little fan-out).

Tokens
    Ids are cut into ``num_sessions + num_subagents + 1`` disjoint blocks of
    ``span = vocab_size // (that count)`` ids: block 0 holds the system prompt, block s+1 the
    tokens session s writes (its repo context, tool outputs, outputs). Tokens are drawn
    uniformly from the block with the session's own generator
    (``SeedSequence(seed, spawn_key=(2, s))``; the system prompt uses spawn key (3,)). So two
    sessions share nothing beyond the system prompt, except that a sub-agent starts with a
    copy of its parent's context at the fork. The structure (lengths, turns, forks, think
    times) comes from spawn key (0, k) for top-level session k, so it does not depend on the
    token blocks.

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

Trace
    `write_trace` writes the JSONL format of `scenarios.traces` (compact JSON): requests
    ``{"rid","session_id","timestamp","tokens","output_tokens"}``, events
    ``{"event":"close_session","session_id","timestamp"}``. Each session's serialized
    context is kept as text and extended per turn, so writing costs about a memcpy per line.
"""
from __future__ import annotations

import heapq
import json
import math
import numbers
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .seeding import rng as _rng
from .traces import MAX_PROMPT_TOKENS
from .workload_kinds import ReplayHook, ReplayRequest, SessionClose

MAX_VOCAB_SIZE = 2**62  # token ids stay non-negative int64 (the trace reader's bound)
LENGTHS = ("uniform", "lognormal")  # AgenticConfig.lengths

# SeedSequence spawn keys: one independent stream per purpose.
_STREAM_STRUCTURE, _STREAM_ARRIVALS, _STREAM_TOKENS, _STREAM_SYSTEM = 0, 1, 2, 3
_CLOSE, _REQUEST = 0, 1  # sort rank at equal timestamps


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and not math.isnan(v)


def _check_int(name: str, value, lo: int) -> None:
    if not _is_int(value) or value < lo:
        raise ValueError(f"AgenticConfig.{name} must be an integer >= {lo}, got {value!r}")


def _check_range(cfg, name: str, lo_min, integer: bool, positive: bool = False):
    """A (lo, hi) pair with lo_min <= lo <= hi, stored back as a tuple."""
    v = getattr(cfg, name)
    kind = "integers" if integer else "numbers"
    bound = f"> {lo_min}" if positive else f">= {lo_min}"
    msg = f"AgenticConfig.{name} must be a (lo, hi) pair of {kind} with {bound} lo <= hi, got {v!r}"
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise ValueError(msg)
    lo, hi = v
    ok = _is_int if integer else (lambda x: _is_real(x) and math.isfinite(x))
    if not (ok(lo) and ok(hi)) or lo > hi or lo < lo_min or (positive and lo <= lo_min):
        raise ValueError(msg)
    object.__setattr__(cfg, name, (lo, hi) if integer else (float(lo), float(hi)))


@dataclass(frozen=True, kw_only=True)
class AgenticConfig:
    """Knobs of the agentic workload (module docstring). Ranges are inclusive (lo, hi).

    Every request line of a trace carries its whole prompt (~24k tokens on average here,
    ~5.8 bytes a token), so the size grows with sessions x turns^2. The defaults keep the
    per-turn shape of SWE-bench agents (4-12k-token repository context, 200-2000-token tool
    outputs) and scale the count knobs down so the default trace stays near 50 MB and ~360
    requests: 16 sessions (8 at once), 8-24 turns, sub-agent probability 0.1. (64 sessions x
    8-30 turns at 0.15 would give ~2000 requests and ~290 MB.)"""

    seed: int = 20260626
    num_sessions: int = 16  # top-level agent sessions
    concurrency: int = 8  # top-level sessions active at once
    system_prompt_tokens: int = 2048  # shared by ALL sessions
    repo_context_tokens: tuple = (4000, 12000)  # per session
    turns: tuple = (8, 24)  # tool-call loop length per session
    tool_output_tokens: tuple = (200, 2000)  # per turn (turn 1: the task statement)
    output_tokens: tuple = (50, 400)  # per turn
    think_time_s: tuple = (0.5, 20.0)  # idle gap between turns (clipped lognormal)
    subagent_prob: float = 0.1  # per turn t < T: fork a sub-agent
    subagent_turns: tuple = (1, 5)  # a sub-agent's turns
    arrival_rate: float = 1.0  # session starts per second (Poisson); inf: all at once
    service_base_s: float = 0.25  # nominal time to first token of every request
    service_s_per_output_token: float = 0.02  # nominal decode time per output token
    vocab_size: int = 128_000
    lengths: str = LENGTHS[0]  # how turns, tool outputs and answers are drawn in their ranges

    def __post_init__(self):
        _check_int("seed", self.seed, 0)
        _check_int("num_sessions", self.num_sessions, 1)
        _check_int("concurrency", self.concurrency, 1)
        _check_int("system_prompt_tokens", self.system_prompt_tokens, 0)
        _check_range(self, "repo_context_tokens", 0, True)
        _check_range(self, "turns", 1, True)
        _check_range(self, "tool_output_tokens", 1, True)
        _check_range(self, "output_tokens", 1, True)
        _check_range(self, "think_time_s", 0.0, False, positive=True)
        _check_range(self, "subagent_turns", 1, True)
        p = self.subagent_prob
        if not _is_real(p) or not 0.0 <= p <= 1.0:
            raise ValueError(f"AgenticConfig.subagent_prob must be a probability in [0, 1], got {p!r}")
        rate = self.arrival_rate
        if not _is_real(rate) or rate <= 0:
            raise ValueError(
                f"AgenticConfig.arrival_rate must be a number > 0 (sessions/s; inf starts all at "
                f"once), got {rate!r}")
        for name in ("service_base_s", "service_s_per_output_token"):
            v = getattr(self, name)
            if not _is_real(v) or not math.isfinite(v) or v < 0:
                raise ValueError(f"AgenticConfig.{name} must be a finite number >= 0 (seconds), got {v!r}")
        _check_int("vocab_size", self.vocab_size, 1)
        if self.lengths not in LENGTHS:
            raise ValueError(f"AgenticConfig.lengths must be one of {', '.join(LENGTHS)}, got {self.lengths!r}")
        if self.vocab_size > MAX_VOCAB_SIZE:
            raise ValueError(f"AgenticConfig.vocab_size must be <= 2**62, got {self.vocab_size}")
        if self.vocab_size < self.num_sessions + 1:
            raise ValueError(
                f"AgenticConfig.vocab_size must be >= num_sessions + 1 ({self.num_sessions + 1}): "
                f"every session writes from its own block of ids, got {self.vocab_size}")
        if self.max_prompt_tokens > MAX_PROMPT_TOKENS:
            raise ValueError(
                f"AgenticConfig.turns x (tool_output_tokens + output_tokens) gives prompts of up to "
                f"{self.max_prompt_tokens:,} tokens, over the limit of {MAX_PROMPT_TOKENS:,}")

    @property
    def max_prompt_tokens(self) -> int:
        """Upper bound of any prompt (a sub-agent forked at its parent's last turn but one)."""
        per_turn = self.tool_output_tokens[1] + self.output_tokens[1]
        return (self.system_prompt_tokens + self.repo_context_tokens[1]
                + (self.turns[1] + self.subagent_turns[1]) * per_turn)


# The realistic SWE-bench-style agent (module docstring, "Lengths from published statistics"):
# AgenticConfig overrides; in a scenario file, the same keys under `workload:`.
SWE_AGENT = {"lengths": "lognormal", "turns": (12, 105), "tool_output_tokens": (40, 2000),
             "repo_context_tokens": (1000, 4000), "think_time_s": (0.1, 30.0)}


@dataclass(frozen=True, slots=True, eq=False)
class AgenticRequest:
    """One turn of one session. Arrays are read-only int64 views (compare with numpy)."""

    rid: int  # 0-based position among requests
    session_id: int
    turn: int  # 1-based
    timestamp_ms: int
    prompt: np.ndarray
    output: np.ndarray


@dataclass(frozen=True, slots=True)
class AgenticClose:
    """close_session event: right after the session's last request finishes."""

    session_id: int
    timestamp_ms: int


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
class _Plan:
    sessions: tuple  # SessionPlan by session id
    order: tuple  # (timestamp_ms, kind, session_id, turn) in record order
    span: int  # ids per token block


class _Live:
    """An active session's token buffer and (when writing) its serialized context."""

    __slots__ = ("buf", "text", "done")

    def __init__(self, buf: np.ndarray, text: str | None, done: int):
        self.buf, self.text, self.done = buf, text, done


def _ser(a: np.ndarray) -> str:
    """'1,2,3' (compact JSON list body)."""
    return json.dumps(a.tolist(), separators=(",", ":"))[1:-1]


def _cat(a: str, b: str) -> str:
    return f"{a},{b}" if a and b else a or b


class AgenticWorkload:
    """Iterate an agentic workload as `AgenticRequest` / `AgenticClose` records in timestamp
    order. Iterating again gives identical records; buffers of closed sessions are dropped."""

    def __init__(self, config: AgenticConfig | None = None):
        if config is None:
            config = AgenticConfig()
        if not isinstance(config, AgenticConfig):
            raise TypeError(f"config must be an AgenticConfig, got {type(config).__name__}")
        self.config = config
        self._plan_cache: _Plan | None = None

    # ------------------------------------------------------------------ planning (no tokens)
    def sessions(self) -> tuple:
        """Every session's `SessionPlan`, indexed by session id."""
        return self._plan().sessions

    def _plan(self) -> _Plan:
        if self._plan_cache is None:
            self._plan_cache = self._build_plan()
        return self._plan_cache

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

    def _build_plan(self) -> _Plan:
        c = self.config
        N = c.num_sessions
        # arrivals (ms)
        if math.isinf(c.arrival_rate) or N == 1:
            arrivals = np.zeros(N, dtype=np.int64)
        else:
            gaps = _rng(c.seed, _STREAM_ARRIVALS).exponential(1000.0 / c.arrival_rate, size=N - 1)
            arrivals = np.rint(np.concatenate([[0.0], np.cumsum(gaps)])).astype(np.int64)

        # structure of each top-level session and its sub-agents, times relative to its start
        tops, subs = [], []  # subs: (parent k, fork turn, tool, out, rel_times, rel_close)
        for k in range(N):
            rng = _rng(c.seed, _STREAM_STRUCTURE, k)
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

        # admission: FIFO, at most `concurrency` top-level sessions between start and close
        free = [0] * c.concurrency
        starts = []
        for k in range(N):
            s = max(int(arrivals[k]), heapq.heappop(free))
            starts.append(s)
            heapq.heappush(free, s + tops[k][4])

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
            events.extend((t, _REQUEST, p.session_id, turn) for turn, t in enumerate(p.request_ms.tolist(), 1))
            events.append((p.close_ms, _CLOSE, p.session_id, 0))
        events.sort()
        return _Plan(tuple(plans), tuple(events), span)

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

    # ------------------------------------------------------------------ records
    def __iter__(self) -> Iterator[AgenticRequest | AgenticClose]:
        for rec, _, _ in self._records(text=False):
            yield rec

    def _records(self, text: bool):
        """(record, prompt text, output text); the texts only when `text`."""
        c = self.config
        plan = self._plan()
        span = plan.span
        sys_tokens = _rng(c.seed, _STREAM_SYSTEM).integers(0, span, size=c.system_prompt_tokens, dtype=np.int64)
        sys_text = _ser(sys_tokens) if text else None
        live: dict[int, _Live] = {}
        rid = 0
        for ts, kind, sid, turn in plan.order:
            if kind == _CLOSE:
                del live[sid]
                yield AgenticClose(sid, ts), None, None
                continue
            sp = plan.sessions[sid]
            st = live.get(sid)
            if st is None:
                st = live[sid] = self._open(sp, live, sys_tokens, sys_text, span, text)
            i = turn - 1
            end = int(sp.prompt_end[i])
            out_end = end + int(sp.output[i])
            ptext = otext = None
            if text:
                st.text = _cat(st.text, _ser(st.buf[st.done : end]))
                st.done = end
                ptext, otext = st.text, _ser(st.buf[end:out_end])
            yield AgenticRequest(rid, sid, turn, ts, st.buf[:end], st.buf[end:out_end]), ptext, otext
            rid += 1

    def session_buffer(self, sp: SessionPlan, parent_buf: np.ndarray | None = None) -> np.ndarray:
        """All of session `sp`'s tokens (read-only int64): turn t's prompt is
        ``buf[:sp.prompt_end[t-1]]`` and its output the next ``sp.output[t-1]`` tokens. A
        sub-agent needs its parent's buffer. The same tokens `__iter__` yields."""
        c = self.config
        span = self._plan().span
        if sp.parent is None:
            sys_tokens = _rng(c.seed, _STREAM_SYSTEM).integers(0, span, size=c.system_prompt_tokens, dtype=np.int64)
            live = {}
        else:
            if parent_buf is None:
                raise ValueError(f"session {sp.session_id} is a sub-agent of {sp.parent}: give its parent's buffer")
            sys_tokens, live = None, {sp.parent: _Live(parent_buf, None, 0)}
        return self._open(sp, live, sys_tokens, None, span, False).buf

    def _open(self, sp: SessionPlan, live, sys_tokens, sys_text, span, text) -> _Live:
        c = self.config
        lo = (sp.session_id + 1) * span
        own = _rng(c.seed, _STREAM_TOKENS, sp.session_id).integers(lo, lo + span, size=sp.own_tokens, dtype=np.int64)
        if sp.parent is None:
            buf, txt = np.concatenate([sys_tokens, own]), sys_text
        else:
            par = live[sp.parent]  # the parent waits for the sub-agent, so it is live
            buf = np.concatenate([par.buf[: sp.inherited], own])
            txt = _cat(par.text, _ser(par.buf[par.done : sp.inherited])) if text else None
        buf.flags.writeable = False
        return _Live(buf, txt, sp.inherited)

    # ------------------------------------------------------------------ outputs
    def write_trace(self, path) -> int:
        """Write the JSONL trace (compact JSON, one record a line); returns the bytes written."""
        n = 0
        with open(os.fspath(path), "w", encoding="ascii", newline="\n") as f:
            for rec, ptext, otext in self._records(text=True):
                if isinstance(rec, AgenticClose):
                    line = (f'{{"event":"close_session","session_id":{rec.session_id},'
                            f'"timestamp":{rec.timestamp_ms}}}\n')
                else:
                    line = (f'{{"rid":{rec.rid},"session_id":{rec.session_id},"timestamp":{rec.timestamp_ms},'
                            f'"tokens":[{ptext}],"output_tokens":[{otext}]}}\n')
                f.write(line)
                n += len(line)
        return n

    def summary(self) -> dict:
        """Counts from the plan (no tokens drawn). ``unique_prompt_tokens`` is the size of the
        token trie of all prompts (the system prompt once, each session's own prompt tokens);
        ``reusable_tokens_upper_bound`` = total - unique is the hit count of an infinite cache
        with page size 1."""
        c = self.config
        plan = self._plan()
        top = [p for p in plan.sessions if not p.is_subagent]
        sub = [p for p in plan.sessions if p.is_subagent]
        total = sum(int(p.prompt_end.sum()) for p in plan.sessions)
        unique = c.system_prompt_tokens + sum(int(p.prompt_end[-1]) - p.inherited for p in plan.sessions)
        requests = sum(p.turns for p in plan.sessions)
        return {
            "sessions": len(top),
            "sub_agents": len(sub),
            "requests": requests,
            "close_events": len(plan.sessions),
            "total_prompt_tokens": total,
            "unique_prompt_tokens": unique,
            "reusable_tokens_upper_bound": total - unique,
            "output_tokens": sum(int(p.output.sum()) for p in plan.sessions),
            "max_prompt_tokens": max(int(p.prompt_end[-1]) for p in plan.sessions),
            "mean_prompt_tokens": total / requests,
            "duration_s": plan.order[-1][0] / 1000.0,
        }


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


def _replay_items(wl: AgenticWorkload, page_size: int, keyed: bool):
    """`radixsim replay --workload agentic`: turns as requests, closes as session closes."""
    for r in wl:
        if isinstance(r, AgenticClose):
            yield SessionClose(r.session_id)
        else:
            yield ReplayRequest(r.rid, r.session_id, None, r.prompt, r.output)


REPLAY = ReplayHook(AgenticConfig, AgenticWorkload, _replay_items)  # the kind's replay hook
