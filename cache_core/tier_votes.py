"""Tiers x voting components: the hierarchy asks every component (components/*: their tier
hooks) and combines the answers. FULL decides where a node lives (tiers.py); the other
components' payloads follow it:
- votes see the union of tiers; an L3 run or a tree boundary whose payloads only L3 holds is
  reusable at the deepest boundary every component accepts (`storage_boundary`,
  `l3_boundary`);
- `fetch_boundary` starts the L3 -> L2 fetches such a boundary needs, `prefetch_components`
  brings a prefetched node's payloads along, `load_boundary` brings back (L2 -> L1) exactly
  what the reused boundary needs. Each payload becomes valid on its destination only when
  its transfer is acknowledged; the match then reuses the deepest boundary L1 alone accepts.
"""
from __future__ import annotations

import numpy as np


def storage_boundary(voters, validators, keys, run_pages: int) -> int:
    """Deepest page count j <= run_pages of the L3 run that every component accepts (each
    continuing from its validator's state at the end of the tree walk). 0 when none."""
    ok = np.ones(run_pages, dtype=bool)
    for c, v in zip(voters, validators):
        ok &= c.storage_mask(keys, run_pages, v)
    nz = np.flatnonzero(ok)
    return int(nz[-1]) + 1 if len(nz) else 0


def l3_boundary(voters, P: int, visited, traversed: int, best: int, keys) -> int:
    """Deepest page boundary b in (best, traversed] of a tree path at which every voting
    component has its payload in the tree (L1 or L2) or in L3 (`Component.l3_mask`). FULL
    must be in the tree (not in flight) up to b. `visited`: the walk's nodes (before any
    split); `keys`: the request's page keys. 0 when none."""
    cap = traversed // P
    for nd in visited:
        s = nd.parent.end // P
        if s >= cap:
            break
        if nd.value is None and nd.host is None:  # a prefetch still in flight
            cap = s
            break
    lo_b = best // P + 1
    if cap < lo_b:
        return 0
    ok = np.ones(cap - lo_b + 1, dtype=bool)
    for c in voters:
        ok &= c.l3_mask(visited, traversed, keys, lo_b, cap)
    nz = np.flatnonzero(ok)
    return (lo_b + int(nz[-1])) * P if len(nz) else 0


def fetch_boundary(voters, bnode, keys) -> bool:
    """Start the L3 -> L2 fetches of the payloads that reuse at `bnode`'s end needs and no
    tree tier holds. True when every missing payload is on its way."""
    results = [c.fetch_boundary(bnode, keys) for c in voters]
    return all(results)


def prefetch_components(hier, node, keys) -> None:
    """Bring the component payloads of a prefetched node from L3 into L2 (with its FULL)."""
    node.pending += 1  # not an L2 victim while its own payloads are being placed
    try:
        for c in hier.voters:
            c.prefetch(node, keys)
    finally:
        node.pending -= 1
        hier.settled(node)


def load_boundary(voters, node) -> bool:
    """Make the payloads that reuse at `node`'s end needs valid on L1. False if a pool cannot
    supply them (the components after it are not asked)."""
    for c in voters:
        if not c.load_boundary(node):
            return False
    return True
