"""`MatchMemo`: a request is matched once per state change (issue 16 item 3).

The engine asks for the same request's match several times on its way in (ordering, the
admission probe, resolve). While the cache's state is unchanged, the walk would find the same
nodes: the memo gives the stored result back and only repeats the walk's effects on recency
(a fresh tick on the root and the nodes the walk visited, offered again to the queues), so
ticks and eviction order are exactly those of a new walk.

`version` is the state a match depends on: the topology's counter (every insert, split,
removal, lock and unlock) plus every component pool's allocations and frees (evictions,
SWA tombstones, MAMBA checkpoints). A match that changed the state itself (a split) is not
kept. Used on L1-only caches with the built-in components (tiers change residency through
acknowledgements and L3 contents the counter does not see)."""
from __future__ import annotations

from dataclasses import replace


class MatchMemo:
    def __init__(self, topo):
        self.topo = topo
        self.tree = topo.tree
        self.pools = [c.pool for c in topo.components]
        self.kept: dict = {}  # id(seq) -> (seq, n, result, last visited node, visited nodes or None)
        self.kept_at = -1  # the version the kept results were matched at

    @property
    def version(self) -> int:
        return self.topo.version + sum(p.changes for p in self.pools)

    def match(self, seq, n: int, walk):
        """The match of seq[:n]: kept while the version holds, else `walk(seq, n)`, which
        returns (result, last visited node, visited nodes or None)."""
        v = self.version
        if v != self.kept_at:
            self.kept.clear()
            self.kept_at = v
        got = self.kept.get(id(seq))
        if got is not None and got[0] is seq and got[1] == n:
            self._touch(got[3], got[4])
            return replace(got[2])
        m, last, visited = walk(seq, n)
        if self.version == v:
            self.kept[id(seq)] = (seq, n, m, last, visited)
        return m

    def _touch(self, last, visited) -> None:
        """What the walk did to recency (tree.walk's ticks, then the queues), again."""
        tick = self.tree.fresh()
        self.tree.root.tick = tick
        if visited is None:  # lazy ticks: the deepest visited node only
            if last is not None:
                last.tick = tick
            self.topo.full.touched(last)
            return
        for nd in visited:
            nd.tick = tick
        self.topo.touch_path(visited)
