"""`RadixCache`: the orchestrator over the radix topology and its components.

Public calls take and return small dataclasses; callers never hold tree nodes (a
`MatchResult` carries an opaque handle used for lock/unlock and insert bookkeeping).

Typical request (this is what `replay.ReplayStepper` does, step by step)::

    seq = TokenSeq(prompt + output[:-1])
    m = cache.match(seq, limit)          # longest cached prefix, page-aligned
    cache.lock(m)                        # protect the matched path
    pages = cache.alloc(n)               # page indices for the new tokens (may evict)
    cache.insert(seq, n_aligned, pages, m.cached_tokens)
    cache.unlock(m)

All costs are logical: the cache is given no clock, sleeps never and touches no bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .actions import L1, Alloc, CopyState, Free
from .allocator import INDEX_DTYPE
from .components.full import FullComponent
from .components.mamba import MambaComponent
from .components.swa import SwaComponent
from .config import CacheConfig
from .eviction import make_policy
from .keys import as_tokens, page_keys
from .sessions import SessionRegistry
from .tiers import Hierarchy, TieredFull
from .tiers_hybrid import attach_pools, load_boundary, prefetch_components, storage_boundary
from .tree import RadixTree
from .vote import vote

_EMPTY = np.empty(0, dtype=INDEX_DTYPE)


class TokenSeq:
    """A token sequence prepared once for repeated matching (int64 bytes + length), with its
    page keys computed on first need (or handed in by a workload that builds them
    incrementally: `keys` for at least the full pages that will be looked up)."""

    __slots__ = ("data", "length", "_keys", "_keys_page")

    def __init__(self, tokens, keys: np.ndarray | None = None, page_size: int | None = None):
        if isinstance(tokens, TokenSeq):
            self.data, self.length = tokens.data, tokens.length
            self._keys, self._keys_page = tokens._keys, tokens._keys_page
            return
        arr = as_tokens(tokens)
        self.data = arr.tobytes()
        self.length = len(arr)
        self._keys, self._keys_page = keys, page_size

    def __len__(self) -> int:
        return self.length

    @classmethod
    def join(cls, *parts) -> "TokenSeq":
        """The concatenation of int64 token arrays, copied once (no intermediate array)."""
        arrs = [as_tokens(p) for p in parts]
        seq = cls.__new__(cls)
        seq.data = b"".join(memoryview(a) for a in arrs if len(a))
        seq.length = sum(len(a) for a in arrs)
        seq._keys = seq._keys_page = None
        return seq

    def page_keys(self, page_size: int) -> np.ndarray:
        """Stable keys of every full page (cache_core.keys), computed once."""
        if self._keys is None or self._keys_page != page_size:
            toks = np.frombuffer(self.data, dtype=np.int64)
            self._keys, self._keys_page = page_keys(toks, page_size)[0], page_size
        return self._keys


class LockHandle:
    """Opaque reference to a matched prefix; only the cache looks inside."""

    __slots__ = ("_node",)

    def __init__(self, node):
        self._node = node


@dataclass(frozen=True, slots=True)
class MatchResult:
    cached_tokens: int  # reusable prefix length (page-aligned): every component accepts it
    handle: LockHandle
    traversed_tokens: int = -1  # how far the FULL path matched (>= cached_tokens)
    lost: tuple = ()  # ((component, tokens short of the traversal, reason), ...)
    device_tokens: int = -1  # with tiers: the part on L1 (-1: all of cached_tokens)
    host_tokens: int = 0  # with tiers: the part on L2 only
    storage_tokens: int = 0  # with tiers: the part found in L3 (beyond the tree)

    @property
    def device(self) -> int:
        return self.cached_tokens if self.device_tokens < 0 else self.device_tokens

    @property
    def traversed(self) -> int:
        return self.cached_tokens if self.traversed_tokens < 0 else self.traversed_tokens


@dataclass(frozen=True, slots=True)
class InsertResult:
    prefix_tokens: int  # tokens of the key that were already in the tree
    freed_pages: int  # pages handed back: duplicates of tree content and the partial tail
    handle: LockHandle | None = None  # the node that ends the inserted sequence


class RadixCache:
    """One radix tree with its components on the device tier (L1).

    `record_actions=True` makes every pool allocation and free, every state copy and every
    tier transfer an action record in `self.actions` (sidecars listed with the indices they
    follow). With tiers, `auto_ack=False` leaves transfers in flight until `ack(id)`."""

    def __init__(self, config: CacheConfig, record_actions: bool = False, auto_ack: bool = True):
        self.config = config
        self.page_size = P = config.page_size
        self.policy = make_policy(config.policy)
        hybrid = config.swa is not None or config.mamba is not None
        tiered = config.tiered
        # SWA, MAMBA and tiers rank internal nodes, so their access statistics must be eager
        self.tree = RadixTree(P, self._on_split, self._on_remove, comp_slots=3 if hybrid else 0,
                              lazy=not (hybrid or tiered))
        full_cls = TieredFull if tiered else FullComponent
        self.full = full_cls(self.tree, config.usable_tokens, self.policy)
        self.hier = Hierarchy(self, config.tiers, config.usable_tokens, auto_ack) if tiered else None
        self.swa = SwaComponent(self, config.swa.window_tokens, config.swa_tokens) if config.swa else None
        self.mamba = (MambaComponent(self, config.mamba.slots, config.mamba.every_tokens)
                      if config.mamba else None)
        self.components = [c for c in (self.full, self.swa, self.mamba) if c is not None]
        if self.hier is not None and (self.swa is not None or self.mamba is not None) and self.hier.pool is not None:
            attach_pools(self.hier, config.usable_tokens, config.tiers.l2_size(config.usable_tokens))
        self.sessions = SessionRegistry(self) if self.policy.uses_sessions else None
        self._track_keys = self.policy.needs_keys or (self.hier is not None and self.hier.storage is not None)
        self.voters = [c for c in (self.swa, self.mamba) if c is not None]
        if hybrid:
            self.full.remove = self._remove_subtree_leaf
        self._outstanding_pages = 0  # FULL pages allocated to callers, not yet in the tree or freed
        self._outstanding_swa = 0
        self._locks: dict[int, list] = {}  # node id -> [node, count], for invariant checks
        self.actions: list | None = [] if record_actions else None
        if record_actions:
            self._watch(self.full.pool, "full")
            if self.swa is not None:
                self._watch(self.swa.pool, "swa")
            if self.mamba is not None:
                self._watch(self.mamba.pool, "mamba")

    def _watch(self, pool, name: str) -> None:
        sidecars = tuple(s.name for s in self.config.sidecars if s.follows == name)
        acts = self.actions

        def listener(kind, indices):
            rec = Alloc if kind == "alloc" else Free
            acts.append(rec(name, L1, tuple(int(i) for i in indices), sidecars))

        pool.listener = listener

    # -- tree hooks fan out to components ----------------------------------------------------
    def _on_split(self, upper, lower, upper_tokens):
        for c in self.components:
            c.on_split(upper, lower, upper_tokens)
        for c in self.voters:  # the upper half is new (fresh tick), the lower's payload shrank
            c.touched(upper)
            c.touched(lower)

    def _on_remove(self, node):
        for c in self.components:
            c.on_remove(node)
        if self.sessions is not None:
            self.sessions.on_remove(node)

    def _remove_subtree_leaf(self, node):
        """Remove an unlocked leaf, then every ancestor that becomes an unlocked leaf no
        voting component can use (e.g. all SWA tombstones, no MAMBA checkpoint). Returns
        (last parent, FULL tokens removed); they count as FULL evictions."""
        full, root = self.full, self.tree.root
        parent, n = full.remove_leaf(node)
        while (parent is not root and not parent.children and parent.lock_ref == 0
               and any(c.useless_leaf(parent) for c in self.voters)):
            parent, k = full.remove_leaf(parent)
            n += k
        full.touched(parent)
        return parent, n

    # -- match / lock ------------------------------------------------------------------------
    def match(self, seq, limit_tokens: int | None = None) -> MatchResult:
        """Longest reusable prefix of seq[:limit] (cut to whole pages). Takes one tick: the
        root and each visited node get it; a split's upper half gets a fresh later tick.
        With voting components the walk goes as far as FULL matches and the result is the
        deepest boundary all of them accept (the node is split there if needed)."""
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        n = seq.length if limit_tokens is None else min(limit_tokens, seq.length)
        n = n // self.page_size * self.page_size
        tree = self.tree
        tick = tree.fresh()
        if self.hier is not None:
            return self._match_tiers(seq, n, tick)
        if not self.voters:
            node, matched, last = tree.walk(seq.data, n, tick, True)
            self.full.touched(last)
            return MatchResult(matched, LockHandle(node), matched)
        visited = []
        _, traversed, _ = tree.walk(seq.data, n, tick, True, visited=visited, split=False)
        best, node, cut, lost = vote(self.voters, visited, traversed, self.page_size)
        if node is None:
            node = tree.root
        elif cut < node.num_tokens:
            node = tree.split(node, cut)
        for nd in visited:
            for c in self.components:
                c.touched(nd)
        return MatchResult(best, LockHandle(node), traversed, lost)

    def _match_tiers(self, seq, n: int, tick: int) -> MatchResult:
        """Device run, then host run (tree), then storage run (L3, by page key)."""
        if self.voters:
            return self._match_tiers_voted(seq, n, tick)
        hier, P = self.hier, self.page_size
        visited = []
        node, matched, _ = self.tree.walk(seq.data, n, tick, True, visited=visited)
        for nd in visited:
            self.full.touched(nd)
            hier.touched(nd)
            hier.on_hit(nd)
        if node.parent is not None and (not visited or node is not visited[-1]):
            hier.on_hit(node)  # the upper half of a split is the part walked through
        cut = False
        while node.parent is not None and node.value is None and node.host is None:
            node, cut = node.parent, True  # a prefetch still in flight: nothing there to reuse yet
        matched = min(matched, node.end)
        d = node
        while d.parent is not None and d.value is None:
            d = d.parent
        device = d.end
        storage = 0
        if hier.storage is not None and matched < n and not cut:
            keys = seq.page_keys(P)
            run = hier.storage.leading(keys[matched // P : n // P]) * P
            storage = run if run >= hier.cfg.min_prefetch_tokens else 0
        return MatchResult(matched + storage, LockHandle(node), matched, (), device, matched - device, storage)

    def _match_tiers_voted(self, seq, n: int, tick: int) -> MatchResult:
        """Tiers with SWA/MAMBA: votes on the union of tiers, then an L3 run whose boundary
        every component accepts (tiers_hybrid.storage_boundary)."""
        hier, P, tree = self.hier, self.page_size, self.tree
        visited = []
        _, traversed, _ = tree.walk(seq.data, n, tick, True, visited=visited, split=False)
        for nd in visited:
            for c in self.components:
                c.touched(nd)
            hier.touched(nd)
            hier.on_hit(nd)
        vals: list = []
        best, node, cut, lost = vote(self.voters, visited, traversed, P, out=vals)
        storage = 0
        if hier.storage is not None and traversed < n:
            keys = seq.page_keys(P)[traversed // P : n // P]
            run = hier.storage.leading(keys)
            swa_state = (0, True)
            for v in vals:
                if hasattr(v, "run"):
                    swa_state = (v.run, v.clean)
            j = storage_boundary(self, keys, run, swa_state) if run else 0
            if j * P >= max(hier.cfg.min_prefetch_tokens, 1):
                storage = j * P
                tnode = visited[-1] if visited else tree.root
                if tnode.parent is not None and tnode.end > traversed:
                    tnode = tree.split(tnode, traversed - tnode.parent.end)
                node, best, cut = tnode, traversed, None
        if storage == 0:
            if node is None:
                node = tree.root
            elif cut < node.num_tokens:
                node = tree.split(node, cut)
        d = node
        while d.parent is not None and d.value is None:
            d = d.parent
        return MatchResult(best + storage, LockHandle(node), traversed, lost, d.end, node.end - d.end, storage)

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

    def load(self, m: MatchResult, seq) -> MatchResult:
        """Bring a locked match's host hits (L2 -> L1) and storage hits (L3 -> L2 -> L1) into
        newly allocated L1 pages. Returns the match to use from now on: locked, its
        cached_tokens = device + loaded host + loaded storage tokens (tokens count as
        cached only once loaded), the old lock released. Without tiers: `m` itself."""
        hier = self.hier
        if hier is None or (m.host_tokens == 0 and m.storage_tokens == 0 and not self.voters):
            return m
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        node = m.handle._node
        chain = []
        n = node
        while n.parent is not None and n.value is None:
            chain.append(n)
            n = n.parent
        chain.reverse()
        host = hier.load_host(chain)
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
            self.lock(MatchResult(top.end, LockHandle(top)))  # protect the window while loading it
            load_boundary(self, top)
            self.unlock(MatchResult(top.end, LockHandle(top)))
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

    # -- sessions (sessions.py; active when the policy uses them) ---------------------------------
    def session_begin(self, session_id) -> int:
        """A request of `session_id` starts; returns its generation (0 without sessions)."""
        return 0 if self.sessions is None else self.sessions.begin(session_id)

    def session_finish(self, session_id, generation: int, done) -> bool:
        """The request completed: register its session's region ending where `done` (an
        InsertResult or MatchResult) ends. False for a stale finish or without sessions."""
        if self.sessions is None or done.handle is None:
            return False
        return self.sessions.finish(session_id, generation, done.handle._node)

    def close_session(self, session_id) -> None:
        """Remove the session's references (its cache entries stay)."""
        if self.sessions is not None:
            self.sessions.close(session_id)

    def ack(self, action_id: int, ok: bool = True) -> None:
        """The data plane finished (or failed) transfer `action_id`: on success the payload is
        valid on its destination; on failure the destination slots are freed and the source
        stays valid."""
        self.hier.ack(action_id, ok)

    def lock(self, m: MatchResult) -> None:
        node = m.handle._node
        for c in self.components:
            c.lock(node)
        entry = self._locks.setdefault(node.id, [node, 0])
        entry[1] += 1

    def unlock(self, m: MatchResult) -> None:
        node = m.handle._node
        entry = self._locks.get(node.id)
        if entry is None:
            raise RuntimeError("unlock without a matching lock")
        for c in self.components:
            c.unlock(node)
        entry[1] -= 1
        if entry[1] == 0:
            del self._locks[node.id]

    def finalize(self, m: MatchResult, private_slot: int) -> list:
        """Component finalizers for one request that reuses `m`: MAMBA copies the shared
        checkpoint into `private_slot` (a `CopyState` action). Returns the actions."""
        if self.mamba is None:
            return []
        acts = self.mamba.finalize(m.handle._node, private_slot)
        if self.actions is not None:
            self.actions.extend(acts)
        return acts

    # -- memory ------------------------------------------------------------------------------
    @property
    def free_tokens(self) -> int:
        return self.full.free_tokens

    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` of FULL L1 (if evictable); returns tokens freed."""
        if num_tokens <= 0:
            return 0
        return self.full.evict(num_tokens)

    def alloc(self, num_pages: int):
        """Take `num_pages` L1 pages without evicting; None if not enough are free."""
        pages = self.full.pool.alloc(num_pages)
        if pages is not None:
            self._outstanding_pages += len(pages)
        return pages

    def free(self, pages: np.ndarray) -> None:
        """Return pages obtained from `alloc` that will not be inserted."""
        self._outstanding_pages -= len(pages)
        self.full.pool.free(pages)

    @property
    def free_swa_tokens(self) -> int:
        return self.swa.pool.free_pages * self.page_size

    def evict_swa(self, num_tokens: int) -> int:
        """Free at least `num_tokens` of the SWA pool in policy order; returns tokens freed."""
        return self.swa.evict(-(-num_tokens // self.page_size)) * self.page_size if num_tokens > 0 else 0

    def alloc_swa(self, num_pages: int):
        """Take SWA pages without evicting; None if not enough are free."""
        pages = self.swa.pool.alloc(num_pages)
        if pages is not None:
            self._outstanding_swa += len(pages)
        return pages

    def free_swa(self, pages: np.ndarray) -> None:
        self._outstanding_swa -= len(pages)
        self.swa.pool.free(pages)

    def alloc_states(self, n: int):
        """`n` MAMBA state slots for one request (evicting checkpoints if short): the first
        is its private working state; None if the pool cannot supply them."""
        return self.mamba.acquire(n)

    def free_states(self, slots) -> None:
        self.mamba.release(slots)

    # -- insert -----------------------------------------------------------------------------------
    def insert(self, seq, num_tokens: int, pages: np.ndarray = _EMPTY, pages_from: int = 0,
               after: MatchResult | None = None, *, swa_pages: np.ndarray | None = None,
               state_slots=None, priority: int = 0) -> InsertResult:
        """Insert seq[:num_tokens] (page-aligned). `pages` hold the KV of tokens
        pages_from .. pages_from + len(pages)*P: those the tree already holds are freed, the
        rest go to the new leaf, and pages past num_tokens (a partial tail) are freed too.
        Takes one tick, with the same visiting and splitting rules as `match`.

        `after`: a still-locked match of a prefix of `seq` (no longer than num_tokens); the
        walk resumes from it instead of looking the matched path up again (same result).
        `swa_pages`: SWA pages the request computed for its window, in position order; they
        fill [max(pages_from, num_tokens - window), num_tokens), healing tombstones; the rest
        are freed. `state_slots`: the request's MAMBA slots (private state first, then
        snapshot slots): they become checkpoints where the strategy says, or are freed.
        `priority`: the request's priority; every node on the inserted path keeps the highest
        it has seen (the `priority` and `session` policies read it)."""
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        P = self.page_size
        if num_tokens % P or num_tokens > seq.length:
            raise ValueError(f"insert length {num_tokens} must be page-aligned and <= {seq.length}")
        tree = self.tree
        tick = tree.fresh()
        visited = None if tree.lazy else []
        if after is not None:
            start = after.handle._node
            if (start.lock_ref <= 0 and start.parent is not None) or not start.alive \
                    or after.cached_tokens > num_tokens:
                raise ValueError("`after` must be a locked match of a prefix of the inserted tokens")
            node, prefix, last = tree.walk(seq.data, num_tokens, tick, False, start, after.cached_tokens,
                                           visited=visited)
        else:
            node, prefix, last = tree.walk(seq.data, num_tokens, tick, False, visited=visited)
        self.full.touched(last)
        freed = 0
        leaf = None
        if len(pages):
            if prefix < pages_from or pages_from % P:
                raise ValueError("pages must start at a page boundary inside the cached prefix")
            lo = (prefix - pages_from) // P
            hi = (num_tokens - pages_from) // P
            dup = lo  # leading pages of tokens the tree already holds on L1: duplicates
            if self.hier is not None:  # recomputed tokens the tree holds on L2 only: back to L1
                dup = self._heal_l1(node, pages, pages_from, lo)
            if dup:
                self.free(pages[:dup])
            if hi < len(pages):
                self.free(pages[hi:])
            freed = min(dup, len(pages)) + max(0, len(pages) - hi)
            if prefix < num_tokens and self.hier is not None and node.parent is not None and node.value is None:
                self.free(pages[lo:hi])  # its parent is not on L1 (still loading): do not cache below it
                freed += hi - lo
            elif prefix < num_tokens:
                if hi > len(pages):
                    raise ValueError("not enough pages for the new tokens")
                leaf = tree.add_leaf(node, seq.data[prefix << 3 : num_tokens << 3])
                self._outstanding_pages -= hi - lo
                if self._track_keys:
                    leaf.pkeys = seq.page_keys(P)[prefix // P : num_tokens // P]
                leaf.priority = priority
                self.full.attach(leaf, pages[lo:hi])
        elif prefix < num_tokens:
            raise ValueError("insert of new tokens needs their pages")
        final = leaf or node
        if priority:
            n = final
            rank_inner = self.hier is not None or self.voters  # internal nodes are ranked too
            while n.parent is not None and n.priority < priority:
                n.priority = priority
                if rank_inner:
                    self._touch_all(n)
                n = n.parent
            self.full.touched(final)  # its key may have changed
        if self.voters:
            self._after_hybrid_insert(visited, final, leaf, pages_from, num_tokens, swa_pages, state_slots)
        if self.hier is not None:
            for nd in visited:
                self.full.touched(nd)
                self.hier.touched(nd)
            if leaf is not None:
                self.hier.on_insert(leaf)
        return InsertResult(prefix, freed, LockHandle(final))

    def _touch_all(self, n) -> None:
        """`n`'s policy key changed: offer it again to every queue it may be a candidate of."""
        self.full.touched(n)
        if self.hier is not None:
            self.hier.touched(n)
        for c in self.voters:
            c.touched(n)

    def _heal_l1(self, node, pages, pages_from: int, lo: int) -> int:
        """Give host-only nodes at the bottom of the path (at or after pages_from) the L1
        pages the request computed for them, so L1 stays prefix-closed. Returns how many
        leading pages are still duplicates to free."""
        chain = []
        n = node
        while n.parent is not None and n.value is None and not n.pending and n.parent.end >= pages_from:
            chain.append(n)
            n = n.parent
        if n.parent is not None and n.value is None:
            return lo  # above them a node is still loading: heal nothing, L1 stays prefix-closed
        P = self.page_size
        for h in chain:
            a, b = (h.parent.end - pages_from) // P, (h.end - pages_from) // P
            self._outstanding_pages -= b - a
            self.full.set_l1(h, pages[a:b])
        return (n.end - pages_from) // P if chain else lo

    def _after_hybrid_insert(self, visited, final, leaf, lo, hi, swa_pages, state_slots) -> None:
        for nd in visited:
            for c in self.components:
                c.touched(nd)
        swa, mamba = self.swa, self.mamba
        hi = min(hi, final.end)  # nothing was cached past a node still in flight (tiers)
        lo = min(lo, hi)
        if swa is not None:
            given = _EMPTY if swa_pages is None else swa_pages
            w_lo = max(lo, hi - swa.window_pages * self.page_size, 0)
            rest = swa.attach_window(final, w_lo, hi, given, leaf)
            self._outstanding_swa -= len(given) - len(rest)
            if len(rest):
                self.free_swa(rest)
        if mamba is not None and state_slots is not None:
            self._place_checkpoints(final, lo, hi, list(state_slots))

    def _place_checkpoints(self, final, lo: int, hi: int, slots: list) -> None:
        """The request's private state becomes the checkpoint at `hi` (end of its cached
        sequence); snapshot slots go to every-K positions in (lo, hi), latest first."""
        mamba = self.mamba
        if not slots:
            return
        private, snaps = slots[0], slots[1:]
        targets = []
        if hi > lo:
            targets.append((hi, private))
            every = mamba.every
            if every:
                q = (hi - 1) // every * every
                while q > lo and snaps:
                    targets.append((q, snaps.pop()))
                    q -= every
        else:
            mamba.release([private])
        if snaps:
            mamba.release(snaps)
        for q, slot in targets:
            nd = self._node_ending_at(final, q)
            if mamba.put_checkpoint(nd, slot):
                mamba.private -= 1
                if q != hi and self.actions is not None:
                    self.actions.append(CopyState("mamba", L1, int(private), int(slot), q))
            else:
                mamba.release([slot])

    def _node_ending_at(self, bottom, q: int):
        """The node on the path ending at `bottom` whose edge ends exactly at position q
        (splitting the node that contains q)."""
        nd = bottom
        while nd.parent.end >= q:
            nd = nd.parent
        if nd.end == q:
            return nd
        return self.tree.split(nd, q - nd.parent.end)

    # -- reporting --------------------------------------------------------------------------------
    def slots_of(self, seq, num_tokens: int | None = None) -> dict:
        """Read-only: the slot indices that hold seq[:num_tokens] where it is cached, per pool,
        one per page in position order: ``{"full": [...], "swa": [...]}`` (-1 = SWA
        tombstone) plus each sidecar under its own name with its source's exact indices.
        This is the FULL -> SWA index translation (e.g. six pages F0..F5 with a two-page
        window map F4, F5 -> S0, S1). No tick, no split."""
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        n = seq.length if num_tokens is None else min(num_tokens, seq.length)
        P = self.page_size
        full, swa = [], []
        for node, k in self.tree.path_nodes(seq.data, n // P * P):
            full.append(node.value[: k // P])
            if self.swa is not None:
                swa.append(node.comp[self.swa.kind].pages[: k // P])
        out = {"full": np.concatenate(full) if full else _EMPTY.copy()}
        if self.swa is not None:
            out["swa"] = np.concatenate(swa) if swa else _EMPTY.copy()
        for sc in self.config.sidecars:
            out[sc.name] = out[sc.follows]
        return out

    @property
    def num_nodes(self) -> int:
        return self.tree.num_nodes

    @property
    def cached_tokens_total(self) -> int:
        return self.full.evictable_tokens + self.full.protected_tokens

    def stats(self) -> dict:
        out = {"nodes": self.tree.num_nodes, "page_size": self.page_size, "policy": self.policy.name}
        for c in self.components:
            out[c.name] = c.stats()
        if self.hier is not None:
            out["tiers"] = self.hier.stats()
        return out
