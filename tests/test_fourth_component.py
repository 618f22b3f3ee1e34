"""A fourth component, defined in this file only, plugs into the cache with one line and takes
part in voting, eviction, the tiers (L2 backup, demotion, load) and the invariant check, with
no edit in cache_core/ (issue 16 item 1: components are the extension point).

The component, RING, is a per-request sidecar with its own slot pool and its own window rule:
- each request takes one RING slot (`request_slots`); at insert it becomes the payload of the
  node that ends at the request's cached end (`place`); a split leaves it on the lower half;
- window rule (`validator`): a boundary is reusable only inside the last `window` tokens of a
  node that holds a RING payload (on L1, or on any tier unless the vote is L1-only);
- lock: the payload at the reused boundary; evict: the shared payload loop (an unlocked leaf
  goes whole when no L2 exists, otherwise only the L1 slot is dropped);
- tiers: a backup copies the slot to its own L2 pool; demotion drops the L1 slot; a match at
  a boundary whose payload only L2 holds loads it back (L2 -> L1) before it is reused.

Registration: ``CacheConfig(..., extra_components=(RingSpec(window=8, slots=2),))``.
"""
from __future__ import annotations

import numpy as np
import pytest

from cache_core import CacheConfig, RadixCache, ReplayStepper, invariants
from cache_core.actions import L1, L2, Transfer
from cache_core.allocator import PagePool, pool_errors
from cache_core.components.base import Component
from cache_core.components.ports import alloc_host
from cache_core.eviction import EvictionQueue
from cache_core.tiers import TierConfig
from helpers import node_at, shape, toks


class RingPayload:
    __slots__ = ("slot", "host", "locks")

    def __init__(self, slot: int):
        self.slot, self.host, self.locks = slot, -1, 0


class RingVoter:
    def __init__(self, kind: int, window: int, page_size: int, l1_only: bool):
        self.kind, self.W, self.P, self.l1_only = kind, window, page_size, l1_only

    def mask(self, node, start: int, npages: int):
        pl = node.comp[self.kind]
        if pl is None or (pl.slot < 0 and (self.l1_only or pl.host < 0)):
            return False
        ends = start + (np.arange(npages) + 1) * self.P
        return ends >= node.end - self.W


class Ring(Component):
    name = "ring"

    def __init__(self, link, window: int, slots: int):
        self.link, self.kind, self.P, self.W = link, link.slot, link.page_size, window
        self.pool = PagePool(slots)
        self.queue = EvictionQueue(link.policy, self.is_candidate, self.name)
        self.tiers = None
        self.outstanding = 0
        self.evicted = 0

    def is_candidate(self, node) -> bool:
        pl = node.comp[self.kind] if node.alive and not node.pending else None
        return pl is not None and pl.slot >= 0 and pl.locks == 0

    def touched(self, node) -> None:
        if node is not None and node.parent is not None and self.is_candidate(node):
            self.queue.push(node)

    def validator(self, l1_only: bool = False):
        return RingVoter(self.kind, self.W, self.P, l1_only)

    def useless_leaf(self, node) -> bool:
        pl = node.comp[self.kind]
        return pl is None or (pl.slot < 0 and pl.host < 0)

    def on_remove(self, node) -> None:
        pl = node.comp[self.kind]
        if pl is not None and pl.slot >= 0:
            self.pool.free_one(pl.slot)
        if pl is not None and pl.host >= 0:
            self.host_pool.free_one(pl.host)
        node.comp[self.kind] = None

    def lock(self, node) -> None:
        pl = node.comp[self.kind] if node.parent is not None else None
        if pl is not None:
            pl.locks += 1

    def unlock(self, node) -> None:
        pl = node.comp[self.kind] if node.parent is not None else None
        if pl is not None:
            pl.locks -= 1
            self.touched(node)

    def drop_l1(self, node) -> int:
        pl = node.comp[self.kind]
        if pl is None or pl.slot < 0:
            return 0
        self.pool.free_one(pl.slot)
        pl.slot = -1
        return 1

    def evict(self, num: int) -> int:
        freed, _ = self.evict_payloads(num)
        self.evicted += freed
        return freed

    def request_slots(self, new_tokens: int, cached: int, aligned: int):
        if self.pool.free_pages < 1:
            self.evict(1)
        got = self.pool.alloc(1)
        if got is None:
            return None
        self.outstanding += 1
        return [int(got[0])]

    def release_slots(self, slots) -> None:
        self.outstanding -= len(slots)
        self.pool.free(np.asarray(slots, dtype=np.int32))

    def place(self, final, leaf, lo: int, hi: int, slots) -> None:
        if not slots:
            return
        pl = final.comp[self.kind]
        if hi > lo and final.end == hi and (pl is None or pl.slot < 0):
            if pl is None:
                final.comp[self.kind] = pl = RingPayload(slots[0])
            else:
                pl.slot = slots[0]
            self.outstanding -= 1
            self.touched(final)
        else:
            self.release_slots(slots)

    def check(self, nodes, locks, in_flight, errors: list) -> None:
        handles = {node.id: cnt for node, cnt in locks}
        held = []
        for n in nodes[1:]:
            pl = n.comp[self.kind]
            if pl is None:
                continue
            if pl.slot >= 0:
                held.append(pl.slot)
            if pl.locks != handles.get(n.id, 0):
                errors.append(f"node #{n.id}: ring locks {pl.locks} != handles {handles.get(n.id, 0)}")
        held = np.concatenate([np.array(held, dtype=np.int64), in_flight(L1, self.name)])
        pool_errors("ring pool", self.pool, held, self.outstanding, errors)

    # -- tiers ------------------------------------------------------------------------------------
    def attach_tiers(self, tiers, l2_ratio) -> None:
        self.tiers = tiers
        if tiers.has_l2:
            self.host_pool = PagePool(int(self.pool.capacity_pages * l2_ratio))

    def transfer_bytes(self, tokens: int) -> int:
        return 100  # one ring slot

    def backup(self, node) -> None:
        pl = node.comp[self.kind]
        if pl is None or pl.slot < 0 or pl.host >= 0:
            return
        dst = alloc_host(self.tiers, self, 1)
        if dst is None:
            return
        node.pending += 1

        def done(ok, node=node, slot=int(dst[0])):
            node.pending -= 1
            q = node.comp[self.kind] if node.alive else None
            if ok and q is not None and q.host < 0:
                q.host = slot
            else:
                self.host_pool.free_one(slot)
            self.tiers.settled(node)

        self.tiers.emit("backup", L1, L2, 0, pl.slot, int(dst[0]), None, done, self.name, self.transfer_bytes(0))

    def load_boundary(self, node) -> bool:
        pl = node.comp[self.kind] if node.parent is not None else None
        if pl is None or pl.slot >= 0 or pl.host < 0:
            return True
        if self.pool.free_pages < 1:
            self.evict(1)
        got = self.pool.alloc(1)
        if got is None:
            return False
        node.pending += 1

        def done(ok, node=node, slot=int(got[0])):
            node.pending -= 1
            q = node.comp[self.kind] if node.alive else None
            if ok and q is not None and q.slot < 0:
                q.slot = slot
            else:
                self.pool.free_one(slot)
            self.tiers.settled(node)

        self.tiers.emit("load", L2, L1, 0, pl.host, int(got[0]), None, done, self.name, self.transfer_bytes(0))
        return True


class RingSpec:
    """What `CacheConfig.extra_components` takes: a name and a builder from a TreeLink."""

    name = "ring"

    def __init__(self, window: int, slots: int):
        self.window, self.slots = window, slots

    def build(self, link) -> Ring:
        return Ring(link, self.window, self.slots)


def ring_of(cache) -> Ring:
    (ring,) = [c for c in cache.components if c.name == "ring"]
    return ring


def payload(cache, tokens):
    """(L1 slot, L2 slot) of the RING payload on the node ending at len(tokens), or None."""
    nd = node_at(cache, tokens)
    pl = None if nd is None else nd.comp[ring_of(cache).kind]
    return None if pl is None else (pl.slot, pl.host)


A = toks("abcdefghijklmnopqrstuvwxyzABCDEF")  # 32 tokens
B = A + toks("01234567")  # extends A
C = A[:16] + toks("QRSTUVWXYZ*+-/=<")  # shares 16 tokens with A
D = A[:28] + toks("qrstuvwx")  # shares 28 tokens with A


def make(tiers=None, record=True) -> tuple[RadixCache, ReplayStepper]:
    cfg = CacheConfig(page_size=4, capacity_tokens=256, tiers=tiers,
                      extra_components=(RingSpec(window=8, slots=2),))  # the one registration line
    cache = RadixCache(cfg, record_actions=record)
    return cache, ReplayStepper(cache)


def steps(cache, st, *seqs) -> list:
    out = []
    for s in seqs:
        r = st.step(s)
        invariants.check(cache)  # RING's own recount runs with the cache's
        out.append((r.cached_tokens, r.traversed_tokens, r.lost, r.evicted_tokens))
    return out


def test_ring_is_registered_after_full():
    cache, _ = make()
    assert [c.name for c in cache.components] == ["full", "ring"]
    assert [c.name for c in cache.voters] == ["ring"]
    assert ring_of(cache).kind == 1  # the next payload slot after FULL: none is kept for an absent SWA or MAMBA
    assert cache.config.components == ("full", "ring")


def test_ring_votes_with_its_window_rule():
    cache, st = make()
    got = steps(cache, st, A, B, C)
    assert got == [
        (0, 0, (), 0),
        (32, 32, (), 0),  # A's end holds A's slot
        (0, 16, (("ring", 16, "rejected"),), 8),  # 16 < 32 - 8: outside the window
    ]
    cache, st = make()
    got = steps(cache, st, A, B, D, D)
    assert got[2:] == [
        (28, 28, (), 8),  # 28 >= 32 - 8: inside A's window (split at 28, the payload stays below)
        (32, 32, (), 4),  # D's own leaf [28, 36) accepts 32
    ]
    assert shape(cache) == {"abcdefghijklmnopqrstuvwxyzAB": {"qrst": {"uvwx": {}}}}


def test_ring_pool_pressure_evicts_in_policy_order():
    cache, st = make()
    ring = ring_of(cache)
    steps(cache, st, A, B)
    assert ring.pool.free_pages == 0 and ring.outstanding == 0
    assert payload(cache, A) == (0, -1) and payload(cache, B) == (1, -1)
    steps(cache, st, C)  # needs a slot: the least recently used RING node, B's leaf, goes whole
    assert ring.evicted == 1 and cache.full.evicted_tokens == 8
    assert shape(cache) == {"abcdefghijklmnop": {"qrstuvwxyzABCDEF": {}, "QRSTUVWXYZ*+-/=<": {}}}
    assert payload(cache, A) == (0, -1) and payload(cache, B) is None and payload(cache, C) == (1, -1)


def test_ring_follows_its_node_to_l2_and_back():
    cache, st = make(TierConfig(hicache_ratio=2, write_policy="write_through"))
    ring = ring_of(cache)
    steps(cache, st, A)
    moved = [(t.kind, t.component, t.src_tier, t.dst_tier, t.tokens, t.bytes) for t in cache.actions
             if isinstance(t, Transfer)]
    assert moved == [("backup", "full", "L1", "L2", 32, 0), ("backup", "ring", "L1", "L2", 0, 100)]
    assert payload(cache, A) == (0, 0)  # on L1 and backed up to its own L2 pool
    assert cache.evict(32) == 32  # FULL demotes A's leaf: RING's L1 slot goes, its L2 copy stays
    assert payload(cache, A) == (-1, 0) and ring.pool.free_pages == 2
    invariants.check(cache)
    n0 = len(cache.actions)
    b = st.step(B)
    invariants.check(cache)
    moved = [(t.kind, t.component, t.src_tier, t.dst_tier) for t in cache.actions[n0:] if isinstance(t, Transfer)]
    assert moved == [("load", "full", "L2", "L1"), ("load", "ring", "L2", "L1"),
                     ("backup", "full", "L1", "L2"), ("backup", "ring", "L1", "L2")]
    assert (b.cached_tokens, b.cached_device, b.cached_host) == (32, 0, 32)
    assert payload(cache, A) == (0, 0) and payload(cache, B) == (1, 1)


def test_ring_invariants_catch_a_leaked_slot():
    cache, st = make()
    st.step(A)
    ring_of(cache).pool.alloc(1)  # a slot that nobody holds or accounts for
    with pytest.raises(invariants.InvariantError, match="ring pool: free 0 \\+ held 1 \\+ handed out 0 != capacity 2"):
        invariants.check(cache)
