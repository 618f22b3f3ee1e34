"""SWA pages and MAMBA checkpoints on the tiers: they follow their node.

FULL decides where a node lives (tiers.py); the other components' payloads move with it:
- backup (L1 -> L2) copies the node's L1 SWA pages and its checkpoint into the components'
  own L2 pools (sized like the FULL L2 pool: the same ratio to their L1 pool);
- demotion (FULL leaves L1) frees the node's L1 SWA pages and checkpoint: what has an L2 copy
  stays reusable from L2, the rest becomes a tombstone;
- component pressure on L1 (SWA/MAMBA eviction) frees only L1 copies (never nodes);
- L3 holds SWA pages under ("swa", page key) and checkpoints under ("mamba", key of the
  page they end), next to FULL pages under their key; a component L2 pool that is short
  first drops its copies that L3 also holds (`L3HeldCopies`, in policy order: they stay
  reusable through L3), and only then evicts host-only nodes;
- votes see the union of tiers; `load` brings back exactly what the reused boundary needs:
  FULL pages of the path, SWA pages of the window before it, the checkpoint at it; each
  payload becomes valid on its destination only when its transfer is acknowledged. The
  match then reuses the deepest boundary L1 alone accepts (all of it once the loads are in).
"""
from __future__ import annotations

import numpy as np

from .actions import L1, L2, L3
from .allocator import INDEX_DTYPE, PagePool
from .components.mamba import MAMBA
from .components.swa import SWA, SwaPayload
from .l3_copies import L3HeldCopies


def _settled(cache, node) -> None:
    """A transfer on `node` finished: it and its parent (which a child in flight blocks from
    L1 eviction) may be eviction candidates again."""
    if node.alive:
        cache._touch_all(node)
        if node.parent is not None:
            cache.full.touched(node.parent)


def attach_pools(hier, l1_tokens, l2_tokens) -> None:
    """Give SWA and MAMBA an L2 pool each, scaled like FULL's L2 to L1 (and, with L3, the
    queue of their L2 copies that L3 also holds)."""
    cache = hier.cache
    ratio = None if l2_tokens is None or not l1_tokens else l2_tokens / l1_tokens
    for comp in (cache.swa, cache.mamba):
        if comp is None:
            continue
        cap = comp.pool.capacity_pages
        comp.host_pool = PagePool(None if cap is None or ratio is None else int(cap * ratio))
        if hier.storage is not None:
            comp.l3_copies = L3HeldCopies(hier, comp)


def _alloc_host(hier, comp, n: int):
    """n slots of a component's L2 pool: if short, drop its copies that L3 holds first, then
    evict host-only leaves (any component)."""
    if n <= 0:
        return np.empty(0, dtype=INDEX_DTYPE)
    pool = comp.host_pool
    got = pool.alloc(n)
    if got is None and comp.l3_copies is not None and not pool.unbounded:
        comp.l3_copies.drop(n - pool.free_pages)
        got = pool.alloc(n)
    tries = 0
    while got is None and tries < 64 and len(hier.queue):
        if not hier.evict_l2(hier.P * n):
            break
        got = pool.alloc(n)
        tries += 1
    return got


def backup_components(hier, node) -> None:
    cache = hier.cache
    swa, mamba = cache.swa, cache.mamba
    if swa is not None and node.comp[SWA] is not None:
        pl = node.comp[SWA]
        if pl.host is None:
            pl.host = np.full(len(pl.pages), -1, dtype=INDEX_DTYPE)
        idx = np.flatnonzero((pl.pages >= 0) & (pl.host < 0))
        dst = _alloc_host(hier, swa, len(idx))
        if dst is not None and len(idx):

            def done(ok, pieces, idx=idx, dst=dst):  # pieces: the node, or its halves after a split
                for x, loc, d in _land_swa_l2(swa, ok, pieces, idx, dst):
                    _store_late(hier, x, "swa", loc, d)

            hier._emit("backup", L1, L2, len(idx) * hier.P, pl.pages[idx], dst, None, done, "swa", node=node)
    if mamba is not None and node.comp[MAMBA] is not None:
        pl = node.comp[MAMBA]
        if pl.slot >= 0 and pl.host < 0:
            _checkpoint_to_host(hier, node, "backup", L1, pl.slot, None)


def _land_swa_l2(swa, ok: bool, pieces, idx, dst) -> list:
    """An SWA transfer into L2 slots `dst` (for page positions `idx` of its node) finished: on
    success each piece takes the slots of positions that have no L2 copy yet (a copy that
    landed meanwhile, e.g. a prefetch and a backup of the same page, keeps its own); every
    other slot is freed. Returns [(piece, positions, slots)] placed."""
    placed = []
    for x, sl in pieces:
        sel = (idx >= sl.start) & (idx < sl.stop)
        loc, d = idx[sel] - sl.start, dst[sel]
        q = x.comp[SWA] if x.alive else None
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


def _checkpoint_to_host(hier, node, kind: str, src_tier: str, src, keys) -> None:
    """Give `node`'s checkpoint an L2 slot, filled by a `kind` transfer from `src_tier`; the
    slot counts only once acknowledged (freed on failure or if the node is gone)."""
    cache, mamba = hier.cache, hier.cache.mamba
    dst = _alloc_host(hier, mamba, 1)
    if dst is None:
        return
    node.pending += 1

    def done(ok, node=node, slot=int(dst[0])):
        node.pending -= 1
        q = node.comp[MAMBA] if node.alive else None
        if ok and q is not None and q.host < 0:  # (a copy that landed first keeps its slot)
            q.host = slot
            if kind == "backup" and node.pkeys is not None and len(node.pkeys):
                _store_late(hier, node, "mamba", None, slot)
        else:
            mamba.host_pool.free_one(slot)
        _settled(cache, node)

    hier._emit(kind, src_tier, L2, 0, src, int(dst[0]), keys, done, "mamba")


def _store_late(hier, node, component: str, rel, src) -> None:
    """With acknowledgements later than emission (an engine), a component payload reaches L2
    after its node's FULL store to L3 was issued; with ``l3_write="on_insert"`` it follows to
    L3 on its own (`rel`: the SWA page positions within the node; None: the checkpoint)."""
    if hier.auto_ack or hier.storage is None or hier.cfg.l3_write != "on_insert" or node.pkeys is None:
        return
    storage = hier.storage
    page_keys = node.pkeys[rel] if component == "swa" else node.pkeys[-1:]
    keys = [(component, int(k)) for k in page_keys]
    if not keys:
        return
    tokens = len(keys) * hier.P if component == "swa" else 0

    def done(ok, *_a, keys=keys):
        if ok:
            storage.put_many(keys)
            if node.alive:  # its L2 copy may now be dropped under pressure
                getattr(hier.cache, component).touched(node)

    hier._emit("store", L2, L3, tokens, src, None, page_keys, done, component)


def demote_components(cache, node) -> None:
    if cache.swa is not None:
        cache.swa.drop_l1(node)
    if cache.mamba is not None:
        cache.mamba.drop_l1(node)


def store_payloads(cache, node) -> list:
    """The component payloads a node holds on L2, as (component, L3 page key, L2 slot): its
    SWA pages and its checkpoint (under the key of the page it ends), which a FULL store of
    the node carries along (`Transfer.payloads`)."""
    out = []
    pk = node.pkeys
    if pk is None:
        return out
    swa = node.comp[SWA] if cache.swa is not None else None
    if swa is not None and swa.host is not None:
        have = swa.host >= 0
        out += [("swa", int(k), int(h)) for k, h in zip(pk[have], swa.host[have])]
    mp = node.comp[MAMBA] if cache.mamba is not None else None
    if mp is not None and mp.host >= 0 and len(pk):
        out.append(("mamba", int(pk[-1]), int(mp.host)))
    return out


def storage_boundary(cache, keys, run_pages: int, swa_state) -> int:
    """Deepest page count j <= run_pages of the L3 run that every component accepts: SWA needs
    the window before it (continuing the tree's present run `swa_state` = (run, clean)), MAMBA
    a checkpoint stored at it. 0 when none."""
    storage, P = cache.hier.storage, cache.page_size
    run, clean = swa_state
    best = 0
    for j in range(1, run_pages + 1):
        k = int(keys[j - 1])
        ok = True
        if cache.swa is not None:
            if ("swa", k) in storage:
                run += P
            else:
                run, clean = 0, False
            ok = clean or run >= cache.swa.window
        if ok and cache.mamba is not None:
            ok = ("mamba", k) in storage
        if ok:
            best = j
    return best


def l3_boundary(cache, visited, traversed: int, best: int, keys) -> int:
    """Deepest page boundary b in (best, traversed] of a tree path at which every voting
    component has its payload in the tree (L1 or L2) or in L3: SWA every page of the window
    [b - W, b) (all of [0, b) when b < W: the run/clean rule of the voter), MAMBA a checkpoint
    at a node ending at b or ("mamba", key of the page ending at b). FULL must be in the tree
    (not in flight) up to b. `visited`: the walk's nodes (before any split); `keys`: the
    request's page keys. 0 when none."""
    P, storage, swa, mamba = cache.page_size, cache.hier.storage, cache.swa, cache.mamba
    T = traversed // P
    tree_swa = np.zeros(T, dtype=bool)
    ck = {}
    cap = T
    for nd in visited:
        s, e = nd.parent.end // P, min(nd.end, traversed) // P
        if s >= T:
            break
        if nd.value is None and nd.host is None:  # a prefetch still in flight
            cap = s
            break
        if swa is not None and nd.comp[SWA] is not None:
            tree_swa[s:e] = nd.comp[SWA].present(e - s)
        if mamba is not None and nd.end <= traversed:
            pl = nd.comp[MAMBA]
            ck[e] = pl is not None and (pl.slot >= 0 or pl.host >= 0)
    lo_b = best // P + 1
    if cap < lo_b:
        return 0
    if swa is not None:
        wp = swa.window_pages
        lo = max(0, lo_b - wp)
        av = tree_swa[lo:cap].copy()
        for i in np.flatnonzero(~av).tolist():
            av[i] = ("swa", int(keys[lo + i])) in storage
        bad = np.concatenate(([0], np.cumsum(~av)))  # bad[k]: pages missing in [lo, lo + k)
    for b in range(cap, lo_b - 1, -1):
        if mamba is not None and not ck.get(b) and ("mamba", int(keys[b - 1])) not in storage:
            continue
        if swa is not None and bad[b - lo] != bad[max(0, b - wp) - lo]:
            continue
        return b * P
    return 0


def fetch_boundary(hier, bnode, keys) -> bool:
    """Start the L3 -> L2 prefetches of the component payloads that reuse at `bnode`'s end
    needs and no tree tier holds: the SWA pages of the window before it (into the nodes' SWA
    L2 arrays) and its MAMBA checkpoint. Each is valid on L2 only at its ack (a failure frees
    the slots). `keys`: the request's page keys (page j of the path = keys[j]). True when
    every missing payload is on its way (False: not in L3 any more, or no L2 slot)."""
    cache = hier.cache
    ok = True
    if cache.swa is not None:
        ok = cache.swa.host_pool is not None and _fetch_window(hier, bnode, keys)
    if cache.mamba is not None:
        pl = bnode.comp[MAMBA]
        if pl is None or (pl.slot < 0 and pl.host < 0):
            j = bnode.end // hier.P
            if ("mamba", int(keys[j - 1])) not in hier.storage:
                return False
            if pl is None:
                from .components.mamba import MambaPayload

                bnode.comp[MAMBA] = MambaPayload(-1)
            ids0 = hier._ids
            _checkpoint_to_host(hier, bnode, "prefetch", L3, None, keys[j - 1 : j])
            ok = ok and hier._ids != ids0
    return ok


def _fetch_window(hier, bnode, keys) -> bool:
    """fetch_boundary's SWA part: one prefetch per node of the window, into fresh L2 slots."""
    swa, storage, P = hier.cache.swa, hier.storage, hier.P
    lo = max(0, bnode.end - swa.window_pages * P)
    segs = []
    n = bnode
    while n.parent is not None and n.end > lo:
        pl = n.comp[SWA]
        if pl is None:
            k = n.num_tokens // P
            pl = n.comp[SWA] = SwaPayload(np.full(k, -1, dtype=INDEX_DTYPE), k)
        s = n.parent.end // P
        j0 = max(0, lo // P - s)
        miss = pl.pages[j0:] < 0
        if pl.host is not None:
            miss &= pl.host[j0:] < 0
        idx = np.flatnonzero(miss) + j0
        if len(idx):
            ks = keys[s + idx]
            if not all(("swa", int(k)) in storage for k in ks.tolist()):
                return False
            segs.append((n, idx, ks))
        n = n.parent
    need = sum(len(i) for _, i, _ in segs)
    dst_all = _alloc_host(hier, swa, need)
    if dst_all is None:
        return False
    used = 0
    for n, idx, ks in reversed(segs):  # top-down
        dst = dst_all[used : used + len(idx)]
        used += len(idx)

        def done(ok, pieces, idx=idx, dst=dst):  # valid on L2 only once acknowledged
            _land_swa_l2(swa, ok, pieces, idx, dst)

        hier._emit("prefetch", L3, L2, len(idx) * P, None, dst, ks, done, "swa", node=n)
    return True


def prefetch_components(hier, node, keys) -> None:
    """Bring the component payloads of a prefetched node from L3 into L2 (with its FULL)."""
    cache = hier.cache
    storage = hier.storage
    node.pending += 1  # not an L2 victim while its own payloads are being placed
    try:
        _prefetch_payloads(hier, cache, storage, node, keys)
    finally:
        node.pending -= 1
        _settled(cache, node)


def _prefetch_payloads(hier, cache, storage, node, keys) -> None:
    swa, mamba = cache.swa, cache.mamba
    if swa is not None:
        # only the window before the node's end serves reuse there: older windows found in
        # L3 (each round stores its own) would only crowd the SWA L2 pool
        tail = min(len(keys), swa.window_pages)
        have = np.zeros(len(keys), dtype=bool)
        have[len(keys) - tail:] = [("swa", int(k)) in storage for k in keys[len(keys) - tail:]]
        node.comp[SWA] = SwaPayload(np.full(len(keys), -1, dtype=INDEX_DTYPE), len(keys),
                                    host=np.full(len(keys), -1, dtype=INDEX_DTYPE))
        dst = _alloc_host(hier, swa, int(have.sum()))
        if dst is not None and len(dst):
            idx = np.flatnonzero(have)

            def done_s(ok, pieces, idx=idx, dst=dst):  # valid on L2 only once acknowledged
                _land_swa_l2(swa, ok, pieces, idx, dst)

            hier._emit("prefetch", L3, L2, len(dst) * hier.P, None, dst, keys[have], done_s, "swa", node=node)
    if mamba is not None:
        from .components.mamba import MambaPayload

        node.comp[MAMBA] = MambaPayload(-1)
        if len(keys) and ("mamba", int(keys[-1])) in storage:
            _checkpoint_to_host(hier, node, "prefetch", L3, None, keys[-1:])


def load_boundary(cache, node) -> bool:
    """Make the payloads that reuse at `node`'s end needs valid on L1: the SWA window pages
    before it and its MAMBA checkpoint (from L2). False if a pool cannot supply them."""
    hier, P = cache.hier, cache.page_size
    swa, mamba = cache.swa, cache.mamba
    if swa is not None:
        lo = max(0, node.end - swa.window_pages * P)
        segs = []
        n = node
        while n.parent is not None and n.end > lo:
            pl = n.comp[SWA]
            j0 = max(0, (lo - n.parent.end) // P)
            if pl is not None and pl.host is not None:
                idx = np.flatnonzero((pl.pages[j0:] < 0) & (pl.host[j0:] >= 0)) + j0
                if len(idx):
                    segs.append((n, idx))
            n = n.parent
        need = sum(len(i) for _, i in segs)
        if need:
            if swa.pool.free_pages < need and not swa.pool.unbounded:
                swa.evict(need - swa.pool.free_pages)
            pages = swa.pool.alloc(need)
            if pages is None:
                return False
            used = 0
            for n, idx in segs:
                pl = n.comp[SWA]
                dst = pages[used : used + len(idx)]
                used += len(idx)

                def done_s(ok, pieces, idx=idx, dst=dst):  # valid on L1 only once acknowledged
                    for x, sl in pieces:
                        sel = (idx >= sl.start) & (idx < sl.stop)
                        loc = idx[sel] - sl.start
                        q = x.comp[SWA] if x.alive else None
                        if ok and q is not None and (q.pages[loc] < 0).all():
                            q.pages = q.pages.copy()
                            q.pages[loc] = dst[sel]
                            q.ntomb -= len(loc)
                        else:
                            swa.pool.free(dst[sel])

                hier._emit("load", L2, L1, len(idx) * P, pl.host[idx], dst, None, done_s, "swa", node=n)
    if mamba is not None and node.parent is not None:
        pl = node.comp[MAMBA]
        if pl is not None and pl.slot < 0 and pl.host >= 0:
            if mamba.pool.free_pages < 1 and not mamba.pool.unbounded:
                mamba.evict(1)
            got = mamba.pool.alloc(1)
            if got is None:
                return False
            node.pending += 1

            def done_m(ok, node=node, slot=int(got[0])):
                node.pending -= 1
                q = node.comp[MAMBA] if node.alive else None
                if ok and q is not None and q.slot < 0:
                    q.slot = slot
                else:
                    mamba.pool.free_one(slot)
                _settled(cache, node)

            hier._emit("load", L2, L1, 0, pl.host, int(got[0]), None, done_m, "mamba")
    return True
