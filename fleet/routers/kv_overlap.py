"""KV-overlap scoring as Dynamo's KV router does (ai-dynamo/dynamo, lib/llm/src/kv_router/
scheduler.rs, `DefaultWorkerSelector::select_worker`; docs/architecture/kv_cache_routing.md):

    logit_i = overlap_score_weight x potential_prefill_blocks_i + potential_active_blocks_i

with ``potential_prefill_blocks = (prompt tokens - overlap_blocks_i x block) / block`` and
``potential_active_blocks`` the blocks of the requests the router has in flight on engine i
plus this request's; the lowest logit wins (temperature 0; ties: the lowest index). Weight 1 by
default (``--kv-overlap-score-weight``).

Differences from Dynamo's code (lib/kv-router/src/scheduling/selector.rs, earlier
lib/llm/src/kv_router/scheduler.rs), stated, not modelled: Dynamo's prefill term is the worker's
``prefill_tokens``, its pending prefill tokens plus this request's new ones (here: this request's
new tokens only), and its active blocks come from its ``ActiveSequences``, which de-duplicate the
blocks that requests in flight share (here: every request's blocks counted in full).

Overlap comes from the engines' KV events as the router's indexer receives them: when a request
finishes on engine i, the engine has stored its blocks (prompt + output, whole pages) and that
"stored" event reaches the indexer ``staleness_s`` later. The core publishes no eviction events,
so "removed" events are approximated: each engine's index keeps at most the engine's L1 + L2
capacity in blocks, least recently stored first out (stated in docs/fleet.md)."""
from __future__ import annotations

import heapq

from .base import RecentKeys, Router, argmin, leading, register_router


@register_router("kv_overlap")
class KvOverlap(Router):

    def __init__(self, n, *, overlap_score_weight: float = 1.0, staleness_s: float = 0.0, **kw):
        super().__init__(n, **kw)
        self.weight = float(overlap_score_weight)
        self.staleness_s = float(staleness_s)
        self.index = [RecentKeys() for _ in range(n)]
        self.capacity_pages = [None] * n  # set by the fleet from each engine's L1 (+ L2) size
        self._events: list = []  # heap of (visible at, seq, engine, keys)
        self._seq = 0
        self.active_blocks = [0] * n
        self._keys: dict = {}  # rid -> the page keys it will store (the engine drops its tokens at finish)

    def _blocks(self, req) -> int:
        return -(-(req.prompt_tokens + req.output_length) // self.P)

    def _apply_events(self, now: float) -> None:
        ev = self._events
        while ev and ev[0][0] <= now:
            _, _, i, keys = heapq.heappop(ev)
            self.index[i].touch(keys)
            self.index[i].trim(self.capacity_pages[i])

    def pick(self, req, now):
        self._apply_events(now)
        keys = self.prompt_keys(req)
        new = self._blocks(req)
        logits = [self.weight * (req.prompt_tokens - leading(keys, self.index[i]) * self.P) / self.P
                  + self.active_blocks[i] + new for i in range(self.n)]
        return argmin(logits, self.down)

    def routed(self, req, i, now):
        super().routed(req, i, now)
        self.active_blocks[i] += self._blocks(req)
        self._keys[req.rid] = req.seq.page_keys(self.P).tolist()

    def finished(self, req, i, now):
        super().finished(req, i, now)
        self.active_blocks[i] -= self._blocks(req)
        keys = self._keys.pop(req.rid)
        if req.rejected:
            return
        self._seq += 1
        heapq.heappush(self._events, (now + self.staleness_s, self._seq, i, keys))

    def failed(self, req, i, now):
        """Lost with its engine: its blocks leave the active count; it stored nothing."""
        Router.finished(self, req, i, now)
        self.active_blocks[i] -= self._blocks(req)
        self._keys.pop(req.rid, None)

    def forget(self, i):
        """Engine i restarted: its index and the stored events still on their way are dropped."""
        self.index[i] = RecentKeys()
        self._events = [e for e in self._events if e[2] != i]
        heapq.heapify(self._events)
