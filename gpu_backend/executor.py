"""The torch step executor: runs a `Step` of the engine on the synthetic model over real pools.

A step (its prefill entries: request, new tokens, context; and its decode requests) is ONE
`SyntheticHybridModel.forward_batch` call, one `Segment` per request over its page table:

- FULL: the pages of its cached prefix (`RadixCache.slots_of` up to its lock) followed by the
  pages it owns (allocated per chunk and per decode page by the engine); sidecars that follow
  FULL (SWA) use the same indices (the pools' index translation is the core's);
- SWA: the prefix's SWA pages (-1 where tombstoned), then the request's own SWA pages: the
  core gives it ``min(pages, window_pages + 1)`` pages and, at insert, page i holds position
  page ``w_lo/P + i`` with ``w_lo = max(prefix, end - window_pages*P)``, so positions from
  w_lo on are written straight there; positions before w_lo (earlier chunks, whose KV only
  later chunks of the same request read) go to a private ring of scratch pages beyond the
  core's pool (window + one chunk + 2 pages per running request);
- MAMBA: the request's state runs in a scratch slot (one per running request, beyond the core's
  slots); the core's private slot (where the reused checkpoint was copied) seeds it (read at
  each rec layer, `Segment.seed_slot`: after that layer's load has landed); the states
  at the positions the core will checkpoint are written during the forward (`Segment.saves`):
  the end of the request's last whole page into its private slot, and with
  ``mamba_every_tokens`` each every-K snapshot into its snapshot slot (the core's insert-time
  CopyState for a snapshot is then skipped by the data plane: `snapshot_taken`).

Outputs are the workload's (fixed up front): decode is teacher-forced, so the KV in the cache is
always the KV of the tokens the tree holds. Token ids are taken modulo the model's vocabulary.
A step's time is measured in two parts (`StepTimer`): its host time (page tables, the batch's
index math and its one index upload: once per step, whatever the layers) by the host clock, and
its device time by device timers (CUDA events on a GPU; on CPU the forward itself; on CPU with
one torch thread both by the thread's CPU time, `step_clock`): the embedding and the logits
once, the layers (`forward_batch` between its marks) times `layer_scale` (the preset's layers
over the model's). The engine's clock advances by host + embedding and logits + layers x
layer_scale (`busy_s` sums the unscaled times), or, with a `pace` (an executor such as the
simulator's cost model, `torch.clock: modelled`), by the time that executor gives the same
step; then the forward runs in `settle`, at the step's end, after any L2 -> L1 loads
the engine overlapped with it have landed on that clock. On the device those loads may still be
in flight (`TorchDataPlane` with layerwise overlap): the forward waits for each layer's pages
just before that layer (`loads.layer_waiter`), then for the rest.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from cache_core.engine_types import DONE

from .model import Segment


@dataclass(frozen=True)
class StepTime:
    """One step's measured parts (seconds): host (page tables, index math, the index upload),
    ends (embedding and logits: once per step) and layers (every layer of the reduced model)."""

    host: float
    ends: float
    layers: float

    def scaled(self, layer_scale: float) -> float:
        """The step's time for a model with `layer_scale` times the layers: only the layers scale."""
        return self.host + self.ends + self.layers * layer_scale


def step_clock(device):
    """The clock a step's host time (and on CPU its device time) is read with: on CPU with one
    torch thread, the thread's CPU time (the CPU is then the device, and its busy time does not
    count the slices other processes of a shared machine took), else the wall clock."""
    if torch.device(device).type != "cuda" and torch.get_num_threads() == 1:
        return time.thread_time
    return time.perf_counter


class StepTimer:
    """Marks of one forward (`SyntheticHybridModel.forward_batch`'s ``mark``): CUDA events on a
    GPU (device time, read after the step synchronised), `step_clock` on CPU."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.clock = step_clock(device)
        self.marks: list = []

    def __call__(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(self.clock())

    def spans(self) -> list:
        """Seconds between consecutive marks."""
        if self.cuda:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def timed_forward(model, segments, pools, *, wait_layer=None, after=None) -> tuple:
    """(last-token logits, `StepTime`) of one batched forward timed as the executor times a step:
    `prepare` (host), then the forward between `StepTimer` marks. `after()` runs once the forward
    is issued, before the device time is read (the executor waits for the loads left in flight)."""
    clock = step_clock(model.device)
    t0 = clock()
    batch = model.prepare(segments, pools)
    host = clock() - t0
    timer = StepTimer(model.device)
    with torch.no_grad():
        logits = model.forward_batch(batch, pools, wait_layer=wait_layer, mark=timer)
    if after is not None:
        after()
    embed, layers, head = timer.spans()
    return logits, StepTime(host, embed + head, layers)


class TorchExecutor:
    def __init__(self, env, model, pools, cache, *, scratch_base: int = 0, swa_scratch_base: int = 0,
                 swa_scratch_pages: int = 0, record_logits: bool = False, pace=None, layer_scale: float = 1.0):
        self.env = env
        self.layer_scale = layer_scale  # without a pace: a step lasts its measured time x this
        self.pace = pace  # None: a step lasts its measured time; else an executor that times it
        self.model = model
        self.pools = pools
        self.cache = cache
        self.P = cache.page_size
        self.scratch_base = scratch_base  # first state slot the executor may use as scratch
        self._scratch: dict = {}  # id(request) -> (scratch slot - scratch_base, request)
        self._free_scratch: list = []
        # SWA pages of positions before a request's kept window, while it computes: a ring of
        # `swa_scratch_pages` pages per running request beyond the core's SWA pages
        self.swa_scratch_base, self.swa_scratch_pages = swa_scratch_base, swa_scratch_pages
        self._swa: dict = {}
        self._free_swa: list = []
        self.record_logits = record_logits
        self.logits: dict = {}  # rid -> logits of its last prompt token (first output)
        self.prompts: dict = {}  # rid -> its prompt (model token ids), with record_logits
        self.positions: dict = {}  # rid -> [(position, logits of that token), ...] of every forward
        self.sequences: dict = {}  # rid -> prompt + output[:-1] (model token ids), with record_logits
        self.snapshots: dict = {}  # snapshot slot -> (position, private slot, request): written in a forward
        self.loads = None  # the data plane whose loads in flight a forward waits for layer by layer
        self.busy_s = 0.0  # measured seconds of every step (unscaled)
        self.times: list = []  # StepTime of each step
        self.steps = 0  # (without a pace the first is preceded by an untimed warm-up forward without pools)
        self.batches: list = []  # (prefill chunks, decodes) of each step, all in one forward

    # -- page tables ---------------------------------------------------------------------------
    def _tokens(self, r, a: int, b: int) -> torch.Tensor:
        t = np.frombuffer(r.seq.data, dtype=np.int64, count=b)[a:b] % self.model.spec.vocab
        return torch.from_numpy(t.copy())

    def _full_pages(self, r) -> list:
        cached = r.match.cached_tokens
        pre = self.cache.slots_of(r.seq, cached)["full"] if cached else np.empty(0, dtype=np.int64)
        own = np.concatenate(r.pages) if r.pages else np.empty(0, dtype=np.int64)
        return np.concatenate([pre, own]).tolist()

    def _swa_pages(self, r, start: int, end: int) -> list:
        P = self.P
        need = -(-end // P)
        out = [-1] * need
        lo = r.match.cached_tokens  # with SWA the request's lock stays at its reused prefix
        if lo:
            pre = self.cache.slots_of(r.seq, lo)["swa"].tolist()
            out[: len(pre)] = pre
        got = None if r.slots is None else r.slots.get("swa")  # its SWA window pages (lifecycle.request_slots)
        own = [] if got is None else [int(x) for x in got]
        hi = r.seq.length // P * P
        q0 = max(lo, hi - self.cache.swa.window_pages * P) // P  # own[i] holds position page q0 + i
        scratch = self._swa_block(r)
        S = len(scratch)
        for q in range(lo // P, need):
            if q >= q0 and q - q0 < len(own):
                out[q] = own[q - q0]
            elif q < q0 and need - q <= S:  # before the kept window: a private scratch ring
                out[q] = scratch[q % S]
        return out

    @staticmethod
    def _claim(table: dict, free: list, r) -> int:
        """r's index in `table` (id(r) -> (index, r)): its own, else a free one, else the next
        new one. With none free, requests retracted since they took one (the engine released
        them: ``started`` is False) give theirs back first: a retracted request starts over."""
        got = table.get(id(r))
        if got is not None:
            return got[0]
        if not free:
            for k, (i, x) in list(table.items()):
                if not x.started:
                    del table[k]
                    free.append(i)
        i = free.pop() if free else len(table)
        table[id(r)] = (i, r)
        return i

    def _swa_block(self, r) -> list:
        b = self._claim(self._swa, self._free_swa, r)
        return list(range(self.swa_scratch_base + b * self.swa_scratch_pages,
                          self.swa_scratch_base + (b + 1) * self.swa_scratch_pages))

    def _state(self, r, start: int) -> tuple:
        """(r's scratch state slot, the slot its state resumes from: the reused checkpoint, its
        private slot, at the first compute of an admission, else None: the scratch slot). The
        forward reads the checkpoint at each rec layer, after that layer's load has landed."""
        if self.cache.mamba is None:
            return None, None
        s = self.scratch_base + self._claim(self._scratch, self._free_scratch, r)
        seed = int(r.slots["mamba"][0]) if start == r.match.cached_tokens and start > 0 else None
        return s, seed

    @property
    def scratch_in_use(self) -> int:
        """Scratch state slots and SWA scratch rings held by requests (finished ones hold none)."""
        return len(self._scratch) + len(self._swa)

    def release(self, r) -> None:
        """r finished: its scratch state slot and SWA scratch ring are free again."""
        for table, free in ((self._scratch, self._free_scratch), (self._swa, self._free_swa)):
            got = table.pop(id(r), None)
            if got is not None:
                free.append(got[0])

    # -- one step: one batched forward ------------------------------------------------------
    def _saves(self, r, start: int, end: int) -> tuple:
        """Where the core will keep this request's states, those computed in this forward:
        the checkpoint at the end of its last whole page (its private slot ``states[0]``) and
        the every-K snapshots (``states[1:]``, placed as `RadixCache._place_checkpoints` places
        them: the latest multiple of K below the end first, each into the last slot left)."""
        if self.cache.mamba is None:
            return ()
        lo, hi = r.match.cached_tokens, r.seq.length // self.P * self.P
        states = r.slots["mamba"]  # its MAMBA state slots, private state first
        private = int(states[0])
        if start == lo:  # a new admission: what an earlier one (retracted since) wrote is void
            for slot in [s for s, (_, _, x) in self.snapshots.items() if x is r]:
                del self.snapshots[slot]
        targets = [(hi, private)] if hi > lo else []
        every, snaps = self.cache.mamba.every, [int(x) for x in states[1:]]
        if every and hi > lo:
            q = (hi - 1) // every * every
            while q > lo and snaps:
                targets.append((q, snaps.pop()))
                q -= every
        out = tuple((q, slot) for q, slot in targets if start < q <= end)
        for q, slot in out:
            if slot != private:
                self.snapshots[slot] = (q, private, r)
        return out

    def snapshot_taken(self, a) -> bool:
        """A MAMBA `CopyState` the core emits at insert for an every-K snapshot (its private
        slot -> a snapshot slot at position q): True when this executor already wrote the state
        of position q into that slot during the request's forward (the private slot by then
        holds a later state), so the data plane must not copy it again."""
        got = self.snapshots.get(int(a.dst))
        if got is None or got[2].phase != DONE or (got[0], got[1]) != (a.at_tokens, int(a.src)):
            return False
        del self.snapshots[int(a.dst)]
        return True

    def _segment(self, r, start: int, n: int) -> Segment:
        end = start + n
        slot, seed = self._state(r, start)
        return Segment(self._tokens(r, start, end), start, self._full_pages(r),
                       self._swa_pages(r, start, end) if self.cache.swa is not None else None,
                       slot, self._saves(r, start, end), seed)

    @property
    def layers(self):
        """The layers the engine's layer-wise overlap model splits a step into (None: no overlap):
        the pace's (the forward runs in `settle`, once the step's loads have landed); without a
        pace, when the data plane overlaps loads (FULL, SWA and MAMBA alike), the preset's layers (the
        model's times `layer_scale`: what a measured step stands for)."""
        if self.pace is not None:
            return getattr(self.pace, "layers", None)
        if self.loads is None or not self.loads.overlap:
            return None
        return max(1, round(self.model.spec.num_layers * self.layer_scale))

    def execute(self, step):
        if self.pace is not None:  # the paced time first; the forward runs in settle
            yield from self.pace.execute(step)
            return
        if self.loads is not None and self.loads.overlap:  # their pages in the page tables now
            self.loads.land([t for r, _, _ in step.prefill for t in sorted(r.waiting_ids)])
        yield self.env.timeout(self._run(step).scaled(self.layer_scale))

    def settle(self, step) -> None:
        """The step's time has passed and its loads have landed (the engine calls this just
        before completing the step): with a pace, run the step now."""
        if self.pace is not None:
            self._run(step)

    def _run(self, step) -> StepTime:
        """Run the step (its prefill chunks and decodes) as ONE batched forward; returns its
        measured `StepTime` (recording the logits, a check of tests, is not timed)."""
        work = [(r, ctx, new) for r, new, ctx in step.prefill] + [(r, r.fill_len - 1, 1) for r in step.decode]
        if self.pace is None and not self.steps:  # warm up first, untimed, as a server does before serving
            with torch.no_grad():
                self.model.forward_batch([Segment(self._tokens(r, s, s + n)) for r, s, n in work], None)
        clock = step_clock(self.model.device)
        t0 = clock()
        segs = [self._segment(r, start, n) for r, start, n in work]
        pages = clock() - t0  # the page tables: host time too
        wait = None if self.loads is None else self.loads.layer_waiter()
        logits, t = timed_forward(self.model, segs, self.pools, wait_layer=wait,
                                  after=None if wait is None else self.loads.finish_loads)
        t = StepTime(pages + t.host, t.ends, t.layers)
        if self.record_logits:
            self._record(work, logits)
        self.busy_s += t.scaled(1.0)
        self.times.append(t)
        self.steps += 1
        self.batches.append((len(step.prefill), len(step.decode)))
        return t

    def _record(self, work, logits) -> None:
        for (r, start, n), lg in zip(work, logits):
            end = start + n
            self.positions.setdefault(r.rid, []).append((end - 1, lg.clone()))
            self.sequences[r.rid] = self._tokens(r, 0, r.seq.length)
            if end == len(r.prompt) and r.rid not in self.logits:
                self.logits[r.rid] = lg.clone()
                self.prompts[r.rid] = self._tokens(r, 0, len(r.prompt))


__all__ = ["TorchExecutor", "StepTime", "StepTimer", "step_clock", "timed_forward"]
