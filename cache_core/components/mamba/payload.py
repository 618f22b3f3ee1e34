"""MAMBA payload (`MambaPayload`) and validator (`MambaVoter`); see component.py for the rules."""
from __future__ import annotations

from ...vote import END


class MambaPayload:
    __slots__ = ("slot", "locks", "srefs", "host")

    def __init__(self, slot: int):
        self.slot = slot  # L1 state slot; -1 = not on L1 (a tombstone there)
        self.locks = 0
        self.srefs = 0  # sessions whose reusable frontier is this checkpoint
        self.host = -1  # with tiers: L2 state slot, -1 = none


class MambaVoter:
    __slots__ = ("kind", "l1_only")

    def __init__(self, kind: int, l1_only: bool = False):
        self.kind = kind  # the component's payload slot
        self.l1_only = l1_only

    def mask(self, node, start: int, npages: int):
        pl = node.comp[self.kind]
        if pl is None or (pl.slot < 0 and (self.l1_only or pl.host < 0)):
            return False
        return END  # only the boundary at the node's end (on any tier unless l1_only)
