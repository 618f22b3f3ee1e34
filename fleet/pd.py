"""Prefill/decode disaggregation: prefill engines compute a request's prompt and first token,
its KV crosses a modelled RDMA link to a decode engine, which generates the rest.

- The fleet's router picks the prefill engine (among the prefill group), ``pd.decode_router``
  the decode engine (among the decode group), both when the request arrives (SGLang's
  mini-load-balancer picks the pair up front).
- Prefill: a copy of the request with one output token (its TokenSeq is the prompt's).
- KV transfer: when the prefill finishes, ``prompt tokens x bytes per token`` (the model's
  FULL KV with its sidecars, `scenarios.presets.bytes_per_token`) go over the prefill engine's
  link (`sim.links.Link`: ``pd.kv_bytes_per_s`` processor-shared, ``pd.kv_latency_s`` per
  transfer).
- Decode: when the bytes have arrived, the KV of the prompt's whole pages lands in the decode
  engine's cache (public `RadixCache` calls: evict, alloc, insert; the decode side's radix
  cache, SGLang's decode radix), then the request arrives there with the prompt plus the first
  token as its prompt and the remaining output. So its decode starts no earlier than its KV
  arrives; if the decode engine had to evict the landed KV before admitting it, it recomputes
  (``decode_cached_tokens`` in the row shows what it reused).

Rows: TTFT = prefill queue + load + compute (the prefill engine's row); the time after the
first token splits into ``kv_transfer_s`` (first token -> KV landed), ``decode_queue_s``
(landed -> first decode token) and ``decode_s`` (the rest). Decode engines must be FULL-only.
"""
from __future__ import annotations

import numpy as np

from cache_core.engine_types import EngineRequest
from cache_core.records import TokenSeq

from .fleet import Fleet


class PDFleet(Fleet):
    def __init__(self, engines, router, roles, decode_router, kv_links, kv_bytes_per_token):
        super().__init__(engines, router, roles)
        self.prefill = [i for i, r in enumerate(roles) if r == "prefill"]
        self.decode = [i for i, r in enumerate(roles) if r == "decode"]
        self.decode_router = decode_router
        self.kv_links = kv_links  # one per prefill engine, in self.prefill order
        self.kv_bytes_per_token = kv_bytes_per_token
        self.parts: dict = {}  # rid -> {"user": request, "p": engine, "d": engine, ...times}
        router.engines = [[engines[i]] for i in self.prefill]
        decode_router.engines = [[engines[i]] for i in self.decode]

    def arrive(self, req) -> None:
        self.arrived += 1
        now = self.now()
        p = self.router.pick(req, now)
        d = self.decode_router.pick(req, now)
        self.router.routed(req, p, now)
        self.decode_router.routed(req, d, now)
        self.parts[req.rid] = {"user": req, "p": p, "d": d, "seq": req.seq}
        self.engine_of[req.rid] = self.prefill[p]
        P, lp = self.P, req.prompt_tokens
        keys = req.seq.page_keys(P)[: lp // P]
        seq = TokenSeq(np.frombuffer(req.seq.data[: lp * 8], dtype=np.int64), keys, P)
        pre = EngineRequest(rid=req.rid, session_id=req.session_id, prompt=req.prompt, output_length=1,
                            arrival_s=req.arrival_s, seq=seq, round=req.round)
        self.engines[self.prefill[p]].arrive(pre)

    def _finished(self, r, i: int) -> None:
        part = self.parts[r.rid]
        user = part["user"]
        if i in self.prefill and "prefill" not in part:
            part["prefill"] = r
            self.router.finished(user, part["p"], self.now())
            if r.rejected or user.output_length <= 1:
                return self._done(user, part)
            part["kv_sent_s"] = self.now()
            nbytes = user.prompt_tokens * self.kv_bytes_per_token
            ev = self.kv_links[part["p"]].transfer(nbytes, pages=1)
            ev.callbacks.append(lambda _e, rid=r.rid: self._kv_arrived(rid))
            return
        part["decode"] = r
        self._done(user, part)

    def _kv_arrived(self, rid) -> None:
        part = self.parts[rid]
        user = part["user"]
        part["kv_done_s"] = self.now()
        eng = self.engines[self.decode[part["d"]]]
        seq = part["seq"]
        land_kv(eng.cache, seq, user.prompt_tokens // self.P * self.P)
        lp = user.prompt_tokens + 1
        dec = EngineRequest(rid=rid, session_id=user.session_id,
                            prompt=np.frombuffer(seq.data[: lp * 8], dtype=np.int64),
                            output_length=user.output_length - 1, arrival_s=self.now(), seq=seq, round=user.round)
        eng.arrive(dec)

    def _done(self, user, part) -> None:
        self.decode_router.finished(user, part["d"], self.now())
        part.pop("seq", None)
        user.rejected = part["prefill"].rejected or ("decode" in part and part["decode"].rejected)
        self.complete(user)


def land_kv(cache, seq, tokens: int) -> bool:
    """Put the KV of seq[:tokens] (page-aligned) into `cache` as a transfer would leave it:
    pages allocated (evicting as needed) and inserted; pages the tree holds already are
    freed by the insert. False when L1 cannot supply the pages (the request will recompute)."""
    P = cache.page_size
    n = tokens // P
    if n == 0:
        return True
    if cache.free_tokens < tokens:
        cache.evict(tokens - cache.free_tokens)
    pages = cache.alloc(n)
    if pages is None:
        return False
    cache.insert(seq, tokens, pages, 0)
    return True


__all__ = ["PDFleet", "land_kv"]
