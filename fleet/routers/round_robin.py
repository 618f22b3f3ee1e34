"""Round-robin: request k goes to engine k mod N (sgl-router's ``round_robin``)."""
from __future__ import annotations

from .base import Router, register_router


@register_router("round_robin")
class RoundRobin(Router):

    def __init__(self, n, **kw):
        super().__init__(n, **kw)
        self._next = 0

    def pick(self, req, now):
        i = self._next
        while i in self.down and len(self.down) < self.n:  # a down engine's turn passes to the next
            i = (i + 1) % self.n
        self._next = (i + 1) % self.n
        return i
