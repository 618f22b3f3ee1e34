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
    (0: off, vLLM's default)."""

    block_size: int = DEFAULT_BLOCK_SIZE
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0

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
        self.offload = None  # an L2 connector (see `VllmEngine`), consulted at first scheduling

    def add(self, r) -> None:
        self.keys[id(r)] = r.seq.page_keys(self.B).tolist()
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
        c, kv, B = self.config, self.kv, self.B
        while budget > 0 and self.waiting and len(self.running) < c.max_num_seqs:
            r = self.waiting[0]
            keys = self.keys[id(r)]
            hit = kv.lookup(keys, r.fill_len)
            computed = len(hit) * B
            new = r.fill_len - computed
            if 0 < thr < new:
                new = thr
            if not c.enable_chunked_prefill and new > budget:
                break
            new = min(new, budget)
            if not kv.fits(hit, cdiv(r.fill_len, B) - len(hit)):  # the whole sequence must fit
                break
            self.waiting.popleft()
            kv.touch(hit)
            r.pages = list(hit)
            r.computed_tokens = computed
            self._grow(r, cdiv(computed + new, B) - len(hit), computed + new)
            if r.retracted == 0:
                r.cached_tokens = r.cached_device = computed
            self.running.append(r)
            out.append((r, new, computed))
            budget -= new
        return budget

    def _grow(self, r, need: int, upto: int) -> None:
        """Give r `need` new blocks and cache the blocks full up to token `upto`."""
        kv = self.kv
        if need > 0:
            ev0 = kv.evicted_blocks
            r.pages += kv.take(need)
            r.evicted_tokens += (kv.evicted_blocks - ev0) * self.B
        done = min(r.computed_tokens, r.fill_len) // self.B
        full = min(upto, r.fill_len) // self.B
        if full > done:
            kv.cache(r.pages, self.keys[id(r)], done, full)

    def preempt(self, r) -> None:
        """vLLM's `_preempt_request`: free r's blocks, computed 0, to the waiting queue's front."""
        self.kv.free(r.pages)
        r.pages = []
        r.computed_tokens = 0
        r.retracted += 1
        self.preempted_log.append(r.rid)
        self.waiting.appendleft(r)

    def complete(self, scheduled: list) -> tuple[list, list]:
        """After the step: (requests that sampled their first token, requests that finished)."""
        first, done = [], []
        for r, new, _ctx in scheduled:
            r.computed_tokens += new
            if r.computed_tokens < r.fill_len:
                continue  # a prefill chunk: no token
            if r.generated_tokens == 0:
                first.append(r)
            r.generated_tokens += 1
            if r.generated_tokens >= r.output_length:
                self.running.remove(r)
                self.kv.free(r.pages)
                r.pages = []
                del self.keys[id(r)]
                done.append(r)
        return first, done

    def idle(self) -> bool:
        return not self.running and not self.waiting


__all__ = ["VllmConfig", "VllmScheduler", "batch_defaults", "DEFAULT_BLOCK_SIZE"]
