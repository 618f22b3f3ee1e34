"""Mooncake's sharded batch eviction (``MooncakeStore`` with ``shards`` > 1; store.py's module
docstring describes it): before #2286 its ``BatchEvict`` walked the metadata shards from a
random one, evicting per shard, then took the oldest candidates left in a second pass."""
from __future__ import annotations

import math
import random
import zlib
from collections import OrderedDict
from collections.abc import Callable
from itertools import chain

_M64 = (1 << 64) - 1


class ShardedEviction:
    """The MooncakeStore methods of sharded eviction (a mixin: the store's objects are its
    ``_fresh`` and ``_keys`` maps, ``_drop`` evicts one, ``_start`` draws the first shard)."""

    _fresh: OrderedDict
    _keys: OrderedDict
    _start: random.Random
    shards: int
    objects_per_page: int
    clock: Callable[[], float] | None

    def _drop(self, obj) -> None:
        raise NotImplementedError

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

    def _candidates(self) -> dict:
        """Evictable objects -> their lease (never read: -1, the epoch; no clock: lease order)."""
        out = dict.fromkeys(self._fresh, -1.0)
        now = None if self.clock is None else self.clock()
        for i, (k, until) in enumerate(self._keys.items()):
            if now is None:
                out[k] = float(i)
            elif until > now:
                break
            else:
                out[k] = until
        return out

    def evict_by_shard(self, target: float, lowerbound: float) -> int:
        """Mooncake's BatchEvict before #2286 (see the module docstring); returns the objects evicted."""
        lease, S = self._candidates(), self.shards
        groups: list = [[] for _ in range(S)]
        for o in chain(self._fresh, self._keys):
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
                    self._drop(o)
                    evicted += 1
                else:
                    rest.append(o)
        want = min(math.ceil(count * lowerbound) - evicted, len(rest))
        if want > 0:  # second pass: the oldest candidates left, in shard order
            cut = sorted(lease[o] for o in rest)[want - 1]
            for o in [o for o in rest if lease[o] <= cut][:want]:
                self._drop(o)
            evicted += want
        return evicted
