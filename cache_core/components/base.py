"""The component contract: what every cacheable value on the radix topology implements.

One token-keyed tree gives every prefix its identity; each *component* attaches one kind of
reusable value to it (``node.comp[link.slot]``) and defines only what differs between kinds.
The cache, the hierarchy and the request lifecycle iterate their components and call these
hooks; a component is given narrow collaborators (`ports.TreeLink`, `ports.TierLink`), never
the cache. Adding a kind of value = one module implementing this class + one entry in
``CacheConfig.extra_components`` (tests/test_fourth_component.py is the worked example).

=====================  =====================================================================
hook                   meaning
=====================  =====================================================================
``validator()``        a fresh per-match voter: ``mask(node, start, npages)`` says which page
                       boundaries inside `node` it accepts (vote.py); None accepts all (FULL).
``on_split()``         the tree cut a node; cut this component's payload the same way.
``on_remove()``        the node leaves the tree; release this component's payload.
``lock()``/            protect what a running request reads (FULL: the whole matched path;
``unlock()``           SWA: only the window; MAMBA: the checkpoint).
``touched()``          a node's policy key or candidacy may have changed: offer it again.
``useless_leaf()``     a leaf this component can serve no boundary of (it may go).
``evict()``            free at least n units of this component's L1 pool in policy order.
``request_slots()``    take the units one request computes into (evicting when short); None:
``release_slots()``    the request cannot run. Released when it does not insert them.
``finalize()``         make a matched value usable by one request (MAMBA: copy the shared
                       checkpoint into the private slot), returning actions.
``place()``            after an insert: attach the request's units to the inserted path.
``stats()``/``check()``  counters; invariant recount (appends error lines).
``match_state()``      the counters a match's memo key adds up for it (l1_match.py): objects
                       with a ``frees`` count; default its L1 and L2 pools (evictions,
                       tombstones; inserts, splits and removals count on the topology). A
                       component whose votes change otherwise lists a counter of its own.
``page_slots()``       with ``slots_per_page``: its slot index per page of a node (reporting,
                       `RadixCache.slots_of`; FULL: the KV pages, SWA: -1 = tombstone).
session hooks          ``add_session_ref`` (a session's region now ends at a node: reference
                       what serves it; returns a token, None: nothing referenced),
                       ``drop_session_ref`` (release it), ``session_node_removed`` (the
                       token after a node left the tree) and ``session_referenced`` (None,
                       or a test the ``session`` policy ranks this component's payloads by).
tier hooks             ``attach_tiers`` (L2 pool; a `TierLink`), ``backup`` (L1 -> L2 with its
                       node), ``demote`` (FULL left L1: drop the L1 copy), ``store_payloads`` (L3
                       keys and slots of its L2 copies), ``storage_mask``/``l3_mask`` (which boundaries
                       of an L3 run / a tree path it can serve through L3), ``prepare_fetch``/
                       ``fetch_boundary`` (L3 -> L2 for a boundary), ``prefetch`` (L3 -> L2
                       with a prefetched node), ``load_boundary`` (L2 -> L1 for a boundary),
                       ``transfer_bytes`` (bytes of a transfer of n tokens).
=====================  =====================================================================

FULL is always present and anchors the topology. Sidecars have no vote and no tree slot and
follow a declared source component's indices.
"""
from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..allocator import PagePool
from .l3_copies import L3HeldCopies

if TYPE_CHECKING:
    from ..eviction import EvictionQueue
    from .ports import TierLink, TreeLink


class ComponentKind(IntEnum):
    """FULL's slot (0: its pages are `node.value`); every other component takes the next slot
    in build order (`CacheConfig.component_specs`) from its `TreeLink`."""

    FULL = 0


class Component:
    """Base class with no-op hooks; a component overrides what it needs."""

    kind: int
    name: str = "component"
    lost_reason: str = "rejected"  # why a match stopped short for this component (MatchResult.lost)
    host_pool: PagePool | None = None  # its L2 pool once `attach_tiers` ran
    l3_copies: L3HeldCopies | None = None  # with L3 too: its L2 copies that L3 holds (l3_copies.L3HeldCopies)
    # set by the components that keep a tree payload with an L1 pool (`evict_payloads`)
    link: TreeLink
    pool: PagePool
    queue: EvictionQueue
    tiers: TierLink | None  # once `attach_tiers` ran
    outstanding = 0  # units handed out to requests, not yet in the tree or returned
    slots_per_page = False  # True: `page_slots` reports one slot index per page (slots_of)
    # None, or `referenced(node) -> bool`: whether a session references this component's payload
    # on `node` (the `session` policy takes unreferenced payloads first; eviction.SessionAware)
    session_referenced: Callable[[Any], bool] | None = None

    # -- matching --------------------------------------------------------------------------
    def validator(self, l1_only: bool = False):
        """Return a voter with ``mask(node, start, npages)`` (see vote.py), or None to accept
        all. `l1_only`: vote on what is on the device tier only."""
        return None

    def useless_leaf(self, node) -> bool:
        return False

    def is_candidate(self, node) -> bool:
        """`node` holds an L1 payload of this component that eviction may take now."""
        return False

    def touched(self, node) -> None:
        """`node`'s policy key or candidacy may have changed: offer it to the eviction queue if it
        is a candidate, and its L2 copy to the L3-held copies (dropped first under L2 pressure)."""
        if node is None or node.parent is None:
            return
        if self.is_candidate(node):
            self.queue.push(node)
        if self.l3_copies is not None:
            self.l3_copies.offer(node)

    # -- payload hooks ---------------------------------------------------------------------
    def on_split(self, upper, lower, upper_tokens: int) -> None:
        """Cut this component's payload: `upper` takes the first `upper_tokens` tokens."""

    def on_remove(self, node) -> None:
        """Release this component's payload of a node that leaves the tree."""

    def lock(self, node) -> None:
        """Protect what a request that matched up to `node` reads."""

    def unlock(self, node) -> None:
        """Undo one `lock(node)`."""

    def evict(self, num: int) -> int:
        """Free at least `num` units of this component's pool if possible; return units freed."""
        return 0

    # -- one request -------------------------------------------------------------------------
    def request_slots(self, new_tokens: int, cached: int, aligned: int):
        """Units a request that computes `new_tokens` after `cached` (its sequence cut to
        `aligned`) needs; None when the pool cannot supply them."""
        return ()

    def release_slots(self, slots) -> None:
        """Return units from `request_slots` that were not placed."""

    def finalize(self, node, slots) -> list:
        """Actions that make the matched value at `node` usable by one request (default: none)."""
        return []

    def place(self, final, leaf, lo: int, hi: int, slots) -> None:
        """After an insert that ends at `final` (`leaf`: the new leaf or None): attach the
        request's `slots` to the tokens [lo, hi) of the path; release the rest."""
        if slots is not None:
            self.release_slots(slots)

    def stats(self) -> dict:
        return {}

    def match_state(self) -> list:
        """Objects whose ``frees`` counts change whenever this component's payloads change in a
        way a match reads, beyond inserts, splits and removals (the topology's version): its
        L1 pool and, once tiers are attached, its L2 pool; none without a pool."""
        return [p for p in (getattr(self, "pool", None), self.host_pool) if p is not None]

    def snapshot_state(self, node) -> str | None:
        """A word for this component's payload on `node` in the tree snapshot (snapshot.py), or None."""
        return None

    def page_slots(self, node, npages: int):
        """With `slots_per_page`: this component's slot index per page of `node`'s first `npages`."""
        raise NotImplementedError

    # -- session references (sessions.py) -------------------------------------------------------
    def add_session_ref(self, node):
        """A session's region now ends at `node`: reference what reuse there needs. Returns
        a token for `drop_session_ref` (None: nothing was referenced)."""
        return None

    def drop_session_ref(self, node, token) -> None:
        """Release the reference `add_session_ref` gave `token` for (`node`: the region's end
        now; it moves up to the parent when its node leaves the tree)."""

    def session_node_removed(self, node, token):
        """`node`, where a region ended, left the tree: the token to keep (None: the reference
        went with the node)."""
        return token

    def check(self, nodes, locks, in_flight, errors: list) -> None:
        """Invariant recount: `nodes` (root first), `locks` [(node, count)], `in_flight(tier,
        component)` the destination slots of unacknowledged transfers; append error lines."""

    # -- tiers ---------------------------------------------------------------------------------
    def attach_tiers(self, tiers, l2_ratio: float | None) -> None:
        """An L2 tier exists: take a `TierLink` and size an L2 pool (ratio to the L1 pool)."""

    def attach_l2_pool(self, tiers, l2_ratio: float | None) -> None:
        """The usual `attach_tiers` of a component whose payload follows its node to L2: keep
        `tiers`, size the L2 pool at `l2_ratio` x the L1 pool, and with L3 track the L2 copies
        that L3 holds (dropped first under L2 pressure)."""
        self.tiers = tiers
        if not tiers.has_l2:
            return
        cap = self.pool.capacity_pages
        self.host_pool = PagePool(None if cap is None or l2_ratio is None else int(cap * l2_ratio))
        if tiers.storage is not None:
            self.l3_copies = L3HeldCopies(tiers.storage, self.link, self)

    def transfer_bytes(self, tokens: int) -> int:
        return 0

    def backup(self, node) -> None:
        """`node`'s FULL pages reached L2: copy this component's L1 payload to L2 too."""

    def demote(self, node) -> None:
        """`node`'s FULL pages left L1 (an L2 copy remains): drop the L1 payload."""
        self.drop_l1(node)

    def drop_l1(self, node) -> int:
        return 0

    def store_payloads(self, node) -> list:
        """The payloads `node` holds on L2 as (component, L3 page key, L2 slot): a FULL store
        of the node carries them along (`Transfer.payloads`)."""
        return []

    def storage_mask(self, keys, run_pages: int, voter) -> np.ndarray:
        """Boundaries after page j < run_pages of an L3 run (page keys `keys`) that this
        component accepts; `voter`: its validator at the end of the tree walk. Default: none
        (a component that keeps nothing in L3 serves no boundary through it)."""
        return np.zeros(run_pages, dtype=bool)

    def l3_mask(self, visited, traversed: int, keys, lo_b: int, cap: int) -> np.ndarray:
        """Page boundaries b in [lo_b, cap] of a tree path this component can serve from the
        tree (L1 or L2) or from L3, as a mask indexed by b - lo_b. Default: none."""
        return np.zeros(cap - lo_b + 1, dtype=bool)

    def prepare_fetch(self, node) -> None:
        """Before a boundary at `node`'s end is locked for an L3 fetch."""

    def fetch_boundary(self, node, keys) -> bool:
        """Start L3 -> L2 fetches of what reuse at `node`'s end needs; False if impossible."""
        return True

    def prefetch(self, node, keys) -> None:
        """A node was prefetched from L3 into L2: bring this component's payloads with it."""

    def load_boundary(self, node) -> bool:
        """Make what reuse at `node`'s end needs valid on L1 (loads from L2); False if short."""
        return True

    # -- shared by the voting components -------------------------------------------------------
    def evict_payloads(self, num: int) -> tuple[int, int]:
        """The eviction loop SWA and MAMBA share: pop candidates in policy order; an unlocked
        leaf goes whole (when no L2 tier exists: it serves nothing without this payload),
        otherwise only this component's L1 payload is dropped (`drop_l1`; an L2 copy may
        remain). Returns (units freed, nodes removed)."""
        freed = removed = 0
        link = self.link
        while freed < num:
            node = self.queue.pop()
            if node is None:
                break
            if not node.children and node.lock_ref == 0 and self.host_pool is None:
                before = self.pool.free_pages
                link.remove_leaf(node)
                freed += self.pool.free_pages - before
                removed += 1
                continue
            freed += self.drop_l1(node)
        self.queue.maybe_compact(link.tree.num_nodes)
        return freed, removed
