"""MAMBA: recurrent-state checkpoints, reused only exactly where one was taken
(*checkpoint reuse*).

- Payload: ``node.comp[MAMBA]`` is a `MambaPayload` with one state slot: the checkpoint of the
  recurrent state after the node's last token (so it sits on the node that ends exactly at
  the checkpoint position), or -1 for a tombstone (the checkpoint was evicted, the node
  stays). Slots come from a state pool with a fixed slot count.
- Validator: accepts a boundary only at the end of a node that holds a checkpoint (never
  inside a node, never at a tombstone).
- Finalizer: a request that reuses a checkpoint gets a private slot and a `CopyState`
  action (shared -> private); the shared slot is never handed out writable.
- Insert: checkpoints are taken where the strategy says: at the end of each request's
  cached sequence (its private slot becomes the checkpoint), and every K tokens (snapshot
  copies). Positions inside existing nodes split them, so a node ends at each checkpoint.
- Lock: the checkpoint at the reused boundary only.
- Evict: in policy order over nodes with an unlocked checkpoint, internal nodes included:
  an internal node keeps its place as a tombstone; an unlocked leaf is removed whole (a leaf
  without a checkpoint can serve no boundary), and so is a leaf that becomes a tombstone.
"""
from __future__ import annotations

from ..actions import L1, CopyState
from ..allocator import PagePool
from ..eviction import EvictionQueue
from ..vote import END
from .base import Component, ComponentKind

MAMBA = ComponentKind.MAMBA


class MambaPayload:
    __slots__ = ("slot", "locks", "srefs", "host")

    def __init__(self, slot: int):
        self.slot = slot  # L1 state slot; -1 = not on L1 (a tombstone there)
        self.locks = 0
        self.srefs = 0  # sessions whose reusable frontier is this checkpoint
        self.host = -1  # with tiers: L2 state slot, -1 = none


class _MambaVoter:
    __slots__ = ("l1_only",)

    def __init__(self, l1_only: bool = False):
        self.l1_only = l1_only

    def mask(self, node, start: int, npages: int):
        pl = node.comp[MAMBA]
        if pl is None or (pl.slot < 0 and (self.l1_only or pl.host < 0)):
            return False
        return END  # only the boundary at the node's end (on any tier unless l1_only)


class MambaComponent(Component):
    kind = MAMBA
    name = "mamba"

    def __init__(self, cache, slots: int | None, every_tokens: int | None):
        self.cache = cache
        self.tree = cache.tree
        self.every = every_tokens
        self.pool = PagePool(slots)
        self.queue = EvictionQueue(cache.policy, self._is_candidate, "mamba")
        self.private = 0  # slots held by running requests
        self.locked = 0  # checkpoints with a lock (payloads with locks > 0)
        self.evicted_slots = 0
        self.evicted_nodes = 0
        self.copies = 0

    # -- candidates --------------------------------------------------------------------------
    @staticmethod
    def _is_candidate(node) -> bool:
        pl = node.comp[MAMBA] if node.alive and not node.pending else None  # not while in flight
        return pl is not None and pl.slot >= 0 and pl.locks == 0

    def touched(self, node) -> None:
        if node is not None and node.parent is not None:
            if self._is_candidate(node):
                self.queue.push(node)
            if self.l3_copies is not None:
                self.l3_copies.offer(node)

    def validator(self, l1_only: bool = False):
        return _MambaVoter(l1_only)

    def useless_leaf(self, node) -> bool:
        pl = node.comp[MAMBA]
        return pl is None or (pl.slot < 0 and pl.host < 0)

    # -- payload hooks ---------------------------------------------------------------------------
    def on_split(self, upper, lower, upper_tokens: int) -> None:
        pass  # the checkpoint belongs to the end of the node: it stays with the lower half

    def on_remove(self, node) -> None:
        pl = node.comp[MAMBA]
        if pl is not None and pl.slot >= 0:
            self.pool.free_one(pl.slot)
        if pl is not None and pl.host >= 0:
            self.host_pool.free_one(pl.host)
        node.comp[MAMBA] = None

    # -- tiers (the checkpoint follows its node between L1 and L2) -----------------------------
    host_pool = None  # set by the hierarchy when an L2 tier exists
    l3_copies = None  # with L3 too: its L2 copies that L3 holds go first (l3_copies.L3HeldCopies)

    def drop_l1(self, node) -> int:
        """Free the node's L1 checkpoint slot (an L2 copy may remain); returns slots freed."""
        pl = node.comp[MAMBA]
        if pl is None or pl.slot < 0:
            return 0
        self.pool.free_one(pl.slot)
        pl.slot = -1
        return 1

    def put_checkpoint(self, node, slot: int) -> bool:
        """Store `slot` as `node`'s checkpoint; False (slot not taken) if it has one."""
        pl = node.comp[MAMBA]
        if pl is not None and pl.slot >= 0:
            return False
        if pl is None:
            node.comp[MAMBA] = MambaPayload(slot)
        else:
            pl.slot = slot
        self.touched(node)
        return True

    # -- private slots -------------------------------------------------------------------------
    def acquire(self, n: int):
        """`n` slots for a request (evicting checkpoints if short); None if impossible."""
        short = n - self.pool.free_pages
        if short > 0 and not self.pool.unbounded:
            self.evict(short)
        got = self.pool.alloc(n)
        if got is not None:
            self.private += len(got)
        return got

    def release(self, slots) -> None:
        self.private -= len(slots)
        self.pool.free(slots)

    def finalize(self, node, private_slot: int) -> list:
        """Copy the shared checkpoint at `node` into the request's private slot."""
        pl = node.comp[MAMBA] if node.parent is not None else None
        if pl is None or pl.slot < 0:
            return []
        self.copies += 1
        return [CopyState("mamba", L1, int(pl.slot), int(private_slot), node.end)]

    # -- locks ---------------------------------------------------------------------------------
    def lock(self, node) -> None:
        pl = node.comp[MAMBA] if node.parent is not None else None
        if pl is not None:
            pl.locks += 1
            self.locked += pl.locks == 1

    def unlock(self, node) -> None:
        pl = node.comp[MAMBA] if node.parent is not None else None
        if pl is not None:
            pl.locks -= 1
            if pl.locks == 0:
                self.locked -= 1
                self.touched(node)

    @property
    def available_slots(self) -> int | None:
        """Free slots plus checkpoints that eviction could free (None: unbounded)."""
        if self.pool.unbounded:
            return None
        held = self.pool.capacity_pages - self.pool.free_pages - self.private
        return self.pool.free_pages + max(0, held - self.locked)

    # -- session references (sessions.py) ------------------------------------------------------
    def add_session_ref(self, node) -> bool:
        pl = node.comp[MAMBA] if node.parent is not None else None
        if pl is None:
            return False
        pl.srefs += 1
        self.touched(node)
        return True

    def drop_session_ref(self, node) -> None:
        pl = node.comp[MAMBA]
        if pl is not None:
            pl.srefs -= 1
            self.touched(node)

    # -- eviction ------------------------------------------------------------------------------
    def evict(self, num: int) -> int:
        """Free at least `num` checkpoint slots in policy order; returns slots freed."""
        freed, removed = self.evict_payloads(num)
        self.evicted_slots += freed
        self.evicted_nodes += removed
        return freed

    def stats(self) -> dict:
        ckpt = tombs = 0
        for n in self.tree.iter_nodes():
            pl = n.comp[MAMBA] if n.parent is not None else None
            if pl is not None:
                if pl.slot >= 0:
                    ckpt += 1
                else:
                    tombs += 1
        return {
            "every_tokens": self.every,
            "capacity_slots": self.pool.capacity_pages,
            "checkpoints": ckpt,
            "private_slots": self.private,
            "tombstone_nodes": tombs,
            "evicted_slots": self.evicted_slots,
            "evicted_nodes": self.evicted_nodes,
            "copies": self.copies,
        }
