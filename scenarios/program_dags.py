"""LM-program configs and their DAG structure (calls, parents, sessions; no tokens). The
tokens, page keys and workloads are in `scenarios/programs.py`, whose docstring describes the
programs."""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field

import numpy as np

from .traces import MAX_PROMPT_TOKENS

MAX_VOCAB_SIZE = 2**62
MAX_CALLS = 1_000_000  # calls of one instance
STREAM_TOKENS, STREAM_STRUCTURE = 0, 1  # sim/program_clients.py uses 2


def _knob(default: int, lo: int = 1):
    return field(default=default, metadata={"lo": lo})


@dataclass(frozen=True, kw_only=True)
class ProgramConfig:
    """Knobs common to every program: ``seed``, ``num_instances`` (copies of the program,
    sharing nothing) and ``vocab_size`` (ids lie in [0, vocab_size)). Integer knobs declare
    their lower bound in the field metadata; a bad value raises ValueError naming it."""

    seed: int = _knob(0, 0)
    num_instances: int = _knob(1)
    vocab_size: int = _knob(2**40)
    commit_prefix: bool = False  # send a shared prefix alone first (module docstring)

    def __post_init__(self):
        name = type(self).__name__
        for f in dataclasses.fields(self):
            v, lo = getattr(self, f.name), f.metadata.get("lo")
            if lo is None:
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
                raise ValueError(f"{name}.{f.name} must be an integer >= {lo}, got {v!r}")
        if not isinstance(self.commit_prefix, bool):
            raise ValueError(f"{name}.commit_prefix must be true or false, got {self.commit_prefix!r}")
        if not self.num_instances <= self.vocab_size <= MAX_VOCAB_SIZE:
            raise ValueError(f"{name}.vocab_size must be between num_instances ({self.num_instances}) and "
                             f"2**62 (each instance draws from its own block of ids), got {self.vocab_size}")
        self._check()
        if self.num_calls > MAX_CALLS:
            raise ValueError(f"{name}: one instance would make {self.num_calls:,} calls, over the limit of "
                             f"{MAX_CALLS:,}; make the count knobs smaller")
        if self.max_prompt_tokens > MAX_PROMPT_TOKENS:
            raise ValueError(f"{name}: the longest prompt would have {self.max_prompt_tokens:,} tokens, over "
                             f"the limit of {MAX_PROMPT_TOKENS:,}; make the length knobs smaller")

    def _check(self) -> None:
        """Cross-knob checks of a subclass (raise ValueError naming the knob)."""

    @property
    def max_prompt_tokens(self) -> int:
        """Length of the longest prompt (analytic)."""
        raise NotImplementedError

    @property
    def num_calls(self) -> int:
        """Calls of one instance (analytic)."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class FewShotConfig(ProgramConfig):
    """One examples prefix (num_examples x example_length) shared by num_questions root calls."""

    num_examples: int = _knob(8)
    example_length: int = _knob(256)
    num_questions: int = _knob(16)
    question_length: int = _knob(64)
    output_length: int = _knob(32)

    max_prompt_tokens = property(lambda self: self.num_examples * self.example_length + self.question_length)
    num_calls = property(lambda self: self.num_questions + self.commit_prefix)


@dataclass(frozen=True, kw_only=True)
class SelfConsistencyConfig(ProgramConfig):
    """num_samples root calls with the same prompt (the question as prefix, no new text)."""

    question_length: int = _knob(1024)
    num_samples: int = _knob(8)
    output_length: int = _knob(256)

    max_prompt_tokens = property(lambda self: self.question_length)
    num_calls = property(lambda self: self.num_samples + self.commit_prefix)


@dataclass(frozen=True, kw_only=True)
class MultiTurnChatConfig(ProgramConfig):
    """A chain of num_turns calls: turn t's prompt = full(turn t-1) + turn_length new tokens."""

    num_turns: int = _knob(8)
    turn_length: int = _knob(256)
    output_length: int = _knob(128)

    max_prompt_tokens = property(lambda self: self.num_turns * (self.turn_length + self.output_length)
                                 - self.output_length)
    num_calls = property(lambda self: self.num_turns)


@dataclass(frozen=True, kw_only=True)
class TreeOfThoughtConfig(ProgramConfig):
    """Search of ``depth`` levels over a problem prefix of problem_length tokens: every frontier
    state branches into ``branching`` thoughts, each thought is scored, the ``keep`` best of a
    level (seeded) form the next frontier."""

    depth: int = _knob(3)
    branching: int = _knob(3)
    keep: int = _knob(2)
    problem_length: int = _knob(256)
    thought_length: int = _knob(64)
    output_length: int = _knob(128)
    score_length: int = _knob(32)

    def _check(self):
        if self.keep > self.branching:
            raise ValueError(f"TreeOfThoughtConfig.keep must be <= branching ({self.branching}), got {self.keep}")
        if self.keep * self.branching > 1000:  # ordering edges between two levels: (keep x branching)**2
            raise ValueError(f"TreeOfThoughtConfig.keep x branching must be <= 1000, got {self.keep * self.branching}")

    max_prompt_tokens = property(lambda self: self.problem_length + self.score_length
                                 + self.depth * (self.thought_length + self.output_length))
    num_calls = property(lambda self: 2 * self.branching * (1 + (self.depth - 1) * self.keep) + self.commit_prefix)


@dataclass(frozen=True, kw_only=True)
class AgentConfig(ProgramConfig):
    """A main chain of num_steps steps; after every fork_every-th step (not the last) it forks
    num_subagents sub-agents of subagent_steps calls each, and its next step joins them."""

    num_steps: int = _knob(8, 2)
    num_subagents: int = _knob(2)
    fork_every: int = _knob(3)
    step_length: int = _knob(256)
    subagent_steps: int = _knob(3)
    output_length: int = _knob(64)

    def _check(self):
        if self.fork_every > self.num_steps - 1:
            raise ValueError(f"AgentConfig.fork_every must be <= num_steps - 1 ({self.num_steps - 1}) so that "
                             f"the agent forks at least once, got {self.fork_every}")

    @property
    def max_prompt_tokens(self) -> int:
        L, O, M, S = self.step_length, self.output_length, self.num_subagents, self.subagent_steps
        full, longest = L + O, L
        for k in range(1, self.num_steps):
            if k % self.fork_every == 0:
                longest = max(longest, full + S * L + (S - 1) * O)
                full += M * O
            longest = max(longest, full + L)
            full += L + O
        return longest

    num_calls = property(lambda self: self.num_steps + (self.num_steps - 1) // self.fork_every
                         * self.num_subagents * self.subagent_steps)


# ------------------------------------------------------------------------------------------
# DAG builders (structure only, no tokens)
# ------------------------------------------------------------------------------------------
class _Dag:
    def __init__(self, cfg: ProgramConfig, prefix_len: int = 0):
        import networkx as nx  # here: a program is built only by the commands that run one

        self.g = nx.DiGraph(sessions=1, prefix=prefix_len)
        self.commit = None
        if cfg.commit_prefix and prefix_len:  # the prefix goes first, alone; the roots become its children
            self.g.graph["prefix"] = 0
            self.commit = self.call("commit", prefix_len, 0)

    def call(self, kind, new, out, parents=(), session=0, after=(), **attrs) -> int:
        n = self.g.number_of_nodes()
        if not parents and self.commit is not None:
            parents = (self.commit,)
        self.g.add_node(n, kind=kind, new_tokens=new, output_length=out, session=session,
                        parents=tuple(parents), **attrs)
        for p in parents:
            self.g.add_edge(p, n, data=True)
        for p in after:
            if not self.g.has_edge(p, n):
                self.g.add_edge(p, n, data=False)
        return n


def few_shot_dag(c: FewShotConfig, rng):
    d = _Dag(c, c.num_examples * c.example_length)
    for _ in range(c.num_questions):
        d.call("question", c.question_length, c.output_length)
    return d.g


def self_consistency_dag(c: SelfConsistencyConfig, rng):
    d = _Dag(c, c.question_length)
    for _ in range(c.num_samples):
        d.call("sample", 0, c.output_length)
    return d.g


def chat_dag(c: MultiTurnChatConfig, rng):
    d = _Dag(c)
    prev = ()
    for _ in range(c.num_turns):
        prev = (d.call("turn", c.turn_length, c.output_length, parents=prev),)
    return d.g


def tot_dag(c: TreeOfThoughtConfig, rng):
    d = _Dag(c, c.problem_length)
    frontier, scores = [None], []
    for level in range(1, c.depth + 1):
        thoughts = [d.call("thought", c.thought_length, c.output_length, parents=() if f is None else (f,),
                           after=scores, level=level, kept=False)
                    for f in frontier for _ in range(c.branching)]
        scores = [d.call("score", c.score_length, c.output_length, parents=(t,), level=level) for t in thoughts]
        if level < c.depth:
            value = rng.random(len(thoughts))  # the (seeded) scores the score calls return
            best = sorted(np.argsort(-value, kind="stable")[: c.keep].tolist())
            frontier = [thoughts[i] for i in best]
            for t in frontier:
                d.g.nodes[t]["kept"] = True
    return d.g


def agent_dag(c: AgentConfig, rng):
    d = _Dag(c)
    prev = d.call("step", c.step_length, c.output_length)
    for k in range(1, c.num_steps):
        finals = []
        if k % c.fork_every == 0:
            for _ in range(c.num_subagents):
                s = d.g.graph["sessions"]
                d.g.graph["sessions"] += 1
                last = prev
                for _ in range(c.subagent_steps):
                    last = d.call("subagent", c.step_length, c.output_length, parents=(last,), session=s)
                finals.append(last)
        prev = d.call("join" if finals else "step", c.step_length, c.output_length, parents=(prev, *finals))
    return d.g


# ------------------------------------------------------------------------------------------
# one program instance
# ------------------------------------------------------------------------------------------
