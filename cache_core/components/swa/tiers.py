"""SWA pages on the tiers: they follow their node (FULL decides where a node lives, tiers.py).

- backup (L1 -> L2) copies the node's L1 SWA pages into the component's own L2 pool;
- L3 holds SWA pages under ("swa", page key); a boundary is served through L3 when the
  window before it is on some tier or in L3;
- `load_window` brings back the window before a reused boundary (L2 -> L1); each page is
  valid on its destination only once its transfer is acknowledged.
"""
from __future__ import annotations

import numpy as np

from ...actions import BACKUP, L1, L2, L3, LOAD, PREFETCH
from ...allocator import INDEX_DTYPE
from ..ports import alloc_host, store_late
from .payload import SwaPayload, window_runs


def backup(swa, node) -> None:
    pl = node.comp[swa.kind]
    if pl is None:
        return
    tiers = swa.tiers
    if pl.host is None:
        pl.host = np.full(len(pl.pages), -1, dtype=INDEX_DTYPE)
    idx = np.flatnonzero((pl.pages >= 0) & (pl.host < 0))
    dst = alloc_host(tiers, swa, len(idx))
    if dst is not None and len(idx):

        def done(ok, pieces, idx=idx, dst=dst):  # pieces: the node, or its halves after a split
            for x, loc, d in land_l2(swa, ok, pieces, idx, dst):
                store_late(tiers, swa, x, loc, d)

        tokens = len(idx) * swa.P
        tiers.emit(BACKUP, L1, L2, tokens, pl.pages[idx], dst, None, done, swa.name, swa.transfer_bytes(tokens),
                   node=node)


def land_l2(swa, ok: bool, pieces, idx, dst) -> list:
    """An SWA transfer into L2 slots `dst` (for page positions `idx` of its node) finished: on
    success each piece takes the slots of positions that have no L2 copy yet (a copy that
    landed meanwhile, e.g. a prefetch and a backup of the same page, keeps its own); every
    other slot is freed. Returns [(piece, positions, slots)] placed."""
    placed = []
    for x, sl in pieces:
        sel = (idx >= sl.start) & (idx < sl.stop)
        loc, d = idx[sel] - sl.start, dst[sel]
        q = x.comp[swa.kind] if x.alive else None
        if not ok or q is None:
            swa.host_pool.free(d)
            continue
        h = q.host.copy() if q.host is not None else np.full(len(q.pages), -1, dtype=INDEX_DTYPE)
        new = h[loc] < 0
        h[loc[new]] = d[new]
        q.host = h
        swa.host_pool.free(d[~new])
        placed.append((x, loc[new], d[new]))
    return placed


def storage_mask(swa, keys, run_pages: int, voter) -> np.ndarray:
    """Pages j of an L3 run after which the window before is complete, continuing the tree
    walk's present run (`voter.run`, `voter.clean`)."""
    run, clean = (voter.run, voter.clean) if voter is not None else (0, True)
    present = swa.tiers.storage.contains_each([(swa.name, k) for k in keys[:run_pages].tolist()])
    return window_runs(present, run, clean, swa.P, swa.window)[0]


def l3_mask(swa, visited, traversed: int, keys, lo_b: int, cap: int) -> np.ndarray:
    """Boundaries b in [lo_b, cap] (pages) whose window [b - W, b) (all of [0, b) when b < W)
    is in the tree (L1 or L2) or in L3, page by page."""
    P, storage = swa.P, swa.tiers.storage
    tree_swa = np.zeros(cap, dtype=bool)
    for nd in visited:
        s, e = nd.parent.end // P, min(nd.end, traversed) // P
        if s >= cap:
            break
        pl = nd.comp[swa.kind]
        if pl is not None:
            tree_swa[s:min(e, cap)] = pl.present(min(e, cap) - s)
    wp = swa.window_pages
    lo = max(0, lo_b - wp)
    av = tree_swa[lo:cap].copy()
    miss = np.flatnonzero(~av)
    av[miss] = storage.contains_each([(swa.name, k) for k in keys[lo + miss].tolist()])
    bad = np.concatenate(([0], np.cumsum(~av)))  # bad[k]: pages missing in [lo, lo + k)
    bs = np.arange(lo_b, cap + 1)
    return bad[bs - lo] == bad[np.maximum(0, bs - wp) - lo]


def window_nodes(swa, node):
    """The nodes holding the window before `node`'s end, bottom-up, each with the index of its
    first page inside that window."""
    lo = max(0, node.end - swa.window_pages * swa.P)
    n = node
    while n.parent is not None and n.end > lo:
        yield n, max(0, (lo - n.parent.end) // swa.P)
        n = n.parent


def fetch_window(swa, bnode, keys) -> bool:
    """One L3 -> L2 prefetch per node of the window before `bnode`'s end, into fresh L2 slots
    (valid on L2 only at the ack). False when a page is not in L3 any more or no L2 slot."""
    tiers, P = swa.tiers, swa.P
    storage = tiers.storage
    segs = []
    for n, j0 in window_nodes(swa, bnode):
        pl = n.comp[swa.kind]
        if pl is None:
            k = n.num_tokens // P
            pl = n.comp[swa.kind] = SwaPayload(np.full(k, -1, dtype=INDEX_DTYPE), k)
        s = n.parent.end // P
        miss = pl.pages[j0:] < 0
        if pl.host is not None:
            miss &= pl.host[j0:] < 0
        idx = np.flatnonzero(miss) + j0
        if len(idx):
            ks = keys[s + idx]
            if not storage.contains_each([(swa.name, k) for k in ks.tolist()]).all():
                return False
            segs.append((n, idx, ks))
    dst_all = alloc_host(tiers, swa, sum(len(i) for _, i, _ in segs))
    if dst_all is None:
        return False
    used = 0
    for n, idx, ks in reversed(segs):  # top-down
        dst = dst_all[used : used + len(idx)]
        used += len(idx)

        def done(ok, pieces, idx=idx, dst=dst):  # valid on L2 only once acknowledged
            land_l2(swa, ok, pieces, idx, dst)

        tiers.emit(PREFETCH, L3, L2, len(idx) * P, None, dst, ks, done, swa.name,
                   swa.transfer_bytes(len(idx) * P), node=n)
    return True


def prefetch(swa, node, keys) -> None:
    """A prefetched node's SWA pages from L3: only the window before its end serves reuse
    there (older windows found in L3, each round storing its own, would only crowd L2)."""
    tiers, storage = swa.tiers, swa.tiers.storage
    tail = min(len(keys), swa.window_pages)
    have = np.zeros(len(keys), dtype=bool)
    have[len(keys) - tail:] = storage.contains_each([(swa.name, k) for k in keys[len(keys) - tail:].tolist()])
    node.comp[swa.kind] = SwaPayload(np.full(len(keys), -1, dtype=INDEX_DTYPE), len(keys),
                                     host=np.full(len(keys), -1, dtype=INDEX_DTYPE))
    dst = alloc_host(tiers, swa, int(have.sum()))
    if dst is not None and len(dst):
        idx = np.flatnonzero(have)

        def done(ok, pieces, idx=idx, dst=dst):  # valid on L2 only once acknowledged
            land_l2(swa, ok, pieces, idx, dst)

        tokens = len(dst) * swa.P
        tiers.emit(PREFETCH, L3, L2, tokens, None, dst, keys[have], done, swa.name, swa.transfer_bytes(tokens),
                   node=node)


def load_window(swa, node) -> bool:
    """The SWA pages of the window before `node`'s end that only L2 holds -> L1. False if the
    pool cannot supply them."""
    P = swa.P
    segs = []
    for n, j0 in window_nodes(swa, node):
        pl = n.comp[swa.kind]
        if pl is not None and pl.host is not None:
            idx = np.flatnonzero((pl.pages[j0:] < 0) & (pl.host[j0:] >= 0)) + j0
            if len(idx):
                segs.append((n, idx))
    need = sum(len(i) for _, i in segs)
    if not need:
        return True
    if swa.pool.free_pages < need and not swa.pool.unbounded:
        swa.evict(need - swa.pool.free_pages)
    pages = swa.pool.alloc(need)
    if pages is None:
        return False
    used = 0
    for n, idx in segs:
        pl = n.comp[swa.kind]
        dst = pages[used : used + len(idx)]
        used += len(idx)

        def done(ok, pieces, idx=idx, dst=dst):  # valid on L1 only once acknowledged
            for x, sl in pieces:
                sel = (idx >= sl.start) & (idx < sl.stop)
                loc = idx[sel] - sl.start
                q = x.comp[swa.kind] if x.alive else None
                if ok and q is not None and (q.pages[loc] < 0).all():
                    q.pages = q.pages.copy()
                    q.pages[loc] = dst[sel]
                    q.ntomb -= len(loc)
                else:
                    swa.pool.free(dst[sel])

        tokens = len(idx) * P
        swa.tiers.emit(LOAD, L2, L1, tokens, pl.host[idx], dst, None, done, swa.name, swa.transfer_bytes(tokens),
                       node=n)
    return True
