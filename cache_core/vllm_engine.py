"""A vLLM-like engine (``engine.kind: vllm``): vLLM v1's scheduler (`vllm_sched.py`) over its
prefix cache (`vllm_blocks.py`), on the same three plug-ins as the SGLang-like `engine.Engine`
(engine_types.py: clock, data plane, step executor) and with the same outward interface
(`arrive`, `loop`, `close_input`, `check_finished`, `finished`, `counters`, `timeline`,
`listeners`, ...), so the simulator drives and records it unchanged.

A step mixes decodes and prefill chunks (vLLM has no prefill-only steps): it is priced as one
`engine_types.Step`, each prefill chunk as (new tokens, tokens computed before it) and each
decode by its context. Times of a result row: ``queue_s`` in the waiting queue until the first
token (also after a preemption before it, and an L2 load's wait), ``load_s`` 0, compute the rest.

A request that could never be served (``cdiv(prompt + output, B)`` above the pool's blocks:
longer than the ``max_model_len`` the pool allows; without chunked prefill, longer than the
budget, which vLLM keeps >= max_model_len) is rejected at arrival.

L2 seam (`offload`, None by default: then none of this happens): a connector with the calls of
`cache_core.vllm_offload.VllmOffloadConnector` (vLLM's OffloadingConnectorScheduler):
``new_request(block_keys, prompt_len)`` at arrival; ``matched_tokens(state, gpu_hit_tokens)`` at
each prefix lookup (a hit is loaded asynchronously, as vLLM's connector does: the request takes
the blocks up to it and waits out of the queue until the load lands, `VllmScheduler._load`);
``load(state, blocks, tokens)``; ``offer(state, computed, blocks)`` after each step a request ran
(its store job); ``finished(state, computed, blocks)`` when it finishes (blocks freed at once:
vLLM's delayed free while stores are pending is not modelled); ``complete(transfer)`` when the
data plane reports a transfer done; ``cpu`` (its length: the chunks held) and ``tpc`` (tokens per
chunk) for the timeline and, with the real connector, the stats. Transfers (``direction`` load / store, ``gpu_blocks``,
``nbytes``) go onto the L2 <-> L1 link as ``load`` / ``backup`` actions. The reported L2 hit is
``cached_host`` (the wait for its load counts as ``queue_s``). Scenarios wire it with
``cache.l2_tokens`` (scenarios/engine_kinds.py, radixsim/sim_wiring.py); then ``tokens_moved``
counts the tokens per link (summary ``tokens_per_link``), the cache's stats the CPU chunks and
the timeline the CPU's cached tokens.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from .actions import BACKUP, L1, L2, LOAD, Transfer
from .engine_types import DONE, WAITING, EngineStalled, Step, check_finished
from .optional import present
from .scheduling import FINISHED, RUNNING
from .scheduling import WAITING as Q_WAITING
from .vllm_blocks import VllmBlockCache
from .vllm_sched import VllmConfig, VllmScheduler, cdiv


class VllmKV:
    """What result writers read of an engine's cache (`hier`, `components`, `stats`, ...) for a
    vLLM block pool: one full-attention component, no tiers."""

    hier = None
    name = "full"
    offload = None  # the L2 connector (VllmEngine's `offload`), whose CPU chunks `stats` reports

    def __init__(self, blocks: VllmBlockCache):
        self.blocks = blocks
        self.page_size = blocks.block_size
        self.components = [self]

    @property
    def capacity_tokens(self) -> int | None:
        n = self.blocks.num_blocks
        return None if n is None else (n - 1) * self.page_size

    def used_tokens(self) -> int:
        """Tokens in blocks that hold KV (referenced, or cached in the free queue)."""
        return (len(self.blocks.ref) + len(self.blocks.hashed)) * self.page_size

    def l2_tokens(self) -> int:
        """Tokens in the CPU's chunks (0 without an L2)."""
        o = self.offload
        return 0 if o is None else len(o.cpu) * o.tpc

    def stats(self) -> dict:
        b = self.blocks
        out = {"kind": "vllm", "block_size": self.page_size, "capacity_tokens": self.capacity_tokens,
               "free_tokens": None if b.num_blocks is None else b.free_blocks * self.page_size,
               "cached_blocks": len(b.hash_of), "evicted_tokens": b.evicted_blocks * self.page_size,
               "evicted_blocks": b.evicted_blocks}
        if self.offload is not None:
            cpu, tpc = self.offload.cpu, self.offload.tpc
            out.update({"l2_block_size": tpc, "l2_chunks": cpu.num_chunks, "l2_cached_chunks": len(cpu),
                        "l2_stored_chunks": cpu.stored_chunks, "l2_evicted_chunks": cpu.evicted_chunks,
                        "l2_evicted_tokens": cpu.evicted_chunks * tpc})
        return out

    # -- what a router reads (fleet/routers: llm_d's scorers, cache_aware_exact), the radix cache's names --
    @property
    def full(self) -> "VllmKV":
        """The full-attention component: the pool itself (its only one)."""
        return self

    @property
    def pool(self) -> VllmBlockCache:
        return self.blocks

    @property
    def free_tokens(self) -> int:
        """Tokens in free blocks that hold no KV (the free queue's unhashed and never-used blocks)."""
        return (self.blocks.free_blocks - len(self.blocks.hashed)) * self.page_size

    @property
    def evictable_tokens(self) -> int:
        """Tokens in cached blocks no request references (the free queue's hashed tail)."""
        return len(self.blocks.hashed) * self.page_size

    def exact_reuse(self, req) -> int:
        """Tokens of `req` this engine would reuse now, read without changing anything: the GPU
        hit (`VllmBlockCache.lookup`) plus the CPU chunks (the offload connector's) stored
        beyond it, as `VllmOffloadConnector.matched_tokens` counts them (chunks still being
        stored count none; no LRU touch)."""
        B = self.page_size
        keys = req.seq.page_keys(B).tolist()
        local = len(self.blocks.lookup(keys, req.prompt_tokens)) * B
        o = self.offload
        if o is None:
            return local
        tpc, n_keys = o.tpc, req.prompt_tokens // o.tpc
        start = local // tpc
        hits = 0
        for k in keys[o.bpc - 1::o.bpc][start:n_keys]:
            ref = o.cpu.lookup(k)
            if ref is None or ref < 0:
                break
            hits += 1
        ext = min(n_keys * tpc, tpc * (start + hits)) - local
        return local + (ext if hits and ext >= tpc else 0)

    def check(self) -> None:
        self.blocks.check()


class VllmQueues(NamedTuple):
    waiting: Any
    prefetching: Any


class VllmEngine:
    """vLLM v1 serving loop on the engine plug-ins. ``kind`` is "vllm" (the SGLang-like engine
    has none)."""

    kind = "vllm"

    def __init__(self, config: VllmConfig, num_blocks: int | None, clock, dataplane, executor, offload=None):
        self.config = config
        self.P = config.block_size
        self.blocks = VllmBlockCache(config.block_size, num_blocks)
        self.cache = VllmKV(self.blocks)
        self.sched = VllmScheduler(self.blocks, config)
        self.sched.offload = offload
        self.clock, self.dataplane, self.executor = clock, dataplane, executor
        self.offload = offload
        self.cache.offload = offload
        self.tokens_moved: dict[str, int] | None = None if offload is None else {f"{L1}->{L2}": 0, f"{L2}->{L1}": 0}
        self.pending: dict = {}  # transfer id -> (connector transfer, request)
        self.next_id = 0
        self.arrived = 0
        self.input_closed = False
        self.steps = 0
        self.finished: list = []
        self.timeline: list = []
        self.listeners: list = []
        self.counters = {"preemptions": 0, "prefill_steps": 0, "decode_steps": 0, "prefill_tokens": 0,
                         "transfers": 0}

    @property
    def max_total_tokens(self) -> int | None:
        """The pool's KV tokens (SGLang's name; None: unbounded)."""
        return self.cache.capacity_tokens

    @property
    def queues(self):
        """The waiting requests as a router reads them (SGLang's names): ``waiting`` (vLLM's
        waiting queue) and ``prefetching`` (those waiting for their L2 load, `holding`)."""
        return VllmQueues(self.sched.waiting, self.sched.holding)

    @property
    def inflight(self) -> int:
        """Transfers handed to the data plane, not yet reported done."""
        return len(self.pending)

    def submit_transfers(self) -> None:
        """Hand the connector's new transfers to the data plane (L2 <-> L1)."""
        for t, r in self.sched.take_transfers():
            load = t.direction == LOAD
            self.next_id += 1
            n = len(t.gpu_blocks)
            a = Transfer(id=self.next_id, kind=LOAD if load else BACKUP, component="full", src_tier=L2 if load else L1,
                         dst_tier=L1 if load else L2, tokens=n * self.P, bytes=t.nbytes,
                         src=None if load else tuple(t.gpu_blocks), dst=tuple(t.gpu_blocks) if load else None)
            moved = present(self.tokens_moved, "the L2 link counters")  # transfers exist only with an L2
            moved[f"{a.src_tier}->{a.dst_tier}"] += a.tokens
            self.pending[a.id] = (t, r)
            self.counters["transfers"] += 1
            self.dataplane.submit(a, self.transfer_done)

    def transfer_done(self, tid: int, ok: bool) -> None:
        t, r = self.pending.pop(tid)
        self.offload.complete(t)
        if t.direction == LOAD:
            self.sched.load_done(r)
        self.clock.kick()

    # -- the loop ---------------------------------------------------------------------------
    def loop(self):
        """The serving loop (a generator: ``yield`` what the plug-ins return)."""
        while not (self.input_closed and self.sched.idle()):
            step = self.form_step()
            self.submit_transfers()
            if step is None:
                if self.sched.loaded_waiting():
                    continue  # a load landed meanwhile: schedule it
                if self.input_closed and not self.pending:
                    raise EngineStalled(f"nothing can run: {self.stall_report()}")
                yield self.clock.idle(None)
                continue
            yield from self.executor.execute(step)
            self.complete(step)
            self.submit_transfers()

    def form_step(self) -> Step | None:
        """The next step (None: nothing scheduled)."""
        now = self.clock.now()
        scheduled, preempted = self.sched.schedule()
        for r in preempted:
            self.counters["preemptions"] += 1
            r.state = Q_WAITING
            r.phase = WAITING
            r.phase_since_s = now
        if not scheduled:
            return None
        prefill, decode = [], []
        for r, new, ctx in scheduled:
            if r.phase == WAITING:  # admitted now
                if r.first_token_s is None:
                    r.queue_s += now - r.phase_since_s
                if r.admit_s is None:
                    r.admit_s = now
                r.state = RUNNING
                r.phase = "prefill"
            if new == 1 and r.generated_tokens > 0 and ctx == r.fill_len - 1:
                decode.append(r)
            else:
                prefill.append((r, new, ctx))
                self.counters["prefill_tokens"] += new
        self.steps += 1
        self.counters["prefill_steps" if prefill else "decode_steps"] += 1
        self.scheduled = scheduled
        return Step(self.steps, now, tuple(prefill), tuple(decode), tuple((n, c) for _, n, c in prefill),
                    tuple(r.fill_len - 1 for r in decode))

    def complete(self, step: Step) -> None:
        now = self.clock.now()
        first, done = self.sched.complete(self.scheduled)
        for r in first:
            r.first_token_s = now
            r.phase = "decode"
        for r in done:
            r.finish_s = now
            r.phase = DONE
            r.state = FINISHED
            self.done_request(r)
        self.timeline.append((now, len(self.sched.running), len(self.sched.waiting),
                              0 if self.blocks.num_blocks is None else self.cache.used_tokens(),
                              self.cache.l2_tokens(), 0))

    # -- arrivals ---------------------------------------------------------------------------
    def arrive(self, r) -> None:
        """A request arrives (its arrival_s set by the driver)."""
        self.arrived += 1
        r.phase_since_s = r.arrival_s
        n = self.blocks.num_blocks
        total = len(r.prompt) + r.output_length
        if (n is not None and cdiv(total, self.P) > n - 1) or (
                not self.config.enable_chunked_prefill and total > self.config.max_num_batched_tokens):
            r.reject(self.clock.now())
            self.done_request(r)
            return
        r.phase = WAITING
        r.state = Q_WAITING
        self.sched.add(r)
        self.clock.kick()

    def close_session(self, session_id) -> None:
        """vLLM keeps no sessions."""

    def close_input(self) -> None:
        self.input_closed = True
        self.clock.kick()

    def done_request(self, r) -> None:
        r.seq = None
        r.prompt = r.prompt[:0]
        self.finished.append(r)
        for f in self.listeners:
            f(r)

    def check_finished(self, expected: int | None = None) -> None:
        """After the loop's driver stopped: EngineStalled unless every request finished
        (engine_types.check_finished)."""
        check_finished(self, expected)

    def stall_report(self) -> str:
        s = self.sched
        return (f"{self.arrived - len(self.finished)} of {self.arrived} arrived requests unfinished: "
                f"running {len(s.running)}, waiting {len(s.waiting)}; free blocks {self.blocks.free_blocks}")


__all__ = ["VllmEngine", "VllmKV"]
