"""Cache-aware routing with an approximate tree per engine, as SGLang's router does
(sgl-project/sglang, sgl-router/src/policies/cache_aware.rs, `CacheAwarePolicy::select_worker`).
Defaults: sgl-router's command-line defaults (src/main.rs, `#[arg(long, default_value_t = ...)]`:
cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5, eviction_interval 120 s,
max_tree_size 67,108,864), which is what a launched router uses; NOT `CacheAwareConfig::default()`
(src/policies/mod.rs: 0.5, 32, 1.1, 30 s, 10,000), which only code building the config gets.

- Loads are the router's own counts of unfinished requests per engine. The system is
  imbalanced when ``max - min > balance_abs_threshold`` and ``max > min * balance_rel_threshold``;
  then the request goes to the least loaded engine (shortest queue) and is still inserted in
  that engine's tree.
- Otherwise the approximate trees are matched: the engine with the longest prefix match wins if
  ``matched / prompt > cache_threshold``, else (``low_match``) the engine with the smallest tree
  (``smallest_tree``, the default: sgl-router's `get_smallest_tenant`) or the engine with the
  fewest unfinished requests (``least_load``: the newer sgl-model-gateway's rule for a low match,
  as issue 27 reports it); the prompt is inserted into the chosen engine's tree.
- Every ``eviction_interval_s`` each tree larger than ``max_tree_size`` loses its least recently
  used entries down to that size (sgl-router's background `evict_tenant_by_size`).

Differences (stated): the tree holds the prompt's whole pages by stable page key, not text
characters, so matches and sizes count tokens at page granularity; eviction is checked when a
request arrives, not on a wall-clock thread."""
from __future__ import annotations

from .base import RecentKeys, Router, argmin, leading, register_router

LOW_MATCH = ("smallest_tree", "least_load")  # where a request matching no engine well goes


@register_router("cache_aware")
class CacheAware(Router):

    def __init__(self, n, *, cache_threshold: float = 0.3, balance_abs_threshold: int = 64,
                 balance_rel_threshold: float = 1.5, eviction_interval_s: float = 120.0,
                 max_tree_size: int = 67_108_864, low_match: str = "smallest_tree", **kw):
        super().__init__(n, **kw)
        if low_match not in LOW_MATCH:
            raise ValueError(f"fleet.router.low_match: got {low_match!r}; expected {' or '.join(LOW_MATCH)}")
        self.low_match = low_match
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
        up = self.alive() if self.down else range(self.n)
        hi, lo = max(loads[j] for j in up), min(loads[j] for j in up)
        if hi - lo > self.abs_threshold and hi > lo * self.rel_threshold:
            self.imbalanced_picks += 1
            i = argmin(loads, self.down)
        else:
            self.balanced_picks += 1
            runs = self.matched_tokens(req, keys)
            best = max(up, key=lambda j: (runs[j], -j))
            rate = runs[best] / req.prompt_tokens if req.prompt_tokens else 0.0
            i = best if rate > self.cache_threshold else self.emptiest()
        self._insert(self.trees[i], keys)
        return i

    def matched_tokens(self, req, keys) -> list:
        """Per engine: prompt tokens its approximate tree matches."""
        return [leading(keys, t) * self.P for t in self.trees]

    def emptiest(self) -> int:
        """Where a low match goes: the engine with the smallest approximate tree (sgl-router's
        `get_smallest_tenant`), or with ``low_match: least_load`` the fewest unfinished requests."""
        if self.low_match == "least_load":
            return argmin(self.outstanding, self.down)
        return argmin([len(t) for t in self.trees], self.down)

    @staticmethod
    def _insert(tree, keys) -> None:
        tree.touch(keys)

    def _evict(self) -> None:
        for t in self.trees:
            t.trim(self.max_pages)

    def forget(self, i):
        """Engine i restarted: its approximate tree goes (sgl-router's `remove_tenant`)."""
        self.trees[i] = RecentKeys()
