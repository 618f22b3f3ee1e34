"""HiCache tiers for FULL: device L1, host L2, external L3, with write and prefetch policies.

Components decide *what* is reusable; the hierarchy decides *where* a payload lives and says
what must move — it never moves anything itself: every move is a `Transfer` action that the
data plane acknowledges (`RadixCache.ack`). With ``auto_ack`` (replay) each action completes
as it is emitted.

Residency (FULL): ``node.value`` = L1 pages or None, ``node.host`` = L2 pages or None; a node
is in the tree while it holds either. L3 is not in the tree: it is a key-value store of
pages addressed by their stable page keys (cache_core.keys), shared across engines, with
its own capacity and eviction (cache_core.tiers.store: ``l3_model`` "prefix" LRU or "mooncake"). Both tree tiers are *prefix-closed*: a node on L1 has its parent on L1,
a node on L2 its parent on L2 (backups go top-down), so a match is a device run, then a host
run, then (beyond the tree) a run of pages found in L3.

- write_through: back up a new leaf (and any ancestor not yet backed up) to L2 at insert
  (a node is locked while its backup is in flight, as in SGLang);
  write_through_selective: once a node has `threshold` hits (inserts whose path covered it,
  counted and checked at insert as SGLang 0.5.23 does);
  write_back: when L1 evicts it. L3 gets a copy of L2 content on backup (``l3_write=
  "on_insert"``) or when L2 evicts it (``"on_l2_evict"``).
- L1 eviction (device leaves: on L1, no child on L1, unlocked, nothing in flight) *demotes*
  a node that has an L2 copy (frees its L1 pages, the node stays); without one the node is
  removed (write_back first backs it up). L2 eviction takes host-only tree leaves: dropped,
  or handed to L3 first.
- A match reports device, host and storage tokens (storage runs shorter than
  ``min_prefetch_tokens`` are ignored); `RadixCache.load` brings host hits to L1 and storage
  hits through L2 to L1 in newly allocated pages; tokens count as cached once loaded.
- Prefetch policies (best_effort, wait_complete, timeout with SGLang's budget of 1.0 s +
  0.25 s per 1024 tokens) are the engine loop's decision; the core exposes the budget.
"""
from __future__ import annotations

from ..actions import BACKUP, L1, L2, L3, LOAD, PREFETCH, STORE
from ..allocator import PagePool
from ..components.full_tiered import TieredFull
from ..components.ports import FullTierLink, TierLink
from ..eviction import EvictionQueue
from .config import L3_WRITES, PREFETCH_POLICIES, WRITE_POLICIES, TierConfig
from .failures import drop_stranded, failed_prefetch, failed_transfer
from .ledger import TransferLedger
from .store import make_store

__all__ = ["Hierarchy", "TierConfig", "TieredFull", "WRITE_POLICIES", "PREFETCH_POLICIES", "L3_WRITES", "make_hierarchy"]

class Hierarchy:
    """L2 pool and queue, the L3 index, write policies and loads; its transfers in `ledger` (ledger.py)."""

    def __init__(self, topo, cfg: TierConfig, l1_tokens: int | None, auto_ack: bool, full: TieredFull,
                 storage=None):  # full: built by its spec (config.FullSpec); storage: see make_hierarchy
        self.topo = topo
        self.tree = topo.tree
        self.cfg = cfg
        self.P = topo.page_size
        self.full = full
        self.voters = topo.voters  # the other components (registered after FULL)
        l2 = cfg.l2_size(l1_tokens) if cfg.has_l2 else 0
        self.l2_ratio = None if l2 is None or not l1_tokens else l2 / l1_tokens
        self.pool = PagePool(None if l2 is None else l2 // self.P) if cfg.has_l2 else None
        self.queue = EvictionQueue(topo.policy, self.is_candidate, "full")
        self.storage = storage if storage is not None else make_store(cfg, self.P) if cfg.l3 else None
        self.auto_ack = auto_ack
        self.ledger = TransferLedger(self.P, auto_ack, cfg.kv_bytes_per_token, topo.sidecars_of, topo.record,
                                     self._failed, self._settled)
        self.evicted_l2_tokens = 0
        self.full.attach_tiers_port(FullTierLink(
            host_pool=self.pool, write_back=cfg.write_policy == "write_back", voters=self.voters,
            backup_chain=self.backup_chain, host_touched=self.touched, split_in_flight=self.ledger.split_in_flight))

    # what the ledger counts, read by the cache, the engine, invariants and tests
    pending = property(lambda self: self.ledger.pending)
    ids = property(lambda self: self.ledger.ids)
    finished = property(lambda self: self.ledger.finished)
    failed = property(lambda self: self.ledger.failed)
    tokens_moved = property(lambda self: self.ledger.tokens_moved)
    bytes_moved = property(lambda self: self.ledger.bytes_moved)

    def link(self) -> TierLink:
        """The collaborator the other components get (`Component.attach_tiers`)."""
        return TierLink(page_size=self.P, has_l2=self.pool is not None, storage=self.storage,
                        auto_ack=self.auto_ack, l3_write=self.cfg.l3_write, emit=self.ledger.emit,
                        settled=self.settled, evict_host=self.evict_host, emitted=lambda: self.ledger.ids)

    def settled(self, node) -> None:
        """A transfer on `node` finished: it and its parent (which a child in flight blocks
        from L1 eviction) may be eviction candidates again."""
        if node.alive:
            self.topo.touch_all(node)
            if node.parent is not None:
                self.full.touched(node.parent)

    def unlocked(self, node) -> None:
        """A lock on `node` was released (Topology.unlock): a node a failed prefetch left on no tier goes."""
        drop_stranded(self, node)

    def evict_host(self, num_tokens: int) -> int:
        """Free L2 for a component's L2 pool (0 when no host-only leaf is left)."""
        return self.evict_l2(num_tokens) if len(self.queue) else 0

    # -- L2 candidates ----------------------------------------------------------------------------
    @staticmethod
    def is_candidate(node) -> bool:
        return (node.alive and node.host is not None and node.value is None and not node.children
                and node.lock_ref == 0 and not node.pending)

    def touched(self, node) -> None:
        if node is not None and node.parent is not None and self.is_candidate(node):
            self.queue.push(node)

    @property
    def free_l2_tokens(self) -> int:
        assert self.pool is not None  # with L2 only
        return self.pool.free_pages * self.P

    def evict_l2(self, num_tokens: int) -> int:
        """Free at least `num_tokens` of L2 from host-only leaves in policy order."""
        freed = 0
        tree = self.tree
        while freed < num_tokens:
            node = self.queue.pop()
            if node is None:
                break
            n = node.num_tokens
            if self.storage is not None and self.cfg.l3_write == "on_l2_evict":
                self._store(node, remove=True)  # removed once the store is acknowledged
                if not node.alive:
                    freed += n
                continue
            parent = tree.remove_leaf(node)
            freed += n
            self.evicted_l2_tokens += n
            while self.is_candidate(parent) and self.topo.useless_leaf(parent):
                n = parent.num_tokens  # nothing left to reuse at its end (all tombstones): it goes too
                parent = tree.remove_leaf(parent)
                freed += n
                self.evicted_l2_tokens += n
            self.touched(parent)
        self.queue.maybe_compact(tree.num_nodes)
        return freed

    def _alloc_l2(self, pages: int):
        if self.pool is None:
            return None
        short = pages * self.P - self.free_l2_tokens
        if short > 0 and not self.pool.unbounded:
            self.evict_l2(short)
        return self.pool.alloc(pages)

    # -- transfers (the ledger's; the hierarchy's part of settling them) ------------------------------
    def ack(self, action_id: int, ok: bool = True) -> None:
        self.ledger.ack(action_id, ok)

    def _failed(self, t) -> None:
        failed_transfer(self, t)

    def _settled(self, pieces) -> None:
        drop_stranded(self, pieces[-1][0])  # nothing in flight on a failed prefetch's node any more
        for x, _ in pieces:  # no longer in flight: eviction may consider them again
            if x.alive:
                self.topo.touch_all(x)
        if pieces and pieces[0][0].alive:  # a parent blocked by a child in flight is free again
            self.full.touched(pieces[0][0].parent)

    # -- write path -----------------------------------------------------------------------------
    def backup_chain(self, node) -> None:
        """Back `node` up to L2, first every ancestor that has no L2 copy (top-down)."""
        if self.pool is None:
            return
        chain = []
        n = node
        while n.parent is not None and n.host is None and not n.pending:
            chain.append(n)
            n = n.parent
        if n.parent is not None and n.host is None:
            return  # the nearest ancestor's own backup is still in flight: L2 stays prefix-closed
        chain.reverse()
        if self.auto_ack:
            for n in chain:
                if n.value is None or not self._backup(n, ()):
                    return
        elif chain and chain[0].value is not None:
            self._backup(chain[0], tuple(chain[1:]))  # the rest follows each ack, top-down

    def _backup(self, node, rest: tuple) -> bool:
        pages = self._alloc_l2(node.num_tokens // self.P)
        if pages is None:
            return False
        # locked until the ack, as SGLang's write-through does (inc_lock_ref): its L1 pages and
        # its path cannot be evicted meanwhile, so they must not count as evictable either
        self.topo.lock(node)

        def done(ok, pieces, pages=pages, rest=rest, held=node):
            self.topo.unlock(held)
            for x, sl in pieces:  # top-down: a piece's parent is on L2 before it is
                good = ok and x.alive and x.host is None and (x.parent.parent is None or x.parent.host is not None)
                if good:
                    x.host = pages[sl]
                    for c in self.voters:
                        c.backup(x)
                    if self.storage is not None and self.cfg.l3_write == "on_insert":
                        self._store(x)
                else:
                    self.pool.free(pages[sl])
                    ok = False
                self.full.touched(x)  # popped while in flight? offer it again
                self.touched(x)
            if ok and rest and rest[0].alive and rest[0].value is not None and rest[0].host is None:
                self._backup(rest[0], rest[1:])

        self.ledger.emit(BACKUP, L1, L2, node.num_tokens, node.value, pages, node.pkeys, done, node=node)
        return True

    def _store(self, node, remove: bool = False) -> None:
        """Copy a node's L2 pages to L3 (its L2 pages are held until the ack); with `remove`
        (on_l2_evict) the node leaves the tree once the store is acknowledged."""
        if node.pkeys is None:
            if remove:
                self._drop(node)
            return
        storage = self.storage
        payloads = tuple(p for c in self.voters for p in c.store_payloads(node))

        def done(ok, pieces, keys=node.pkeys, extra=[(c, k) for c, k, _ in payloads], node=node):
            if ok:
                storage.put(keys)
                storage.put_many(extra)
            if remove:
                self._drop(node)

        self.ledger.emit(STORE, L2, L3, node.num_tokens, node.host, None, node.pkeys, done, node=node,
                         payloads=payloads)

    def _drop(self, node) -> None:
        """Remove an L2-evicted host-only leaf (if it still is one)."""
        if node.alive and self.is_candidate(node):
            n = node.num_tokens
            parent = self.tree.remove_leaf(node)
            self.evicted_l2_tokens += n
            self.touched(parent)
            self.full.touched(parent)

    def on_insert(self, leaf) -> None:
        if self.cfg.write_policy == "write_through":
            self.backup_chain(leaf)

    def on_hit(self, node) -> None:
        """write_through_selective: back a node up once it has enough hits."""
        if (self.cfg.write_policy == "write_through_selective" and node.host is None
                and node.value is not None and node.hits >= self.cfg.write_through_threshold):
            self.backup_chain(node)

    # -- read path ------------------------------------------------------------------------------------
    def load_host(self, nodes, pipeline: bool = False) -> int:
        """Bring host-only `nodes` (top-down, all locked) to L1; returns tokens loaded
        (stops at the first node that gets no L1 pages). Without acknowledgements on emit
        (auto_ack False) it stops after the first load it emits, unless `pipeline`: then it
        emits a load for every node of the chain at once, and the data plane must acknowledge
        them in emission order (a piece becomes valid on L1 only below a parent on L1)."""
        loaded = 0
        full = self.full
        for node in nodes:
            if not node.alive:
                break
            if node.value is not None:
                loaded += node.num_tokens
                continue
            if node.pending or node.host is None:  # already loading, or not on L2 yet: wait
                break
            need = node.num_tokens // self.P
            if full.pool.free_pages < need and not full.pool.unbounded:
                full.evict(need * self.P - full.free_tokens)
            pages = full.pool.alloc(need)
            if pages is None:
                break

            def done(ok, pieces, pages=pages):
                for x, sl in pieces:
                    good = ok and x.alive and x.value is None and (x.parent.parent is None or x.parent.value is not None)
                    if good:
                        full.set_l1(x, pages[sl])
                    else:
                        full.pool.free(pages[sl])
                        ok = False
                    self.touched(x)

            self.ledger.emit(LOAD, L2, L1, node.num_tokens, node.host, pages, node.pkeys, done, node=node)
            if node.value is None:  # still in flight (no auto ack): not loaded yet
                if pipeline:
                    continue
                break
            loaded += node.num_tokens
        return loaded

    def prefetch(self, parent, seq_data: bytes, start: int, keys) -> object:
        """Storage hit: pages `keys` following `parent` (which ends at token `start`) come from
        L3 into L2 as a new host-only node. Returns the node, or None without L2 space."""
        assert self.storage is not None  # with L3 only
        n_pages = len(keys)
        if parent.parent is not None and parent.host is None:  # L2 stays prefix-closed
            self.backup_chain(parent)
            if parent.host is None:
                return None
        pages = self._alloc_l2(n_pages)
        if pages is None:
            return None
        tree = self.tree
        node = tree.add_leaf(parent, seq_data[start << 3 : (start + n_pages * self.P) << 3])
        node.value = None
        node.pkeys = keys
        self.storage.touch(keys)

        def done(ok, pieces, pages=pages, node=node):
            if not ok:  # unreadable in L3: forgotten there (failures.py)
                return failed_prefetch(self, pieces, pages)
            for x, sl in pieces:
                x.host = pages[sl]
                self.touched(x)

        self.ledger.emit(PREFETCH, L3, L2, n_pages * self.P, None, pages, keys, done, node=node,
                         ssd_pages=self.storage.on_ssd(keys))
        return node

    def stats(self) -> dict:
        cap = None if self.pool is None else self.pool.capacity_pages
        out = {
            "write_policy": self.cfg.write_policy,
            "l2_capacity_tokens": None if cap is None else cap * self.P,
            "l2_free_tokens": None if self.pool is None or cap is None else self.free_l2_tokens,
            "l2_evicted_tokens": self.evicted_l2_tokens,
            "l1_demoted_tokens": self.full.demoted_tokens,
            "tokens_moved": dict(self.tokens_moved),
            "in_flight": len(self.pending),
            "failed": self.failed,
        }
        if self.storage is not None:
            out.update(self.storage.stats())
        return out


def make_hierarchy(topo, config, auto_ack: bool, full, storage=None) -> Hierarchy | None:
    """The hierarchy of a cache with tiers (`config`: its CacheConfig), else None. `storage`: a prebuilt
    L3 store (several caches share one: a fleet's shared L3) that the hierarchy and, through its `link`,
    every component use from the start instead of a store of their own; it needs an L3 tier."""
    tiers = config.tiers if config.tiered else None
    if storage is not None and not (tiers and tiers.l3):
        raise ValueError("storage: a prebuilt L3 store needs a cache with an L3 tier")
    return Hierarchy(topo, tiers, config.usable_tokens, auto_ack, full, storage) if tiers else None
