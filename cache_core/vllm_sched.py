"""vLLM v1's scheduler over its prefix cache (`vllm_blocks.VllmBlockCache`), one step at a time,
as vllm 0.33.0 decides it (vllm/v1/core/sched/scheduler.py: `Scheduler.schedule`,
`_preempt_request`, `update_from_output`; vllm/v1/core/kv_cache_manager.py: `allocate_slots`).
Clock-agnostic: `vllm_engine.VllmEngine` drives it on the engine plug-ins.

One step (`VllmScheduler.schedule`), under a token budget of ``max_num_batched_tokens``:

1. **Running requests first**, in their order. Each gets ``num_tokens - num_computed_tokens``
   tokens (a decode: 1; a prefill: the rest of its prompt), capped by
   ``long_prefill_token_threshold`` (when > 0 and more than one request is running or waiting)
   and by the budget left (chunked prefill). Its new blocks (``cdiv(computed + new, B)`` minus
   those it holds) come from the free queue; when they do not fit, the LAST running request is
   preempted (recompute: its blocks freed in reverse order, ``num_computed_tokens = 0``, put at
   the FRONT of the waiting queue) and the allocation retried, until it fits or the request
   preempted itself; then the running loop stops.
2. **The waiting queue** (FCFS; only if nothing was preempted in this step), while budget is
   left and fewer than ``max_num_seqs`` requests run: the head's prefix hit
   (`get_computed_blocks`: full blocks, at most ``(num_tokens - 1) // B``, so the last token is
   always computed) is looked up whenever it has no computed tokens (at first scheduling and
   after a preemption); its tokens are ``num_tokens - hit`` (threshold, then: without chunked
   prefill a request that does not fit the budget stops the loop; with it, the budget caps it).
   Admission (``scheduler_reserve_full_isl``, default True): the blocks of its WHOLE sequence
   (``cdiv(num_tokens, B)`` minus the hit, plus the hit blocks that sit in the free queue)
   must be free, else the loop stops (FCFS: nobody behind it is tried).
3. **Caching** at allocation: every block that the step's tokens fill gets its hash
   (``min(computed + new, num_tokens) // B`` full blocks), so a request admitted later in the
   same step already hits them.

After the step (`complete`): each request's computed tokens advance; one whose computed
tokens reach ``num_tokens`` samples a token (prefill done or a decode); one that has all its
output finishes and frees its blocks (reverse order: the tail is evicted first). The reported
``cached_tokens`` is the hit at the FIRST scheduling (vLLM's prefill stats skip preempted
re-prefills). The last sampled token is never computed: prompt + output[:-1] is cached.

Not modelled (a scenario asking for them is refused upstream): async scheduling (vLLM 0.33.0
turns it on by default: vllm/config/vllm.py `VllmConfig.__post_init__`; this is the synchronous
scheduler), the priority policy, the watermark (default 0.0), speculative decoding, encoder
inputs, sliding-window/mamba groups.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from .scheduling import check_int

# vllm 0.33.0 defaults (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, OPENAI_API_SERVER
# usage context; vllm/config/scheduler.py SchedulerConfig; vllm/config/cache.py CacheConfig)
DEFAULT_BLOCK_SIZE = 16


def batch_defaults(gpu_memory_bytes: int, gpu_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vllm 0.33.0's OpenAI API server sets them for a
    GPU of this memory (vllm/engine/arg_utils.py `EngineArgs.get_batch_defaults`): >= 160 GiB
    16384/1024; >= 70 GiB and not an A100 (H100, H200) 8192/1024; else 2048/256."""
    gib = 1 << 30
    if gpu_memory_bytes >= 160 * gib:
        return 16384, 1024
    if gpu_memory_bytes >= 70 * gib and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


@dataclass(frozen=True, kw_only=True)
class VllmConfig:
    """vLLM's scheduler arguments (same names): ``block_size``, ``max_num_seqs``,
    ``max_num_batched_tokens``, ``enable_chunked_prefill``, ``long_prefill_token_threshold``
    (0: off, vLLM's default); with an L2 (vLLM's CPU offloading connector), its
    kv_connector_extra_config ``block_size`` and ``eviction_policy`` as ``offload_block_size``
    (tokens per CPU chunk) and ``offload_eviction_policy`` (None both: no L2)."""

    block_size: int = DEFAULT_BLOCK_SIZE
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    offload_block_size: int | None = None
    offload_eviction_policy: str | None = None

    kind = "vllm"  # what scenarios and the simulator branch on (EngineConfig is the sglang kind)

    def __post_init__(self):
        check_int(self.block_size, "engine.block_size", 1)
        check_int(self.max_num_seqs, "engine.max_num_seqs", 1)
        check_int(self.max_num_batched_tokens, "engine.max_num_batched_tokens", 1)
        check_int(self.long_prefill_token_threshold, "engine.long_prefill_token_threshold", 0)
        if not isinstance(self.enable_chunked_prefill, bool):
            raise ValueError("engine.enable_chunked_prefill must be true or false, "
                             f"got {self.enable_chunked_prefill!r}")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class VllmScheduler:
    """The running list, the waiting queue and the block pool of one vLLM engine. Requests are
    `EngineRequest`s: ``fill_len`` is vLLM's ``num_tokens`` (prompt + generated),
    ``computed_tokens`` its ``num_computed_tokens``, ``pages`` its block ids, ``retracted`` its
    ``num_preemptions``; ``seq`` (prompt + output[:-1]) names its blocks."""

    def __init__(self, kv, config: VllmConfig):
        self.kv = kv
        self.config = config
        self.B = config.block_size
        self.running: list = []
        self.waiting: deque = deque()
        self.keys: dict = {}  # id(request) -> the hashes of its full blocks (prompt + output[:-1])
        self.preempted_log: list = []  # rids preempted, in order
        self.offload: Any = None  # an L2 connector (see `VllmEngine`), consulted at each prefix lookup
        self.oreq: dict = {}  # id(request) -> its connector state
        self.holding: deque = deque()  # requests holding blocks loaded (or loading) from the L2
        self.inflight: dict = {}  # id(request) -> request still prefilling (vLLM's _inflight_prefills)
        self.transfers: list = []  # (connector transfer, request) issued, for the engine's data plane
        self.loading: set = set()  # id(request) of those in `holding` whose load is in flight
        self.ncached: dict = {}  # id(request) -> its blocks cached so far (vLLM's num_cached_block)

    def add(self, r) -> None:
        self.keys[id(r)] = keys = r.seq.page_keys(self.B).tolist()
        if self.offload is not None:
            self.oreq[id(r)] = self.offload.new_request(keys, len(r.prompt))
        self.waiting.append(r)

    # -- one step ---------------------------------------------------------------------------
    def schedule(self) -> tuple[list, list]:
        """([(request, new tokens, computed before), ...] in schedule order, [preempted, ...])."""
        c = self.config
        budget = c.max_num_batched_tokens
        thr = c.long_prefill_token_threshold if len(self.running) + len(self.waiting) > 1 else 0
        out: list = []
        preempted: list = []
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            new = r.fill_len - r.computed_tokens
            if 0 < thr < new:
                new = thr
            new = min(new, budget)
            if not self._grow_or_preempt(r, new, preempted):
                break
            out.append((r, new, r.computed_tokens))
            budget -= new
            i += 1
        if not preempted:
            budget = self._admit(budget, thr, out)
        return out, preempted

    def _grow_or_preempt(self, r, new: int, preempted: list) -> bool:
        """allocate_slots for a running request, preempting the last running one while it fails."""
        kv = self.kv
        while True:
            need = cdiv(r.computed_tokens + new, self.B) - len(r.pages)
            if kv.fits([], need):
                self._grow(r, need, r.computed_tokens + new)
                return True
            victim = self.running.pop()
            self.preempt(victim)
            preempted.append(victim)
            if victim is r:
                return False

    def _admit(self, budget: int, thr: int, out: list) -> int:
        """The waiting loop: requests holding KV blocks (loaded from the L2) first, then the queue."""
        for r in [x for x in self.holding if id(x) not in self.loading]:
            if budget <= 0 or len(self.running) >= self.config.max_num_seqs:
                return budget
            took = self._admit_one(r, [], budget, thr, out)
            if took is None:
                return budget
            self.holding.remove(r)
            budget -= took
        while budget > 0 and self.waiting and len(self.running) < self.config.max_num_seqs:
            r = self.waiting[0]
            hit = self.kv.lookup(self.keys[id(r)], r.fill_len)
            ext = 0 if self.offload is None else self.offload.matched_tokens(self.oreq[id(r)], len(hit) * self.B)
            if ext:
                if not self._load(r, hit, ext):
                    break
                continue
            took = self._admit_one(r, hit, budget, thr, out)
            if took is None:
                break
            budget -= took
        return budget

    def _admit_one(self, r, hit: list, budget: int, thr: int, out: list) -> int | None:
        """Schedule r (with its prefix hit, or the blocks it holds): the tokens taken, None if not."""
        c, kv, B = self.config, self.kv, self.B
        computed = len(hit) * B if hit or not r.pages else r.computed_tokens
        new = r.fill_len - computed
        if 0 < thr < new:
            new = thr
        if not c.enable_chunked_prefill and new > budget:
            return None
        new = min(new, budget)
        held = len(hit) or len(r.pages)
        if not kv.fits(hit, cdiv(r.fill_len, B) - held):  # the whole sequence must fit
            return None
        if not r.pages:
            self.waiting.popleft()
            kv.touch(hit)
            r.pages = list(hit)
            self.ncached[id(r)] = len(hit)
            if r.retracted == 0:
                r.cached_tokens = r.cached_device = computed
        r.computed_tokens = computed
        self._grow(r, cdiv(computed + new, B) - len(r.pages), computed + new)
        if computed + new < r.fill_len:
            self.inflight[id(r)] = r
        self.running.append(r)
        out.append((r, new, computed))
        return new

    def _load(self, r, hit: list, ext: int) -> bool:
        """An L2 hit of `ext` tokens past the GPU hit (vLLM's async connector load): the blocks up
        to it (within the free blocks less what in-flight prefills still need), uncached until the
        load lands; r holds them, out of the queue, until then (`load_done`)."""
        kv, B = self.kv, self.B
        if not kv.fits(hit, cdiv(r.fill_len, B) - len(hit)):
            return False
        reserved = sum(cdiv(x.fill_len, B) - len(x.pages) for x in self.inflight.values())
        if not kv.fits(hit, cdiv(len(hit) * B + ext, B) - len(hit) + reserved):
            return False
        self.waiting.popleft()
        kv.touch(hit)
        ev0 = kv.evicted_blocks
        r.pages = list(hit) + kv.take(cdiv(len(hit) * B + ext, B) - len(hit))
        r.evicted_tokens += (kv.evicted_blocks - ev0) * B
        r.computed_tokens = len(hit) * B + ext
        if r.retracted == 0:
            r.cached_tokens, r.cached_device, r.cached_host = r.computed_tokens, len(hit) * B, ext
        self.loading.add(id(r))
        self.ncached[id(r)] = len(hit)
        self.inflight[id(r)] = r
        self.holding.append(r)
        self.transfers.append((self.offload.load(self.oreq[id(r)], r.pages, ext), r))
        return True

    def load_done(self, r) -> None:
        """r's load landed (`_update_waiting_for_remote_kv`): its blocks are cached, and a hit of
        the whole sequence recomputes the last token."""
        full = r.computed_tokens // self.B
        self.kv.cache(r.pages, self.keys[id(r)], self.ncached[id(r)], full)
        self.ncached[id(r)] = full
        if r.computed_tokens == r.fill_len:
            r.computed_tokens -= 1
        self.loading.discard(id(r))

    def _grow(self, r, need: int, upto: int) -> None:
        """Give r `need` new blocks and cache the blocks full up to token `upto`."""
        kv = self.kv
        if need > 0:
            ev0 = kv.evicted_blocks
            r.pages += kv.take(need)
            r.evicted_tokens += (kv.evicted_blocks - ev0) * self.B
        done = self.ncached[id(r)]
        full = min(upto, r.fill_len) // self.B
        if full > done:
            kv.cache(r.pages, self.keys[id(r)], done, full)
            self.ncached[id(r)] = full

    def preempt(self, r) -> None:
        """vLLM's `_preempt_request`: free r's blocks, computed 0, to the waiting queue's front."""
        self.kv.free(r.pages)
        r.pages = []
        r.computed_tokens = 0
        self.inflight.pop(id(r), None)
        del self.ncached[id(r)]
        r.retracted += 1
        self.preempted_log.append(r.rid)
        self.waiting.appendleft(r)

    def complete(self, scheduled: list) -> tuple[list, list]:
        """After the step: (requests that sampled their first token, requests that finished)."""
        first, done = [], []
        off = self.offload
        for r, new, _ctx in scheduled:
            r.computed_tokens += new
            if off is not None:  # the step's store job (the connector's offer of computed blocks)
                self.transfers.append((off.offer(self.oreq[id(r)], r.computed_tokens, r.pages), r))
            if r.computed_tokens < r.fill_len:
                continue  # a prefill chunk: no token
            self.inflight.pop(id(r), None)
            if r.generated_tokens == 0:
                first.append(r)
            r.generated_tokens += 1
            if r.generated_tokens >= r.output_length:
                self.running.remove(r)
                if off is not None:
                    self.transfers.append((off.finished(self.oreq.pop(id(r)), r.computed_tokens, r.pages), r))
                self.kv.free(r.pages)
                r.pages = []
                del self.keys[id(r)], self.ncached[id(r)]
                done.append(r)
        return first, done

    def take_transfers(self) -> list:
        """The connector's transfers issued since the last call (None entries dropped)."""
        out = [(t, r) for t, r in self.transfers if t is not None]
        self.transfers = []
        return out

    def loaded_waiting(self) -> bool:
        """A request holds blocks whose load has landed (it can be scheduled)."""
        return any(id(r) not in self.loading for r in self.holding)

    def idle(self) -> bool:
        return not self.running and not self.waiting and not self.holding


__all__ = ["VllmConfig", "VllmScheduler", "batch_defaults", "DEFAULT_BLOCK_SIZE"]
