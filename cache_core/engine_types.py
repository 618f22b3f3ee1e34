"""Records and plug-in contracts of the engine loop (cache_core/engine.py).

The engine never waits and never reads a clock itself: it is given three plug-ins.

- **Clock** ``now() -> float`` (seconds) and ``idle(until) -> waitable``: what the loop yields
  when there is nothing to run; it resumes at ``until`` (None: no timer) or as soon as
  ``kick()`` is called (a request arrived, a transfer finished). SimPy: ``env.now`` and an
  event; a wall clock: ``time.perf_counter()`` and a condition variable.
- **DataPlane** ``submit(transfer, on_done)``: carry out one ``cache_core.actions.Transfer``
  and call ``on_done(transfer.id, ok)`` when it has finished (SimPy: modelled links; torch:
  real copies). The engine acknowledges the cache itself.
- **StepExecutor** ``execute(step) -> generator``: run one batch; the loop does
  ``yield from executor.execute(step)``, so a simulated executor yields a timeout of the
  modelled step time and a real one runs the model (yielding nothing) and returns.
  Optional: ``layers`` (int: the engine may then overlap L2 -> L1 loads with a step, timing
  them per layer; absent or None: no overlap) and ``settle(step)``, called once the step's
  time has passed and its overlapped loads have landed, just before the engine completes it.

"Waitables" are whatever the driver understands: the SimPy driver runs ``Engine.loop()`` as
a process, so they are SimPy events; a wall-clock driver iterates the generator itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

from .scheduling import FINISHED, Request, check_int, schedule_policy_names

if TYPE_CHECKING:
    from .records import MatchResult, TokenSeq

LOAD_OVERLAPS = ("layerwise", "none")
TREE_CORES = ("sglang-python", "sglang-rust", "radixsim")  # cost tables of sim/tree_cpu.py
FRONTENDS = ("sglang-text",)  # serving front ends of sim/serving_cpu.py

# request phases (Request.state keeps the scheduler's waiting/running/finished view)
ARRIVED, PREFETCHING, WAITING, LOADING, READY, PREFILL, DECODE, DONE = (
    "arrived", "prefetching", "waiting", "loading", "ready", "prefill", "decode", "done")


class EngineStalled(RuntimeError):
    """Requests that can never finish: nothing can run and nothing is in flight, yet requests
    wait, or the driver stopped with requests unfinished (`Engine.check_finished`; e.g. a
    transfer that never completes). The message names the unfinished requests by phase."""


def check_finished(engine, expected: int | None = None) -> None:
    """After an engine's driver stopped: raise EngineStalled, naming the unfinished requests
    (`engine.stall_report()`), unless every request that arrived (and `expected` ones, when
    given) finished. Shared by both engine flavours."""
    n = engine.arrived if expected is None else expected
    if len(engine.finished) != n or engine.arrived != n:
        raise EngineStalled(f"the run stopped with {len(engine.finished)} of {n} requests finished; "
                            f"{engine.stall_report()}")


class Clock(Protocol):
    def now(self) -> float: ...
    def idle(self, until: float | None): ...
    def kick(self) -> None: ...


class DataPlane(Protocol):
    def submit(self, transfer, on_done: Callable[[int, bool], None]) -> None: ...


class StepExecutor(Protocol):
    def execute(self, step: "Step") -> Iterator: ...


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """The serving knobs (SGLang server arguments of the same meaning).

    - ``max_running_requests``: requests admitted at once (prefilling, loading or decoding).
    - ``max_prefill_tokens``: a prefill step's token budget (SGLang default 16384).
    - ``chunked_prefill_tokens``: chunk size (SGLang ``--chunked-prefill-size``; None: off).
    - ``schedule_policy``: waiting-queue order, one of fcfs, lpm, dfs-weight, random.
    - ``new_token_ratio``: share of each running request's output still reserved at admission.
    - ``mixed_chunk``: run decode and prefill in one step (SGLang ``--enable-mixed-chunk``);
      off: a step with any prefill runs only the prefill (SGLang's default, prefill first).
    - ``prefetch_policy``: how an L3 prefetch gates a request (SGLang
      ``--hicache-storage-prefetch-policy``): ``wait_complete`` (it may be scheduled only
      once the prefetch is done), ``best_effort`` (at once; what has arrived is used),
      ``timeout`` (at the earlier of done and the budget ``TierConfig.prefetch_budget_s``).
    - ``load_overlap``: how a request's L2 -> L1 loads meet its compute. ``layerwise``
      (SGLang HiCache): the request joins a prefill step while its loads are in flight and
      each layer's compute waits only for that layer's KV (engine.py, "Loads overlapped with
      compute"); ``none``: it waits in ``loading`` until every load has finished, then computes.
    - ``tree_core``: whose radix-tree CPU time the scheduler pays between steps (sim/tree_cpu.py:
      one of `TREE_CORES`); None (default): none, and nothing is counted.
    - ``overlap_schedule``: SGLang's overlap scheduler (its default; ``--disable-overlap-schedule``
      turns it off): the tree's CPU time hides behind the previous GPU step, only the excess shows.
    - ``frontend``: the serving front end whose CPU costs a request pays outside the GPU
      (sim/serving_cpu.py: tokenization, the fixed per-request cost, the first token's way out);
      None (default): none.
    - ``l3_get_batch_pages``: SGLang's L3 read path (sim/l3_reads.py): one prefetch at a time, in
      batches of this many pages, one store get each, in series; None (default): each prefetch is
      one transfer sharing the link with the others.
    - ``seed``: for the ``random`` policy.
    """

    max_running_requests: int = 16
    max_prefill_tokens: int = 16384
    chunked_prefill_tokens: int | None = 8192
    schedule_policy: str = "fcfs"
    new_token_ratio: float = 0.7
    mixed_chunk: bool = False
    prefetch_policy: str = "wait_complete"
    load_overlap: str = "layerwise"
    tree_core: str | None = None
    overlap_schedule: bool = True
    frontend: str | None = None
    l3_get_batch_pages: int | None = None
    seed: int = 0
    schedule_options: object = None  # the schedule policy's options dataclass (None: its defaults)

    kind = "sglang"  # engine.kind (a class attribute: vllm_sched.VllmConfig is the vllm kind)

    def __post_init__(self):
        check_int(self.max_running_requests, "engine.max_running_requests", 1)
        check_int(self.max_prefill_tokens, "engine.max_prefill_tokens", 1)
        if self.chunked_prefill_tokens is not None:
            check_int(self.chunked_prefill_tokens, "engine.chunked_prefill_tokens", 1)
        if self.schedule_policy not in schedule_policy_names():
            raise ValueError(f"engine.schedule_policy must be one of {', '.join(schedule_policy_names())}, "
                             f"got {self.schedule_policy!r}")
        if self.prefetch_policy not in ("wait_complete", "best_effort", "timeout"):
            raise ValueError("engine.prefetch_policy must be wait_complete, best_effort or timeout, "
                             f"got {self.prefetch_policy!r}")
        if self.load_overlap not in LOAD_OVERLAPS:
            raise ValueError(f"engine.load_overlap must be one of {', '.join(LOAD_OVERLAPS)}, "
                             f"got {self.load_overlap!r}")
        if self.tree_core is not None and self.tree_core not in TREE_CORES:
            raise ValueError(f"engine.tree_core must be null or one of {', '.join(TREE_CORES)}, got {self.tree_core!r}")
        if self.frontend is not None and self.frontend not in FRONTENDS:
            raise ValueError(f"engine.frontend must be null or one of {', '.join(FRONTENDS)}, got {self.frontend!r}")
        if self.frontend is not None and self.tree_core is not None:
            raise ValueError("engine.frontend: not supported together with engine.tree_core yet (both delay a "
                             "step's outputs); expected one of them null")
        if self.l3_get_batch_pages is not None:
            check_int(self.l3_get_batch_pages, "engine.l3_get_batch_pages", 1)
        if not isinstance(self.overlap_schedule, bool):
            raise ValueError(f"engine.overlap_schedule must be true or false, got {self.overlap_schedule!r}")
        if not isinstance(self.mixed_chunk, bool):
            raise ValueError(f"engine.mixed_chunk must be true or false, got {self.mixed_chunk!r}")


@dataclass(eq=False)
class EngineRequest(Request):
    """A request as the engine serves it (the scheduler's `Request` plus the cache state and
    the times that become a result row). ``seq`` is the `TokenSeq` of prompt + output[:-1]."""

    seq: TokenSeq | None = None  # narrower than Request's opaque fields (same place, same default)
    match: MatchResult | None = None
    round: int | None = None
    phase: str = ARRIVED
    pages: list = field(default_factory=list)  # FULL pages owned: KV of tokens prefix .. kv_pages*P
    kv_pages: int = 0  # pages from token 0 the request has KV in (prefix pages + owned)
    inserted_tokens: int = 0  # tokens it inserted into the tree so far (chunks): they count no hit again
    slots: dict | None = None  # the voting components' units by name (lifecycle.request_slots)
    started: bool = False  # SWA window pages and MAMBA slots taken (first prefill chunk)
    gen: int = 0  # session generation
    waiting_ids: set = field(default_factory=set)  # transfers it waits for
    resolve_rounds: int = 0
    prefetch_tokens: int = 0
    storage_fetched: int = 0  # FULL tokens it brought L3 -> L2 (arrival prefetch and loads); unused: - cached_storage
    ready_at: float | None = None  # timeout prefetch: schedulable from then
    load_start_s: float | None = None  # layerwise overlap: its loads in flight were issued then
    load_done_s: float | None = None  # ... and had all finished then (None: still in flight)
    # results
    admit_s: float | None = None
    ready_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    prefetch_wait_s: float = 0.0  # held at the prefetch gate (wait_complete, timeout)
    queue_s: float = 0.0  # until the first token: time in the waiting queue
    load_s: float = 0.0  # until the first token: time waiting for transfers (prefetch gate, loads)
    phase_since_s: float = 0.0  # when the current queue / load / compute stretch began
    cached_tokens: int = 0
    cached_device: int = 0
    cached_host: int = 0
    cached_storage: int = 0
    evicted_tokens: int = 0
    rejected: bool = False
    first_prefix: int | None = None
    prompt_tokens: int = 0
    frontend_s: float = 0.0  # until the first token: in the serving front end (sim/serving_cpu.py)

    def __post_init__(self):
        super().__post_init__()
        self.prompt_tokens = len(self.prompt)

    def reject(self, now: float) -> None:
        """It can never be served: it ends at once, rejected (both engine flavours, at arrival)."""
        self.rejected = True
        self.phase = DONE
        self.state = FINISHED
        self.finish_s = now

    @property
    def limit(self) -> int:
        return max(self.fill_len - 1, 0)


@dataclass(frozen=True, slots=True)
class Step:
    """One batch: prefill entries (request, new tokens, tokens computed before this step and
    shared tokens computed once by an earlier request of the same step) and decode requests.
    ``prefill_cost``/``decode_contexts`` are what the step executor prices."""

    index: int
    start_s: float
    prefill: tuple  # ((EngineRequest, new_tokens, context_tokens), ...)
    decode: tuple  # (EngineRequest, ...)
    prefill_cost: tuple  # ((new_tokens computed, context tokens), ...)
    decode_contexts: tuple

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


__all__ = ["Clock", "DataPlane", "StepExecutor", "EngineConfig", "EngineRequest", "EngineStalled", "Step",
           "LOAD_OVERLAPS", "FRONTENDS"]
