"""Agentic multi-session workload: SWE-bench-like agent trajectories (SPEC.md 5).

Many agent sessions run a tool-call loop over one repository each; a few turns fork a
sub-agent. The cache-relevant shape is: one system prompt shared by every session, a long
per-session repository context, prompts that grow by the previous model output plus a tool
output every turn, idle gaps while tools run, and sub-agents whose first prompt is their
parent's whole context.

Where the parts live: the knobs and the realistic agent (`AgenticConfig`, `SWE_AGENT`, lengths
from published statistics) in scenarios/agentic_config.py; the sessions, sub-agents, session ids
and timeline (`SessionPlan`, `Planner`) in scenarios/agentic_plan.py; the tokens and records
here.

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

Trace
    `write_trace` writes the JSONL format of `scenarios.traces` (compact JSON): requests
    ``{"rid","session_id","timestamp","tokens","output_tokens"}``, events
    ``{"event":"close_session","session_id","timestamp"}``. Each session's serialized
    context is kept as text and extended per turn, so writing costs about a memcpy per line.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .agentic_config import LENGTHS, SWE_AGENT, AgenticConfig  # noqa: F401 (LENGTHS, SWE_AGENT re-exported)
from .agentic_plan import CLOSE, STREAM_SYSTEM, STREAM_TOKENS, AgenticPlan, Planner, SessionPlan
from .seeding import rng as _rng
from .workload_kinds import ReplayHook, ReplayRequest, SessionClose


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
        self._plan_cache: AgenticPlan | None = None

    # ------------------------------------------------------------------ planning (no tokens)
    def sessions(self) -> tuple:
        """Every session's `SessionPlan`, indexed by session id."""
        return self._plan().sessions

    def _plan(self) -> AgenticPlan:
        if self._plan_cache is None:
            self._plan_cache = Planner(self.config).build()
        return self._plan_cache

    # ------------------------------------------------------------------ records
    def __iter__(self) -> Iterator[AgenticRequest | AgenticClose]:
        for rec, _, _ in self._records(text=False):
            yield rec

    def _records(self, text: bool):
        """(record, prompt text, output text); the texts only when `text`."""
        c = self.config
        plan = self._plan()
        span = plan.span
        sys_tokens = _rng(c.seed, STREAM_SYSTEM).integers(0, span, size=c.system_prompt_tokens, dtype=np.int64)
        sys_text = _ser(sys_tokens) if text else None
        live: dict[int, _Live] = {}
        rid = 0
        for ts, kind, sid, turn in plan.order:
            if kind == CLOSE:
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
            sys_tokens = _rng(c.seed, STREAM_SYSTEM).integers(0, span, size=c.system_prompt_tokens, dtype=np.int64)
            live = {}
        else:
            if parent_buf is None:
                raise ValueError(f"session {sp.session_id} is a sub-agent of {sp.parent}: give its parent's buffer")
            sys_tokens, live = None, {sp.parent: _Live(parent_buf, None, 0)}
        return self._open(sp, live, sys_tokens, None, span, False).buf

    def _open(self, sp: SessionPlan, live, sys_tokens, sys_text, span, text) -> _Live:
        c = self.config
        lo = (sp.session_id + 1) * span
        own = _rng(c.seed, STREAM_TOKENS, sp.session_id).integers(lo, lo + span, size=sp.own_tokens, dtype=np.int64)
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


def _replay_items(wl: AgenticWorkload, page_size: int, keyed: bool):
    """`radixsim replay --workload agentic`: turns as requests, closes as session closes."""
    for r in wl:
        if isinstance(r, AgenticClose):
            yield SessionClose(r.session_id)
        else:
            yield ReplayRequest(r.rid, r.session_id, None, r.prompt, r.output)


REPLAY = ReplayHook(AgenticConfig, AgenticWorkload, _replay_items)  # the kind's replay hook
