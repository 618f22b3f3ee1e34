"""Actions: frozen records of what the data plane must do. The core never moves bytes.

The cache appends actions to `RadixCache.actions` when it is built with
``record_actions=True`` (replay leaves it off and only counts). Every record names the
component, the tier and the slot indices, plus the sidecar pools that follow those indices
(a sidecar reuses its source's exact indices, so it is freed and moved with it).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 (requires-python): enum.StrEnum's behaviour, which the records rely on
    from enum import Enum

    class StrEnum(str, Enum):
        """A member is its str value: equal to it, and str()/format() give it."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return str.__format__(self, spec)


class Tier(StrEnum):
    """Where a payload lives: device (L1), host (L2), external store (L3). A `StrEnum`: each
    member equals (and formats as) its name, so records and result files read the same."""

    L1 = "L1"
    L2 = "L2"
    L3 = "L3"


class TransferKind(StrEnum):
    """What a `Transfer` does (see its docstring)."""

    LOAD = "load"
    BACKUP = "backup"
    STORE = "store"
    PREFETCH = "prefetch"


L1, L2, L3 = Tier.L1, Tier.L2, Tier.L3
LOAD, BACKUP, STORE, PREFETCH = TransferKind.LOAD, TransferKind.BACKUP, TransferKind.STORE, TransferKind.PREFETCH


@dataclass(frozen=True, slots=True)
class Alloc:
    """Indices handed out from a component's pool on `tier` (sidecars follow)."""

    component: str
    tier: str
    indices: tuple
    sidecars: tuple = ()


@dataclass(frozen=True, slots=True)
class Free:
    """Indices returned to a component's pool on `tier` (sidecars follow)."""

    component: str
    tier: str
    indices: tuple
    sidecars: tuple = ()


@dataclass(frozen=True, slots=True)
class CopyState:
    """Copy one recurrent-state slot into another on `tier` (MAMBA copy-on-reuse and
    checkpoint snapshots). `at_tokens` is the prefix length the state belongs to."""

    component: str
    tier: str
    src: int
    dst: int
    at_tokens: int


@dataclass(frozen=True, slots=True, eq=False)
class Transfer:
    """A move of one component's pages between tiers, acknowledged by the data plane.

    kind: "load" (L2 -> L1, a host hit), "backup" (L1 -> L2, write policy), "store"
    (L2 -> L3) or "prefetch" (L3 -> L2, a storage hit; `ssd_pages` of it come from the store's
    SSD tier). `keys` are the stable page keys
    (cache_core.keys) of the pages when an L3 tier exists; `src`/`dst` the slot indices on
    each side (None for L3, which is addressed by key). The payload becomes valid on `dst`
    only when `RadixCache.ack(id)` is called; until then the pages are in flight: neither
    side can be evicted or handed out."""

    id: int
    kind: str
    component: str
    src_tier: str
    dst_tier: str
    tokens: int
    bytes: int
    src: object = None
    dst: object = None
    keys: object = None
    sidecars: tuple = ()
    ssd_pages: int = 0  # prefetch: pages only the L3 store's SSD tier holds (read from disk first)
    # store: component payloads the node holds on L2 that go to L3 with its FULL pages (the
    # core records them in L3 at the ack): ((component, page key, L2 slot), ...)
    payloads: tuple = ()
