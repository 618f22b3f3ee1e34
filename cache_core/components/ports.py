"""The narrow collaborators a component is given (never the cache itself).

- `TreeLink` (every component, at construction: its spec's `build(link)`): the tree, the
  eviction policy, the page size, the payload slot on a node, `remove_leaf` (remove an
  unlocked leaf and every ancestor that became useless; returns (parent, FULL tokens)),
  `record` (append an action record when the cache records actions, else a no-op), the FULL
  L1 pool in tokens (`full_tokens`, None: unbounded; a pool sized as a share of it), the
  cache's `TierConfig` (`tier_config`, None: L1 only) and, for FULL, `useless_leaf` (a leaf
  no voting component can use; None without voting components).
- `TierLink` (components with tiers, `Component.attach_tiers`): the L3 store, the page size,
  `emit` (record a transfer; see `TransferLedger.emit`, `cache_core/tiers/ledger.py`), `settled` (a transfer on a node
  finished: offer it again to every queue), `evict_host` (free L2 by evicting host-only
  leaves) and the write settings (`auto_ack`, `l3_write`).
- `FullTierLink` (FULL with tiers, `TieredFull.attach_tiers_port`): the L2 pool, whether L1
  eviction backs up first (`write_back`), the other components (demoted with a node),
  `backup_chain`, `host_touched` (a node may be an L2 eviction candidate again) and the
  ledger's `split_in_flight`; FULL holds no reference to the hierarchy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..actions import L2, L3, STORE
from ..allocator import INDEX_DTYPE


@dataclass(frozen=True, kw_only=True)
class TreeLink:
    tree: Any
    policy: Any
    page_size: int
    slot: int
    remove_leaf: Callable
    record: Callable
    full_tokens: int | None = None
    tier_config: Any = None
    useless_leaf: Callable | None = None


@dataclass(frozen=True, kw_only=True)
class FullTierLink:
    host_pool: Any  # the L2 pool, or None
    write_back: bool
    voters: Any  # the other components
    backup_chain: Callable  # backup_chain(node)
    host_touched: Callable  # host_touched(node)
    split_in_flight: Callable  # split_in_flight(upper, lower)


@dataclass(frozen=True, kw_only=True)
class TierLink:
    page_size: int
    has_l2: bool  # an L2 tier exists (components then get an L2 pool)
    storage: Any  # the L3 store, or None
    auto_ack: bool
    l3_write: str
    emit: Callable  # emit(kind, src_tier, dst_tier, tokens, src, dst, keys, done, component, nbytes, node=None)
    settled: Callable  # settled(node)
    evict_host: Callable  # evict_host(tokens) -> tokens freed (0: nothing left to evict)
    emitted: Callable  # emitted() -> transfers emitted so far (a counter)


def alloc_host(tiers: TierLink, comp, n: int):
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
    while got is None and tries < 64:
        if not tiers.evict_host(tiers.page_size * n):
            break
        got = pool.alloc(n)
        tries += 1
    return got


def store_late(tiers: TierLink, comp, node, rel, src) -> None:
    """With acknowledgements later than emission (an engine), a component payload reaches L2
    after its node's FULL store to L3 was issued; with ``l3_write="on_insert"`` it follows to
    L3 on its own (`rel`: the page positions within the node; None: one payload at its end)."""
    if tiers.auto_ack or tiers.storage is None or tiers.l3_write != "on_insert" or node.pkeys is None:
        return
    storage = tiers.storage
    page_keys = node.pkeys[rel] if rel is not None else node.pkeys[-1:]
    keys = [(comp.name, int(k)) for k in page_keys]
    if not keys:
        return
    tokens = len(keys) * tiers.page_size if rel is not None else 0

    def done(ok, *_a, keys=keys):
        if ok:
            storage.put_many(keys)
            if node.alive:  # its L2 copy may now be dropped under pressure
                comp.touched(node)

    tiers.emit(STORE, L2, L3, tokens, src, None, page_keys, done, comp.name, comp.transfer_bytes(tokens))
