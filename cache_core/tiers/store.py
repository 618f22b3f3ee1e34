"""L3 page stores: the prefix-closed LRU index and a Mooncake Store model.

Both address pages by their stable page keys (cache_core.keys; SWA/MAMBA payloads by
(component, key) pairs) and answer the same questions: is a key present (`in`; many keys:
`contains_each`), how long is the run of present keys from the first (`leading`), mark keys
read (`touch`), store keys (`put`, `put_many`). Which one a Hierarchy uses is ``TierConfig.l3_model``.

``prefix`` (StorageIndex): LRU by put or read, one entry per page, capacity in pages. Until its
first eviction a read is logged, not applied page by page (read_log.py: ordered once then).

``mooncake`` (MooncakeStore): what Mooncake Store's master does with SGLang's HiCache objects
(sources and the reasoning in docs/store_model.md):
- one object per page (SGLang's backend stores a page's K and V, per TP rank, as objects put
  and probed together; here they are one object);
- a put of a key already present only renews its lease (SGLang's backend probes
  `batch_is_exist` before `batch_put_from` and puts only the missing keys); a new object has
  no lease (its lease timeout is the epoch), so it is evicted before any object that was read;
- a read (`touch`: the prefetch's existence probe and get) grants a lease until now +
  ``lease_ttl_s`` (Mooncake's `default_kv_lease_ttl`, 10 s); eviction takes the objects with the
  oldest lease first and skips every object whose lease has not expired (on the store's
  ``clock``, which the simulator sets to its own; with no clock, as in replay, leases only
  order eviction and never protect);
- eviction is in batches: once the used fraction exceeds ``high_watermark`` (Mooncake's
  `eviction_high_watermark_ratio`, 0.90), or a put found the pool full (that put fails: the
  object is not stored), the master's eviction thread evicts n = ceil(objects x max(ratio,
  used - high_watermark + ratio)) objects (`eviction_ratio`, 0.05; n counts every object in
  the pool, leased or not, but at most the expired ones go): the n oldest leases, and every
  never-read object when the n-th is one of them (they all share the epoch lease; in put order
  here); a pass that evicts nothing leaves the put failure pending for the next pass (before
  the next put batch: Mooncake's eviction thread wakes every 10 ms);
- not prefix aware: a lost middle page cuts the reusable run there (`leading` stops at it);
- ``replicas`` copies of each object share the pool (capacity / replicas objects);
- ``objects_per_page`` (default 1): the objects SGLang's backend stores per page (its K and V
  per TP rank: 2 x tp for MHA/GQA, tp for MLA); a page is present only while all of them are
  (``batch_exists`` stops at the first page with a missing object) and a put stores only the
  missing ones; capacity is in objects (capacity_pages x objects_per_page);
- ``shards`` (default 1: one pool-wide pass, Mooncake since #2286, 2026-06-24): Mooncake's
  ``BatchEvict`` before that (from #374, 2025-05-21) walked its 1024 metadata shards (an
  object's shard: a hash of its key) from a random one, and in each shard evicted
  ceil(objects so far x target) - evicted so far of that shard's candidates, oldest lease
  first (every candidate at the cutoff goes); a second pass takes the oldest remaining
  candidates up to max(target / 2, used - watermark) of the pool. Eviction is then local to
  a shard: a shard without never-read objects gives up its oldest leases (any page of any
  history), so with ``objects_per_page`` > 1 a page's objects are lost independently;
- an optional SSD tier (``ssd_pages``; 0 = none): what the memory pool evicts is written to
  SSD (Mooncake's offload keeps a disk replica), the oldest offloaded first out when it is
  full; a key on SSD counts as present (a get falls back to the disk replica) and is not put
  again.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from itertools import takewhile

import numpy as np

from .read_log import ReadLog
from .store_options import (LEASE_TTL_S, MODELS, MOONCAKE, MooncakeOptions, l3_model_config, l3_model_configs,  # noqa: F401
                            l3_model_names, l3_options, register_l3_model, unregister_l3_model)
from .store_shards import ShardedEviction

_RUNS_KEPT = 1 << 16  # `leading`'s remembered runs, at most (then it starts over)


class StorageIndex:
    """L3 ``prefix`` model: page keys present in the external store, least recently used first."""

    clock: Callable[[], float] | None = None  # a callable giving the current time in seconds (the Mooncake model's leases)

    def __init__(self, capacity_pages: int | None):
        self.capacity_pages = capacity_pages
        self._keys: dict = {}  # key -> its put's stamp while reads are logged; then an OrderedDict, LRU first
        self.reads: ReadLog | None = ReadLog()  # None from the first eviction on (then ordered)
        self._runs: dict = {}  # first key -> (n, n-th key): `leading`'s last run from it
        self.evicted_pages = self.changes = 0  # changes: put batches and removals (match.py)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def leading(self, keys) -> int:
        """How many of `keys`, from the first, are present (a storage hit run). A page key
        names its whole prefix (cache_core.keys), so while no key has left the store, the
        last run found from the same first key is still present up to its last key: the
        count resumes after it (a queued request probed again costs only its new pages)."""
        if not len(keys):
            return 0
        first, runs = int(keys[0]), self._runs
        n, last = runs.get(first, (0, None))
        if n > len(keys) or (n and int(keys[n - 1]) != last):
            n = 0
        n += self._present_run(keys[n:].tolist())
        if n:
            if len(runs) >= _RUNS_KEPT:
                runs.clear()
            runs[first] = (n, int(keys[n - 1]))
        return n

    def _present_run(self, keys: list) -> int:
        """How many of `keys`, from the first, are present."""
        return len(list(takewhile(self._lookup(), keys)))

    def contains_each(self, keys: list) -> np.ndarray:
        """`key in self` for each of `keys`, as a bool mask."""
        return np.fromiter(map(self._lookup(), keys), dtype=bool, count=len(keys))

    def _lookup(self):
        """The fastest callable for `key in self`."""
        return self._keys.__contains__

    def _removed(self) -> None:
        """A key left the store: the runs `leading` remembers may have lost a page, and a kept
        match (match.py) may count it (a discard on one engine of a shared store)."""
        self._runs.clear()
        self.changes += 1

    def discard(self, keys) -> None:
        """Forget pages `keys` (an int64 array of FULL page keys, or a list of any keys: a read
        found them missing or corrupt, a failed prefetch), so a later probe stops before them
        instead of reading them again."""
        for k in (keys.tolist() if isinstance(keys, np.ndarray) else keys):
            self._forget(k)
        self._removed()

    def _forget(self, key) -> None:
        self._keys.pop(key, None)

    def pages(self) -> list:
        """Every key present (FULL page keys, (component, key) payloads), in no set order."""
        return list(self._keys)

    def clear(self) -> None:
        """Forget every key: the store's index is lost (its master restarted; fault what-ifs)."""
        self.discard(self.pages())

    def on_ssd(self, keys) -> int:
        """How many of `keys` only an SSD tier holds (none here)."""
        return 0

    def touch(self, keys) -> None:
        if self.reads is not None:  # before the first eviction: logged
            return self.reads.add(keys, len(self._keys))
        move = self._ordered().move_to_end
        for k in keys.tolist():
            try:
                move(k)
            except KeyError:  # not present: nothing to mark
                pass

    def _ordered(self) -> OrderedDict:
        """The index once the first eviction ordered it (least recently used first)."""
        assert isinstance(self._keys, OrderedDict) and self.reads is None
        return self._keys

    def put(self, keys) -> None:
        self.put_many(keys.tolist())

    def put_many(self, keys: list) -> None:
        """Store keys (ints for FULL pages, (component, key) pairs for the others)."""
        reads, cap, self.changes = self.reads, self.capacity_pages, self.changes + 1
        if reads is not None:  # before the first eviction: stamped, ordered when it comes
            self._keys.update(zip(keys, reads.stamps(len(keys))))
            if cap is None or len(self._keys) <= cap:
                return
            self._keys, self.reads = reads.order(self._keys), None
        d = self._ordered()
        if reads is None:  # ordered already: LRU by put or read
            for k in keys:
                d[k] = None
                d.move_to_end(k)
        while cap is not None and len(d) > cap:
            d.popitem(last=False)
            self.evicted_pages += 1
            self._removed()

    def stats(self) -> dict:
        return {"l3_pages": len(self), "l3_evicted_pages": self.evicted_pages}


class MooncakeStore(StorageIndex):
    """L3 ``mooncake`` model (see the module docstring): lease-ordered objects, watermark
    batch eviction, failed puts on a full pool, an optional SSD tier below."""

    _keys: OrderedDict  # read objects, oldest lease first (ordered from the start)

    def __init__(self, capacity_pages: int | None, *, high_watermark: float = MOONCAKE.l3_eviction_high_watermark,
                 eviction_ratio: float = MOONCAKE.l3_eviction_ratio, replicas: int = MOONCAKE.l3_replicas,
                 ssd_pages: int = 0, lease_ttl_s: float = LEASE_TTL_S, shards: int = MOONCAKE.l3_eviction_shards,
                 objects_per_page: int = MOONCAKE.l3_objects_per_page):
        per = objects_per_page
        super().__init__(None if capacity_pages is None else capacity_pages * per // replicas)
        self.shards = shards
        self.objects_per_page = per
        # sharded batch eviction (store_shards.py), a strategy called with this store's maps
        self.sharding = ShardedEviction(shards, per) if shards > 1 else None
        self.evicted_objects = 0
        self.high_watermark = high_watermark
        self.eviction_ratio = eviction_ratio
        self.lease_ttl_s = lease_ttl_s
        self._fresh: OrderedDict = OrderedDict()  # never read: evicted first, in put order
        self._keys = OrderedDict()  # read: key -> lease timeout (s), oldest lease first
        self._need_eviction = False  # a put failed and no pass has evicted since
        self.ssd_pages = ssd_pages * per
        self._ssd: OrderedDict = OrderedDict()  # offloaded, oldest first
        self.rejected_puts = 0
        self.eviction_batches = 0
        self.ssd_evicted_pages = 0

    def __len__(self) -> int:
        return len(self._keys) + len(self._fresh)

    def _objects(self, keys: list) -> list:
        """The objects of pages `keys` (the keys themselves with one object per page)."""
        per = self.objects_per_page
        return keys if per == 1 else [(k, h) for k in keys for h in range(per)]

    def _in_mem(self, obj) -> bool:
        return obj in self._keys or obj in self._fresh

    def _has(self, obj) -> bool:
        return obj in self._keys or obj in self._fresh or obj in self._ssd

    def in_memory(self, key) -> bool:
        return all(self._in_mem(o) for o in self._objects([key]))

    def __contains__(self, key) -> bool:
        return all(self._has(o) for o in self._objects([key]))

    def shard(self, obj) -> int:
        """The metadata shard of an object (``shards`` > 1; store_shards.py)."""
        assert self.sharding is not None  # built when shards > 1
        return self.sharding.shard(obj)

    def _lookup(self):
        return self.__contains__

    def pages(self) -> list:
        """Every page (or payload) key with an object present, memory or SSD."""
        per = self.objects_per_page
        objs = [o for d in (self._keys, self._fresh, self._ssd) for o in d]
        return list(dict.fromkeys(objs if per == 1 else (o[0] for o in objs)))

    def _forget(self, key) -> None:  # every object of the page, wherever it is (memory or SSD)
        for o in self._objects([key]):
            for d in (self._keys, self._fresh, self._ssd):
                d.pop(o, None)

    def on_ssd(self, keys) -> int:
        """How many of `keys` only the SSD tier holds (a read of them comes from disk)."""
        return sum(1 for k in keys.tolist() if k in self and not self.in_memory(k))

    def touch(self, keys) -> None:
        self._lease(self._objects(keys.tolist()))

    def _lease(self, keys) -> None:
        """Grant a read lease (Mooncake's `GrantReadLease`: timeout = max(timeout, now + ttl));
        the clock only moves forward, so the leased order stays the timeout order."""
        leased, fresh = self._keys, self._fresh
        until = 0.0 if self.clock is None else self.clock() + self.lease_ttl_s
        for k in keys:
            if k in leased:
                leased[k] = max(leased[k], until)
                leased.move_to_end(k)
            elif k in fresh:
                del fresh[k]
                leased[k] = until

    def expired(self) -> int:
        """Read objects whose lease has expired (all of them with no clock)."""
        if self.clock is None:
            return len(self._keys)
        now, n = self.clock(), 0
        for until in self._keys.values():
            if until > now:
                break
            n += 1
        return n

    def put_many(self, keys: list) -> None:
        self.changes += 1
        if self._need_eviction:  # a pass since the last batch, once leases may have expired
            self._evict(True)
        objs = self._objects(keys)
        self._lease([o for o in objs if self._has(o)])
        cap = self.capacity_pages
        full = False
        for k in objs:
            if self._has(k):
                continue
            if cap is not None and len(self) >= cap:
                self.rejected_puts += 1  # no space: the put fails, the eviction thread is woken
                full = True
                continue
            self._fresh[k] = None
        self._evict(full or self._need_eviction)

    def _evict(self, full: bool) -> None:
        """One eviction-thread pass: above the watermark (or after a failed put) evict
        ceil(objects x max(ratio, used - watermark + ratio)) objects, oldest lease first,
        objects under an unexpired lease skipped."""
        cap = self.capacity_pages
        if cap is None or cap == 0:
            return
        n_obj = len(self)
        used = n_obj / cap
        if not (used > self.high_watermark or (full and self.eviction_ratio > 0.0)):
            return
        target = max(self.eviction_ratio, used - self.high_watermark + self.eviction_ratio)
        if self.shards > 1:
            now = None if self.clock is None else self.clock()
            assert self.sharding is not None  # built when shards > 1
            n = self.sharding.evict(self._fresh, self._keys, now, self._drop, target,
                                    max(target / 2, used - self.high_watermark))
            self._need_eviction = full and n == 0
            self.eviction_batches += n > 0
            return
        n = min(len(self._fresh) + self.expired(), math.ceil(n_obj * target))
        self._need_eviction = full and n == 0
        if n:
            self.eviction_batches += 1
        # the n-th oldest lease is the cutoff and every object at it goes (evict_num is a
        # minimum): when it is a never-read object (lease at the epoch), all of those go
        n = max(n, len(self._fresh)) if n else 0
        for _ in range(n):
            d = self._fresh if self._fresh else self._keys
            k, _v = d.popitem(last=False)
            self._evicted(k)

    def _evicted(self, obj) -> None:
        self._removed()  # (conservative: with an SSD tier the page may still be present)
        self.evicted_objects += 1
        self.evicted_pages = self.evicted_objects // self.objects_per_page
        self._offload(obj)

    def _drop(self, obj) -> None:
        if obj in self._fresh:
            del self._fresh[obj]
        else:
            del self._keys[obj]
        self._evicted(obj)

    def _offload(self, key) -> None:
        if not self.ssd_pages:
            return
        ssd = self._ssd
        ssd[key] = None
        while len(ssd) > self.ssd_pages:
            ssd.popitem(last=False)
            self.ssd_evicted_pages += 1

    def stats(self) -> dict:
        out = super().stats()
        out.update(l3_rejected_puts=self.rejected_puts, l3_eviction_batches=self.eviction_batches)
        if self.ssd_pages:
            out.update(l3_ssd_pages=len(self._ssd), l3_ssd_evicted_pages=self.ssd_evicted_pages)
        return out


@register_l3_model("prefix")
def _prefix_store(cfg, capacity_pages, page_size: int) -> StorageIndex:
    return StorageIndex(capacity_pages)


@register_l3_model("mooncake", MooncakeOptions)
def _mooncake_store(cfg, capacity_pages, page_size: int) -> MooncakeStore:
    return MooncakeStore(capacity_pages, high_watermark=cfg.l3_high_watermark, eviction_ratio=cfg.l3_eviction_ratio,
                         replicas=cfg.l3_replicas, ssd_pages=(cfg.l3_ssd_tokens or 0) // page_size,
                         lease_ttl_s=cfg.l3_lease_ttl_s, shards=cfg.l3_eviction_shards,
                         objects_per_page=cfg.l3_objects_per_page)


def make_store(cfg, page_size: int) -> StorageIndex:
    """The L3 store `cfg` (a TierConfig with l3) asks for (its registered `l3_model`)."""
    cap = None if cfg.l3_tokens is None else cfg.l3_tokens // page_size
    return MODELS.make(cfg.l3_model, cfg=cfg, capacity_pages=cap, page_size=page_size)


__all__ = ["LEASE_TTL_S", "MooncakeStore", "StorageIndex", "make_store", "register_l3_model", "l3_model_names",
           "l3_model_config", "l3_model_configs", "l3_options", "unregister_l3_model"]
