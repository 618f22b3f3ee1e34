"""Matching on a cache with tiers as a pure query plus an explicit touch, and the reuse of a
request's query while the state it reads is unchanged (issue 16 item 3; l1_match.py does the
same without tiers).

- `TieredMatch.query(seq, n)`: read-only (no tick, no split, no queue offer, no L3 recency:
  `store.leading` marks nothing read): the device run, the host run and the L3 run (FULL
  only), or the vote on the union of tiers with the L3 run and the L3 boundary every
  component accepts (votes.py), and where the result's node must be split.
- `TieredMatch.touch(plan)`: what the walk did, in its order: one fresh tick on the root and
  every visited node, then FULL only the split and every visited node offered again to every
  queue (`Topology.touch_all`), with voting components the offers and then the split.
- `match` = touch(query); a query that needs no split is kept per request (its `TokenSeq`)
  while `version` holds.

`version` covers everything a query reads: the topology's counter (inserts, splits,
removals), what every component lists in `match_state()` (the frees of its L1 and L2 pool
by default; built once its tiers are attached) and the frees of the hierarchy's L2 pool
(evictions, demotions, tombstones; an allocation places nothing on a node by itself: the
insert, transfer or acknowledgement that does is counted), the transfers emitted and finished
(`Hierarchy.ids`, `Hierarchy.finished`: nodes in flight, residency set at acknowledgements)
and the L3 store's puts and removals (`changes`: evictions, discards after failed reads,
on one engine or another sharing the store)."""
from __future__ import annotations

from dataclasses import dataclass

from ..l1_match import MemoMatch, PlanMemo, path_tokens
from ..records import LockHandle, MatchResult
from ..tree import Node
from ..vote import vote
from .votes import l3_boundary, storage_boundary


@dataclass(frozen=True, slots=True)
class TierPlan:
    result: tuple  # (cached, traversed, lost, device, host, storage, l3_boundary)
    node: Node | None  # the result's node; None: the upper half of the split
    split: Node | None  # the node to split `cut` tokens into its edge (None: no split)
    cut: int
    visited: list  # every visited node, top-down
    split_first: bool  # FULL only: the walk split before the queue offers

    @property
    def splits(self) -> bool:
        return self.split is not None


def l1_end(node) -> int:
    """Where the device run of the path to `node` ends (the deepest ancestor on L1)."""
    while node.parent is not None and node.value is None:
        node = node.parent
    return node.end


def upper_end(split, cut: int) -> int:
    return split.parent.end + cut


def device_end(node, split, cut: int) -> int:
    """The device run above the result's node (`node` None: the split's upper half, which
    has the residency of the node it is cut from)."""
    if node is not None:
        return l1_end(node)
    return upper_end(split, cut) if split.value is not None else l1_end(split.parent)


class TieredMatch(MemoMatch):
    def __init__(self, topo, hier, memo: bool):
        self.topo, self.hier, self.tree, self.page_size = topo, hier, topo.tree, topo.page_size
        self.memo: PlanMemo | None = PlanMemo() if memo else None
        self.quiet = memo and topo.policy.tick_order_only
        self.pools: list | None = None  # every component's `match_state()` and the hierarchy's L2 pool, once built

    @property
    def version(self) -> int:
        hier, store = self.hier, self.hier.storage
        pools = self.pools
        if pools is None:  # the components' L2 pools exist once the cache attached its tiers
            pools = self.pools = [p for c in self.topo.components for p in c.match_state()] + (
                [] if hier.pool is None else [hier.pool])
        v = self.topo.version + hier.ids + hier.finished + (0 if store is None else store.changes)
        for p in pools:
            v += p.frees
        return v

    def query(self, seq, n: int) -> TierPlan:
        """Read-only: the tiered match of seq[:n] and the split it needs."""
        path = self.tree.path_nodes(seq.data, n)
        if self.topo.voters:
            return self._query_voted(seq, n, path)
        return self._query_full(seq, n, path)

    def touch(self, plan: TierPlan) -> MatchResult:
        """Ticks, the split, queue offers (module doc); the result."""
        tree, topo = self.tree, self.topo
        tick = tree.fresh()
        tree.root.tick = tick
        for nd in plan.visited:
            nd.tick = tick
        upper = plan.node
        if plan.split is not None and plan.split_first:
            upper = tree.split(plan.split, plan.cut)
        for nd in plan.visited:
            topo.touch_all(nd)
        if plan.split is not None and not plan.split_first:
            upper = tree.split(plan.split, plan.cut)
        return self._result(plan, plan.node if plan.node is not None else upper)

    def result(self, plan: TierPlan) -> MatchResult:
        return self._result(plan, plan.node)

    @staticmethod
    def _result(plan: TierPlan, node) -> MatchResult:
        cached, traversed, lost, device, host, storage, l3b = plan.result
        return MatchResult(cached, LockHandle(node), traversed, lost, device, host, storage, l3b)

    def _storage_run(self, seq, lo: int, n: int):
        """The L3 run of page keys after token `lo` (pages), and those keys."""
        P = self.page_size
        keys = seq.page_keys(P)[lo // P : n // P]
        return self.hier.storage.leading(keys), keys

    def _query_full(self, seq, n: int, path) -> TierPlan:
        """FULL only: device run, host run (tree), then the storage run (L3, by page key)."""
        visited = [nd for nd, _ in path]
        matched = path_tokens(path)
        top = visited[-1] if visited else self.tree.root
        split, cut = (top, path[-1][1]) if path and path[-1][1] < top.num_tokens else (None, 0)
        stop = False  # a prefetch still in flight: nothing there to reuse yet
        while top.parent is not None and top.value is None and top.host is None:
            top, stop = top.parent, True
        node = None if split is not None and not stop else top
        matched = min(matched, top.end if node is not None else upper_end(split, cut))
        device = device_end(node, split, cut)
        storage = 0
        if self.hier.storage is not None and matched < n and not stop:
            run = self._storage_run(seq, matched, n)[0] * self.page_size
            storage = run if run >= self.hier.cfg.min_prefetch_tokens else 0
        result = (matched + storage, matched, (), device, matched - device, storage, 0)
        return TierPlan(result, node, split, cut, visited, True)

    def _query_voted(self, seq, n: int, path) -> TierPlan:
        """With SWA/MAMBA: votes on the union of tiers, then an L3 run whose boundary every
        component accepts (votes.storage_boundary), or a deeper tree boundary whose
        missing payloads L3 holds (votes.l3_boundary)."""
        hier, P, voters = self.hier, self.page_size, self.topo.voters
        visited = [nd for nd, _ in path]
        traversed = path_tokens(path)
        vals: list = []
        best, node, cut, lost = vote(voters, visited, traversed, P, out=vals)
        least = max(hier.cfg.min_prefetch_tokens, 1)
        storage = 0
        if hier.storage is not None and traversed < n:
            run, keys = self._storage_run(seq, traversed, n)
            j = storage_boundary(voters, vals, keys, run, P) if run else 0
            if j * P >= least:
                storage, best, node = j * P, traversed, visited[-1] if visited else self.tree.root
                cut = traversed - node.parent.end if node.parent is not None else 0
        l3b = 0
        if storage == 0 and best < traversed and hier.storage is not None and hier.pool is not None:
            l3b = l3_boundary(voters, P, visited, traversed, best, seq.page_keys(P))
            l3b = l3b if l3b - best >= least else 0
        if node is None:
            node, cut = self.tree.root, 0
        split = node if 0 < cut < node.num_tokens else None
        res = None if split is not None else node
        device = device_end(res, split, cut)
        end = node.end if res is not None else upper_end(split, cut)
        result = (best + storage, traversed, lost, device, end - device, storage, l3b)
        return TierPlan(result, res, split, cut, visited, False)
