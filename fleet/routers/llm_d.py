"""llm_d: weighted scorers and a picker, as llm-d's inference scheduler (the Gateway API
Inference Extension's (GIE) endpoint picker with llm-d's plugins) combines them in one
scheduling profile. Configured with the scheduler profile's names:

    router:
      kind: llm_d
      scorers:                       # default: GIE's default profile (queue 2, kv-cache 2, prefix 3)
        - {type: precise-prefix-cache-scorer, weight: 3}
        - {type: prefix-cache-scorer, weight: 2,
           parameters: {hashBlockSize: 64, maxPrefixBlocksToMatch: 256, lruCapacityPerServer: 31250}}
        - {type: kv-cache-utilization-scorer, weight: 1}
        - {type: queue-scorer, weight: 1}
      picker: max-score-picker       # or random-picker

The profile (GIE pkg/epp/scheduling/scheduler_profile.go, `runScorerPlugins`): every scorer
gives each engine a score clamped to [0, 1] (`enforceScoreRange`) and the engine's total is
the sum of score x weight (weights raw, not normalised). The pickers (GIE
pkg/epp/scheduling/framework/plugins/picker/, kubernetes-sigs/gateway-api-inference-extension
@02308be307b248a4ce2e908d34945178468f3f39): `max-score-picker` shuffles the candidates, then
sorts them stably by score, so equal best scores are broken uniformly at random;
`random-picker` takes a uniformly random engine. Randomness comes from the scenario's seed, so a
run is deterministic for a seed.

Scorers (each cited in docs/fleet.md):

- `prefix-cache-scorer` (GIE's approximate prefix plugin, pkg/epp/scheduling/framework/plugins/
  multi/prefix/plugin.go and indexer.go @00913f9205cd1d16fe03c0c25a83808dfebc2c89 /
  @01925288c7ab8ae98675c0d83b4cd8a45f8609d2): the prompt is cut into blocks, chained hashes with
  hash 0 the model's (every engine that was sent any request holds it); at most
  ``maxPrefixBlocksToMatch`` blocks; a prompt shorter than one block gets no hashes and scores 0.
  When a request is routed, its hashes are added, in order, to the chosen engine's LRU of at most
  ``lruCapacityPerServer`` hashes (an evicted hash no longer names that engine). The match walks
  the hashes from the first while SOME engine holds the hash and counts, per engine, the hashes
  it holds in that run; score = count / number of hashes. GIE hashes prompt characters
  (``hashBlockSize`` 64 = 16 tokens at its 4 characters per token); here blocks are tokens:
  ``hashBlockSize / 4`` tokens, or ``blockSizeTokens`` (the newer GIE name) when given.
- `precise-prefix-cache-scorer` (llm-d-inference-scheduler pkg/plugins/scorer/
  precise_prefix_cache.go @057d2c76bf7512294386c3d0534b6391a7d34127, its kv-cache index scored by
  llm-d-kv-cache-manager pkg/kvcache/kvblock_scorer.go @760bfeab3c3ad3249798030bfa05ac1b6bb7b4ec
  `LongestPrefixScorer`): an engine's score is the number of consecutive blocks from the first
  that its KV events say it holds; here its cache's exact match now (device + host pages; with
  DP ranks the best rank), events without delay, read without touching the cache (no LRU
  tick). Engines holding none are absent from the index's answer and score 0; the others are
  normalised min-max among themselves (utils.go `indexedScoresToNormalizedScoredPods`), 1.0 for
  all when they are equal.
- `kv-cache-utilization-scorer` (GIE scorer/kvcache_utilization.go @02308be3): 1 - KV usage, the
  share of the engine's KV pool held by requests (vLLM's ``kv_cache_usage_perc``: cached pages
  no request holds count as free); here ``(pool - free - evictable) / pool``, read now, not
  scraped.
- `queue-scorer` (GIE scorer/queue.go @02308be3): ``(max - q) / (max - min)`` over the engines'
  waiting queues (waiting + prefetching requests), 1.0 for all when they are equal.
"""
from __future__ import annotations

import numbers
import random
from collections import OrderedDict

from .base import Router, exact_reuse, register_router

MODEL_HASH = ("model",)  # GIE's hash 0: the model name's hash, the same for every request here
CHARS_PER_TOKEN = 4  # GIE: "a good guess of average characters per token is 4"
# GIE's default scheduling profile (config/charts/inferencepool/templates/epp-config.yaml
# @0ae94dfbf9dcdf8b7f42bc74e849239c7b8f020a): queue-scorer 2, kv-cache-utilization-scorer 2,
# prefix-cache-scorer 3; the picker defaults to max-score-picker
DEFAULT_SCORERS = ({"type": "queue-scorer", "weight": 2}, {"type": "kv-cache-utilization-scorer", "weight": 2},
                   {"type": "prefix-cache-scorer", "weight": 3})
PICKERS = ("max-score-picker", "random-picker")


def _positive_int(v, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{where}: got {v!r}; expected a positive integer")
    return int(v)


class Scorer:
    """One scorer: ``score(router, req) -> [0..1] per engine``; ``routed`` after a pick."""

    params: dict = {}

    def score(self, router, req) -> list:
        raise NotImplementedError

    def routed(self, router, req, i: int) -> None:
        pass

    def forget(self, i: int) -> None:
        """Engine i restarted (engine_down): drop what was learnt of it (nothing here)."""


class ApproxPrefix(Scorer):
    """GIE's `prefix-cache-scorer`: an index of the block hashes routed to each engine."""

    type = "prefix-cache-scorer"
    params = {"hashBlockSize": 64, "blockSizeTokens": None, "maxPrefixBlocksToMatch": 256,
              "lruCapacityPerServer": 31250}

    def __init__(self, n: int, where: str, hashBlockSize=64, blockSizeTokens=None, maxPrefixBlocksToMatch=256,
                 lruCapacityPerServer=31250):
        chars = _positive_int(hashBlockSize, f"{where}.hashBlockSize")
        if blockSizeTokens is None:
            if chars % CHARS_PER_TOKEN:
                raise ValueError(f"{where}.hashBlockSize: got {chars}; expected a multiple of {CHARS_PER_TOKEN} "
                                 f"characters ({CHARS_PER_TOKEN} per token), or set blockSizeTokens")
            self.block = chars // CHARS_PER_TOKEN
        else:
            self.block = _positive_int(blockSizeTokens, f"{where}.blockSizeTokens")
        self.max_blocks = _positive_int(maxPrefixBlocksToMatch, f"{where}.maxPrefixBlocksToMatch")
        self.capacity = _positive_int(lruCapacityPerServer, f"{where}.lruCapacityPerServer")
        self.hash_to_engines: dict = {}  # hash -> set of engines
        self.lru = [OrderedDict() for _ in range(n)]  # per engine, least recently added first
        self._hashes: dict = {}  # rid -> its hashes, from scoring to routing

    def hashes(self, router, req) -> list:
        if self.block == router.P:
            keys = router.prompt_keys(req)
        else:
            import numpy as np

            from cache_core.keys import page_keys

            toks = np.frombuffer(req.seq.data, dtype=np.int64)[: req.prompt_tokens]
            keys = page_keys(toks, self.block)[0].tolist()
        if not keys:
            return []
        return [MODEL_HASH] + keys[: self.max_blocks]

    def score(self, router, req) -> list:
        hashes = self.hashes(router, req)
        self._hashes[req.rid] = hashes
        counts = [0] * router.n
        for h in hashes:
            holders = self.hash_to_engines.get(h)
            if not holders:
                break
            for i in holders:
                counts[i] += 1
        total = len(hashes)
        return [c / total if total else 0.0 for c in counts]

    def forget(self, i: int) -> None:
        """Engine i restarted: its LRU of hashes goes (GIE drops a removed pod's entries)."""
        for h in self.lru[i]:
            holders = self.hash_to_engines.get(h)
            if holders is not None:
                holders.discard(i)
                if not holders:
                    del self.hash_to_engines[h]
        self.lru[i] = OrderedDict()

    def routed(self, router, req, i: int) -> None:
        lru, cap = self.lru[i], self.capacity
        for h in self._hashes.pop(req.rid, ()):
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            self.hash_to_engines.setdefault(h, set()).add(i)
            if len(lru) > cap:
                old, _ = lru.popitem(last=False)
                holders = self.hash_to_engines[old]
                holders.discard(i)
                if not holders:
                    del self.hash_to_engines[old]


class PrecisePrefix(Scorer):
    """llm-d's `precise-prefix-cache-scorer`: the engines' own caches (their KV events)."""

    type = "precise-prefix-cache-scorer"

    def __init__(self, n: int, where: str):
        pass

    @staticmethod
    def blocks(engine, req, page_size: int) -> int:
        return exact_reuse(engine, req) // page_size

    def score(self, router, req) -> list:
        held = {i: b for i, ranks in enumerate(router.engines)
                if (b := max(self.blocks(e, req, router.P) for e in ranks)) > 0}
        if not held:
            return [0.0] * router.n
        lo, hi = min(held.values()), max(held.values())
        return [0.0 if i not in held else 1.0 if hi == lo else (held[i] - lo) / (hi - lo) for i in range(router.n)]


class KvCacheUtilization(Scorer):
    """GIE's `kv-cache-utilization-scorer`: 1 - the share of the KV pool requests hold."""

    type = "kv-cache-utilization-scorer"

    def __init__(self, n: int, where: str):
        pass

    @staticmethod
    def usage(ranks) -> float:
        pool = held = 0
        for e in ranks:
            if e.cache.full.pool.unbounded:
                continue
            pool += e.max_total_tokens
            held += e.max_total_tokens - e.cache.free_tokens - e.cache.full.evictable_tokens
        return held / pool if pool else 0.0

    def score(self, router, req) -> list:
        return [1.0 - self.usage(ranks) for ranks in router.engines]


class QueueDepth(Scorer):
    """GIE's `queue-scorer`: min-max over the engines' waiting queues, shorter is better."""

    type = "queue-scorer"

    def __init__(self, n: int, where: str):
        pass

    @staticmethod
    def waiting(ranks) -> int:
        return sum(len(e.queues.waiting) + len(e.queues.prefetching) for e in ranks)

    def score(self, router, req) -> list:
        q = [self.waiting(ranks) for ranks in router.engines]
        lo, hi = min(q), max(q)
        return [1.0 if hi == lo else (hi - x) / (hi - lo) for x in q]


SCORERS = {cls.type: cls for cls in (PrecisePrefix, ApproxPrefix, KvCacheUtilization, QueueDepth)}


@register_router("llm_d")
class LlmD(Router):

    def __init__(self, n, *, scorers=None, picker="max-score-picker", **kw):
        super().__init__(n, **kw)
        where = "fleet.router"
        if scorers is None:
            scorers = [dict(s) for s in DEFAULT_SCORERS]
        if not isinstance(scorers, list):
            raise ValueError(f"{where}.scorers: got {scorers!r}; expected a list of {{type: NAME, weight: W}}")
        self.scorers: list = []  # (scorer, weight)
        for j, s in enumerate(scorers):
            self.scorers.append(self._scorer(s, n, f"{where}.scorers[{j}]"))
        if isinstance(picker, dict):
            extra = set(picker) - {"type"}
            if extra:
                raise ValueError(f"{where}.picker.{sorted(extra)[0]}: not modelled; expected only type")
            picker = picker.get("type")
        if picker not in PICKERS:
            raise ValueError(f"{where}.picker: unknown picker {picker!r}; expected one of {', '.join(PICKERS)}")
        self.picker = picker
        self.rng = random.Random(kw.get("seed", 0))
        self.last_scores: list = []  # the weighted totals of the last pick (tests, debugging)

    @staticmethod
    def _scorer(s, n: int, where: str):
        if not isinstance(s, dict) or not isinstance(s.get("type"), str):
            raise ValueError(f"{where}: got {s!r}; expected a mapping {{type: NAME, weight: W, parameters: {{...}}}}")
        extra = set(s) - {"type", "weight", "parameters"}
        if extra:
            raise ValueError(f"{where}.{sorted(extra)[0]}: unknown key; expected type, weight, parameters")
        kind = s["type"]
        if kind not in SCORERS:
            raise ValueError(f"{where}.type: unknown scorer {kind!r}; expected one of {', '.join(SCORERS)}")
        w = s.get("weight", 1)  # GIE: "If omitted, a weight of one will be used"
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not w >= 0:
            raise ValueError(f"{where}.weight: got {w!r}; expected a number >= 0")
        params = s.get("parameters") or {}
        if not isinstance(params, dict):
            raise ValueError(f"{where}.parameters: got {params!r}; expected a mapping")
        cls = SCORERS[kind]
        for k in params:
            if k not in cls.params:
                raise ValueError(f"{where}.parameters.{k}: not a modelled parameter of {kind}; expected "
                                 f"{', '.join(cls.params) or '(none)'}")
        return cls(n, f"{where}.parameters", **params), float(w)

    def pick(self, req, now):
        totals = [0.0] * self.n
        for scorer, w in self.scorers:
            for i, x in enumerate(scorer.score(self, req)):
                totals[i] += min(max(x, 0.0), 1.0) * w
        self.last_scores = totals
        up = self.alive() if self.down else range(self.n)  # a down engine is filtered out first
        if self.picker == "random-picker":
            return up[self.rng.randrange(len(up))]
        best = max(totals[i] for i in up)
        tied = [i for i in up if totals[i] == best]
        return tied[0] if len(tied) == 1 else tied[self.rng.randrange(len(tied))]

    def forget(self, i):
        """Engine i restarted: each scorer drops what it had learnt of it."""
        for scorer, _ in self.scorers:
            scorer.forget(i)

    def routed(self, req, i, now):
        super().routed(req, i, now)
        for scorer, _ in self.scorers:
            scorer.routed(self, req, i)
