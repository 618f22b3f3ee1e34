"""Least-load: the engine with the fewest queued + running tokens the router sent it (prompt
+ output of its unfinished requests); the lowest index among equals."""
from __future__ import annotations

from .base import Router, argmin, register_router


@register_router("least_load")
class LeastLoad(Router):

    def pick(self, req, now):
        return argmin(self.outstanding_tokens, self.down)
