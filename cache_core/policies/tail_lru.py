"""`tail-lru`: Tail-Optimized LRU (Zhang, Li, Moallemi and Peng, "Tail-Optimized Caching for
LLM Inference", arXiv 2510.15152, NeurIPS 2025; Algorithm 1, "Tail-Optimized LRU Policy"),
adapted to radix leaves.

The paper's model: conversation i has history length L_i of which X_i tokens are cached; its
next turn adds about Q_i new tokens, so its time to first token grows with the uncached
L_i + Q_i - X_i, and it is a tail turn (an SLO violation) when that exceeds a threshold xi.
Cached tokens of i beyond (L_i + Q_i - xi)^+ do not change whether the next turn lands in the
tail, so T-LRU evicts those first (a short conversation's whole cache, a long one's tail beyond
its need), least recently used conversation first, and falls back to LRU only when no such
token is left ("a two-line modification of LRU"). Parameters: xi and the estimate Q_i.

Adaptation: a conversation is a root-to-leaf path and a leaf goes whole. A leaf covering
tokens [start, end) of a path whose known length is L is "tail-safe" when evicting it leaves
L + Q - start <= xi uncached; key = (not tail-safe, tick): tail-safe leaves first, LRU within
each class. L is the node's end, or the deepest end of the descendants evicted under it since
its last access (an evicted tail is still the conversation's history: its parent, now a leaf,
is ranked with the whole uncached length). Q, one estimate for all conversations: the running
mean of the tokens of the leaves ranked for the first time (each is one request's new prompt
and output suffix). xi = 4,096 tokens by default: about the 200 ms TTFT SLO the paper uses,
at ~20k tokens/s of prefill (an 8B model on one H100). The class is fixed at the node's last
access or when its known length changes. SWA and MAMBA pools rank by LRU.
"""
from __future__ import annotations

from ..eviction import Policy, register_policy
from .stamped import FullRanked, KeyAtAccess

XI_TOKENS = 4096


@register_policy("tail-lru")
class TailLru(KeyAtAccess, FullRanked, Policy):
    reads_hits = reads_priority = False

    def __init__(self, xi: int = XI_TOKENS):
        KeyAtAccess.__init__(self)
        self.xi = xi
        self._new = [0, 0]  # tokens and count of first-ranked leaves (the estimate of Q)
        self._lost: dict = {}  # node id -> (its tick then, deepest end evicted under it)

    def q_hat(self) -> float:
        return self._new[0] / self._new[1] if self._new[1] else 0.0

    def length(self, node) -> int:
        got = self._lost.get(node.id)
        return got[1] if got is not None and got[0] == node.tick else node.end

    def stamp(self, node):
        return (node.tick, self.length(node))

    def fresh(self, node, seen_before: bool):
        if not seen_before:
            self._new[0] += node.num_tokens
            self._new[1] += 1
        start = node.end - node.num_tokens
        safe = self.length(node) + self.q_hat() - start <= self.xi
        return (not safe, node.tick)



    def _evicted(self, node, key) -> None:
        parent = node.parent
        if parent is not None and parent.parent is not None:
            deepest = max(self.length(node), self.length(parent))
            self._lost[parent.id] = (max(parent.tick, node.tick), deepest)  # the parent absorbs the tick
        self._lost.pop(node.id, None)
        self.drop(node)
