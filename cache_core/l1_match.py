"""Matching on L1 (a cache without tiers) as a pure query plus an explicit touch, and the reuse
of a request's query while the cache's state is unchanged (issue 16 item 3).

- `L1Match.query(seq, n)`: read-only (no tick, no split, no queue): the FULL path along
  seq[:n], the vote of the voting components, and where the result's node must be split.
- `L1Match.touch(plan)`: what SGLang's match_prefix does to the tree, in its order: one fresh
  tick on the root and the visited nodes (lazily: the deepest visited node only), the split
  where the result ends inside an edge (the upper half gets a later fresh tick), then every
  visited node offered again to the queues. Returns the `MatchResult`.
- `L1Match.match` = touch(query). A query that needs no split is kept per request (by its
  `TokenSeq`) while `version` holds: the engine asks for the same request's match several
  times on its way in (ordering, the admission probe, resolve), and each is then only a
  touch, with exactly the ticks and queue offers of a new walk.

`version` is the state a query depends on: the topology's counter (every insert, split and
removal) plus what each component lists in `match_state()` (its pool's frees by default:
evictions, SWA tombstones; an allocation hands pages to a caller and places nothing on a
node: the tree takes them at an insert). Locks are not part of it: no query reads a lock
(they decide only which nodes a queue takes, which `touch` offers afresh). Used with any
components (a component without a pool adds nothing; one whose votes change otherwise lists
a counter of its own); tiers match through tiers/match.py (residency changes with
acknowledgements and L3 contents)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .optional import present
from .records import LockHandle, MatchResult
from .tree import Node
from .vote import vote


@dataclass(frozen=True, slots=True)
class MatchPlan:
    cached_tokens: int
    traversed_tokens: int
    lost: tuple
    node: Node  # the result's node, or the node to split at `cut`
    cut: int | None  # tokens of `node`'s edge to keep above the split; None: no split
    last: Node | None  # the deepest visited node (None: none)
    visited: list | None  # every visited node, top-down (None: lazy ticks)

    @property
    def splits(self) -> bool:
        return self.cut is not None


def path_tokens(path) -> int:
    """Tokens a `RadixTree.path_nodes` path covers."""
    return path[-1][0].parent.end + path[-1][1] if path else 0


class PlanMemo:
    """Match plans kept per request (by its `TokenSeq`) while the version they were queried
    at holds (shared with tiers/match.py)."""

    def __init__(self):
        self.kept: dict = {}  # id(seq) -> (seq, n, plan)
        self.kept_at = -1  # the version the kept plans were queried at

    def get(self, seq, n: int, version: int):
        """The plan kept for seq[:n] at `version`, or None (a new version drops every plan)."""
        if version != self.kept_at:
            self.kept.clear()
            self.kept_at = version
        got = self.kept.get(id(seq))
        return got[2] if got is not None and got[0] is seq and got[1] == n else None

    def keep(self, seq, n: int, plan) -> None:
        self.kept[id(seq)] = (seq, n, plan)


class MemoMatch:
    """`match` = touch(query(...)); a query whose plan needs no split is kept per request
    while `version` holds (`memo` None: every match queries). Shared with tiers/match.py.

    `repeat` answers a match without its effects when they would only repeat the last
    match's: the same kept plan with no tick taken since. The same nodes would get the newest
    tick again, keeping their order among themselves and above every other node, and be
    offered again to queues that hold each candidate under its current key already (the
    invariants check this): nothing eviction can see changes, for a policy whose keys compare
    ticks only with each other (`Policy.tick_order_only`; `quiet`)."""

    memo: PlanMemo | None = None
    quiet = False  # repeats may be answered by `repeat` (a memo and a tick_order_only policy)
    last: tuple | None = None  # (plan, the tree's tick after it) of the last match
    tree: Any
    page_size: int

    @property
    def version(self) -> int:
        raise NotImplementedError

    def query(self, seq, n: int):
        raise NotImplementedError

    def touch(self, plan) -> MatchResult:
        raise NotImplementedError

    def result(self, plan) -> MatchResult:
        """The result of a plan that needs no split, without touching anything."""
        raise NotImplementedError

    def span(self, seq, limit_tokens: int | None) -> int:
        """Tokens a match of seq (a `TokenSeq`) cut to `limit_tokens` covers: whole pages."""
        n = seq.length if limit_tokens is None else min(limit_tokens, seq.length)
        return n // self.page_size * self.page_size

    def match(self, seq, n: int) -> MatchResult:
        memo = self.memo
        if memo is None:
            return self.touch(self.query(seq, n))
        plan = memo.get(seq, n, self.version)
        if plan is None:
            plan = self.query(seq, n)
            if not plan.splits:
                memo.keep(seq, n, plan)
        res = self.touch(plan)
        self.last = (plan, self.tree.now)
        return res

    def repeat(self, seq, limit_tokens: int) -> MatchResult | None:
        """What matching seq[:limit_tokens] (a `TokenSeq`) would return now, when the match
        would only repeat the last one's effects (class doc); None: match it."""
        last = self.last
        if not self.quiet or last is None or last[1] != self.tree.now:
            return None
        plan = present(self.memo, "a quiet matcher's memo").get(seq, self.span(seq, limit_tokens), self.version)
        return self.result(plan) if plan is last[0] else None


class L1Match(MemoMatch):
    def __init__(self, topo, memo: bool = True):
        self.topo, self.tree, self.page_size = topo, topo.tree, topo.page_size
        self.pools = [p for c in topo.components for p in c.match_state()] if memo else []
        self.memo: PlanMemo | None = PlanMemo() if memo else None
        self.quiet = memo and topo.policy.tick_order_only

    @property
    def version(self) -> int:
        return self.topo.version + sum(p.frees for p in self.pools)

    def query(self, seq, n: int) -> MatchPlan:
        """Read-only: the match of seq[:n] and the split it needs."""
        path = self.tree.path_nodes(seq.data, n)
        traversed = path_tokens(path)
        last = path[-1][0] if path else None
        voters = self.topo.voters
        if not voters:
            if last is None:
                return MatchPlan(0, 0, (), self.tree.root, None, None, None)
            k = path[-1][1]
            cut = k if k < last.num_tokens else None
            return MatchPlan(traversed, traversed, (), last, cut, last, None)
        visited = [nd for nd, _ in path]
        best, node, cut, lost = vote(voters, visited, traversed, self.page_size)
        if node is None:
            node, cut = self.tree.root, None
        elif cut >= node.num_tokens:
            cut = None
        return MatchPlan(best, traversed, lost, node, cut, last, visited)

    def touch(self, plan: MatchPlan) -> MatchResult:
        """Ticks, the split, queue offers (module doc); the result."""
        tree = self.tree
        tick = tree.fresh()
        tree.root.tick = tick
        if plan.visited is not None:
            for nd in plan.visited:
                nd.tick = tick
        node = plan.node if plan.cut is None else tree.split(plan.node, plan.cut)
        if plan.visited is None:  # lazy ticks: the deepest visited node only
            if plan.last is not None:
                plan.last.tick = tick
            self.topo.full.touched(plan.last)
        else:
            self.topo.touch_path(plan.visited)
        return MatchResult(plan.cached_tokens, LockHandle(node), plan.traversed_tokens, plan.lost)

    def result(self, plan: MatchPlan) -> MatchResult:
        return MatchResult(plan.cached_tokens, LockHandle(plan.node), plan.traversed_tokens, plan.lost)
