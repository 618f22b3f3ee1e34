"""Cache-aware routing with an approximate tree per engine, as SGLang's router does
(sgl-project/sglang, sgl-router/src/policies/cache_aware.rs, `CacheAwarePolicy::select_worker`;
defaults from its `CacheAwareConfig`: cache_threshold 0.3, balance_abs_threshold 64,
balance_rel_threshold 1.5, eviction_interval 120 s, max_tree_size 67,108,864).

- Loads are the router's own counts of unfinished requests per engine. The system is
  imbalanced when ``max - min > balance_abs_threshold`` and ``max > min * balance_rel_threshold``;
  then the request goes to the least loaded engine (shortest queue) and is still inserted in
  that engine's tree.
- Otherwise the approximate trees are matched: the engine with the longest prefix match wins if
  ``matched / prompt > cache_threshold``, else the engine with the smallest tree; the prompt is
  inserted into the chosen engine's tree.
- Every ``eviction_interval_s`` each tree larger than ``max_tree_size`` loses its least recently
  used entries down to that size (sgl-router's background `evict_tenant_by_size`).

Differences (stated): the tree holds the prompt's whole pages by stable page key, not text
characters, so matches and sizes count tokens at page granularity; eviction is checked when a
request arrives, not on a wall-clock thread."""
from __future__ import annotations

from .base import RecentKeys, Router, argmin, leading


class CacheAware(Router):
    name = "cache_aware"

    def __init__(self, n, *, cache_threshold: float = 0.3, balance_abs_threshold: int = 64,
                 balance_rel_threshold: float = 1.5, eviction_interval_s: float = 120.0,
                 max_tree_size: int = 67_108_864, **kw):
        super().__init__(n, **kw)
        self.cache_threshold = float(cache_threshold)
        self.abs_threshold = balance_abs_threshold
        self.rel_threshold = float(balance_rel_threshold)
        self.interval = float(eviction_interval_s)
        self.max_pages = max(int(max_tree_size) // self.P, 0)
        self.trees = [RecentKeys() for _ in range(n)]
        self._next_evict = self.interval
        self.balanced_picks = self.imbalanced_picks = 0

    def pick(self, req, now):
        if now >= self._next_evict:
            self._evict()
            self._next_evict = now + self.interval
        keys = self.prompt_keys(req)
        loads = self.outstanding
        hi, lo = max(loads), min(loads)
        if hi - lo > self.abs_threshold and hi > lo * self.rel_threshold:
            self.imbalanced_picks += 1
            i = argmin(loads)
        else:
            self.balanced_picks += 1
            runs = self.matched_tokens(req, keys)
            best = max(range(self.n), key=lambda j: (runs[j], -j))
            rate = runs[best] / req.prompt_tokens if req.prompt_tokens else 0.0
            i = best if rate > self.cache_threshold else self.emptiest()
        self._insert(self.trees[i], keys)
        return i

    def matched_tokens(self, req, keys) -> list:
        """Per engine: prompt tokens its approximate tree matches."""
        return [leading(keys, t) * self.P for t in self.trees]

    def emptiest(self) -> int:
        """The engine with the smallest approximate tree (sgl-router's `get_smallest_tenant`)."""
        return argmin([len(t) for t in self.trees])

    @staticmethod
    def _insert(tree, keys) -> None:
        tree.touch(keys)

    def _evict(self) -> None:
        for t in self.trees:
            t.trim(self.max_pages)
