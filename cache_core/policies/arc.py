"""`arc`: ARC, the Adaptive Replacement Cache (Megiddo and Modha, "ARC: A Self-Tuning, Low
Overhead Replacement Cache", FAST 2003, Fig. 4), adapted to radix leaves.

ARC keeps two LRU lists of cached pages, T1 (seen once recently) and T2 (seen at least twice),
and two ghost lists of recently evicted page keys, B1 (evicted from T1) and B2 (from T2). An
adaptive target p for |T1| decides where to evict (REPLACE: from T1 while |T1| > p, else from
T2); a request that hits a ghost in B1 means T1 was too small (p grows by
max(|B2| / |B1|, 1)), one in B2 that T2 was (p shrinks by max(|B1| / |B2|, 1)); the ghost entry
moves to T2.

Adaptation (a policy here is a sort key over the evictable leaves):
- a node is in T2 once two inserts covered it (SGLang counts hits per insert) or when it came
  back through a ghost entry, else in T1; it never returns to T1;
- sizes are in whole pages (`node.pkeys`); |T1| and |T2| count the nodes the policy has ranked
  (each was a leaf at some time: internal nodes that never were are not counted) until evicted;
  the cache size c is |T1| + |T2| at each eviction, ghosts are trimmed to c pages per list;
- a ghost entry is an evicted node's first page key (chained: one key = one whole prefix) with
  its pages; |B1| and |B2| count pages. A node ranked for the first time is a ghost hit when its
  first page key is in B1 or B2 (an evicted tail comes back as a leaf under the same surviving
  parent, so it starts where the evicted one did), and p moves by the ratio above times the
  node's pages (a node is a run of pages that come back at once);
- REPLACE's tie rule (|T1| = p on a B2 hit) is left out;
- key = (epoch, tick): the nodes of the list REPLACE takes from get the current epoch, the others
  epoch + 1; each time the victim list changes the epoch moves up by one, so no node's key ever
  decreases (the queue re-ranks a popped entry whose key moved, `volatile`), LRU within a list,
  and an empty victim list falls through to the other list by LRU.
SWA and MAMBA pools rank by LRU. With tiers, an L1 demotion and an L2 eviction both count as an
eviction (the node leaves T1/T2 for its ghost list; loaded back, it is a ghost hit).
"""
from __future__ import annotations

from collections import OrderedDict

from ..eviction import Policy, register_policy
from .stamped import FullRanked

T1, T2 = 1, 2


@register_policy("arc")
class Arc(FullRanked, Policy):
    volatile = True
    needs_keys = True
    reads_priority = False

    def __init__(self):
        self.p = 0.0  # target |T1|, pages
        self.size = {T1: 0, T2: 0}  # pages ranked in each list
        self.ghosts = {T1: OrderedDict(), T2: OrderedDict()}  # B1, B2: first page key -> pages, LRU first
        self.ghost_pages = {T1: 0, T2: 0}
        self.victim = T1
        self.epoch = 0
        self._in: dict = {}  # node id -> (list, pages)

    def key(self, node):
        lst = self._place(node)
        return (self.epoch if lst == self.victim else self.epoch + 1, node.tick)



    @staticmethod
    def _pages(node) -> int:
        return 0 if node.pkeys is None else len(node.pkeys)

    def _place(self, node) -> int:
        """The node's list (placing a newly ranked node, with ghost hits); sizes kept current."""
        got = self._in.get(node.id)
        pages = self._pages(node)
        if got is None:
            lst = self._ghost_hit(node, pages) or (T2 if node.hits >= 2 else T1)
        else:
            lst = T2 if node.hits >= 2 else got[0]
            self.size[got[0]] -= got[1]
        self.size[lst] += pages
        self._in[node.id] = (lst, pages)
        self._choose()
        return lst

    def _ghost_hit(self, node, pages: int):
        """Adapt p on a ghost hit (ARC cases II and III); T2 if it was one, else None."""
        if not pages:
            return None
        first = int(node.pkeys[0])
        b1, b2 = self.ghost_pages[T1], self.ghost_pages[T2]
        if first in self.ghosts[T1]:
            self.p = min(self.p + max(b2 / b1, 1.0) * pages, self.size[T1] + self.size[T2])
        elif first in self.ghosts[T2]:
            self.p = max(self.p - max(b1 / b2, 1.0) * pages, 0.0)
        else:
            return None
        for lst, g in self.ghosts.items():
            self.ghost_pages[lst] -= g.pop(first, 0)
        return T2

    def _choose(self) -> None:
        want = T1 if self.size[T1] > 0 and self.size[T1] > self.p else T2
        if want != self.victim:
            self.victim = want
            self.epoch += 1

    def _evicted(self, node, key) -> None:
        lst, pages = self._in.pop(node.id, (T1, 0))
        self.size[lst] -= pages
        cap = self.size[T1] + self.size[T2] + pages  # c: what the cache held before this eviction
        ghost = self.ghosts[lst]
        if pages:
            first = int(node.pkeys[0])
            self.ghost_pages[lst] += pages - ghost.pop(first, 0)
            ghost[first] = pages
        while self.ghost_pages[lst] > cap:
            self.ghost_pages[lst] -= ghost.popitem(last=False)[1]
        self._choose()
