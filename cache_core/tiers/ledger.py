"""The transfer ledger: every `Transfer` the tiers emit, from emission to acknowledgement.

It numbers transfers (`ids`), keeps those in flight (`pending`) and the token range each holds
(`spans`: a transfer on a node holds every node covering that range, the node or the pieces a
later split makes of it, `split_in_flight`), counts what moved per link, and settles a transfer
at its ack (`ack`; at once with ``auto_ack``): failures counted and reported (`on_failed`), the
callback given the pieces it held, then the hierarchy told what is no longer in flight
(`on_settled`). The hierarchy owns it and hands its methods out: `emit` to the components'
`TierLink`, `split_in_flight` to FULL's `FullTierLink`."""
from __future__ import annotations

from collections.abc import Callable

from ..actions import L1, L2, L3, Transfer


class TransferLedger:
    """Transfers in flight, their spans and counters (see the module docstring)."""

    def __init__(self, page_size: int, auto_ack: bool, kv_bytes_per_token: int, sidecars_of: Callable,
                 record: Callable, on_failed: Callable, on_settled: Callable) -> None:
        self.P = page_size
        self.auto_ack = auto_ack
        self.kv_bytes_per_token = kv_bytes_per_token
        self.sidecars_of = sidecars_of  # sidecars_of(component) -> the transfer's sidecars
        self.record = record  # record(transfer): the action log
        self.on_failed = on_failed  # on_failed(transfer): acknowledged ok=False
        self.on_settled = on_settled  # on_settled(pieces): a transfer with a span finished
        self.pending: dict[int, tuple] = {}  # id -> (Transfer, callback) until acknowledged
        self.spans: dict[int, tuple] = {}  # id -> (node, start, end) of the range it holds
        self.ids = 0  # transfers emitted so far
        self.finished = 0  # transfers acknowledged (or failed) so far (a match's version, match.py)
        self.failed = 0
        self.tokens_moved = {f"{a}->{b}": 0 for a, b in ((L1, L2), (L2, L1), (L2, L3), (L3, L2))}  # FULL tokens
        self.bytes_moved = dict.fromkeys(self.tokens_moved, 0)

    def emit(self, kind, src_tier, dst_tier, tokens, src, dst, keys, done, component: str = "full",
             nbytes: int | None = None, node=None, ssd_pages: int = 0, payloads: tuple = ()) -> Transfer:
        """Record a transfer. With `node`, the transfer covers that node's token range: every
        node covering the range (the node, or the pieces a later split makes of it) is held
        in flight until the ack, and `done(ok, pieces)` gets [(piece, page slice), ...]."""
        self.ids += 1
        if nbytes is None:  # FULL; the other components give their own
            nbytes = tokens * self.kv_bytes_per_token
        t = Transfer(self.ids, kind, component, src_tier, dst_tier, tokens, int(nbytes), src, dst, keys,
                     self.sidecars_of(component), ssd_pages, payloads)
        link = f"{src_tier}->{dst_tier}"
        if component == "full":
            self.tokens_moved[link] += tokens
        self.bytes_moved[link] += int(nbytes)  # every component (with --model: sidecars included)
        self.record(t)
        span = None if node is None else (node, node.parent.end, node.end)
        if span is not None:
            node.pending += 1
        if self.auto_ack:
            self._finish(done, span, True)
        else:
            self.pending[t.id] = (t, done)
            if span is not None:
                self.spans[t.id] = span
        return t

    def _finish(self, done, span, ok: bool) -> None:
        self.finished += 1
        if span is None:
            done(ok)
            return
        node, s, e = span
        pieces = []
        n = node
        while n is not None and n.parent is not None and n.end > s:
            n.pending -= 1
            pieces.append((n, slice((n.parent.end - s) // self.P, (n.end - s) // self.P)))
            n = n.parent
        pieces.reverse()  # top-down
        if not pieces:  # the node left the tree meanwhile: the callback frees what it holds
            pieces = [(node, slice(0, (e - s) // self.P))]
        done(ok, pieces)
        self.on_settled(pieces)

    def ack(self, action_id: int, ok: bool = True) -> None:
        t, done = self.pending.pop(action_id)
        span = self.spans.pop(action_id, None)
        if not ok:
            self.failed += 1
            self.on_failed(t)
        self._finish(done, span, ok)

    def split_in_flight(self, upper, lower) -> None:
        """A split of a node in flight: the upper piece is held by every transfer whose range
        it shares (transfers on `lower`'s own path only)."""
        if not lower.pending or not self.pending:
            return
        a, b = upper.parent.end, upper.end
        count = 0
        for node, s, e in self.spans.values():
            if s >= b or e <= a:
                continue
            n = node
            while n is not None and n.parent is not None and n.end > s:
                if n is lower:
                    count += 1
                    break
                n = n.parent
        upper.pending = count


__all__ = ["TransferLedger"]
