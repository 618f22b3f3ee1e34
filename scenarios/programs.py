"""LM programs: DAGs of LLM calls with the KV-sharing patterns of SGLang's paper (seed 004).

A program is a `networkx.DiGraph` whose nodes are calls, numbered 0, 1, ... in creation order,
which is a topological order (every edge goes from a lower to a higher id). A node holds
``kind`` (question, sample, turn, thought, score, step, subagent, join, commit), ``new_tokens``
(its own new text), ``output_length`` (tokens it generates: >= 1, 0 for a commit),
``session`` (local: 0 for the program, k >= 1 for sub-agent k), ``parents`` (its data parents,
in prompt order) and ``depth`` (longest path from a root over all edges). An edge ``u -> v`` has ``data=True`` when u's
tokens are part of v's prompt, ``data=False`` for an ordering-only (control) dependency:
tree-of-thought expands a level only after every thought of the previous level is scored.

Prompt of a call (fixed order)
    full(c) = prompt(c) + output(c)
    root:                     prompt = prefix + new(c)     (prefix: the program's shared text)
    parents (p1, p2, .., pk): prompt = full(p1) + output(p2) + .. + output(pk) + new(c)
    So every call's prompt starts with its first parent's full sequence (or the prefix); a
    join (k > 1) appends only the other parents' outputs (what they return), in `parents` order.
    ``commit_prefix=True`` models SGLang's frontend, which before a fork sends the shared text
    alone (``max_new_tokens=0``) so the forks find it cached: call 0 is then a ``commit`` call
    (new text = the prefix, no output), the program has no prefix, and the former roots are
    its children (same prompts and tokens). It applies to few-shot, self-consistency and
    tree-of-thought (the programs with a shared prefix).

Tokens
    Instance i of a workload owns the id block [i * span, (i + 1) * span), span =
    vocab_size // num_instances, and draws uniformly from it with its own generator
    (``SeedSequence(seed, spawn_key=(0, i))``): the prefix first, then, for each call in id
    order, its new text and its output (outputs are fixed up front; they stand for generated
    text, so children's prompts are known). Instances therefore share no token, and inside an
    instance text is shared only by the rule above (two siblings could also share their first
    token by chance, ~1/span; the default span of 2**40 makes that negligible). Structure draws
    (tree-of-thought pruning) use ``SeedSequence(seed, spawn_key=(1, i))``.

Memory
    A call continues its first parent's buffer ("lane") when it is that parent's heir: the
    lowest-id child of the parent's own session among the children whose first parent it is
    (else the lowest-id such child). Other children copy the parent's full sequence into a new
    lane. Prompts, outputs, sequences (prompt + output[:-1]) and keys are read-only views.

Page keys
    `sequence_keys(c, P)` = `cache_core.keys.page_keys` of sequence(c). Every sequence starts
    with its first parent's full sequence (or the prefix), so its keys extend the parent's
    (or the prefix's) `KeyState`: only the parent's partial tail page (< P tokens) and the new
    tokens are hashed, and there is no case where a whole prompt is re-hashed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cache_core import CacheConfig, RadixCache, ReplayStepper, TokenSeq
from cache_core.keys import ROOT_STATE, TOKEN_DTYPE, page_keys

from .seeding import rng as _rng
from .program_dags import (MAX_CALLS, MAX_VOCAB_SIZE, STREAM_STRUCTURE, STREAM_TOKENS,  # noqa: F401
                           AgentConfig, FewShotConfig, MultiTurnChatConfig, ProgramConfig, SelfConsistencyConfig,
                           TreeOfThoughtConfig, agent_dag, chat_dag, few_shot_dag, self_consistency_dag,
                           tot_dag)

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True, slots=True, eq=False)
class Call:
    """One call of a program instance, as a client sends it (arrays are read-only views)."""

    program: "Program"
    node: int
    kind: str
    depth: int  # 0 for a root; the request's round is depth + 1
    session_id: int  # global: instance * sessions_per_instance + local session
    prompt: np.ndarray
    output: np.ndarray
    sequence: np.ndarray  # prompt + output[:-1]

    def sequence_keys(self, page_size: int) -> np.ndarray:
        """Page keys of `sequence` (cache_core.keys.page_keys), built incrementally."""
        return self.program.sequence_keys(self.node, page_size)


class Program:
    """One instance of an LM program: the DAG, a topological order and, per call, its prompt,
    output, sequence, session and page keys (tokens are drawn on first use)."""

    def __init__(self, name: str, config: ProgramConfig, instance: int, graph: nx.DiGraph):
        if not 0 <= instance < config.num_instances:
            raise ValueError(f"instance {instance} out of range 0..{config.num_instances - 1}")
        self.name, self.config, self.instance, self.graph = name, config, instance, graph
        self.prefix_len = graph.graph["prefix"]
        import networkx as nx  # here: `radixsim --help` lists the programs without it

        self.order = tuple(nx.lexicographical_topological_sort(graph))
        self.sessions_per_instance = graph.graph["sessions"]
        self._plan()
        self._bufs = None
        self._keys: dict = {}

    def __len__(self) -> int:
        return len(self.order)

    def _plan(self) -> None:
        g, nodes = self.graph, self.graph.nodes
        self.plen, self.full, self.slen, heir = {}, {}, {}, {}
        for c in self.order:
            a = nodes[c]
            a["depth"] = max((nodes[p]["depth"] + 1 for p in g.predecessors(c)), default=0)
            ps = a["parents"]
            head = self.prefix_len if not ps else self.full[ps[0]] + sum(nodes[p]["output_length"] for p in ps[1:])
            self.plen[c] = head + a["new_tokens"]
            self.full[c] = self.plen[c] + a["output_length"]
            self.slen[c] = self.full[c] - 1 if a["output_length"] else self.full[c]
            if ps:
                p, cur = ps[0], heir.get(ps[0])
                own = nodes[p]["session"]
                if cur is None or (a["session"] == own and nodes[cur]["session"] != own):
                    heir[p] = c
        self.lane, self.lane_len = {}, []
        for c in self.order:
            ps = nodes[c]["parents"]
            if ps and heir[ps[0]] == c:
                self.lane[c] = self.lane[ps[0]]
            else:
                self.lane[c] = len(self.lane_len)
                self.lane_len.append(0)
            self.lane_len[self.lane[c]] = self.full[c]

    def _tokens(self) -> list:
        if self._bufs is not None:
            return self._bufs
        cfg, nodes = self.config, self.graph.nodes
        span = cfg.vocab_size // cfg.num_instances
        lo, hi = self.instance * span, (self.instance + 1) * span
        rng = _rng(cfg.seed, STREAM_TOKENS, self.instance)
        prefix = rng.integers(lo, hi, size=self.prefix_len, dtype=np.int64)
        bufs = [np.empty(n, dtype=TOKEN_DTYPE) for n in self.lane_len]
        for c in self.order:
            b, ps = bufs[self.lane[c]], nodes[c]["parents"]
            if not ps:
                b[: self.prefix_len] = prefix
                at = self.prefix_len
            else:
                at = self.full[ps[0]]
                if self.lane[ps[0]] != self.lane[c]:
                    b[:at] = bufs[self.lane[ps[0]]][:at]
                for q in ps[1:]:
                    o = nodes[q]["output_length"]
                    b[at : at + o] = bufs[self.lane[q]][self.plen[q] : self.full[q]]
                    at += o
            n = self.full[c] - at
            b[at : at + n] = rng.integers(lo, hi, size=n, dtype=np.int64)
        for b in bufs:
            b.flags.writeable = False
        self._prefix, self._bufs = prefix, bufs
        return bufs

    def prompt(self, c: int) -> np.ndarray:
        """The prompt of call `c` (int64, read-only view)."""
        return self._tokens()[self.lane[c]][: self.plen[c]]

    def output(self, c: int) -> np.ndarray:
        """The output tokens of call `c` (fixed up front)."""
        return self._tokens()[self.lane[c]][self.plen[c] : self.full[c]]

    def sequence(self, c: int) -> np.ndarray:
        """prompt + output[:-1]: what a server caches for call `c`."""
        return self._tokens()[self.lane[c]][: self.slen[c]]

    def session(self, c: int) -> int:
        """Global session id: instance * sessions_per_instance + the call's local session."""
        return self.instance * self.sessions_per_instance + self.graph.nodes[c]["session"]

    def depth(self, c: int) -> int:
        """Longest dependency path from a root to `c` (0 for a root)."""
        return self.graph.nodes[c]["depth"]

    def call(self, c: int) -> Call:
        """Call `c` as one record."""
        return Call(self, c, self.graph.nodes[c]["kind"], self.depth(c), self.session(c), self.prompt(c),
                    self.output(c), self.sequence(c))

    def calls(self):
        """Every call in topological order."""
        return (self.call(c) for c in self.order)

    def sequence_keys(self, c: int, page_size: int) -> np.ndarray:
        """Keys of every full page of sequence(c) (module docstring: built incrementally)."""
        kb, states = self._page_keys(page_size)
        return kb[self.lane[c]][: states[c].length // page_size]

    def _page_keys(self, P: int):
        got = self._keys.get(P)
        if got is not None:
            return got
        bufs, nodes = self._tokens(), self.graph.nodes
        pk, pst = page_keys(self._prefix, P, ROOT_STATE)
        kb = [np.empty(n // P, dtype=np.uint64) for n in self.lane_len]
        states = {}
        for c in self.order:
            ps, kbuf = nodes[c]["parents"], kb[self.lane[c]]
            st0, base = (pst, pk) if not ps else (states[ps[0]], kb[self.lane[ps[0]]])
            k0 = st0.length // P
            if base is not kbuf:
                kbuf[:k0] = base[:k0]
            new, states[c] = page_keys(bufs[self.lane[c]][st0.length : self.slen[c]], P, st0)
            kbuf[k0 : k0 + len(new)] = new
        for k in kb:
            k.flags.writeable = False
        self._keys[P] = (kb, states)
        return self._keys[P]

    def ideal_cached(self, page_size: int = 1) -> list:
        """Cached tokens of each call (topological order) on an unbounded radix cache,
        replayed one call at a time (SGLang's rules, cache_core.ReplayStepper)."""
        rs = ReplayStepper(RadixCache(CacheConfig(page_size=page_size)))
        return [rs.step(self.prompt(c), self.output(c), seq=TokenSeq(self.sequence(c))).cached_tokens
                for c in self.order]

    def summary(self, page_size: int = 1) -> dict:
        """Counts and the ideal (unbounded, serial) hit rate at `page_size`."""
        return _summary(self.name, self.config, [self], page_size)


def _summary(name, config, programs, page_size) -> dict:
    kinds: dict = {}
    n = calls = sessions = prompt = output = cached = depth = 0
    for p in programs:  # one instance at a time (a large workload is never held whole)
        n += 1
        calls += len(p)
        sessions += p.sessions_per_instance
        depth = max(depth, 1 + max(p.depth(c) for c in p.order))
        for c in p.order:
            k = p.graph.nodes[c]["kind"]
            kinds[k] = kinds.get(k, 0) + 1
        prompt += sum(p.plen.values())
        output += sum(p.full[c] - p.plen[c] for c in p.order)
        cached += sum(p.ideal_cached(page_size))
    return {"program": name, "instances": n, "calls": calls, "calls_by_kind": kinds, "depth": depth,
            "sessions": sessions, "prompt_tokens": prompt, "output_tokens": output, "page_size": page_size,
            "ideal_cached_tokens": cached, "ideal_hit_rate": cached / prompt if prompt else 0.0}


def _builder(name, dag):
    def build(config: ProgramConfig, instance: int = 0) -> Program:
        if not isinstance(config, PROGRAMS[name][0]):
            raise TypeError(f"{name} needs a {PROGRAMS[name][0].__name__}, got {type(config).__name__}")
        return Program(name, config, instance, dag(config, _rng(config.seed, STREAM_STRUCTURE, instance)))

    build.__name__ = name
    build.__doc__ = f"Instance `instance` of the {name} program (see its config class)."
    return build


few_shot = _builder("few_shot", few_shot_dag)
self_consistency = _builder("self_consistency", self_consistency_dag)
multi_turn_chat = _builder("multi_turn_chat", chat_dag)
tree_of_thought = _builder("tree_of_thought", tot_dag)
agent_with_subagents = _builder("agent_with_subagents", agent_dag)

PROGRAMS = {
    "few_shot": (FewShotConfig, few_shot),
    "self_consistency": (SelfConsistencyConfig, self_consistency),
    "multi_turn_chat": (MultiTurnChatConfig, multi_turn_chat),
    "tree_of_thought": (TreeOfThoughtConfig, tree_of_thought),
    "agent_with_subagents": (AgentConfig, agent_with_subagents),
}


def program_config(name: str, **knobs) -> ProgramConfig:
    """The config of program `name` with `knobs` set; ValueError for an unknown name or knob."""
    if name not in PROGRAMS:
        raise ValueError(f"unknown program {name!r}; expected one of {', '.join(PROGRAMS)}")
    cls = PROGRAMS[name][0]
    fields = [f.name for f in dataclasses.fields(cls)]
    for k in knobs:
        if k not in fields:
            raise ValueError(f"unknown {name} knob {k!r}; expected one of {', '.join(fields)}")
    return cls(**knobs)


class ProgramWorkload:
    """``config.num_instances`` instances of one program (different spawn keys: instances
    share nothing, sharing inside an instance follows the program). Instances are built on
    demand and not kept."""

    def __init__(self, config: ProgramConfig):
        names = [n for n, (cls, _) in PROGRAMS.items() if type(config) is cls]
        if not names:
            raise TypeError(f"config must be one of the PROGRAMS configs, got {type(config).__name__}")
        self.name, self.config = names[0], config
        self._build = PROGRAMS[self.name][1]

    def instance(self, i: int) -> Program:
        """Instance `i` (fresh; tokens drawn on first use)."""
        return self._build(self.config, i)

    def instances(self):
        """Every instance in order."""
        return (self.instance(i) for i in range(self.config.num_instances))

    def total_calls(self) -> int:
        """Calls over all instances (every instance has config.num_calls)."""
        return self.config.num_instances * self.config.num_calls

    def summary(self, page_size: int = 1) -> dict:
        """Counts over all instances and the ideal hit rate (each instance replayed on its own
        unbounded cache: instances share nothing, so this equals one replay of them all)."""
        return _summary(self.name, self.config, self.instances(), page_size)


__all__ = ["ProgramConfig", "FewShotConfig", "SelfConsistencyConfig", "MultiTurnChatConfig", "TreeOfThoughtConfig",
           "AgentConfig", "Program", "Call", "ProgramWorkload", "PROGRAMS", "program_config", "few_shot",
           "self_consistency", "multi_turn_chat", "tree_of_thought", "agent_with_subagents"]
