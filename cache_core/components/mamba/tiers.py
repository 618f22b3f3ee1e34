"""MAMBA checkpoints on the tiers: a checkpoint follows its node between L1 and L2 (FULL
decides where a node lives, tiers.py); L3 holds it under ("mamba", key of the page it ends).
Each copy is valid on its destination only once its transfer is acknowledged."""
from __future__ import annotations

import numpy as np

from ...actions import BACKUP, L1, L2, L3, LOAD, PREFETCH
from ..ports import alloc_host, store_late
from .payload import MambaPayload


def checkpoint_to_host(mamba, node, kind: str, src_tier, src, keys) -> None:
    """Give `node`'s checkpoint an L2 slot, filled by a `kind` transfer from `src_tier`; the
    slot counts only once acknowledged (freed on failure or if the node is gone)."""
    tiers = mamba.tiers
    dst = alloc_host(tiers, mamba, 1)
    if dst is None:
        return
    node.pending += 1

    def done(ok, node=node, slot=int(dst[0])):
        node.pending -= 1
        q = node.comp[mamba.kind] if node.alive else None
        if ok and q is not None and q.host < 0:  # (a copy that landed first keeps its slot)
            q.host = slot
            if kind == BACKUP and node.pkeys is not None and len(node.pkeys):
                store_late(tiers, mamba, node, None, slot)
        else:
            mamba.host_pool.free_one(slot)
        tiers.settled(node)

    tiers.emit(kind, src_tier, L2, 0, src, int(dst[0]), keys, done, mamba.name, mamba.transfer_bytes(0))


def l3_mask(mamba, visited, traversed: int, keys, lo_b: int, cap: int) -> np.ndarray:
    """Boundaries b in [lo_b, cap] (pages) with a checkpoint at a node ending at b (on L1 or
    L2) or in L3 under the key of page b - 1."""
    P, storage = mamba.P, mamba.tiers.storage
    ck = {}
    for nd in visited:
        s, e = nd.parent.end // P, min(nd.end, traversed) // P
        if s >= cap:
            break
        if nd.end <= traversed:
            pl = nd.comp[mamba.kind]
            ck[e] = pl is not None and (pl.slot >= 0 or pl.host >= 0)
    return np.array([bool(ck.get(b)) or (mamba.name, int(keys[b - 1])) in storage
                     for b in range(lo_b, cap + 1)], dtype=bool)


def fetch_checkpoint(mamba, bnode, keys) -> bool:
    """L3 -> L2 prefetch of the checkpoint at `bnode`'s end when no tree tier holds it. True
    when it is there or on its way."""
    pl = bnode.comp[mamba.kind]
    if pl is not None and (pl.slot >= 0 or pl.host >= 0):
        return True
    j = bnode.end // mamba.P
    if (mamba.name, int(keys[j - 1])) not in mamba.tiers.storage:
        return False
    if pl is None:
        bnode.comp[mamba.kind] = MambaPayload(-1)
    ids0 = mamba.tiers.emitted()
    checkpoint_to_host(mamba, bnode, PREFETCH, L3, None, keys[j - 1 : j])
    return mamba.tiers.emitted() != ids0


def load_checkpoint(mamba, node) -> bool:
    """The checkpoint at `node`'s end, held on L2 only -> a fresh L1 slot. False if short."""
    if node.parent is None:
        return True
    pl = node.comp[mamba.kind]
    if pl is None or pl.slot >= 0 or pl.host < 0:
        return True
    if mamba.pool.free_pages < 1 and not mamba.pool.unbounded:
        mamba.evict(1)
    got = mamba.pool.alloc(1)
    if got is None:
        return False
    node.pending += 1
    tiers = mamba.tiers

    def done(ok, node=node, slot=int(got[0])):
        node.pending -= 1
        q = node.comp[mamba.kind] if node.alive else None
        if ok and q is not None and q.slot < 0:
            q.slot = slot
        else:
            mamba.pool.free_one(slot)
        tiers.settled(node)

    tiers.emit(LOAD, L2, L1, 0, pl.host, int(got[0]), None, done, mamba.name, mamba.transfer_bytes(0))
    return True
