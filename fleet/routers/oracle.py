"""The oracle: asks every engine's exact cache (device + host + storage hits of the request
now; an engine with DP ranks: its best rank) and picks the longest; among equals the least outstanding tokens, then the lowest index.
An upper bound for routing by reuse (as Belady is for eviction); no real router knows this."""
from __future__ import annotations

from .base import Router


class Oracle(Router):
    name = "oracle"

    def pick(self, req, now):
        hits = [max(e.cache.match(req.seq, req.limit).cached_tokens for e in ranks) for ranks in self.engines]
        return min(range(self.n), key=lambda i: (-hits[i], self.outstanding_tokens[i], i))
