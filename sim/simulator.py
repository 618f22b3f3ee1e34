"""The SimPy run mode: the shared engine loop (cache_core/engine.py) with simulated plug-ins.

- `SimClock`: ``env.now``; the loop idles on an event that arrivals and transfer completions
  trigger (``kick``), or until a prefetch timeout.
- `SimDataPlane`: each Transfer goes onto its modelled link (sim/links.py: bandwidth,
  latency, per-page overhead, processor sharing between concurrent transfers) and is
  reported done when its bytes have arrived. Backups (L1->L2) and stores (L2->L3) run in the
  background and compete with loads for the links.
- `CostExecutor`: a step lasts ``cost.step_time_s(prefill, decode)`` of simulated time
  (sim/cost.py: roofline, or a fitted table); with ``engine.tree_core`` set, plus the part of
  the radix tree's CPU time since the previous step that the scheduler cannot hide
  (sim/tree_cpu.py `TreeCpuClock`; ``engine.overlap_schedule``).
- Clients: `multiturn_clients` (bench_multiturn's closed loop) and `timed_arrivals` (a
  trace's timestamps).

With ``engine.load_overlap: layerwise`` (default) a request joins a step while its L2 -> L1
loads are in flight and the step's layers wait only for their own KV (cache_core/engine.py,
`overlap_end_s`), as SGLang's HiCache does; with ``none`` it waits in ``loading`` for all of
them first, so a load delays its first token by the whole load time.
"""
from __future__ import annotations

import math
from collections import deque

import simpy

from cache_core.actions import L2, L3
from cache_core.engine import Engine
from cache_core.engine_types import EngineRequest
from cache_core.records import TokenSeq
from scenarios.seeding import rng as _rng

from .links import DataPlane, LinkSet


class SimClock:
    def __init__(self, env: simpy.Environment):
        self.env = env
        self._ev = None

    def now(self) -> float:
        return self.env.now

    def idle(self, until=None):
        self._ev = self.env.event()
        if until is None:
            return self._ev
        return self.env.any_of([self._ev, self.env.timeout(max(until - self.env.now, 0.0))])

    def kick(self) -> None:
        if self._ev is not None and not self._ev.triggered:
            self._ev.succeed()


class SimDataPlane:
    """Transfers onto modelled links; ``on_done`` is called when the bytes have arrived."""

    mode = "sim"  # what the results call this run's mode (sim/recorder.py)

    def __init__(self, links: LinkSet, shards: dict | None = None):
        self.links = links
        self.plane = DataPlane(links, shards)
        self.l3_down = False  # an L3 outage (scenarios/events.py): L3 reads and writes fail at once
        self.l3_failed: dict = {"read": 0, "write": 0}  # transfers failed by outages, by direction

    def submit(self, t, on_done) -> None:
        if self.l3_down and L3 in (t.src_tier, t.dst_tier):
            self.l3_failed["read" if t.src_tier == L3 else "write"] += 1
            env = self.links.links[(L3, L2)].env  # the store answers with an error at once
            env.timeout(0).callbacks.append(lambda _e, tid=t.id: on_done(tid, False))
            return
        ev = self.plane.submit(t)
        ev.callbacks.append(lambda _e, tid=t.id: on_done(tid, True))


class CostExecutor:
    """A step takes the cost model's time; the busy time and step count are kept. Step times
    are memoised by batch shape (a multi-turn run repeats the same chunk shapes for every
    client): the cost model is a pure function of the batch. ``layers``: the model's layers,
    over which the engine's layerwise load overlap splits a step's time evenly."""

    MEMO_MAX = 200_000

    def __init__(self, env: simpy.Environment, cost, *, layers: int = 1):
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise ValueError(f"layers must be an integer >= 1, got {layers!r}")
        self.env = env
        self.cost = cost
        self.layers = layers
        self.busy_s = 0.0
        self.steps = 0
        self._memo: dict = {}
        self.tree_cpu = None  # a sim/tree_cpu.py TreeCpuClock when engine.tree_core is set

    def execute(self, step):
        key = (step.prefill_cost, step.decode_contexts)
        t = self._memo.get(key)
        if t is None:
            if len(self._memo) >= self.MEMO_MAX:
                self._memo.clear()
            t = self._memo[key] = self.cost.step_time_s(step.prefill_cost, step.decode_contexts)
        self.busy_s += t
        self.steps += 1
        if self.tree_cpu is not None:
            t = self.tree_cpu.step_time_s(t, self.env.now)
        yield self.env.timeout(t)


def sim_clock(env: simpy.Environment, cache) -> SimClock:
    """The engine's clock on `env`; the cache's L3 store (if any) reads it too, so that its
    leases (the Mooncake model's) expire on the simulated clock."""
    clock = SimClock(env)
    if cache.hier is not None and cache.hier.storage is not None:
        cache.hier.storage.clock = clock.now
    return clock


def build(env: simpy.Environment, cache, engine_config, cost, hardware, *, shards: dict | None = None,
          layers: int = 1) -> Engine:
    """An engine on simulated plug-ins: the cache's links from the hardware preset; `shards`
    (`scenarios.presets.transfer_shards`) for the PCIe bytes of one rank; `layers` (the
    model's) for the layerwise load overlap."""
    links = LinkSet.from_hardware(env, hardware)
    executor = CostExecutor(env, cost, layers=layers)
    if engine_config.tree_core is not None:  # unset: nothing is counted, nothing wrapped
        from .tree_cpu import make_tree_cpu

        executor.tree_cpu = make_tree_cpu(cache, engine_config.tree_core, engine_config.overlap_schedule,
                                          hardware.host_cpu_speed)
    eng = Engine(cache, engine_config, sim_clock(env, cache), SimDataPlane(links, shards), executor)
    if executor.tree_cpu is not None:
        executor.tree_cpu.install(env, eng)
    eng.links = links
    return eng


def build_vllm(env: simpy.Environment, config, num_blocks: int | None, cost, hardware, *, layers: int = 1,
               offload=None, shards: dict | None = None):
    """A vLLM-like engine (cache_core/vllm_engine.py) on the same simulated plug-ins: its steps
    on the cost model, its L2 connector's (`offload`) transfers on the hardware's links (L1 <->
    L2: PCIe, each rank moving its `shards` share, as the SGLang-like engine's)."""
    from cache_core.vllm_engine import VllmEngine

    links = LinkSet.from_hardware(env, hardware)
    eng = VllmEngine(config, num_blocks, SimClock(env), SimDataPlane(links, shards),
                     CostExecutor(env, cost, layers=layers), offload=offload)
    eng.links = links
    return eng


# ----------------------------------------------------------------------------------------------
# clients
# ----------------------------------------------------------------------------------------------
_STREAM_SEND = 3  # scenarios.workloads uses 0..2


def multiturn_clients(env: simpy.Environment, engine: Engine, workload, *, on_finish=None):
    """bench_multiturn's closed loop (a SimPy process).

    A ready queue holds clients whose next round may be sent: at first every client (round-1
    order: fifo 0..N-1, or the workload's seeded permutation). The sender takes the head
    (``fifo``) or a seeded random entry (``random``) whenever fewer than ``max_parallel``
    requests are in flight, sends the client's next round (its whole history + new tokens),
    then sleeps an exponential gap at ``request_rate`` (none for an infinite rate). When a
    request finishes, its client is ready again: at once without the round barrier; with it,
    every client of round r+1 becomes ready (in that round's order) when the last request of
    round r finishes."""
    cfg = workload.config
    N, R = cfg.num_clients, cfg.num_rounds
    P = engine.P
    rng = _rng(cfg.seed, _STREAM_SEND)
    ready = deque(workload.round_order(1).tolist())
    histories = {}
    next_round = [1] * N
    done_in_round = [0] * (R + 2)
    state = {"inflight": 0, "sent": 0, "finished": 0, "wake": None}
    gap = None if math.isinf(cfg.request_rate) else 1.0 / cfg.request_rate
    mine: set = set()  # ids of the requests this client sent (another source may share the engine)

    def finished(r):
        if id(r) not in mine:
            return
        mine.discard(id(r))
        state["inflight"] -= 1
        state["finished"] += 1
        done_in_round[r.round] += 1
        c = r.session_id
        if r.round < R:
            if not cfg.round_barrier:
                ready.append(c)
            elif done_in_round[r.round] == N:
                ready.extend(workload.round_order(r.round + 1).tolist())
        if on_finish is not None:
            on_finish(r)
        _wake(state)

    engine.listeners.append(finished)
    total = N * R
    while state["sent"] < total:
        while not ready or state["inflight"] >= cfg.max_parallel:
            state["wake"] = env.event()
            yield state["wake"]
        c = _take(cfg.ready_queue_policy, ready, rng)
        req = _next_round_request(workload, histories, next_round, c, P, state["sent"], env.now)
        state["sent"] += 1
        state["inflight"] += 1
        mine.add(id(req))
        engine.arrive(req)
        if gap is not None and state["sent"] < total:
            yield env.timeout(float(rng.exponential(gap)))
    while state["finished"] < total:
        state["wake"] = env.event()
        yield state["wake"]
    engine.close_input()


def _wake(state: dict) -> None:
    """Wake the multi-turn sender if it waits."""
    ev = state["wake"]
    if ev is not None and not ev.triggered:
        ev.succeed()


def _take(policy: str, ready: deque, rng):
    """The next ready client: the queue's head (``fifo``) or a seeded random entry (``random``)."""
    if policy == "random" and len(ready) > 1:
        i = int(rng.integers(len(ready)))
        c = ready[i]
        del ready[i]
        return c
    return ready.popleft()


def _next_round_request(workload, histories: dict, next_round: list, c: int, P: int, rid: int,
                        now: float) -> EngineRequest:
    """Client `c`'s next round as an engine request (its history is dropped after its last round)."""
    hist = histories.get(c)
    if hist is None:
        hist = histories[c] = workload.client(c)
    wr = hist.next_round(next_round[c])
    next_round[c] += 1
    if next_round[c] > workload.config.num_rounds:
        del histories[c]
    seq = TokenSeq(wr.sequence, wr.sequence_keys(P), P)
    return EngineRequest(rid=rid, session_id=c, prompt=wr.prompt, output_length=len(wr.output),
                         arrival_s=now, seq=seq, round=wr.round)


def timed_arrivals(env: simpy.Environment, engine: Engine, items, *, speedup: float = 1.0):
    """Send each item at its timestamp / speedup (a SimPy process). `items` yields
    (arrival_s, EngineRequest) in time order, or (arrival_s, ("close_session", id))."""
    for t, req in items:
        t = t / speedup
        if t > env.now:
            yield env.timeout(t - env.now)
        if isinstance(req, tuple):
            engine.close_session(req[1])
            continue
        req.arrival_s = env.now
        engine.arrive(req)
    engine.close_input()


__all__ = ["SimClock", "SimDataPlane", "CostExecutor", "build", "build_vllm", "sim_clock", "multiturn_clients", "timed_arrivals"]
