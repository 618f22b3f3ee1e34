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

from .allocator import INDEX_DTYPE
from .config import CacheConfig, FullSpec
from .eviction import make_policy
from .l1_match import L1Match
from .optional import present
from .records import InsertResult, LockHandle, MatchResult, TokenSeq  # noqa: F401 (public names)
from .sessions import SessionRegistry
from .tiers import make_hierarchy
from .tiers.access import TieredAccess
from .tiers.match import TieredMatch
from .topology import Topology

_EMPTY = np.empty(0, dtype=INDEX_DTYPE)


class RadixCache:
    """One radix tree with its components on the device tier (L1).

    `record_actions=True` makes every pool allocation and free, every state copy and every
    tier transfer an action record in `self.actions` (sidecars listed with the indices they
    follow); `record_actions="transfers"` records only transfers and state copies (what an
    engine's data plane executes). With tiers, `auto_ack=False` leaves transfers in flight until `ack(id)`.

    Components: FULL, then each of `config.component_specs` (SWA and MAMBA when configured,
    then `config.extra_components`), each built by its spec from a `ports.TreeLink` with the
    next payload slot; the cache iterates them (components/base.py) and names none."""

    def __init__(self, config: CacheConfig, record_actions: bool = False, auto_ack: bool = True, storage=None):
        self.config = config
        self.page_size = P = config.page_size
        self.policy = make_policy(config.policy, config.policy_options)
        specs = config.component_specs
        voting = bool(specs)
        tiered = config.tiered
        self.actions: list | None = [] if record_actions else None
        # voting components and tiers rank internal nodes, so their access statistics must be eager
        self.topo = topo = Topology(P, self.policy, 1 + len(specs) if voting else 0, not (voting or tiered),
                                    self.actions, config.sidecars)
        self.tree = topo.tree
        usable = config.usable_tokens
        self.full = FullSpec().build(topo.link(0, usable, config.tiers, topo.useless_leaf if voting else None))
        self.hier = make_hierarchy(topo, config, auto_ack, self.full, storage)  # `storage`: a prebuilt L3 store
        topo.add(self.full)
        for slot, spec in enumerate(specs, 1):  # every voting component, built the same way
            topo.add(spec.build(topo.link(slot, usable, config.tiers)))
        self.components = topo.components
        self.voters = topo.voters
        self.tiered = TieredAccess(topo, self.hier, P) if self.hier is not None else None
        if self.hier is not None:
            topo.tiers = self.hier
            link = self.hier.link()
            for c in self.voters:
                c.attach_tiers(link, self.hier.l2_ratio)
        self.sessions = SessionRegistry(self) if self.policy.uses_sessions else None
        topo.sessions = self.sessions
        self._track_keys = self.policy.needs_keys or (self.hier is not None and self.hier.storage is not None)
        # with auto_ack False: `load` emits every L2->L1 load of a host run at once (the data
        # plane acknowledges them in emission order) instead of one per call
        self.pipeline_loads = False
        self.l1 = L1Match(topo) if self.hier is None else None
        self.matcher: L1Match | TieredMatch = (self.tiered.matcher if self.tiered is not None
                                               else present(self.l1, "an L1 matcher without tiers"))
        if record_actions and record_actions != "transfers":  # "transfers": only Transfer records
            for c in self.components:
                topo.watch(c.pool, c.name)

    def component(self, name: str):
        """The component named `name` ("full", "swa", "mamba", an extra's), or None."""
        for c in self.components:
            if c.name == name:
                return c
        return None

    # lookups by name for the many callers that read the built-in hybrid components
    swa = property(lambda self: self.component("swa"))
    mamba = property(lambda self: self.component("mamba"))

    # -- match / lock ------------------------------------------------------------------------
    def match(self, seq, limit_tokens: int | None = None) -> MatchResult:
        """Longest reusable prefix of seq[:limit] (cut to whole pages). Takes one tick: the
        root and each visited node get it; a split's upper half gets a fresh later tick.
        With voting components: the deepest boundary all of them accept (split there if
        needed). `touch(query(...))`, a request's query kept while the state it reads is
        unchanged (l1_match.py; with tiers tiers/match.py)."""
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        return self.matcher.match(seq, self.matcher.span(seq, limit_tokens))

    def query(self, seq, n: int):
        """Read-only (no tick, no split, no queue offer): the match plan of seq[:n]."""
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        return self.matcher.query(seq, n)

    def touch(self, plan) -> MatchResult:
        """Apply a match plan: ticks, the split it needs, queue offers."""
        return self.matcher.touch(plan)

    # -- sessions (sessions.py; active when the policy uses them) ---------------------------------
    def session_begin(self, session_id) -> int:
        """A request of `session_id` starts; returns its generation (0 without sessions)."""
        return 0 if self.sessions is None else self.sessions.begin(session_id)

    def session_finish(self, session_id, generation: int, done) -> bool:
        """The request completed: register its session's region ending where `done` (an
        InsertResult or MatchResult) ends. False for a stale finish or without sessions."""
        if self.sessions is None or done.handle is None:
            return False
        return self.sessions.finish(session_id, generation, done.handle.node)

    def close_session(self, session_id) -> None:
        """Remove the session's references (its cache entries stay)."""
        if self.sessions is not None:
            self.sessions.close(session_id)

    def lock(self, m: MatchResult) -> None:
        self.topo.lock(m.handle.node)

    def unlock(self, m: MatchResult) -> None:
        self.topo.unlock(m.handle.node)

    # -- tiers (tiers.access.TieredAccess) ----------------------------------------------------------
    def load(self, m: MatchResult, seq) -> MatchResult:
        """Load a locked match's host and storage hits into L1 (TieredAccess.load); returns
        the match to use from now on (locked, `m` unlocked). Without tiers: `m` itself."""
        return m if self.tiered is None else self.tiered.load(m, seq, self.pipeline_loads)

    def load_payloads(self, m: MatchResult) -> bool:
        """Issue the component payloads reuse at `m` needs, L2 -> L1, in the same round as its
        FULL loads (TieredAccess.load_payloads). False when an L1 pool cannot take them all."""
        return present(self.tiered, "load_payloads needs tiers").load_payloads(m)

    def prefetch(self, m: MatchResult, seq) -> int:
        """Start bringing a locked match's storage run (L3) into L2 without loading anything
        into L1 (TieredAccess.prefetch). Returns the tokens being prefetched (0: none)."""
        return 0 if self.tiered is None else self.tiered.prefetch(m, seq)

    def ack(self, action_id: int, ok: bool = True) -> None:
        """Transfer `action_id` finished (ok) or failed (its destination slots are freed)."""
        present(self.hier, "transfers exist only with tiers").ack(action_id, ok)

    # -- memory ------------------------------------------------------------------------------
    @property
    def outstanding_pages(self) -> int:
        """FULL pages allocated to callers, not yet in the tree or freed."""
        return self.full.outstanding

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
            self.full.outstanding += len(pages)
        return pages

    def free(self, pages: np.ndarray) -> None:
        """Return pages obtained from `alloc` that will not be inserted."""
        self.full.outstanding -= len(pages)
        self.full.pool.free(pages)

    # -- insert -----------------------------------------------------------------------------------
    def insert(self, seq, num_tokens: int, pages: np.ndarray = _EMPTY, pages_from: int = 0,
               after: MatchResult | None = None, *, slots: dict | None = None, priority: int = 0,
               keep_uncached: bool = False,
               inserted_len: int = 0) -> InsertResult:
        """Insert seq[:num_tokens] (page-aligned). `pages` hold the KV of tokens
        pages_from .. pages_from + len(pages)*P: those the tree already holds are freed, the
        rest go to the new leaf, and pages past num_tokens (a partial tail) are freed too.
        Takes one tick, with the same visiting and splitting rules as `match`.

        `after`: a still-locked match of a prefix of `seq` (no longer than num_tokens); the
        walk resumes from it instead of looking the matched path up again (same result).
        `slots`: every voting component's request units by component name (what
        `lifecycle.request_slots` gave), placed by each component (`Component.place`), e.g.
        ``{"swa": pages}``: SWA pages the request computed for its window, in position order,
        filling [max(pages_from, num_tokens - window), num_tokens) and healing tombstones;
        ``{"mamba": slots}``: private state first, then snapshot slots, checkpoints where the
        strategy says. Units a component does not place are freed.
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
        tree, tick = self.tree, self.tree.fresh()
        self.topo.version += 1  # the tree changes (l1_match.py)
        visited: list | None = None if tree.lazy else []
        if after is not None:
            start = after.handle.node
            if (start.lock_ref <= 0 and start.parent is not None) or not start.alive \
                    or after.cached_tokens > num_tokens or after.cached_tokens != start.end:
                raise ValueError("`after` must be a locked match of a prefix of the inserted tokens, "
                                 "ending at its node (a loaded match: storage tokens not yet loaded do not count)")
            node, prefix, last = tree.walk(seq.data, num_tokens, tick, start, after.cached_tokens,
                                           visited=visited)
        else:
            node, prefix, last = tree.walk(seq.data, num_tokens, tick, visited=visited)
        self.full.touched(last)
        leaf, freed = self._take_pages(seq, node, prefix, num_tokens, pages, pages_from, keep_uncached, priority)
        final = leaf or node
        counted = self._count_hit_and_priority(final, inserted_len, priority)
        shape = self.topo.version  # a split below (a MAMBA checkpoint) puts new nodes on the counted path
        if self.voters:
            given = slots or {}
            self.topo.touch_path(visited)
            hi = min(num_tokens, final.end)  # nothing was cached past a node still in flight (tiers)
            for c in self.voters:
                c.place(final, leaf, min(pages_from, hi), hi, given.get(c.name))
        if self.hier is not None:
            self._tiers_inserted(visited, final, leaf, counted if self.topo.version == shape else None, inserted_len)
        return InsertResult(prefix, freed, LockHandle(final))

    def _take_pages(self, seq, node, prefix: int, num_tokens: int, pages, pages_from: int, keep_uncached: bool,
                    priority: int):
        """`insert`'s pages: free the duplicates and the partial tail, give the new tokens a
        new leaf (unless a node above them is not on L1 yet). Returns (leaf or None, freed)."""
        P, tree = self.page_size, self.tree
        freed = 0
        leaf = None
        if len(pages):
            if prefix < pages_from or pages_from % P:
                raise ValueError("pages must start at a page boundary inside the cached prefix")
            lo = (prefix - pages_from) // P
            hi = (num_tokens - pages_from) // P
            dup = lo  # leading pages of tokens the tree already holds on L1: duplicates
            if self.tiered is not None:  # tiers: recomputed tokens the tree holds on L2 only: back to L1
                dup = self.tiered.heal_l1(node, pages, pages_from, lo)
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
                self.full.outstanding -= hi - lo
                if self._track_keys:
                    leaf.pkeys = seq.page_keys(P)[prefix // P : num_tokens // P]
                leaf.priority = priority
                self.full.attach(leaf, pages[lo:hi])
        elif prefix < num_tokens:
            raise ValueError("insert of new tokens needs their pages")
        return leaf, freed

    def _count_hit_and_priority(self, final, inserted_len: int, priority: int) -> list:
        """Every node of the path past `inserted_len` counts one hit; every node on it keeps
        the highest priority it has seen; queues whose keys changed are told. Returns the
        nodes whose hits changed (eager statistics: that path, bottom-up)."""
        touched = self.tree.count_hits(final, inserted_len)
        if self.policy.reads_hits:  # their policy keys changed
            for n in touched:
                self.topo.touch_all(n)
        if priority:
            n = final
            rank_inner = self.hier is not None or self.voters  # internal nodes are ranked too
            while n.parent is not None and n.priority < priority:
                n.priority = priority
                if rank_inner and self.policy.reads_priority:
                    self.topo.touch_all(n)
                n = n.parent
            if self.policy.reads_priority:
                self.full.touched(final)  # its key may have changed
        return touched

    def _tiers_inserted(self, visited, final, leaf, counted: list | None, inserted_len: int) -> None:
        """Tiers after an insert: the visited nodes are offered to the FULL and L2 queues (with
        voting components FULL a second time after `touch_path`: a duplicate heap entry, kept
        because the heap's length decides when it is compacted, eviction.py); the
        nodes that counted a hit (`counted`, bottom-up, as count_hits walked them; None: a split
        since changed that path, walk it again) may now be backed up, top-down
        (write_through_selective); the new leaf too (write_through)."""
        hier = present(self.hier, "tiers only")
        for nd in present(visited, "tiers keep eager statistics"):
            self.full.touched(nd)
            hier.touched(nd)
        for n in reversed(counted if counted is not None else self.tree.hit_path(final, inserted_len)):
            hier.on_hit(n)
        if leaf is not None:
            hier.on_insert(leaf)

    # -- one request's units of the voting components (lifecycle.py takes and returns them) ---------
    def finalize(self, m: MatchResult, slots) -> list:
        """Component finalizers for one request that reuses `m` (`slots`: its units by
        component name): e.g. MAMBA copies the shared checkpoint into the private slot (a
        `CopyState` action). Returns the actions."""
        acts = []
        for c in self.voters:
            if c.name in slots:
                acts += c.finalize(m.handle.node, slots[c.name])
        for a in acts:
            self.topo.record(a)
        return acts

    # -- reporting --------------------------------------------------------------------------------
    def slots_of(self, seq, num_tokens: int | None = None) -> dict:
        """Read-only: the slot indices that hold seq[:num_tokens] where it is cached, per pool,
        one per page in position order: ``{"full": [...]}`` plus each component that keeps
        one index per page (`Component.page_slots`; SWA: -1 = tombstone) and each sidecar
        under its own name with its source's exact indices. This is the FULL -> SWA index
        translation (e.g. six pages F0..F5 with a two-page window map F4, F5 -> S0, S1). No
        tick, no split."""
        seq = seq if isinstance(seq, TokenSeq) else TokenSeq(seq)
        n = seq.length if num_tokens is None else min(num_tokens, seq.length)
        P = self.page_size
        comps = [c for c in self.components if c.slots_per_page]
        per: dict = {c.name: [] for c in comps}
        for node, k in self.tree.path_nodes(seq.data, n // P * P):
            for c in comps:
                per[c.name].append(c.page_slots(node, k // P))
        out = {name: np.concatenate(got) if got else _EMPTY.copy() for name, got in per.items()}
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
