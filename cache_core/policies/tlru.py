"""`tlru`: SGLang's TLRUStrategy (`--radix-eviction-policy tlru`; sglang/srt/mem_cache/
evict_policy.py and unified_cache/unified_tree_core.py, SGLang 0.5.23), exact.

SGLang's rule, "Tail-Optimized LRU" (Zhang et al., arXiv 2510.15152): a conversation with
history length L whose next prompt adds about Q tokens needs only L + Q - threshold of its
tokens cached to keep its next prefill under the TTFT budget; a leaf whose start (the cached
prefix without it) already covers that budget is "TEL-safe" and goes first. Priority of a
leaf = (-1 if safe else 0, last access time), with
    budget = max(history_len + next_prompt_estimate - threshold, 0),
    safe   = (node end - node tokens) >= budget,
where a node's `_tlru_cached_prefix_len` is its end (tokens from the root to the end of its
edge) and `_tlru_history_len` its branch's high-water depth: the deepest end of any node ever
created in its subtree. SGLang raises it up the path at every node creation, a split's new
upper node inherits the lower one's, and it never shrinks on eviction.

Here: a candidate is a leaf, so its live subtree is itself; its high-water depth is the
deepest of its end and what its evicted children carried up (each evicted leaf hands
max(its end, its own record) to its parent through the eviction hook). A split keeps the
lower node (same id, same end, same record) and the new upper node is internal until its
children go, when they hand their records up: the same numbers as SGLang's eager walk.
A split changes the lower node's start, and the core re-offers both halves then.

Parameters (token counts, as SGLang's `--radix-eviction-policy-config '{"threshold": T,
"next_prompt_estimate": Q}'`; SGLang refuses T <= Q and has no valid default): here
T = 4,096 (about the 200 ms TTFT SLO of the paper at ~20k tokens/s of prefill, as `tail-lru`)
and Q = 512 by default; a subclass with other values: `TLRU.with_params`. Compared with
`tail-lru` (the paper's algorithm adapted here, a running mean for Q, the length of evicted
tails re-read at each access) this is SGLang's code's rule. SWA and MAMBA pools rank by LRU.
"""
from __future__ import annotations

from ..eviction import Policy, register_policy
from .stamped import FullRanked

THRESHOLD_TOKENS = 4096
NEXT_PROMPT_ESTIMATE_TOKENS = 512


@register_policy("tlru")
class TLRU(FullRanked, Policy):
    reads_hits = reads_priority = False
    threshold = THRESHOLD_TOKENS
    next_prompt_estimate = NEXT_PROMPT_ESTIMATE_TOKENS

    def __init__(self):
        if not 0 <= self.next_prompt_estimate < self.threshold:
            raise ValueError(f"tlru needs 0 <= next_prompt_estimate < threshold (tokens), got "
                             f"{self.next_prompt_estimate} and {self.threshold}")
        self._history: dict = {}  # node id -> deepest end its evicted descendants reached

    @classmethod
    def with_params(cls, threshold: int, next_prompt_estimate: int) -> type:
        """A subclass with SGLang's two config values (register it to use it by name)."""
        return type(f"TLRU_{threshold}_{next_prompt_estimate}", (cls,),
                    {"threshold": threshold, "next_prompt_estimate": next_prompt_estimate})

    def history_len(self, node) -> int:
        return max(node.end, self._history.get(node.id, 0))

    def key(self, node):
        budget = max(self.history_len(node) + self.next_prompt_estimate - self.threshold, 0)
        return (node.end - node.num_tokens < budget, node.tick)

    def _evicted(self, node, key) -> None:
        h = self.history_len(node)
        self._history.pop(node.id, None)
        parent = node.parent
        if parent is not None and parent.parent is not None and h > self._history.get(parent.id, 0):
            self._history[parent.id] = h
