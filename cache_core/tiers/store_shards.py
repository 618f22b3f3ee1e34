"""Mooncake's sharded batch eviction (``MooncakeStore`` with ``shards`` > 1; store.py's module
docstring describes it): before #2286 its ``BatchEvict`` walked the metadata shards from a
random one, evicting per shard, then took the oldest candidates left in a second pass.

A strategy the store owns (``MooncakeStore.sharding``) and calls through ``evict``, handing it
the two maps of its objects (read only here) and a callback that evicts one object."""
from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable, Mapping
from itertools import chain

_M64 = (1 << 64) - 1


class ShardedEviction:
    """Mooncake's per-shard batch eviction over ``shards`` metadata shards."""

    def __init__(self, shards: int, objects_per_page: int) -> None:
        self.shards = shards
        self.objects_per_page = objects_per_page
        self._start = random.Random(0)  # stand-in for Mooncake's rand() % kNumShards (docs/store_model.md)

    def shard(self, obj) -> int:
        """The metadata shard of an object (Mooncake: std::hash of SGLang's key string % shards;
        splitmix64 of the page key is a stand-in: the run's key strings are unknown, docs/store_model.md)."""
        key, half = obj if self.objects_per_page > 1 else (obj, 0)
        salt = 0
        if isinstance(key, tuple):  # (component, key) payloads
            salt, key = zlib.crc32(str(key[0]).encode()), key[1]
        x = (int(key) ^ (salt << 40) ^ (half * 0x9E3779B97F4A7C15)) & _M64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64  # splitmix64's finalizer
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
        return (x ^ (x >> 31)) % self.shards

    @staticmethod
    def candidates(fresh: Mapping, leased: Mapping, now: float | None) -> dict:
        """Evictable objects -> their lease (never read: -1, the epoch; no clock: lease order).
        `fresh`: never-read objects; `leased`: read objects -> lease timeout, oldest first."""
        out = dict.fromkeys(fresh, -1.0)
        for i, (k, until) in enumerate(leased.items()):
            if now is None:
                out[k] = float(i)
            elif until > now:
                break
            else:
                out[k] = until
        return out

    def evict(self, fresh: Mapping, leased: Mapping, now: float | None, drop: Callable[[object], None],
              target: float, lowerbound: float) -> int:
        """Mooncake's BatchEvict before #2286 (see the module docstring): `drop(obj)` evicts one
        object from the store; returns the objects evicted."""
        lease, S = self.candidates(fresh, leased, now), self.shards
        groups: list = [[] for _ in range(S)]
        for o in chain(fresh, leased):
            groups[self.shard(o)].append(o)
        start, count, evicted, rest = self._start.randrange(S), 0, 0, []
        for i in range(S):
            objs = groups[(start + i) % S]
            count += len(objs)
            ideal = math.ceil(count * target) - evicted
            cands = [o for o in objs if o in lease]
            if ideal <= 0 or not cands:
                rest += cands if ideal <= 0 else []
                continue
            cut = sorted(lease[o] for o in cands)[min(ideal, len(cands)) - 1]
            for o in cands:
                if lease[o] <= cut:
                    drop(o)
                    evicted += 1
                else:
                    rest.append(o)
        want = min(math.ceil(count * lowerbound) - evicted, len(rest))
        if want > 0:  # second pass: the oldest candidates left, in shard order
            cut = sorted(lease[o] for o in rest)[want - 1]
            for o in [o for o in rest if lease[o] <= cut][:want]:
                drop(o)
            evicted += want
        return evicted


__all__ = ["ShardedEviction"]
