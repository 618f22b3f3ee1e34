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

import numpy as np

from .actions import L1, Alloc, Free
from .allocator import INDEX_DTYPE
from .components.full import FullComponent
from .components.mamba import MambaComponent
from .components.swa import SwaComponent
from .config import CacheConfig
from .eviction import make_policy
from .cache_hybrid import HybridOps
from .cache_tiers import TierOps
from .records import InsertResult, LockHandle, MatchResult, TokenSeq  # noqa: F401 (public names)
from .sessions import SessionRegistry
from .tiers import Hierarchy, TieredFull
from .tiers_hybrid import attach_pools
from .tree import RadixTree
from .vote import vote

_EMPTY = np.empty(0, dtype=INDEX_DTYPE)


class RadixCache(TierOps, HybridOps):
    """One radix tree with its components on the device tier (L1).

    `record_actions=True` makes every pool allocation and free, every state copy and every
    tier transfer an action record in `self.actions` (sidecars listed with the indices they
    follow); `record_actions="transfers"` records only transfers and state copies (what an
    engine's data plane executes). With tiers, `auto_ack=False` leaves transfers in flight until `ack(id)`."""

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
        # with auto_ack False: `load` emits every L2->L1 load of a host run at once (the data
        # plane acknowledges them in emission order) instead of one per call
        self.pipeline_loads = False
        self._outstanding_pages = 0  # FULL pages allocated to callers, not yet in the tree or freed
        self._outstanding_swa = 0
        self._locks: dict[int, list] = {}  # node id -> [node, count], for invariant checks
        self.actions: list | None = [] if record_actions else None
        if record_actions and record_actions != "transfers":  # "transfers": only Transfer records
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
        while parent is not root and not parent.children and parent.lock_ref == 0 and self.useless_leaf(parent):
            parent, k = full.remove_leaf(parent)
            n += k
        full.touched(parent)
        return parent, n

    def useless_leaf(self, node) -> bool:
        """A leaf no voting component can reuse at any boundary (e.g. all SWA tombstones on
        every tier, or no whole SWA window at any boundary in it; no MAMBA checkpoint):
        keeping it only takes memory."""
        if self.swa is not None and self._swa_windowless(node):
            return True
        return any(c.useless_leaf(node) for c in self.voters)

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
            node, matched, last = tree.walk(seq.data, n, tick)
            self.full.touched(last)
            return MatchResult(matched, LockHandle(node), matched)
        visited = []
        _, traversed, _ = tree.walk(seq.data, n, tick, visited=visited, split=False)
        best, node, cut, lost = vote(self.voters, visited, traversed, self.page_size)
        if node is None:
            node = tree.root
        elif cut < node.num_tokens:
            node = tree.split(node, cut)
        for nd in visited:
            for c in self.components:
                c.touched(nd)
        return MatchResult(best, LockHandle(node), traversed, lost)

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

    # -- insert -----------------------------------------------------------------------------------
    def insert(self, seq, num_tokens: int, pages: np.ndarray = _EMPTY, pages_from: int = 0,
               after: MatchResult | None = None, *, swa_pages: np.ndarray | None = None,
               state_slots=None, priority: int = 0, keep_uncached: bool = False,
               inserted_len: int = 0) -> InsertResult:
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
        it has seen (the `priority` and `session` policies read it).
        `keep_uncached`: pages of new tokens the tree cannot take (a node above them is not on
        L1 yet) stay the caller's instead of being freed (an engine still computing on them
        keeps their KV).
        `inserted_len`: tokens of `seq` the same request inserted before (a chunked prefill);
        every node of the path ending past it counts one hit (SGLang counts LFU hits at
        insert, not at match; tree.py). An insert with inserted_len >= num_tokens counts none."""
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
            node, prefix, last = tree.walk(seq.data, num_tokens, tick, start, after.cached_tokens,
                                           visited=visited)
        else:
            node, prefix, last = tree.walk(seq.data, num_tokens, tick, visited=visited)
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
                if not keep_uncached:  # its parent is not on L1 (still loading): do not cache below it
                    self.free(pages[lo:hi])
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
        touched = tree.count_hits(final, inserted_len)
        if self.policy.reads_hits:  # their policy keys changed
            for n in touched:
                self._touch_all(n)
        if priority:
            n = final
            rank_inner = self.hier is not None or self.voters  # internal nodes are ranked too
            while n.parent is not None and n.priority < priority:
                n.priority = priority
                if rank_inner and self.policy.reads_priority:
                    self._touch_all(n)
                n = n.parent
            if self.policy.reads_priority:
                self.full.touched(final)  # its key may have changed
        if self.voters:
            self._after_hybrid_insert(visited, final, leaf, pages_from, num_tokens, swa_pages, state_slots)
        if self.hier is not None:
            for nd in visited:
                self.full.touched(nd)
                self.hier.touched(nd)
            self._on_hits(final, inserted_len)
            if leaf is not None:
                self.hier.on_insert(leaf)
        return InsertResult(prefix, freed, LockHandle(final))

    def _on_hits(self, n, inserted_len: int) -> None:
        """Tiers: the nodes that just counted a hit (top-down) may now be backed up
        (write_through_selective)."""
        path = []
        while n.parent is not None and n.end > inserted_len:
            path.append(n)
            n = n.parent
        for n in reversed(path):
            self.hier.on_hit(n)

    def _touch_all(self, n) -> None:
        """`n`'s policy key changed: offer it again to every queue it may be a candidate of."""
        self.full.touched(n)
        if self.hier is not None:
            self.hier.touched(n)
        for c in self.voters:
            c.touched(n)

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
