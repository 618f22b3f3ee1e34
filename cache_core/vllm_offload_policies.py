"""The cache policies of vLLM 0.33.0's CPU offloading manager (cache_core/vllm_offload.py), as
vllm/v1/kv_offload/cpu/policies/lru.py (LRUCachePolicy) and arc.py (ARCCachePolicy) decide.

A policy holds the chunks (key -> chunk with `ref`: -1 being stored, else readers) and picks the
victims; the manager (VllmCpuOffload) owns the chunk pool and the reference counts. `req` is
the request's OffloadRequest: `rank` (LRU's per-request rank) and `pos` (key -> position)."""
from __future__ import annotations

import heapq
from collections import OrderedDict

POLICIES = ("lru", "arc")  # vllm/v1/kv_offload/cpu/policies/factory.py: the built-in names


SHIFT = 1 << 40  # lru's rank tuple (r, -position) as one int, r * SHIFT - position: the same order


class LruPolicy:
    """LRUCachePolicy: every resident chunk has a rank; evictable chunks sit in a lazy heap and
    the lowest rank goes first. A running request's chunks rank (its rank, -position); each use
    outside that (the request finishing) gives a fresh rank (next, 0). A large update rebuilds
    the heap (as vLLM's _update_heap: the same order, fewer stale entries)."""

    def __init__(self, capacity: int):
        self.chunks: dict = {}
        self.ranks: dict = {}
        self.evictable: set = set()
        self.heap: list = []
        self.next_rank = 0

    def get(self, key):
        return self.chunks.get(key)

    def _request_rank(self, req) -> int:
        if req.rank is None:
            self.next_rank += 1
            req.rank = self.next_rank
        return req.rank

    def _rebuild(self) -> None:
        ranks = self.ranks
        self.heap = [(ranks[k], k) for k in self.evictable]
        heapq.heapify(self.heap)

    def _push_all(self, keys: list) -> None:
        if len(keys) >= max(64, len(self.evictable) // 4):
            self._rebuild()
            return
        ranks, heap = self.ranks, self.heap
        for k in keys:
            heapq.heappush(heap, (ranks[k], k))
        if len(heap) > max(64, 2 * len(self.evictable)):
            self._rebuild()

    def _push(self, key) -> None:
        self._push_all([key])

    def insert(self, key, chunk, req) -> None:
        self.chunks[key] = chunk
        self.ranks[key] = self._request_rank(req) * SHIFT - req.pos[key]
        if chunk.ref == 0:
            self.evictable.add(key)
            self._push(key)

    def _update_recency(self, keys) -> None:
        chunks, ranks, evictable, updated = self.chunks, self.ranks, self.evictable, []
        n = self.next_rank
        for key in keys:
            if key in chunks:
                n += 1
                ranks[key] = n * SHIFT
                if key in evictable:
                    updated.append(key)
        self.next_rank = n
        if updated:
            self._push_all(updated)

    def on_store_miss(self, keys, req) -> None:  # CachePolicy default: touch
        self._update_recency(reversed(list(keys)))

    def on_request_access(self, keys, req) -> None:
        rank, updated = self._request_rank(req) * SHIFT, []
        ranks, pos = self.ranks, req.pos
        for key in keys:
            if key not in self.chunks:
                continue
            r = rank - pos[key]
            if ranks[key] >= r:
                continue
            ranks[key] = r
            if key in self.evictable:
                updated.append(key)
        if updated:
            self._push_all(updated)

    def on_request_finished(self, order, insertion_only, reused, req) -> None:
        self._update_recency(reversed(order))

    def evict(self, n: int, protected: set):
        if n == 0:
            return []
        selected: list = []
        keys, deferred = set(), []
        heap = self.heap
        while heap and len(selected) < n:
            entry = heapq.heappop(heap)
            rank, key = entry
            if key not in self.evictable or self.ranks.get(key) != rank or key in keys:
                continue
            if key in protected:
                deferred.append(entry)
                continue
            selected.append(entry)
            keys.add(key)
        if len(selected) < n:
            for entry in selected + deferred:
                heapq.heappush(heap, entry)
            return None
        for entry in deferred:
            heapq.heappush(heap, entry)
        out = []
        for _, key in selected:
            self.evictable.remove(key)
            del self.ranks[key]
            out.append((key, self.chunks.pop(key)))
        return out

    def mark_evictable(self, key) -> None:
        self.mark_evictable_all([key])

    def mark_evictable_all(self, keys: list) -> None:
        """mark_evictable of each key, in order (one heap update)."""
        self.evictable.update(keys)
        self._push_all(keys)

    def mark_non_evictable(self, key) -> None:
        self.evictable.remove(key)

    def check(self, cpu) -> None:
        assert len(self.chunks) == len(cpu) == len(self.ranks)
        assert self.evictable == {k for k, c in self.chunks.items() if c.ref == 0}
        assert len(self.evictable) == cpu.evictable


class ArcPolicy:
    """ARCCachePolicy: T1 (seen once) and T2 (reused), ghosts B1/B2 and the target T1 size."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.target = 0.0
        self.t1: OrderedDict = OrderedDict()
        self.t2: OrderedDict = OrderedDict()
        self.b1: OrderedDict = OrderedDict()
        self.b2: OrderedDict = OrderedDict()

    def get(self, key):
        return self.t1.get(key) or self.t2.get(key)

    def insert(self, key, chunk, req) -> None:
        self.t1[key] = chunk
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def _ghost_hit(self, key) -> None:
        if key in self.b1:
            self.target = min(self.target + max(1, len(self.b2) / len(self.b1)), self.capacity)
            self.b1.move_to_end(key)
        elif key in self.b2:
            self.target = max(self.target - max(1, len(self.b1) / len(self.b2)), 0)
            self.b2.move_to_end(key)

    def on_store_miss(self, keys, req) -> None:
        for key in reversed(list(keys)):
            self._ghost_hit(key)

    def on_request_access(self, keys, req) -> None:
        return

    def on_request_finished(self, order, insertion_only, reused, req) -> None:
        t1, t2 = self.t1, self.t2
        for key in reversed(order):
            if key in insertion_only:
                if key in t1:
                    t1.move_to_end(key)
                elif key in t2:
                    t2.move_to_end(key)
            elif key in reused and key in t1:
                t2[key] = t1.pop(key)
            elif key in reused and key in t2:
                t2.move_to_end(key)

    def evict(self, n: int, protected: set):
        if n == 0:
            return []
        picked = []  # (key, chunk, from t1)
        size1 = len(self.t1)
        it1, it2 = iter(self.t1.items()), iter(self.t2.items())

        def nxt(it):
            for key, chunk in it:
                if chunk.ref == 0 and key not in protected:
                    return key, chunk
            return None

        for _ in range(n):
            got = None
            if size1 >= int(self.target):
                e = nxt(it1)
                if e is not None:
                    got, size1 = (*e, True), size1 - 1
            if got is None:
                e = nxt(it2)
                if e is not None:
                    got = (*e, False)
            if got is None:
                e = nxt(it1)
                if e is None:
                    return None
                got, size1 = (*e, True), size1 - 1
            picked.append(got)
        out = []
        for key, chunk, from_t1 in picked:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
            out.append((key, chunk))
        for ghost in (self.b1, self.b2):
            for _ in range(len(ghost) - self.capacity):
                ghost.popitem(last=False)
        return out

    def mark_evictable(self, key) -> None:
        return

    def mark_evictable_all(self, keys: list) -> None:
        return

    def mark_non_evictable(self, key) -> None:
        return

    def check(self, cpu) -> None:
        assert len(self.t1) + len(self.t2) == len(cpu) and not set(self.t1) & set(self.t2)
        assert sum(c.ref == 0 for c in (*self.t1.values(), *self.t2.values())) == cpu.evictable
        assert len(self.b1) <= self.capacity and len(self.b2) <= self.capacity


def make_policy(name: str, capacity: int):
    if name == "lru":
        return LruPolicy(capacity)
    if name == "arc":
        return ArcPolicy(capacity)
    raise ValueError(f"unknown vLLM offload policy {name!r}; expected one of {', '.join(POLICIES)}")
