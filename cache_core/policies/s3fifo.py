"""`s3fifo`: S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction",
SOSP 2023), adapted to radix leaves as a sort key.

S3-FIFO admits new objects to a small FIFO queue and evicts those not reused before they
leave it (quick demotion: most objects are one-hit wonders); reused ones move to a main FIFO
queue with reinsertion (a 2-bit frequency, at most 3, decremented on each reinsertion). As a
sort key: never-reused leaves (one hit: their own insert; hits are taken at insert, SGLang's
rule) go first, in creation order; then reused leaves by frequency class min(hits - 1, 3), in
creation order within a class. Not modelled (a sort key holds no queue): the small queue's 10%
size bound (all one-hit leaves go before any reused one) and the ghost queue (a prefix
evicted and inserted again starts as new).
"""
from __future__ import annotations

from ..eviction import Policy, register_policy


@register_policy("s3fifo")
class S3Fifo(Policy):
    reads_priority = False
    tick_order_only = True

    def key(self, node):
        return (min(node.hits - 1, 3), node.created)
