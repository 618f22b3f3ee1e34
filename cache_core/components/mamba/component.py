"""MAMBA: recurrent-state checkpoints, reused only exactly where one was taken
(*checkpoint reuse*).

- Payload: ``node.comp[link.slot]`` is a `MambaPayload` with one state slot: the checkpoint of the
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

import numpy as np

from ...actions import BACKUP, L1, L2, L3, PREFETCH, CopyState
from ...allocator import PagePool, pool_errors
from ...eviction import EvictionQueue
from ..base import Component
from . import tiers as mamba_tiers
from .payload import MambaPayload, MambaVoter


class MambaComponent(Component):
    name = "mamba"
    lost_reason = "no MAMBA checkpoint at boundary"

    def __init__(self, link, slots: int | None, every_tokens: int | None, state_bytes: int = 0):
        self.link = link
        self.kind = link.slot
        self.tree = link.tree
        self.P = link.page_size
        self.every = every_tokens
        self.pool = PagePool(slots)
        self.queue = EvictionQueue(link.policy, self.is_candidate, "mamba", self.session_referenced)
        self.state_bytes = state_bytes
        self.tiers = None  # a TierLink once attach_tiers ran
        self.private = 0  # slots held by running requests
        self.locked = 0  # checkpoints with a lock (payloads with locks > 0)
        self.evicted_slots = 0
        self.evicted_nodes = 0
        self.copies = 0

    @property  # derived, so read-only (Component's is a plain counter)
    def outstanding(self) -> int:  # type: ignore[override]
        return self.private

    # -- candidates --------------------------------------------------------------------------
    def is_candidate(self, node) -> bool:
        pl = node.comp[self.kind] if node.alive and not node.pending else None  # not while in flight
        return pl is not None and pl.slot >= 0 and pl.locks == 0

    def validator(self, l1_only: bool = False):
        return MambaVoter(self.kind, l1_only)

    def useless_leaf(self, node) -> bool:
        pl = node.comp[self.kind]
        return pl is None or (pl.slot < 0 and pl.host < 0)

    # -- payload hooks ---------------------------------------------------------------------------
    def on_split(self, upper, lower, upper_tokens: int) -> None:
        pass  # the checkpoint belongs to the end of the node: it stays with the lower half

    def on_remove(self, node) -> None:
        pl = node.comp[self.kind]
        if pl is not None and pl.slot >= 0:
            self.pool.free_one(pl.slot)
        if pl is not None and pl.host >= 0:
            assert self.host_pool is not None  # an L2 copy lives in the L2 pool
            self.host_pool.free_one(pl.host)
        node.comp[self.kind] = None

    # -- tiers (the checkpoint follows its node between L1 and L2: tiers.py here) ---------------
    def attach_tiers(self, tiers, l2_ratio: float | None) -> None:
        self.attach_l2_pool(tiers, l2_ratio)

    def transfer_bytes(self, tokens: int) -> int:
        return int(self.state_bytes)

    def backup(self, node) -> None:
        pl = node.comp[self.kind]
        if pl is not None and pl.slot >= 0 and pl.host < 0:
            mamba_tiers.checkpoint_to_host(self, node, BACKUP, L1, pl.slot, None)

    def store_payloads(self, node) -> list:
        pl, pk = node.comp[self.kind], node.pkeys
        if pl is not None and pk is not None and pl.host >= 0 and len(pk):
            return [(self.name, int(pk[-1]), int(pl.host))]
        return []

    def storage_mask(self, keys, run_pages: int, voter) -> np.ndarray:
        assert self.tiers is not None  # only a tiered cache asks for an L3 mask
        storage = self.tiers.storage
        return storage.contains_each([(self.name, k) for k in keys[:run_pages].tolist()])

    def l3_mask(self, visited, traversed: int, keys, lo_b: int, cap: int) -> np.ndarray:
        return mamba_tiers.l3_mask(self, visited, traversed, keys, lo_b, cap)

    def prepare_fetch(self, node) -> None:
        if node.comp[self.kind] is None:
            node.comp[self.kind] = MambaPayload(-1)  # before the lock: it counts on the payload

    def fetch_boundary(self, node, keys) -> bool:
        return mamba_tiers.fetch_checkpoint(self, node, keys)

    def prefetch(self, node, keys) -> None:
        node.comp[self.kind] = MambaPayload(-1)
        assert self.tiers is not None  # prefetch happens only with L3
        if len(keys) and (self.name, int(keys[-1])) in self.tiers.storage:
            mamba_tiers.checkpoint_to_host(self, node, PREFETCH, L3, None, keys[-1:])

    def load_boundary(self, node) -> bool:
        return mamba_tiers.load_checkpoint(self, node)

    def held_in_l3(self, node, pl, storage) -> np.ndarray:
        """[0] when L3 holds the node's checkpoint (l3_copies.py), else empty."""
        pk = node.pkeys
        return np.zeros(1 if (self.name, int(pk[-1])) in storage else 0, dtype=np.int64)

    def has_host_copy(self, pl) -> bool:
        return bool(pl.host >= 0)

    def drop_host(self, node, pl, held) -> None:
        assert self.host_pool is not None  # the L2 copy lives in the L2 pool
        self.host_pool.free_one(pl.host)
        pl.host = -1

    def drop_l1(self, node) -> int:
        """Free the node's L1 checkpoint slot (an L2 copy may remain); returns slots freed."""
        pl = node.comp[self.kind]
        if pl is None or pl.slot < 0:
            return 0
        self.pool.free_one(pl.slot)
        pl.slot = -1
        return 1

    def put_checkpoint(self, node, slot: int) -> bool:
        """Store `slot` as `node`'s checkpoint; False (slot not taken) if it has one."""
        pl = node.comp[self.kind]
        if pl is not None and pl.slot >= 0:
            return False
        if pl is None:
            node.comp[self.kind] = MambaPayload(slot)
        else:
            pl.slot = slot
        self.touched(node)
        return True

    # -- one request ---------------------------------------------------------------------------
    def request_slots(self, new_tokens: int, cached: int, aligned: int):
        """Private state + snapshot slots for every-K checkpoints in (cached, aligned): all
        snapshots or none (evicting nothing in vain); None when not even the private slot."""
        every = self.every
        snaps = 0
        if every and aligned > cached:
            snaps = max(0, (aligned - 1) // every - cached // every)
        want = 1 + snaps
        avail = self.available_slots
        if avail is not None and avail < want:
            want = 1
        slots = self.acquire(want)
        return None if slots is None else [int(x) for x in slots]

    def release_slots(self, slots) -> None:
        self.release(slots)

    def place(self, final, leaf, lo: int, hi: int, slots) -> None:
        """The request's private state becomes the checkpoint at `hi` (end of its cached
        sequence); snapshot slots go to every-K positions in (lo, hi), latest first."""
        if not slots:
            return
        slots = list(slots)
        private, snaps = slots[0], slots[1:]
        targets = []
        if hi > lo:
            targets.append((hi, private))
            if self.every:
                q = (hi - 1) // self.every * self.every
                while q > lo and snaps:
                    targets.append((q, snaps.pop()))
                    q -= self.every
        else:
            self.release([private])
        if snaps:
            self.release(snaps)
        for q, slot in targets:
            nd = self.node_ending_at(final, q)
            if self.put_checkpoint(nd, slot):
                self.private -= 1
                if q != hi:
                    self.link.record(CopyState("mamba", L1, int(private), int(slot), q))
            else:
                self.release([slot])

    def node_ending_at(self, bottom, q: int):
        """The node on the path ending at `bottom` whose edge ends exactly at position q
        (splitting the node that contains q)."""
        nd = bottom
        while nd.parent.end >= q:
            nd = nd.parent
        if nd.end == q:
            return nd
        return self.tree.split(nd, q - nd.parent.end)

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

    def finalize(self, node, slots) -> list:
        """Copy the shared checkpoint at `node` into the request's private slot (slots[0])."""
        private_slot = slots[0]
        pl = node.comp[self.kind] if node.parent is not None else None
        if pl is None or pl.slot < 0:
            return []
        self.copies += 1
        return [CopyState("mamba", L1, int(pl.slot), int(private_slot), node.end)]

    # -- locks ---------------------------------------------------------------------------------
    def lock(self, node) -> None:
        pl = node.comp[self.kind] if node.parent is not None else None
        if pl is not None:
            pl.locks += 1
            self.locked += pl.locks == 1

    def unlock(self, node) -> None:
        pl = node.comp[self.kind] if node.parent is not None else None
        if pl is not None:
            pl.locks -= 1
            if pl.locks == 0:
                self.locked -= 1
                self.touched(node)

    @property
    def available_slots(self) -> int | None:
        """Free slots plus checkpoints that eviction could free (None: unbounded)."""
        cap = self.pool.capacity_pages
        if cap is None:  # unbounded
            return None
        held = cap - self.pool.free_pages - self.private
        return self.pool.free_pages + max(0, held - self.locked)

    def snapshot_state(self, node) -> str | None:
        """"present" (an L1 slot), "host" (only on L2), "tombstone"; None: no payload."""
        pl = node.comp[self.kind] if node.comp else None
        if pl is None:
            return None
        if pl.slot >= 0:
            return "present"
        return "host" if pl.host >= 0 else "tombstone"

    # -- session references (sessions.py) ------------------------------------------------------
    def session_referenced(self, node) -> bool:
        return node.comp[self.kind].srefs > 0

    def add_session_ref(self, node):
        """The checkpoint at the region's end (the token: its node), None without one."""
        pl = node.comp[self.kind] if node.parent is not None else None
        if pl is None:
            return None
        pl.srefs += 1
        self.touched(node)
        return node

    def drop_session_ref(self, node, token) -> None:
        pl = token.comp[self.kind]
        if pl is not None:
            pl.srefs -= 1
            self.touched(token)

    def session_node_removed(self, node, token):
        return None if token is node else token  # the checkpoint left with its node

    # -- eviction ------------------------------------------------------------------------------
    def evict(self, num: int) -> int:
        """Free at least `num` checkpoint slots in policy order; returns slots freed."""
        freed, removed = self.evict_payloads(num)
        self.evicted_slots += freed
        self.evicted_nodes += removed
        return freed

    def check(self, nodes, locks, in_flight, errors: list) -> None:
        handles = {node.id: cnt for node, cnt in locks}
        held = []
        live = self.queue.live_ids()
        for n in nodes[1:]:
            pl = n.comp[self.kind]
            if pl is None:
                continue
            if pl.slot >= 0:
                held.append(pl.slot)
                if self.is_candidate(n) and n.id not in live:
                    errors.append(f"node #{n.id}: MAMBA checkpoint missing from its eviction queue")
            if pl.locks != handles.get(n.id, 0):
                errors.append(f"node #{n.id}: MAMBA locks {pl.locks} != handles {handles.get(n.id, 0)}")
        pool_errors("mamba pool", self.pool, np.concatenate([np.array(held, dtype=np.int64),
                                                             in_flight(L1, self.name)]), self.private, errors)
        if self.host_pool is not None:
            host = [n.comp[self.kind].host for n in nodes[1:]
                    if n.comp[self.kind] is not None and n.comp[self.kind].host >= 0]
            pool_errors("mamba L2 pool", self.host_pool,
                        np.concatenate([np.array(host, dtype=np.int64), in_flight(L2, self.name)]), 0, errors)

    def stats(self) -> dict:
        ckpt = tombs = 0
        for n in self.tree.iter_nodes():
            pl = n.comp[self.kind] if n.parent is not None else None
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
