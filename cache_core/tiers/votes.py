"""Tiers x voting components: the hierarchy asks every component (components/*: their tier
hooks) and combines the answers. FULL decides where a node lives (hierarchy.py); the other
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

from ..vote import gap_validators, look_back


def storage_boundary(voters, validators, keys, run_pages: int, page_size: int) -> int:
    """Deepest page count j <= run_pages of the L3 run that every component accepts (each
    continuing from its validator's state at the end of the tree walk). 0 when none.

    Bottom-up, as `vote.vote`: a verdict after page j looks only at the `look_back` tokens
    before it or at the whole path, so fresh validators after a gap (`gap_validators`) first
    see the shortest tail of the run with one exact verdict; those after the tail's first
    `need` - 1 pages are exact. The tail doubles while none of them is accepted; from page 0
    (the walk's validators) every verdict is exact."""
    need = -(-look_back(voters) // page_size)  # pages a windowed verdict looks back over
    tail = max(need, 1)
    while True:
        lo = max(0, run_pages - tail)
        vals = validators if lo == 0 else gap_validators(voters)
        ok = np.ones(run_pages - lo, dtype=bool)
        for c, v in zip(voters, vals):
            ok &= c.storage_mask(keys[lo:], run_pages - lo, v)
        if lo > 0:
            ok[:max(need - 1, 0)] = False  # verdicts that need the run above the tail
        nz = np.flatnonzero(ok)
        if len(nz) or lo == 0:
            return lo + int(nz[-1]) + 1 if len(nz) else 0
        tail *= 2


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
