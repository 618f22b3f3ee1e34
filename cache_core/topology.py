"""`Topology`: the radix tree with its components, the collaborator the cache, the hierarchy
and the components share (never the cache itself).

It fans the tree's split/remove hooks out to every component, keeps the lock registry (node
id -> count, for invariant checks), removes a leaf with every ancestor that became useless,
offers a node again to every queue (`touch_all`) and records actions. Components are
registered with `add` (FULL first); each is built by its spec from a `ports.TreeLink` (`link(slot, ...)`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .actions import L1, Alloc, Free
from .components.ports import TreeLink
from .tree import RadixTree
from .vote import Voters

if TYPE_CHECKING:
    from .components.full import FullComponent
    from .sessions import SessionRegistry
    from .tiers import Hierarchy


class Topology:
    def __init__(self, page_size: int, policy, comp_slots: int, lazy: bool, actions: list | None,
                 sidecars: tuple = ()):
        self.page_size = page_size
        self.policy = policy
        self.tree = RadixTree(page_size, self.on_split, self.on_remove, comp_slots=comp_slots, lazy=lazy)
        self.full: FullComponent | None = None  # the first component added
        self.components: list = []
        self.voters = Voters()  # every component but FULL (they vote on the boundary)
        self.tiers: Hierarchy | None = None  # the Hierarchy, wired by the cache when tiers exist
        self.sessions: SessionRegistry | None = None  # the SessionRegistry, wired by the cache when the policy uses sessions
        self.locks: dict[int, list] = {}  # node id -> [node, count], for invariant checks
        self.actions = actions
        self.sidecars = sidecars
        self._sidecars_of: dict[str, tuple] = {}  # component name -> sidecars_of(name)
        self.version = 0  # bumped by every insert, split and removal (l1_match.py; no query reads a lock)

    def link(self, slot: int, full_tokens: int | None = None, tier_config=None, useless_leaf=None) -> TreeLink:
        return TreeLink(tree=self.tree, policy=self.policy, page_size=self.page_size, slot=slot,
                        remove_leaf=self.remove_leaf, record=self.record, full_tokens=full_tokens,
                        tier_config=tier_config, useless_leaf=useless_leaf)

    def add(self, comp) -> None:
        if self.full is None:
            self.full = comp
        else:
            self.voters.append(comp)
        self.components.append(comp)

    def sidecars_of(self, component: str) -> tuple:
        names = self._sidecars_of.get(component)  # sidecars never change after construction
        if names is None:
            names = self._sidecars_of[component] = tuple(s.name for s in self.sidecars if s.follows == component)
        return names

    # -- tree hooks fan out to components ----------------------------------------------------
    def on_split(self, upper, lower, upper_tokens):
        self.version += 1
        for c in self.components:
            c.on_split(upper, lower, upper_tokens)
        for c in self.voters:  # the upper half is new (fresh tick), the lower's payload shrank
            c.touched(upper)
            c.touched(lower)

    def on_remove(self, node):
        self.version += 1
        for c in self.components:
            c.on_remove(node)
        if self.sessions is not None:
            self.sessions.on_remove(node)

    def remove_leaf(self, node):
        """Remove an unlocked leaf, then every ancestor that becomes an unlocked leaf no
        voting component can use. Returns (last parent, FULL tokens removed)."""
        return self.full.remove(node)

    def useless_leaf(self, node) -> bool:
        """A leaf no voting component can reuse at any boundary: keeping it only takes memory."""
        return any(c.useless_leaf(node) for c in self.voters)

    def touch_all(self, n) -> None:
        """`n`'s policy key changed: offer it again to every queue it may be a candidate of."""
        assert self.full is not None  # wired when the cache was built
        self.full.touched(n)
        if self.tiers is not None:
            self.tiers.touched(n)
        for c in self.voters:
            c.touched(n)

    def touch_path(self, visited) -> None:
        for nd in visited:
            for c in self.components:
                c.touched(nd)

    # -- locks ---------------------------------------------------------------------------------
    def lock(self, node) -> None:
        for c in self.components:
            c.lock(node)
        entry = self.locks.setdefault(node.id, [node, 0])
        entry[1] += 1

    def unlock(self, node) -> None:
        entry = self.locks.get(node.id)
        if entry is None:
            raise RuntimeError("unlock without a matching lock")
        for c in self.components:
            c.unlock(node)
        entry[1] -= 1
        if entry[1] == 0:
            del self.locks[node.id]
        if node.value is None and self.tiers is not None:  # not on L1: maybe a failed prefetch's node
            self.tiers.unlocked(node)

    # -- actions -------------------------------------------------------------------------------
    def record(self, action) -> None:
        if self.actions is not None:
            self.actions.append(action)

    def watch(self, pool, name: str) -> None:
        """Record every allocation and free of `pool` (component `name`) as Alloc/Free actions."""
        sidecars = self.sidecars_of(name)
        acts = self.actions

        def listener(kind, indices):
            rec = Alloc if kind == "alloc" else Free
            acts.append(rec(name, L1, tuple(int(i) for i in indices), sidecars))

        pool.listener = listener
