"""`gdsf`: GreedyDual-Size-Frequency (Cherkasova, "Improving WWW proxies performance with
Greedy-Dual-Size-Frequency caching policy", HP Labs HPL-98-69, 1998; GreedyDual: Young 1994,
Cao and Irani 1997) with the recompute cost of a KV prefix as the cost.

GDSF ranks an object by H = L + frequency x cost / size, evicts the smallest H and sets the
clock L to it (so objects not used for a while age out). Here frequency = the node's hits
(SGLang counts them at insert), size = its tokens, cost = the prefill cost of recomputing its
tokens, sum over positions p of (1 + p / K): per token, the linear layers (1) plus attention
over the p tokens before it (p / K; K = 32768 tokens is where attention equals the linear
FLOPs per token for a Llama-3-8B-like model: 2 x 8e9 params / (4 x 32 layers x 4096 width)).
So a page deep in a long prefix is worth more than one near the root: cost / size =
1 + (start + end) / (2K). H is fixed at the node's last access.
"""
from __future__ import annotations

from ..eviction import Policy, register_policy
from .stamped import FullRanked, KeyAtAccess

ATTENTION_TOKENS = 32768  # K above


@register_policy("gdsf")
class Gdsf(KeyAtAccess, FullRanked, Policy):
    reads_priority = False

    def __init__(self):
        KeyAtAccess.__init__(self)
        self.clock = 0.0  # L

    def stamp(self, node):
        return (node.tick, node.hits)  # an insert's hit may land after its tick

    def fresh(self, node, seen_before: bool):
        start = node.end - node.num_tokens
        density = 1.0 + (start + node.end) / (2 * ATTENTION_TOKENS)
        return self.clock + node.hits * density



    def _evicted(self, node, key) -> None:
        self.clock = key
        self.drop(node)
