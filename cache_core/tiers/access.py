"""`TieredAccess`: the tiered matcher and loader a `RadixCache` with tiers holds (composed, not
a mixin): the tiered match (its `matcher`, match.py: a pure query plus a touch), loads,
prefetches, acknowledgements and healing of host-only nodes. It is given the topology, the hierarchy and the page size, never the cache. The mechanics of residency live in hierarchy.py, votes.py and each component's tiers module;
this is the orchestration on the cache."""
from __future__ import annotations

from ..records import LockHandle, MatchResult, TokenSeq
from ..vote import vote
from .match import TieredMatch
from .votes import fetch_boundary, load_boundary, prefetch_components


class TieredAccess:
    def __init__(self, topo, hier, page_size: int, memo: bool = True):
        self.topo, self.hier, self.page_size = topo, hier, page_size
        self.matcher = TieredMatch(topo, hier, memo)
        self.tree, self.full = topo.tree, topo.full
        self.voters, self.components = topo.voters, topo.components

    def lock(self, m: MatchResult) -> None:
        self.topo.lock(m.handle.node)

    def unlock(self, m: MatchResult) -> None:
        self.topo.unlock(m.handle.node)

    def _fetch_l3(self, m: MatchResult, seq):
        """Start the L3 -> L2 fetch of the component payloads that reuse at `m.l3_boundary`
        needs (votes.fetch_boundary), splitting the node there. Returns (node ending
        at the boundary, True when every missing payload is on its way), or (None, False)."""
        b, tree = m.l3_boundary, self.tree
        path = tree.path_nodes(seq.data, b)
        if not path or sum(k for _, k in path) != b:
            return None, False
        bnode, k = path[-1]
        if k < bnode.num_tokens:
            bnode = tree.split(bnode, k)
        for c in self.voters:
            c.prepare_fetch(bnode)  # before the lock: it counts on the payload
        self.topo.version += 1  # a payload placeholder may be new (match.py reads payloads)
        self.topo.lock(bnode)  # no L2 eviction (for the slots) takes the path meanwhile
        try:
            ok = fetch_boundary(self.voters, bnode, seq.page_keys(self.page_size))
        finally:
            self.topo.unlock(bnode)
        return bnode, ok

    def _load_l3(self, m: MatchResult, seq) -> MatchResult:
        """`load`'s first part for a match with an L3 component boundary: fetch the payloads;
        once they are valid on L2 (replay: acknowledged at emission) the match moves to the
        boundary (locked; `m` unlocked), and the rest of `load` brings it to L1. FULL is
        counted where it is (device/host): only the component payloads came from L3."""
        bnode, ok = self._fetch_l3(m, seq)
        if bnode is None or not ok or not self.hier.auto_ack:
            return m  # in flight: the caller matches again once they are acknowledged
        b, trav = bnode.end, m.traversed_tokens
        d = bnode
        while d.parent is not None and d.value is None:
            d = d.parent
        lost = tuple((name, min(t, trav - b), why) for name, t, why in m.lost if trav > b)
        new = MatchResult(b, LockHandle(bnode), trav, lost, d.end, b - d.end, 0)
        self.lock(new)
        self.unlock(m)
        return new

    def _fallback_l1(self, node):
        """The deepest boundary at or above `node` that L1 alone can serve (all components)."""
        path = []
        n = node
        while n.parent is not None:
            path.append(n)
            n = n.parent
        path.reverse()
        on_l1 = [x for x in path if x.value is not None]
        if not on_l1:
            return self.tree.root
        best, bnode, cut, _ = vote(self.voters, on_l1, on_l1[-1].end, self.page_size, l1_only=True)
        if bnode is None:
            return self.tree.root
        return self.tree.split(bnode, cut) if cut < bnode.num_tokens else bnode

    def _reuse_l1_now(self, m: MatchResult, top, chain) -> MatchResult:
        """Loads in flight (an engine acknowledges them later): reuse what L1 holds now; the
        caller matches again once they are acknowledged (storage and the voters' boundary
        payloads are dealt with then)."""
        for c in chain:
            if c.value is None:
                break
            top = c
        if self.voters and top.parent is not None:
            top = self._fallback_l1(top)
        new = MatchResult(top.end, LockHandle(top), m.traversed_tokens, m.lost, min(m.device, top.end),
                          max(0, top.end - m.device), 0)
        self.lock(new)
        self.unlock(m)
        return new

    def load(self, m: MatchResult, seq, pipeline: bool = False) -> MatchResult:
        """Bring a locked match's host hits (L2 -> L1) and storage hits (L3 -> L2 -> L1) into
        newly allocated L1 pages. Returns the match to use from now on: locked, its
        cached_tokens = device + loaded host + loaded storage tokens (tokens count as
        cached only once loaded), the old lock released. `pipeline`: emit every load of a
        host run at once (RadixCache.pipeline_loads)."""
        hier = self.hier
        if m.host_tokens == 0 and m.storage_tokens == 0 and not self.voters:
            return m
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        if m.l3_boundary > m.cached_tokens and hier.storage is not None:
            m = self._load_l3(m, seq)
        node = m.handle.node
        chain = []
        n = node
        while n.parent is not None and n.value is None:
            chain.append(n)
            n = n.parent
        chain.reverse()
        ids0 = hier.ids
        host = hier.load_host(chain, pipeline=pipeline)
        if pipeline and hier.ids != ids0 and any(c.value is None for c in chain):
            return self._reuse_l1_now(m, n, chain)
        top = n
        for c in chain:
            if c.value is None:
                break
            top = c
        storage = 0
        held = None
        if top is node and m.storage_tokens and m.traversed_tokens == node.end:
            P = self.page_size
            keys = seq.page_keys(P)[node.end // P : (node.end + m.storage_tokens) // P]
            pnode = hier.prefetch(node, seq.data, node.end, keys)
            if pnode is not None:
                if self.voters:
                    prefetch_components(hier, pnode, keys)  # holds pnode in flight meanwhile
                held = MatchResult(pnode.end, LockHandle(pnode))
                self.lock(held)  # no eviction takes it while it is being loaded
                if pnode.host is not None and hier.load_host([pnode]):
                    top, storage = pnode, pnode.num_tokens
        if self.voters and top.parent is not None:
            self.topo.lock(top)  # protect the window while loading it
            load_boundary(self.voters, top)
            self.topo.unlock(top)
            # reuse exactly what L1 can now serve: the deepest boundary at or above `top` that
            # every component accepts from L1 alone (a payload that could not be loaded, or a
            # storage run that did not arrive, moves the boundary up)
            served = self._fallback_l1(top)
            if served is not top:
                top = served
                host = max(0, top.end - m.device)
                storage = 0
        new = MatchResult(top.end, LockHandle(top), m.traversed_tokens, m.lost, min(m.device, top.end), host, storage)
        self.lock(new)
        self.unlock(m)
        if held is not None:
            self.unlock(held)
        return new

    def load_payloads(self, m: MatchResult) -> bool:
        """Issue now, L2 -> L1, the component payloads that reuse at a locked match's boundary
        needs (the SWA window's pages, the MAMBA checkpoint), while the path's FULL pages that
        `load` issued may still be in flight: one round, their L1 slots taken at once (an
        engine overlapping loads with compute). False when an L1 pool cannot take them all."""
        return load_boundary(self.voters, m.handle.node)

    def prefetch(self, m: MatchResult, seq) -> int:
        """Start bringing a locked match's storage run (L3) into L2 as a host-only node,
        without loading anything into L1 (an engine does this while the request waits, as
        SGLang's prefetch thread does). Returns the tokens being prefetched (0: none; e.g. no
        L3 run right after the tree match, or no L2 room). The caller may unlock `m` at once:
        the new node is held in flight until its transfers are acknowledged.
        A match with an `l3_boundary` (component payloads on the tree path only in L3) gets
        those payloads fetched L3 -> L2 instead; that returns 0 (no FULL tokens come from L3)."""
        hier = self.hier
        if hier.storage is None:
            return 0
        if not m.storage_tokens:
            if m.l3_boundary > m.cached_tokens:
                self._fetch_l3(m, seq if isinstance(seq, TokenSeq) else TokenSeq(seq))
            return 0  # FULL stays where it is: no FULL tokens come from L3
        node = m.handle.node
        if m.traversed_tokens != node.end:
            return 0
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        P = self.page_size
        keys = seq.page_keys(P)[node.end // P : (node.end + m.storage_tokens) // P]
        pnode = hier.prefetch(node, seq.data, node.end, keys)
        if pnode is None:
            return 0
        if self.voters:
            prefetch_components(hier, pnode, keys)
        return pnode.num_tokens

    def ack(self, action_id: int, ok: bool = True) -> None:
        """The data plane finished (or failed) transfer `action_id`: on success the payload is
        valid on its destination; on failure the destination slots are freed and the source
        stays valid (but for a prefetch's L3 pages: unreadable, they leave the L3 index)."""
        self.hier.ack(action_id, ok)


    def heal_l1(self, node, pages, pages_from: int, lo: int) -> int:
        """Give nodes at the bottom of the path (at or after pages_from) that are not on L1 the
        pages the request computed for them, so L1 stays prefix-closed: host-only nodes and,
        FULL-only, nodes still in flight (a prefetch L3 -> L2 or a load L2 -> L1 not yet
        acknowledged: the request's pages are their only L1 copy, a load's pages are freed
        at its ack; an engine keeps such an insert locked and computes on over it). With
        SWA/MAMBA, whose payloads in flight are placed by their own acks, a node in flight
        is not healed. Returns how many leading pages are still duplicates to free."""
        chain = []
        n = node
        heal_in_flight = not self.voters
        while (n.parent is not None and n.value is None and (heal_in_flight or not n.pending)
               and n.parent.end >= pages_from):
            chain.append(n)
            n = n.parent
        if n.parent is not None and n.value is None:
            return lo  # a node above pages_from is not on L1: heal nothing, L1 stays prefix-closed
        P = self.page_size
        for h in chain:
            a, b = (h.parent.end - pages_from) // P, (h.end - pages_from) // P
            self.full.outstanding -= b - a
            self.full.set_l1(h, pages[a:b])
        return (n.end - pages_from) // P if chain else lo
