"""The oracle: the cache-aware rule (`cache_aware.py`, SGLang's router) with each engine's
EXACT cache in place of the approximate tree: the prefix match of an engine is what its cache
holds of the request now on device and host (an engine with DP ranks: its best rank; a shared
L3 offers every engine the same storage run, so storage does not tell engines apart), and a
request that matches no engine well enough goes to the engine with the fewest outstanding
tokens. A reference with perfect knowledge of the caches, which no real router has; it is not
a proven upper bound (an online routing rule has none; Belady's bound for eviction is offline),
and docs/fleet.md reports where a router came close to or above it."""
from __future__ import annotations

from .base import argmin
from .cache_aware import CacheAware


class Oracle(CacheAware):
    name = "oracle"

    def matched_tokens(self, req, keys) -> list:
        return [max(self._reuse(e, req) for e in ranks) for ranks in self.engines]

    @staticmethod
    def _reuse(engine, req) -> int:
        m = engine.cache.match(req.seq, req.limit)
        return m.device + m.host_tokens if engine.cache.hier is not None else m.cached_tokens

    def emptiest(self) -> int:
        return argmin(self.outstanding_tokens)

    @staticmethod
    def _insert(tree, keys) -> None:
        """No approximate tree: the caches themselves are asked."""
