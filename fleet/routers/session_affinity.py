"""Session affinity: a consistent hash of the session id with bounded loads (Mirrokni,
Thorup, Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018).

Each engine has ``vnodes`` points on a 64-bit ring (blake2b of seed, engine, point). A request
goes to the first engine clockwise from its session's hash whose unfinished requests are below
the bound ``ceil((1 + epsilon) * (all unfinished + 1) / N)``; so a session stays on its home
engine and moves on only when that engine is at the bound (``moves`` records each such
decision: rid, home engine, chosen engine, the home's unfinished requests, the bound). A
request without a session hashes its rid."""
from __future__ import annotations

import bisect
import hashlib
import math

from .base import Router, register_router


def _h(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@register_router("session_affinity")
class SessionAffinity(Router):

    def __init__(self, n, *, epsilon: float = 0.25, vnodes: int = 64, seed: int = 0, **kw):
        super().__init__(n, seed=seed, **kw)
        if not epsilon >= 0:
            raise ValueError(f"fleet.router.epsilon must be >= 0, got {epsilon!r}")
        self.epsilon = float(epsilon)
        ring = sorted((_h(f"{seed}:{i}:{v}"), i) for i in range(n) for v in range(int(vnodes)))
        self._points = [p for p, _ in ring]
        self._owners = [i for _, i in ring]
        self.moves: list = []

    def home(self, key) -> int:
        """The engine a key maps to with no load bound."""
        return self._owners[bisect.bisect(self._points, _h(str(key))) % len(self._points)]

    def pick(self, req, now):
        key = req.session_id if req.session_id is not None else f"rid:{req.rid}"
        up = self.n - len(self.down)
        cap = math.ceil((1 + self.epsilon) * (sum(self.outstanding) + 1) / up)
        start = bisect.bisect(self._points, _h(str(key)))
        home = self._owners[start % len(self._points)]
        for j in range(len(self._points)):
            i = self._owners[(start + j) % len(self._points)]
            if i not in self.down and self.outstanding[i] < cap:
                if i != home:
                    self.moves.append((req.rid, home, i, self.outstanding[home], cap))
                return i
        return home  # unreachable: some engine is always below the bound
