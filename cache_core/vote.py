"""Matching by vote: the reusable boundary is the deepest candidate every component accepts.

The walk follows the canonical FULL path; every page boundary on it is a candidate. Each
voting component's validator returns, per visited node, which boundaries inside it it
accepts, as a *mask* over the node's matched pages (boundary after page j):
``True`` (all), ``False`` (none), ``END`` (only the node's end) or a bool numpy array.
A rejection never stops the walk: validators see every node, in order, and a deeper node may
be accepted again.
"""
from __future__ import annotations

import numpy as np

END = "end"

REASONS = {"swa": "SWA window incomplete", "mamba": "no MAMBA checkpoint at boundary"}


def _deepest(m, npages: int) -> int:
    """Index of the deepest accepted boundary in the mask, or -1."""
    if m is True or m is END:
        return npages - 1
    if m is False:
        return -1
    nz = np.flatnonzero(m)
    return int(nz[-1]) if len(nz) else -1


def _and(a, b):
    if a is False or b is False:
        return False
    if a is True:
        return b
    if b is True:
        return a
    if a is END or b is END:
        other = b if a is END else a
        return END if other is END or bool(other[-1]) else False
    return a & b


def vote(voters, visited, traversed: int, page_size: int, l1_only: bool = False, out: list | None = None):
    """Return (reusable_tokens, node, cut, lost) where `node` holds the reusable boundary
    `cut` tokens into its edge (cut == its length: the boundary is its end; node None: the
    root) and `lost` is ((name, tokens, reason), ...) for components that stopped short.
    Validators see payloads on every tier unless `l1_only`; `out` receives them (their state
    at the end of the walk)."""
    validators = [c.validator(l1_only) for c in voters]
    if out is not None:
        out.extend(validators)
    own = [0] * len(validators)
    best, best_node, best_cut = 0, None, 0
    for nd in visited:
        start = nd.parent.end
        upto = min(nd.end, traversed)
        npages = (upto - start) // page_size
        if npages <= 0:
            break
        partial = upto < nd.end
        comb = True
        for i, v in enumerate(validators):
            m = v.mask(nd, start, npages)
            if m is END and partial:
                m = False
            j = _deepest(m, npages)
            if j >= 0:
                own[i] = start + (j + 1) * page_size
            comb = _and(comb, m)
        j = _deepest(comb, npages)
        if j >= 0:
            best, best_node, best_cut = start + (j + 1) * page_size, nd, (j + 1) * page_size
    lost = tuple((c.name, traversed - o, REASONS.get(c.name, "rejected"))
                 for c, o in zip(voters, own) if o < traversed)
    return best, best_node, best_cut, lost
