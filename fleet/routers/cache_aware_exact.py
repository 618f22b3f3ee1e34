"""cache_aware_exact (named `oracle` before issue 27): the cache-aware rule (`cache_aware.py`,
SGLang's router) with each engine's EXACT cache in place of the approximate tree: the prefix
match of an engine is what its cache holds of the request now on device and host (an engine
with DP ranks: its best rank; a shared L3 offers every engine the same storage run, so storage
does not tell engines apart), and a request that matches no engine well enough goes to the
engine with the fewest outstanding tokens. It has perfect knowledge of the caches, which no
real router has, but it is NOT an upper bound: it is online and greedy per request, and on
fleet-agentic-pd-4p4d cache_aware beat it (hit 0.8997 vs 0.888, SLO attainment 1.000 vs
0.969), on benchmarks/bench_fleet.py's reduced run too (0.169 vs 0.159); hence the name."""
from __future__ import annotations

from .base import argmin, exact_reuse, register_router
from .cache_aware import CacheAware


@register_router("cache_aware_exact")
class CacheAwareExact(CacheAware):

    def __init__(self, n, **kw):
        if kw.get("low_match", "smallest_tree") != "smallest_tree":
            raise ValueError("fleet.router.low_match: cache_aware_exact keeps no tree; a low match goes to the "
                             "fewest outstanding tokens")
        super().__init__(n, **kw)

    def matched_tokens(self, req, keys) -> list:
        return [0 if i in self.down else max(exact_reuse(e, req) for e in ranks)
                for i, ranks in enumerate(self.engines)]

    def emptiest(self) -> int:
        return argmin(self.outstanding_tokens, self.down)

    @staticmethod
    def _insert(tree, keys) -> None:
        """No approximate tree: the caches themselves are asked."""
