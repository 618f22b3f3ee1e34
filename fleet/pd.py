"""Prefill/decode disaggregation: prefill engines compute a request's prompt and first token,
its KV crosses a modelled RDMA link to a decode engine, which generates the rest.

Steps per request, after SGLang's `python/sglang/srt/disaggregation/decode.py` (PreallocQueue ->
TransferQueue -> WaitingQueue -> running batch) and `prefill.py` (bootstrap queue -> waiting queue ->
inflight queue):

- Routing: the fleet's router picks the prefill engine (among the prefill group), ``pd.decode_router``
  the decode engine (among the decode group), both when the request arrives (SGLang's
  mini-load-balancer picks the pair up front).
- Bootstrap: the handshake through the bootstrap server takes ``pd.bootstrap_s`` (a fixed
  per-request latency; the default 1 ms is an assumption, not a measurement).
- Pre-allocation: the decode engine then reserves the KV of the prompt's whole pages (public
  `RadixCache` calls: match + lock of the prefix it holds, evict, alloc), first come first served
  per decode engine; while its pool cannot supply the pages the request waits (retried whenever
  a decode request ends or KV lands). The pool must also keep, free or evictable, the decode room
  (`PDFleet.decode_room`) of every request holding KV there, this one included: else requests
  whose KV landed could fill it so that none can be admitted for its first decode token, and
  the run would stall (SGLang's PreallocQueue likewise keeps memory back for future decode).
  Only then does the prefill start.
- Prefill: a copy of the request with one output token (its TokenSeq is the prompt's) on the
  prefill engine.
- KV transfer: ``missing tokens x bytes per token`` (the model's FULL KV with its sidecars,
  `scenarios.presets.bytes_per_token`; missing: the prompt less the device prefix the decode
  engine held at pre-allocation, all of it without ``pd.decode_radix``) over the prefill
  engine's link (`sim.links.Link`: ``pd.kv_bytes_per_s`` processor-shared, ``pd.kv_latency_s``
  per transfer).
- Decode: the landed KV is inserted into the reserved pages and held locked until the request
  ends; the request arrives there with the prompt plus the first token as its prompt and the
  remaining output, so its decode starts no earlier than its KV arrives. With
  ``pd.decode_radix: true`` (SGLang's ``--disaggregation-decode-enable-radix-cache``) the decode
  engine keeps prefixes across requests (and may offload them to its L2: decode HiCache);
  with false it keeps nothing once a request ends (SGLang's ChunkCache).

Rows: TTFT = ``bootstrap_s`` + ``prealloc_wait_s`` + prefill queue + load + compute; the time
after the first token splits into ``kv_transfer_s`` (first token -> KV landed),
``decode_queue_s`` (landed -> first decode token) and ``decode_s`` (the rest); ``kv_bytes`` is
what crossed the link: the missing tokens' FULL KV plus, for a hybrid model, the SWA KV of
their last window (the decode engine's SWA pool takes the window's pages, as the engine's own
prefill does). Decode engines must not have a MAMBA component (its state has no transfer model).
"""
from __future__ import annotations

import numpy as np

from cache_core.engine_types import EngineRequest
from cache_core.records import TokenSeq

from .fleet import Fleet


class PDFleet(Fleet):
    def __init__(self, engines, router, roles, decode_router, kv_links, kv_bytes_per_token, pd: dict):
        super().__init__(engines, router, roles)
        self.prefill = [i for i, r in enumerate(roles) if r == "prefill"]
        self.decode = [i for i, r in enumerate(roles) if r == "decode"]
        self.decode_router = decode_router
        self.kv_links = kv_links  # one per prefill engine, in self.prefill order
        self.kv_bytes_per_token = kv_bytes_per_token  # (FULL, SWA bytes per token, SWA window tokens)
        self.bootstrap_s = pd["bootstrap_s"]
        self.decode_radix = pd["decode_radix"]
        self.parts: dict = {}  # rid -> {"user": request, "p": engine, "d": engine, ...times}
        self.prealloc_queue = {d: [] for d in range(len(self.decode))}  # FIFO of rids per decode engine
        self.rooms: dict = {d: {} for d in range(len(self.decode))}  # rid -> decode room, requests holding KV
        router.engines = [[engines[i]] for i in self.prefill]
        decode_router.engines = [[engines[i]] for i in self.decode]
        self.input_closed = False

    def kv_bytes(self, tokens: int) -> float:
        """Bytes of the KV of `tokens` missing tokens: every token's FULL KV, and the SWA KV of
        the last window's tokens (hybrid models)."""
        full, swa, window = self.kv_bytes_per_token
        return tokens * full + min(tokens, window) * swa

    def arrive(self, req) -> None:
        self.arrived += 1
        self.record(req)
        now = self.now()
        p = self.router.pick(req, now)
        d = self.decode_router.pick(req, now)
        self.router.routed(req, p, now)
        self.decode_router.routed(req, d, now)
        self.parts[req.rid] = {"user": req, "p": p, "d": d, "seq": req.seq}
        self.engine_of[req.rid] = self.prefill[p]
        env = self.kv_links[p].env
        env.timeout(self.bootstrap_s).callbacks.append(lambda _e, rid=req.rid: self._bootstrapped(rid))

    def close_input(self) -> None:
        """No more user requests; the engines close once every one is done (one still on its
        way reaches its prefill and decode engines later)."""
        self.input_closed = True
        self._close_when_done()

    def complete(self, r) -> None:
        super().complete(r)
        self._close_when_done()

    def _close_when_done(self) -> None:
        if self.input_closed and self.completed == self.arrived:
            super().close_input()

    def _bootstrapped(self, rid) -> None:
        part = self.parts[rid]
        part["bootstrap_done_s"] = self.now()
        self.prealloc_queue[part["d"]].append(rid)
        self._prealloc(part["d"])

    def _prealloc(self, d: int) -> None:
        """Reserve decode KV for the queued requests of decode engine d, first come first
        served; the head waits while the pool cannot supply its pages and still keep the
        decode rooms of the requests holding KV there (its own included)."""
        queue, eng = self.prealloc_queue[d], self.engines[self.decode[d]]
        while queue:
            part = self.parts[queue[0]]
            room = self.decode_room(eng, part["user"])
            held = reserve(eng.cache, part["seq"], part["user"].prompt_tokens, self.decode_radix,
                           keep=max([room, *self.rooms[d].values()]))
            if held is None:
                return
            queue.pop(0)
            self.rooms[d][part["user"].rid] = room
            part["reserved"] = held
            part["prealloc_done_s"] = self.now()
            self._start_prefill(part)

    @staticmethod
    def decode_room(eng, user) -> int:
        """Free + evictable tokens decode engine `eng` needs for `user`'s decode, once its
        prompt's whole pages landed, to be admitted alone (`admission.Admission`: the tail's
        pages + the output reservation, strictly below what is available) and to finish (the
        pages of its tokens past the landed ones), whichever is more; 0 without a decode."""
        if user.output_length <= 1:
            return 0
        adm, tail = eng.admission, user.prompt_tokens % eng.P
        charge = adm.ceil_pages(tail + 1) + min(user.output_length - 1, adm.clip_max_new_tokens) + 1
        return max(charge, adm.ceil_pages(tail + user.output_length))

    def _start_prefill(self, part) -> None:
        req, P = part["user"], self.P
        lp = req.prompt_tokens
        keys = req.seq.page_keys(P)[: lp // P]
        seq = TokenSeq(_head(req.seq, lp), keys, P)
        pre = EngineRequest(rid=req.rid, session_id=req.session_id, prompt=req.prompt, output_length=1,
                            arrival_s=req.arrival_s, seq=seq, round=req.round)
        self.engines[self.prefill[part["p"]]].arrive(pre)

    def _finished(self, r, i: int) -> None:
        part = self.parts[r.rid]
        user = part["user"]
        if i in self.prefill and "prefill" not in part:
            part["prefill"] = r
            self.router.finished(user, part["p"], self.now())
            if r.rejected or user.output_length <= 1:
                self._release(part)
                return self._done(user, part)
            part["kv_sent_s"] = self.now()
            part["kv_bytes"] = self.kv_bytes(user.prompt_tokens - part["reserved"][0].cached_tokens)
            ev = self.kv_links[part["p"]].transfer(part["kv_bytes"], pages=1)
            ev.callbacks.append(lambda _e, rid=r.rid: self._kv_arrived(rid))
            return
        part["decode"] = r
        self._release(part)
        self._done(user, part)

    def _kv_arrived(self, rid) -> None:
        part = self.parts[rid]
        user = part["user"]
        part["kv_done_s"] = self.now()
        eng = self.engines[self.decode[part["d"]]]
        seq = part["seq"]
        part["landed"] = land(eng.cache, seq, user.prompt_tokens, part.pop("reserved"))
        lp = user.prompt_tokens + 1
        dec = EngineRequest(rid=rid, session_id=user.session_id,
                            prompt=_head(seq, lp),
                            output_length=user.output_length - 1, arrival_s=self.now(), seq=seq, round=user.round)
        eng.arrive(dec)
        self._prealloc(part["d"])

    def _release(self, part) -> None:
        """The request no longer needs its decode KV held: unlock (or free) it; without the
        decode radix the engine keeps nothing (SGLang's ChunkCache frees a request's KV)."""
        cache = self.engines[self.decode[part["d"]]].cache
        self.rooms[part["d"]].pop(part["user"].rid, None)
        if "reserved" in part:
            reserved = part.pop("reserved")
            _free(cache, reserved)
            cache.unlock(reserved[0])
        if part.get("landed") is not None:
            cache.unlock(part.pop("landed"))
        if not self.decode_radix:
            cache.evict(cache.cached_tokens_total)
        self._prealloc(part["d"])

    def _done(self, user, part) -> None:
        self.decode_router.finished(user, part["d"], self.now())
        part.pop("seq", None)
        user.rejected = part["prefill"].rejected or ("decode" in part and part["decode"].rejected)
        self.complete(user)


def _head(seq, tokens: int) -> np.ndarray:
    """The first `tokens` token ids of `seq` (a view of its data)."""
    return np.frombuffer(seq.data, dtype=np.int64, count=tokens)


def reserve(cache, seq, prompt_tokens: int, radix: bool, keep: int = 0):
    """Pre-allocate decode KV for seq[:prompt_tokens]: (match, pages, SWA pages) with the
    device prefix the cache holds locked (radix; else nothing matched), pages for the rest of
    the prompt's whole pages (None when they are more than the whole pool: the request will
    recompute) and, with SWA, pages for their window (as the engine takes them: at most the
    window's pages + 1). None when the pools cannot supply them now, or would keep fewer than
    `keep` FULL tokens free or evictable after them (the request waits; a `keep` more than
    the pool could keep beside this prompt's pages asks for the pool to hold nothing else)."""
    P = cache.page_size
    n = prompt_tokens // P
    m = cache.match(seq, n * P if radix else 0)
    if m.cached_tokens > m.device:
        m = cache.match(seq, m.device)
    need = n - m.cached_tokens // P
    cap = cache.full.capacity_tokens
    cache.lock(m)  # before evicting: the matched prefix stays
    if cap is not None and need * P > cap:
        return m, None, None
    spare = cache.free_tokens + cache.full.evictable_tokens - need * P  # free or evictable after them
    if cap is not None and spare < min(keep, cap - n * P):  # (at most what the pool could keep beside it)
        cache.unlock(m)
        return None
    if cache.free_tokens < need * P:
        cache.evict(need * P - cache.free_tokens)
    pages = cache.alloc(need) if need else np.zeros(0, dtype=np.int64)
    if pages is None:
        cache.unlock(m)
        return None
    swa = None
    sw = cache.swa
    if sw is not None and need:
        k = min(need, sw.window_pages + 1)
        if sw.free_tokens < k * P:
            sw.evict_tokens(k * P - sw.free_tokens)
        swa = sw.alloc(k)
        if swa is None:
            cache.free(pages)
            cache.unlock(m)
            return None
    return m, pages, swa


def land(cache, seq, prompt_tokens: int, reserved):
    """Insert the transferred KV (the reserved pages after the locked prefix) into the decode
    cache and hold it locked until the request ends; returns that lock (None: nothing held)."""
    m, pages, swa = reserved
    n = prompt_tokens // cache.page_size * cache.page_size
    if pages is None or n == 0:
        _free(cache, reserved)
        cache.unlock(m)
        return None
    done = cache.insert(seq, n, pages, m.cached_tokens, slots=None if swa is None else {"swa": swa})
    cache.unlock(m)
    cache.lock(done)
    return done


def _free(cache, reserved) -> None:
    """Return the reserved pages (FULL and SWA) that will not be inserted."""
    _, pages, swa = reserved
    if pages is not None:
        cache.free(pages)
    if swa is not None:
        cache.swa.release_slots(swa)


__all__ = ["PDFleet", "land", "reserve"]
