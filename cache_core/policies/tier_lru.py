"""`tier-lru`: tier-aware LRU for HiCache — evict from L1 first what L2 already holds.

With an L2 tier, evicting a device leaf that is backed up on host memory is a demotion: its
tokens stay cached and come back by a host -> device load, far cheaper than a prefill; evicting
one that is not backed up loses them (or, under write_back, first costs a copy). So backed-up
leaves go first, least recently used first, then the rest by LRU. This is the ordering SGLang's
HiCache design motivates (docs: "SGLang HiCache", hierarchical radix cache, write_through /
write_through_selective / write_back; LMCache and Mooncake's multi-tier stores make the same
point: a copy in a lower tier makes an upper-tier eviction nearly free). Without tiers, and for
host-only leaves (L2 evictions, where `host` is always set), it is plain LRU. Under
write_through every acknowledged leaf is backed up, so it differs from LRU only while backups
are in flight; under write_through_selective and write_back it reorders.
"""
from __future__ import annotations

from ..eviction import Policy, register_policy


@register_policy("tier-lru")
class TierLru(Policy):
    reads_hits = reads_priority = False
    tick_order_only = True

    def key(self, node):
        return (node.host is None, node.tick)
