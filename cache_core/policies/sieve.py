"""`sieve`: SIEVE (Zhang et al., "SIEVE is Simpler than LRU: an Efficient Turn-Key Eviction
Algorithm for Web Caches", NSDI 2024), adapted to radix leaves.

SIEVE keeps objects in insertion order with one visited bit each; a hand scans from the oldest
to the newest, clears the bit of each visited object it passes and evicts the first unvisited
one, then stays there; at the newest it wraps to the oldest. Here the scan order is a sort key:
the hand is (lap, creation tick) of the last victim; a node accessed when the hand is at
(L, c) is next reached in lap R = L if it was created after c, else L + 1; a node new since
then (its first key) is unvisited and goes in lap R, an accessed one is skipped once (its bit
cleared) and goes in lap R + 1: key = (lap, creation tick). Only unlocked leaves are
candidates (the hand skips the rest); an access is a new tick on the node (a match or insert
through it, SGLang's rule), and a node first ranked after it stopped having children counts
as visited when it was touched after its creation. Tier (L2) evictions move the same hand.
"""
from __future__ import annotations

from ..eviction import Policy, register_policy
from .stamped import FullRanked, KeyAtAccess


@register_policy("sieve")
class Sieve(KeyAtAccess, FullRanked, Policy):
    reads_hits = reads_priority = False

    def __init__(self):
        KeyAtAccess.__init__(self)
        self.hand = (0, -1)  # (lap, creation tick of the last victim)

    def fresh(self, node, seen_before: bool):
        lap, at = self.hand
        reach = lap if node.created > at else lap + 1
        visited = seen_before or node.tick > node.created
        return (reach + visited, node.created)



    def _evicted(self, node, key) -> None:
        self.hand = key
        self.drop(node)
