"""`check(cache)`: recount everything from scratch; raise `InvariantError` with a dump on any
mismatch. O(nodes + tokens): for tests and `--check-invariants`, not for the hot path.

Checked:
- links: every child's parent is the node holding it, under the bytes of its first page;
  every non-root edge is non-empty and a whole number of pages; node count;
- FULL payload: one page index per page of every node;
- locks: each node's lock_ref equals the number of live lock handles at it or below it
  (the root holds one permanent reference);
- sizes: evictable = tokens of unlocked nodes, protected = tokens of locked nodes;
- pool: free + in tree + handed out to callers = capacity; no page is both free and in the
  tree, or in two nodes;
- eviction queue: every evictable leaf has a valid entry (so eviction can find it).
"""
from __future__ import annotations

import numpy as np

from .actions import L1, L2
from .allocator import pool_errors


class InvariantError(AssertionError):
    pass


def dump(cache, limit: int = 60) -> str:
    """A readable picture of the tree (at most `limit` nodes)."""
    lines: list[str] = []

    def rec(node, depth):
        if len(lines) >= limit:
            return
        toks = node.tokens()
        shown = toks[:8].tolist()
        more = "..." if len(toks) > 8 else ""
        lines.append(f"{'  ' * depth}#{node.id} len={len(toks)} {shown}{more} lock={node.lock_ref} "
                     f"tick={node.tick} hits={node.hits} "
                     + " ".join(f"{t}={pg[:4].tolist()}{'...' if len(pg) > 4 else ''}"
                                for t, pg in ((L1, node.value), (L2, node.host)) if pg is not None))
        for c in node.children.values():
            rec(c, depth + 1)

    rec(cache.tree.root, 0)
    if len(lines) >= limit:
        lines.append(f"... ({cache.tree.num_nodes} nodes in all)")
    return "\n".join(lines)


def check(cache) -> None:
    errors: list[str] = []
    nodes = _walk(cache, errors)
    _check_locks(cache, nodes, errors)
    _check_full(cache, nodes, errors)
    if cache.hier is not None:
        _check_tiers(cache, nodes, errors)
    locks = list(cache.topo.locks.values())
    for c in cache.voters:
        c.check(nodes, locks, lambda tier, component: _in_flight(cache, tier, component), errors)
    if errors:
        raise InvariantError("cache invariants violated:\n- " + "\n- ".join(errors[:20]) + "\n" + dump(cache))


def _walk(cache, errors: list) -> list:
    """Every reachable node (root first, parents before children), checking the topology."""
    tree = cache.tree
    P = tree.page_size
    pb = 8 * P
    root = tree.root
    nodes = []
    stack: list = [(root, None)]  # (node, its parent)
    while stack:
        node, parent = stack.pop()
        nodes.append(node)
        if node is not root:
            if node.parent is not parent:
                errors.append(f"node #{node.id}: parent link wrong")
            if not node.key or len(node.key) % pb:
                errors.append(f"node #{node.id}: edge of {len(node.key) // 8} tokens is not a whole number of pages")
            elif parent.children.get(node.key[:pb]) is not node:
                errors.append(f"node #{node.id}: not filed under its first page in the parent")
            for tier, pg in ((L1, node.value), (L2, node.host)):
                if pg is not None and len(pg) * P != len(node.key) // 8:
                    errors.append(f"node #{node.id}: {len(pg)} {tier} pages for {len(node.key) // 8} tokens")
            if node.value is None and cache.hier is None:
                errors.append(f"node #{node.id}: no FULL pages")
            if not node.alive:
                errors.append(f"node #{node.id}: dead node still in the tree")
            if node.end != parent.end + len(node.key) // 8:
                errors.append(f"node #{node.id}: end {node.end} != parent end {parent.end} + {len(node.key) // 8}")
            if node.hot is not None and parent.hot is not None and parent.hot.parent is not parent:
                errors.append(f"node #{parent.id}: lookup shortcut points to a node that is not its child")
        for child in node.children.values():
            stack.append((child, node))
    if len(nodes) != tree.num_nodes:
        errors.append(f"num_nodes {tree.num_nodes} != {len(nodes)} reachable")
    return nodes


def _check_locks(cache, nodes, errors: list) -> None:
    """lock_ref = the lock handles at or below a node (post-order accumulation)."""
    held = {nid: cnt for nid, (node, cnt) in cache.topo.locks.items()}
    root = cache.tree.root
    expect: dict[int, int] = {}
    for node in reversed(nodes):  # children after parents in `nodes`, so reversed = bottom-up
        expect[node.id] = held.get(node.id, 0) + sum(expect[c.id] for c in node.children.values())
    for node in nodes:
        want = 1 if node is root else expect[node.id]  # the root holds one permanent reference
        if node.lock_ref != want:
            errors.append(f"node #{node.id}: lock_ref {node.lock_ref}, expected {want}")


def _check_full(cache, nodes, errors: list) -> None:
    """FULL: evictable/protected sizes, the L1 page pool, the eviction queue."""
    full = cache.full
    on_l1 = [n for n in nodes[1:] if n.value is not None]
    evictable = sum(len(n.key) for n in on_l1 if n.lock_ref == 0) // 8
    protected = sum(len(n.key) for n in on_l1 if n.lock_ref > 0) // 8
    if evictable != full.evictable_tokens:
        errors.append(f"evictable_tokens {full.evictable_tokens}, recount {evictable}")
    if protected != full.protected_tokens:
        errors.append(f"protected_tokens {full.protected_tokens}, recount {protected}")
    in_tree = np.concatenate([n.value for n in on_l1] + [_in_flight(cache, L1)])
    free = full.pool.free_view()
    both = np.concatenate([in_tree, free])
    cap = full.pool.capacity_pages
    bound = full.pool.index_bound
    if len(both) and (both.min() < 0 or both.max() >= bound):
        errors.append(f"page index out of range [0, {bound})")
    elif len(both) and np.bincount(both, minlength=bound).max() > 1:
        errors.append("a page is in two places (two nodes, or a node and the free list)")
    if cap is not None:
        total = len(free) + len(in_tree) + cache.outstanding_pages
        if total != cap:
            errors.append(f"pages: free {len(free)} + tree {len(in_tree)} + handed out "
                          f"{cache.outstanding_pages} = {total} != capacity {cap}")
    live = full.queue.live_ids()
    for n in nodes[1:]:
        if full.is_candidate(n) and n.id not in live:
            errors.append(f"node #{n.id}: evictable leaf missing from the eviction queue")


def _in_flight(cache, tier: str, component: str = "full") -> np.ndarray:
    """Destination slots of transfers not yet acknowledged (allocated, not yet valid)."""
    if cache.hier is None:
        return np.empty(0, dtype=np.int64)
    parts = [np.atleast_1d(np.asarray(t.dst, dtype=np.int64)) for t, _ in cache.hier.pending.values()
             if t.dst_tier == tier and t.dst is not None and t.component == component]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _check_tiers(cache, nodes, errors) -> None:
    hier = cache.hier
    for n in nodes[1:]:
        p = n.parent
        if n.value is None and n.host is None and not n.pending:
            errors.append(f"node #{n.id}: on no tier and nothing in flight")
        if n.value is not None and p.parent is not None and p.value is None and not p.pending:
            errors.append(f"node #{n.id}: on L1 below a parent that is not (L1 must be prefix-closed)")
        if n.host is not None and p.parent is not None and p.host is None and not p.pending:
            errors.append(f"node #{n.id}: on L2 below a parent that is not (L2 must be prefix-closed)")
        if n.pending and (cache.full.is_candidate(n) or hier.is_candidate(n)):
            errors.append(f"node #{n.id}: in flight yet offered for eviction")
        if hier.is_candidate(n) and n.id not in hier.queue.live_ids():
            errors.append(f"node #{n.id}: L2 candidate missing from its eviction queue")
        if hier.storage is not None and n.pkeys is not None and len(n.pkeys) * cache.page_size != n.num_tokens:
            errors.append(f"node #{n.id}: {len(n.pkeys)} page keys for {n.num_tokens} tokens")
    if hier.pool is not None:
        held = [n.host for n in nodes[1:] if n.host is not None] + [_in_flight(cache, L2)]
        pool_errors("L2 pool", hier.pool, np.concatenate(held) if held else np.empty(0, dtype=np.int64), 0, errors)
