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


class _Gap:
    """A node without payloads: shown to fresh validators first, it stands for an unknown
    path above the suffix they start on (a validator then accepts nothing that would need it)."""

    class _NoPayloads:
        def __getitem__(self, kind):
            return None

    comp = _NoPayloads()


_GAP = _Gap()


def look_back(voters) -> int:
    """Tokens before a boundary that some voter's verdict there looks at (its `window`
    attribute; 0 without one): kept by `Voters` as they register, else computed."""
    if isinstance(voters, Voters):
        return voters.look_back
    return max((_window(c) for c in voters), default=0)


def _window(comp) -> int:
    return getattr(comp, "window", 0) or 0


class Voters(list):
    """A topology's voting components in registration order, with their `look_back`
    computed as each is added (voters do not change after the cache is built), not per vote."""

    look_back = 0

    def append(self, comp) -> None:
        super().append(comp)
        self.look_back = max(self.look_back, _window(comp))


def gap_validators(voters, l1_only: bool = False) -> list:
    """Fresh validators that have seen a `_Gap`: an unknown path above what they are shown
    next, so they accept only what needs no more than their window of it."""
    validators = [c.validator(l1_only) for c in voters]
    for v in validators:
        v.mask(_GAP, 0, 1)
    return validators


def vote(voters, visited, traversed: int, page_size: int, l1_only: bool = False, out: list | None = None):
    """Return (reusable_tokens, node, cut, lost) where `node` holds the reusable boundary
    `cut` tokens into its edge (cut == its length: the boundary is its end; node None: the
    root) and `lost` is ((name, tokens, reason), ...) for components that stopped short.
    Validators see payloads on every tier unless `l1_only`; `out` receives them (their state
    at the end of the walk).

    Bottom-up: a voter's verdict at boundary b depends only on the `window` tokens before b
    (its `window` attribute; 0 without one) or on the whole path from the root. So the vote
    first runs fresh validators over the shortest suffix of the path that starts at least
    `window` tokens above the end (after a `_Gap`); its verdicts at boundaries b >= suffix
    start + window are exact. Only when some component accepts no boundary there does the
    suffix grow (doubling; at the root every verdict is exact)."""
    nodes = []
    for nd in visited:
        if (min(nd.end, traversed) - nd.parent.end) // page_size <= 0:
            break
        nodes.append(nd)
    reach = look_back(voters)
    s = _suffix_start(nodes, traversed - reach)
    while True:
        lo = nodes[s].parent.end + reach if s > 0 else 0  # verdicts at boundaries >= lo are exact
        validators, found = _vote_suffix(voters, nodes[s:], s > 0, lo, traversed, page_size, l1_only)
        best, best_node, best_cut, own = found
        if s == 0 or (best > 0 and min(own) > 0):
            break
        span = traversed - nodes[s].parent.end
        s = _suffix_start(nodes, nodes[s].parent.end - max(span, reach))
    if out is not None:
        out.extend(validators)
    lost = tuple((c.name, traversed - o, c.lost_reason)
                 for c, o in zip(voters, own) if o < traversed)
    return best, best_node, best_cut, lost


def _suffix_start(nodes, upto: int) -> int:
    """Index of the deepest node that starts at or above token `upto` (0 if none)."""
    s = len(nodes) - 1
    while s > 0 and nodes[s].parent.end > upto:
        s -= 1
    return max(s, 0)


def _vote_suffix(voters, nodes, after_gap: bool, lo: int, traversed: int, page_size: int, l1_only: bool):
    """Fresh validators over `nodes` (after a gap when `after_gap`); returns them and
    (best, best_node, best_cut, own) counting only accepted boundaries >= `lo`."""
    validators = gap_validators(voters, l1_only) if after_gap else [c.validator(l1_only) for c in voters]
    own = [0] * len(validators)
    best, best_node, best_cut = 0, None, 0
    for nd in nodes:
        start = nd.parent.end
        upto = min(nd.end, traversed)
        npages = (upto - start) // page_size
        partial = upto < nd.end
        comb = True
        for i, v in enumerate(validators):
            m = v.mask(nd, start, npages)
            if m is END and partial:
                m = False
            j = _deepest(m, npages)
            if j >= 0 and start + (j + 1) * page_size >= lo:
                own[i] = start + (j + 1) * page_size
            comb = _and(comb, m)
        j = _deepest(comb, npages)
        if j >= 0 and start + (j + 1) * page_size >= lo:
            best, best_node, best_cut = start + (j + 1) * page_size, nd, (j + 1) * page_size
    return validators, (best, best_node, best_cut, own)
