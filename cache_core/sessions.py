"""Session references: stable session ids steer eviction ORDER without pinning memory.

When a request of a session completes successfully, the session's reusable region is
registered (replacing its previous one):
- FULL: the prefix path from the root to the end of the request's cached sequence
  (``node.srefs`` counts the sessions whose path covers a node);
- every other component: what its `add_session_ref(frontier)` hook references (SWA: its tail
  window plus one page; MAMBA: the checkpoint at that frontier); the token it returns is
  handed back to `drop_session_ref` and, when the frontier's node leaves the tree, to
  `session_node_removed` (components/base.py).

`close(sid)` removes the references but not the cache entries. Generations (one counter
for all ids, so a generation is never reused) and a bounded set of recently closed ids
(default 8192, oldest forgotten first) stop a request that finishes after its session was
closed — or closed and reopened — from restoring released references. Costs: register/release O(depth of the region), close O(depth), begin O(1).
The `session` policy (eviction.py) reads these counts; L3 is not affected.
"""
from __future__ import annotations

from collections import OrderedDict


class _State:
    __slots__ = ("gen", "node", "refs")

    def __init__(self, gen: int):
        self.gen = gen
        self.node = None  # FULL frontier
        self.refs: list = []  # [(component, token)] of the other components' references


class SessionRegistry:
    def __init__(self, cache, closed_bound: int = 8192):
        if closed_bound < 0:
            raise ValueError(f"closed_bound must be >= 0, got {closed_bound}")
        self.cache = cache
        self.closed_bound = closed_bound
        self.sessions: dict = {}
        self.closed: OrderedDict = OrderedDict()  # sid -> last generation
        self._at: dict = {}  # node id -> [sids whose frontier sits there]
        self.stale_finishes = 0
        self._gen = 0

    # -- lifecycle --------------------------------------------------------------------------------
    def begin(self, sid) -> int:
        """A request of `sid` starts: returns the generation it belongs to (reopens a
        recently closed id with a new generation)."""
        arrival = getattr(self.cache.policy, "session_arrival", None)  # a policy that predicts returns
        if arrival is not None:
            arrival(sid, self)
        st = self.sessions.get(sid)
        if st is None:
            self.closed.pop(sid, None)
            self._gen += 1  # one counter for all ids: a forgotten closed id cannot reuse a generation
            st = self.sessions[sid] = _State(self._gen)
        return st.gen

    def finish(self, sid, gen: int, node) -> bool:
        """A request of `sid` from generation `gen` completed with its cached sequence ending
        at `node`: register the region. False (nothing changes) for a stale finish."""
        st = self.sessions.get(sid)
        if st is None or st.gen != gen or sid in self.closed:
            self.stale_finishes += 1
            return False
        self._release(sid, st)
        self._register(sid, st, node)
        return True

    def close(self, sid) -> None:
        """Drop `sid`'s references (entries stay cached); later finishes of it are stale."""
        st = self.sessions.pop(sid, None)
        gen = st.gen if st is not None else self.closed.get(sid, 0)
        if st is not None:
            self._release(sid, st)
        self.closed[sid] = gen
        self.closed.move_to_end(sid)
        while len(self.closed) > self.closed_bound:
            self.closed.popitem(last=False)

    # -- regions ----------------------------------------------------------------------------------
    def _register(self, sid, st: _State, node) -> None:
        cache = self.cache
        if node is None or node.parent is None:
            return
        st.node = node
        self._at.setdefault(node.id, []).append(sid)
        rank_inner = cache.hier is not None or cache.voters  # internal nodes are ranked too
        n = node
        while n.parent is not None:
            n.srefs += 1
            if rank_inner:  # its key changed: offer it again wherever it is a candidate
                self._touch(n)
            n = n.parent
        cache.full.touched(node)
        if cache.hier is not None:
            cache.hier.touched(node)
        for c in cache.voters:
            st.refs.append((c, c.add_session_ref(node)))

    def _release(self, sid, st: _State) -> None:
        node = st.node
        if node is None:
            return
        cache = self.cache
        self._forget(node, sid)
        rank_inner = cache.hier is not None or cache.voters
        n = node
        while n.parent is not None:
            n.srefs -= 1
            if rank_inner:
                self._touch(n)
            n = n.parent
        cache.full.touched(node)
        if cache.hier is not None:
            cache.hier.touched(node)
        for c, token in st.refs:
            if token is not None:
                c.drop_session_ref(node, token)
        st.node, st.refs = None, []

    def _touch(self, n) -> None:
        self.cache.topo.touch_all(n)

    def _forget(self, node, sid) -> None:
        lst = self._at.get(node.id)
        if lst is not None:
            lst.remove(sid)
            if not lst:
                del self._at[node.id]

    def on_remove(self, node) -> None:
        """A node left the tree: sessions whose frontier was there keep the rest of their
        region (the frontier moves to the parent); each component says which of its
        references went with the node (`session_node_removed`)."""
        sids = self._at.pop(node.id, None)
        if not sids:
            return
        parent = node.parent
        for sid in sids:
            st = self.sessions.get(sid)
            if st is None:
                continue
            st.refs = [(c, c.session_node_removed(node, token)) for c, token in st.refs]
            if st.node is node:
                st.node = parent if parent is not None and parent.parent is not None else None
                if st.node is not None:
                    self._at.setdefault(st.node.id, []).append(sid)

    def sessions_at(self, node) -> list:
        """Ids of the open sessions whose FULL region ends at `node` (its frontier)."""
        return list(self._at.get(node.id, ()))

    def referenced_sessions(self) -> int:
        return sum(1 for st in self.sessions.values() if st.node is not None)
