"""vLLM's CPU KV offloading connector (an L2 under vLLM v1's prefix cache), per request as
vLLM 0.33.0 decides it, composed with VllmBlockCache (cache_core/vllm_blocks.py).

Read from vllm 0.33.0 (under vllm/: "sched" = distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py,
"mgr" = v1/kv_offload/cpu/manager.py, "lru"/"arc" = v1/kv_offload/cpu/policies/{lru,arc}.py):

* chunks: the CPU holds `num_chunks` chunks of `blocks_per_chunk` GPU blocks (kv_connector_extra_config
  "block_size" = tokens per chunk, a multiple of the GPU block size; offloading/config.py:
  build_offloading_config); a chunk's key is the block hash of its last block (sched:
  RequestOffloadState.update_offload_keys), its position the token where it ends;
* lookup at first scheduling (sched: _lookup_complete_chunks): from the chunk holding the GPU
  hit's end, the run of chunks in the CPU, over the prompt's full chunks; the hit ends on a
  chunk boundary and is at least one chunk past the GPU hit, else 0 (a full-prompt hit is
  allowed: the scheduler then recomputes the last token, v1/core/sched/scheduler.py:
  _update_waiting_for_remote_kv);
* load (sched: update_state_after_alloc; mgr: prepare_load/complete_load): the GPU blocks past the
  GPU hit up to the CPU hit, from the chunks holding them; async: vLLM allocates only the loaded
  tokens' blocks in that step (delay_cache_blocks) and the rest when the request runs; loaded
  chunks are pinned until the load completes; chunks up to the hit are not offered (CHUNK_LEVEL);
* store (sched: _build_store_jobs, every step the request runs and once after it finishes): the
  computed full chunks not offered yet (only the prompt's with offload_prompt_only, vLLM's
  default: v1/kv_offload/base.py OffloadingSpec), so without a CPU hit the GPU-hit chunks too;
  mgr.prepare_store stores those not in the CPU, evicting (policy order) chunks not pinned
  and not in the offer; when that cannot free enough, the WHOLE offer is refused (None) and is
  offered again at the next step; a stored chunk is readable once its store completes;
* LRU (lru: LRUCachePolicy): ranks; a chunk inserted or reused by a running request ranks
  (request rank, -position) (its tail before its head); when the request finishes
  (mgr.on_request_finished, in the step after it), every chunk it touched gets a fresh rank,
  tail first, so its head is the most recent; the lowest rank is evicted first;
* ARC (arc: ARCCachePolicy): T1/T2/B1/B2, the adaptive target (cache_core/vllm_offload_policies.py).

For an engine (concurrent requests), VllmOffloadConnector is the scheduler side, per request:
`new_request(block keys, prompt length)` at add_request; `matched_tokens(req, GPU-hit tokens)`
at first scheduling (None: vLLM delays the request: a hit chunk is being stored or loaded);
after the GPU allocation with a CPU hit, `load(req, block table, hit)` -> a LOAD OffloadJob (the
chunks stay pinned until `complete`); each step the request runs, `offer(req, tokens computed
after the step, block table)` -> a STORE OffloadJob or None; `complete(transfer)` when the
workers report it; the step after it finishes, `finished(req, tokens computed, block table)`.
Transfers carry CPU chunk ids, GPU block ids and bytes (GPU blocks x block size x bytes_per_token).

Serial model (as VllmBlockCache.step): one request at a time; every transfer is reported done at
the end of the step that issued it (so a lookup never sees a pending chunk, and nothing is
pinned when the next request's stores run). tools/vllm_ref/run_vllm_offload.py runs vLLM's own
OffloadingConnectorScheduler + CPUOffloadingManager + KVCacheManager in that order;
tests/test_vllm_offload_reference.py compares every request.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .actions import L1, L2, LOAD, STORE, TransferKind
from .keys import as_tokens, page_keys
from .optional import present
from .vllm_offload_policies import make_policy
from .vllm_blocks import VllmBlockCache

@dataclass
class OffloadJob:
    """One transfer job: `direction` LOAD (CPU L2 -> GPU L1) or STORE (vLLM's name: GPU L1 -> CPU L2)."""
    direction: TransferKind
    keys: list
    cpu_chunks: list
    gpu_blocks: list
    nbytes: int
    evicted: list = field(default_factory=list)  # store: the CPU chunk keys evicted for it, in order

    @property
    def link(self) -> str:
        return f"{L2}->{L1}" if self.direction == LOAD else f"{L1}->{L2}"


class Chunk:
    """mgr ChunkStatus: ref -1 = being stored (not readable), else the loads reading it."""
    __slots__ = ("ref", "cid")

    def __init__(self, cid: int):
        self.ref = -1
        self.cid = cid


@dataclass
class OffloadRequest:
    """One request's connector state (sched RequestOffloadState + mgr _RequestCacheAccess)."""
    keys: list  # chunk keys, in prompt order (position of keys[i] = (i + 1) * tokens per chunk)
    tpc: int
    prompt_len: int
    rank: int | None = None  # lru: the request's provisional rank
    seen: list = field(default_factory=list)
    seen_set: set = field(default_factory=set)
    inserted: set = field(default_factory=set)
    reused: set = field(default_factory=set)
    store_miss: set = field(default_factory=set)
    next_stored: int = 0
    local: int = 0
    refused: tuple | None = None  # the last offer refused (re-offered unchanged: a no-op)

    def __post_init__(self):
        self.pos = {k: (i + 1) * self.tpc for i, k in enumerate(self.keys)}


class VllmCpuOffload:
    """mgr CPUOffloadingManager: a chunk pool of `num_chunks` and its cache policy."""

    def __init__(self, num_chunks: int, policy: str = "lru"):
        if num_chunks < 1:
            raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
        self.num_chunks = num_chunks
        self.policy = make_policy(policy, num_chunks)
        self.allocated = 0
        self.free_list: list[int] = []
        self.evictable = 0
        self.stored_chunks = 0
        self.evicted_chunks = 0

    def lookup(self, key) -> int | None:
        """mgr.lookup: None = MISS, -1 = HIT_PENDING (being stored), else HIT (the readers)."""
        chunk = self.policy.get(key)
        return None if chunk is None else chunk.ref

    def _record(self, keys, req: OffloadRequest, reused=()) -> None:
        new = [k for k in keys if k not in req.seen_set]
        if new:
            req.seen.extend(new)
            req.seen_set.update(new)
            self.policy.on_request_access(new, req)
        req.reused.update(k for k in reused if k not in req.inserted)

    def prepare_load(self, keys, req: OffloadRequest) -> list[int]:
        out = []
        for k in keys:
            chunk = self.policy.get(k)
            if chunk.ref == 0:
                self.policy.mark_non_evictable(k)
                self.evictable -= 1
            chunk.ref += 1
            out.append(chunk.cid)
        self._record(keys, req, reused=keys)
        return out

    def complete_load(self, keys) -> None:
        for k in keys:
            chunk = self.policy.get(k)
            chunk.ref -= 1
            if chunk.ref == 0:
                self.evictable += 1
                self.policy.mark_evictable(k)

    def prepare_store(self, keys, req: OffloadRequest):
        """(keys stored, their chunk ids, keys evicted in order), or None: the offer refused."""
        to_store, ready = [], []
        for k in keys:
            chunk = self.policy.get(k)
            if chunk is None:
                to_store.append(k)
            elif chunk.ref >= 0:
                ready.append(k)
        misses = [k for k in to_store if k not in req.store_miss]
        if misses:
            self.policy.on_store_miss(misses, req)
            req.store_miss.update(misses)
        recorded = set(to_store) | set(ready)
        self._record([k for k in keys if k in recorded], req, reused=ready)
        if not to_store:
            return [], [], []
        n_evict = len(to_store) - (len(self.free_list) + self.num_chunks - self.allocated)
        evicted = []
        if n_evict > 0:
            if n_evict > self.evictable:
                return None
            got = self.policy.evict(n_evict, set(keys))
            if got is None:
                return None
            self.evictable -= len(got)
            for k, chunk in got:
                self.free_list.append(chunk.cid)
                evicted.append(k)
            self.evicted_chunks += len(got)
        fresh = min(len(to_store), self.num_chunks - self.allocated)
        cids = list(range(self.allocated, self.allocated + fresh))
        self.allocated += fresh
        cids += [self.free_list.pop() for _ in range(len(to_store) - fresh)]
        for k, cid in zip(to_store, cids):
            self.policy.insert(k, Chunk(cid), req)
        req.inserted.update(to_store)
        self.stored_chunks += len(to_store)
        return to_store, cids, evicted

    def complete_store(self, keys) -> None:
        get, done = self.policy.get, []
        for k in keys:
            chunk = get(k)
            if chunk is not None and chunk.ref < 0:
                chunk.ref = 0
                done.append(k)
        self.evictable += len(done)
        self.policy.mark_evictable_all(done)

    def request_finished(self, req: OffloadRequest) -> None:
        order = sorted(req.seen, key=req.pos.__getitem__)
        self.policy.on_request_finished(order, req.inserted - req.reused, req.reused, req)

    def __len__(self) -> int:
        return self.allocated - len(self.free_list)


class VllmOffloadConnector:
    """sched OffloadingConnectorScheduler's decisions for one full-attention group."""

    def __init__(self, cpu: VllmCpuOffload, block_size: int, blocks_per_chunk: int = 1,
                 bytes_per_token: int = 0, prompt_only: bool = True):
        if blocks_per_chunk < 1:
            raise ValueError(f"blocks_per_chunk must be >= 1, got {blocks_per_chunk}")
        self.cpu, self.B, self.bpc = cpu, block_size, blocks_per_chunk
        self.tpc = block_size * blocks_per_chunk
        self.bpt = bytes_per_token
        self.prompt_only = prompt_only
        self.loading: set = set()  # sched _chunks_being_loaded: keys of loads not completed yet

    def new_request(self, block_keys: list, prompt_len: int) -> OffloadRequest:
        """`block_keys`: the chained key of every full block of the tokens that will be computed."""
        bpc = self.bpc
        return OffloadRequest(block_keys[bpc - 1::bpc], self.tpc, prompt_len)

    def matched_tokens(self, req: OffloadRequest, local: int) -> int | None:
        """get_num_new_matched_tokens: CPU-hit tokens past the GPU hit `local` (0: none; None: a
        hit chunk is still being stored or loaded: vLLM delays the request, ask again later)."""
        req.next_stored, req.local, tpc = 0, local, self.tpc
        n_keys = req.prompt_len // tpc
        top = n_keys * tpc
        if top - local < tpc:
            return 0
        start = local // tpc
        hits, pending = 0, False
        for k in req.keys[start:n_keys]:
            ref = self.cpu.lookup(k)
            if ref is None:
                break
            hits += 1
            pending |= ref < 0
        if pending:
            return None
        ext = min(top, tpc * (start + hits)) - local
        if not hits or ext < tpc:
            return 0
        if self.loading and any(k in self.loading for k in req.keys[start:-(-(local + ext) // tpc)]):
            return None
        return ext

    def load(self, req: OffloadRequest, blocks: list, ext: int) -> OffloadJob:
        """update_state_after_alloc with a CPU hit: the load job (pins its chunks)."""
        B, end = self.B, req.local + ext
        first = req.local // B
        keys = req.keys[first // self.bpc:-(-end // self.tpc)]
        cids = self.cpu.prepare_load(keys, req)
        self.loading.update(keys)
        req.next_stored = -(-end // self.tpc)
        dst = blocks[first:-(-end // B)]
        return OffloadJob(LOAD, keys, cids, dst, len(dst) * B * self.bpt)

    def offer(self, req: OffloadRequest, computed: int, blocks: list) -> OffloadJob | None:
        """The store job of one step (`computed` tokens after it, `blocks` its block table)."""
        if self.prompt_only:
            computed = min(computed, req.prompt_len)
        n = min(computed // self.tpc, len(blocks) // self.bpc, len(req.keys))
        if n <= req.next_stored:
            return None
        keys = req.keys[req.next_stored:n]
        if req.refused == (req.next_stored, n):
            return None  # the same offer refused again: vLLM's call changes nothing
        got = self.cpu.prepare_store(keys, req)
        if got is None:
            req.refused = (req.next_stored, n)
            return None
        stored, cids, evicted = got
        start = req.next_stored
        req.next_stored = n
        if not stored:
            return None
        bpc, idx = self.bpc, {k: i for i, k in enumerate(keys, start)}
        src = [b for k in stored for b in blocks[idx[k] * bpc:(idx[k] + 1) * bpc]]
        return OffloadJob(STORE, stored, cids, src, len(src) * self.B * self.bpt, evicted)

    def complete(self, t: OffloadJob | None) -> None:
        """The workers report the job done (update_connector_output)."""
        if t is None or not t.keys:
            return
        if t.direction == LOAD:
            self.cpu.complete_load(t.keys)
            self.loading.difference_update(t.keys)
        else:
            self.cpu.complete_store(t.keys)

    def finished(self, req: OffloadRequest, computed: int, blocks: list) -> OffloadJob | None:
        """The step after the request finished: its last offer, then mgr.on_request_finished."""
        t = self.offer(req, computed, blocks)
        self.cpu.request_finished(req)
        return t


@dataclass
class OffloadStep:
    """One request: GPU-hit and CPU-hit (loaded) tokens, refused, the GPU blocks evicted, the CPU
    chunk keys stored and evicted (in order), and the transfers."""
    prompt_tokens: int
    output_tokens: int
    gpu_hit: int
    cpu_hit: int
    rejected: bool
    gpu_evicted: list
    stored: list
    cpu_evicted: list
    transfers: list


class VllmOffloadCache:
    """A vLLM engine's prefix cache with the CPU offloading connector, one request at a time."""

    def __init__(self, block_size: int = 16, num_blocks: int | None = None, cpu_chunks: int = 1,
                 blocks_per_chunk: int = 1, policy: str = "lru", bytes_per_token: int = 0,
                 prompt_only: bool = True):
        self.gpu = VllmBlockCache(block_size, num_blocks)
        self.gpu.evicted_log = []
        self.cpu = VllmCpuOffload(cpu_chunks, policy)
        self.conn = VllmOffloadConnector(self.cpu, block_size, blocks_per_chunk, bytes_per_token, prompt_only)

    def _run(self, t: OffloadJob | None, st: OffloadStep) -> None:
        if t is not None:
            st.transfers.append(t)
            st.stored.extend(t.keys if t.direction == STORE else ())
            st.cpu_evicted.extend(t.evicted)
            self.conn.complete(t)

    def step(self, prompt, output=None) -> OffloadStep:
        gpu, conn, B = self.gpu, self.conn, self.gpu.block_size
        prompt = as_tokens(prompt)
        P = len(prompt)
        n_out = 0 if output is None else len(output)
        seq = prompt if n_out <= 1 else np.concatenate([prompt, as_tokens(output)[:-1]])
        keys = page_keys(seq, B)[0].tolist()
        log0 = len(log := present(gpu.evicted_log, "the GPU block eviction log"))
        local = len(hit := gpu.lookup(keys, P)) * B
        req = conn.new_request(keys, P)
        ext = present(conn.matched_tokens(req, local), "a CPU hit")  # never None here: every transfer completes in its step
        st = OffloadStep(P, n_out, local, ext, False, [], [], [], [])
        blocks = self._admit(req, hit, keys, ext, st)
        if blocks is None:
            st.rejected = True
            conn.finished(req, 0, [])  # never scheduled: no block table, nothing offered
            st.gpu_evicted = log[log0:]
            return st
        self._run(conn.offer(req, P, blocks), st)
        done, computed = P // B, P
        for t in range(1, n_out):  # decode step t computes token P + t - 1
            if (grown := gpu.decode(blocks, keys, done, P + t)) is None:
                st.rejected = True  # vLLM would preempt; alone, the request stops here
                break
            done = grown
            computed = P + t
            self._run(conn.offer(req, computed, blocks), st)
        gpu.free(blocks)
        self._run(conn.finished(req, computed, blocks), st)
        st.gpu_evicted = log[log0:]
        return st

    def _admit(self, req, hit, keys, ext, st) -> list | None:
        """The GPU blocks of an admitted prompt (with the load of a CPU hit first), or None."""
        gpu, B, P = self.gpu, self.gpu.block_size, req.prompt_len
        total = -(-P // B)
        if not ext:
            if not gpu.fits(hit, total - len(hit)):
                return None
            gpu.touch(hit)
            blocks = hit + gpu.take(total - len(hit))
            gpu.cache(blocks, keys, len(hit), P // B)
            return blocks
        end = req.local + ext
        first = -(-end // B) - len(hit)
        if not gpu.fits(hit, first):
            return None
        gpu.touch(hit)
        blocks = hit + gpu.take(first)
        self._run(self.conn.load(req, blocks, ext), st)
        gpu.cache(blocks, keys, len(hit), end // B)
        if total - len(blocks) > gpu.free_blocks:
            gpu.free(blocks)
            return None
        blocks += gpu.take(total - len(blocks))
        gpu.cache(blocks, keys, end // B, P // B)
        return blocks

    def check(self) -> None:
        self.gpu.check()
        self.cpu.policy.check(self.cpu)
