"""Eviction policies from the literature, adapted to radix leaves (docs/policy_lab.md).

One small module each, registered through `cache_core.eviction.register_policy` on import;
every docstring cites its source and says what the adaptation changes.
"""
from . import arc, gdsf, s3fifo, session_next, sieve, tail_lru, tier_lru, tlru  # noqa: F401  (registers their policies)
