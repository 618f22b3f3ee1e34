"""The agentic workload's knobs (`AgenticConfig`, checked on construction) and the realistic
SWE-bench-style agent (`SWE_AGENT`); the workload itself is scenarios/agentic.py.

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
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from .traces import MAX_PROMPT_TOKENS

MAX_VOCAB_SIZE = 2**62  # token ids stay non-negative int64 (the trace reader's bound)
LENGTHS = ("uniform", "lognormal")  # AgenticConfig.lengths


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
    """Knobs of the agentic workload (scenarios/agentic.py). Ranges are inclusive (lo, hi).

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
