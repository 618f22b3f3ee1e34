"""Failed L3 reads (hierarchy.py): a prefetch L3 -> L2 that the data plane acknowledges
``ok=False``, of FULL pages or of a component's payloads (`failed_transfer`, at the ack; a
FULL prefetch's node: `failed_prefetch`, in its callback).

Every data plane here fails a prefetch only because a page could not be read (the torch
backend: a page missing from its page store or failing its checksum, `gpu_backend/store.py`;
Mooncake's client gets an error for a missing object): reading it again fails again. So the
failure drops the run's page keys from the L3 index (`discard`): later requests find no
storage hit there and recompute, instead of each issuing the same failing prefetch. A
component's payloads (an SWA window, a MAMBA checkpoint) are forgotten the same way: votes then
stop accepting a boundary that needs them from L3, instead of every later request fetching
them again.

The prefetch's node goes with its L2 slots at once, unless something still holds it (a child,
or a lock: a request that inserted up to it keeps the insert's node locked). A component's
prefetch still in flight on it does not keep it: its late acknowledgement finds the node gone
and frees its slots. A node kept by a lock is on no tier until that request heals it with its
own pages, and once the last lock is released and nothing is in flight on it
(`drop_stranded`, at every unlock of a node not on L1 and every transfer's end) it goes, so no
node stays in the tree on no tier.
"""
from __future__ import annotations

from ..actions import PREFETCH


def failed_prefetch(hier, pieces, pages) -> None:
    """Free the L2 `pages` of a failed FULL prefetch and remove its `pieces` that nothing else
    uses (bottom-up)."""
    hier.pool.free(pages)
    for x, _ in reversed(pieces):
        if x.alive and _unused(x):
            _remove(hier, x)


def failed_transfer(hier, t) -> None:
    """A failed transfer `t` (the ledger counts it): a failed read from L3 forgets there what it
    read: FULL page keys, or a component's payloads under (component, page key)."""
    if t.kind == PREFETCH:
        hier.storage.discard(t.keys if t.component == "full" else [(t.component, k) for k in t.keys.tolist()])


def drop_stranded(hier, node) -> None:
    """Remove `node`, then each parent, while it is an unused leaf on no tier with nothing in
    flight (a failed prefetch's node that a lock or another transfer had kept)."""
    while node.alive and node.parent is not None and _unused(node) and not node.pending:
        node = _remove(hier, node)


def _unused(node) -> bool:
    return not node.children and node.lock_ref == 0 and node.host is None and node.value is None


def _remove(hier, node):
    parent = hier.tree.remove_leaf(node)
    hier.touched(parent)
    hier.full.touched(parent)
    return parent
