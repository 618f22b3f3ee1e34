"""The radix tree's own CPU time on the scheduler (issue 31, seed figure 7).

Three parts:

- `TreeOpCounter`: counts the tree operations an engine's cache performs, by kind and by what
  each touches. It is attached to one `RadixCache` (`attach`) by wrapping that instance's
  methods; a cache without a counter runs exactly as before (nothing wrapped, nothing counted).
  The kinds and their features (`FEATURES`):

  ========  ==============================================================================
  match     calls; key pages (the query's length: a core converts or hashes the whole key);
            nodes on the matched path (root excluded); pages on it (the FULL
            traversal); copy pages (the key's pages left after each node on the path, summed:
            SGLang's Python walk slices the rest of its key at every node, so this grows with
            nodes x pages); splits (a match ending inside an edge splits it)
  insert    calls; nodes on the inserted path; pages walked (the whole key: SGLang's insert
            walks from the root); copy pages (as match's); new pages (a new leaf's); splits
            (during the insert)
  lock      calls (lock and unlock each one); nodes walked to the root (SGLang's
            inc_lock_ref / dec_lock_ref walk every ancestor)
  evict     calls; tree nodes at the call (SGLang's Python RadixCache collects every leaf
            per evict); nodes popped (removed)
  vote      votes (SWA and any other voter but MAMBA: one per voting component per node on a
            matched path; MAMBA's apart: mamba_votes, mamba_tombstones, measured ~20x cheaper);
            tombstones (a voting component's payload dropped from a node that stays; an SWA
            leaf inserted longer than the window, whose part before the window starts dropped)
  tier      operations (loads, prefetches, acknowledgements)
  ========  ==============================================================================

  A match repeated for the same sequence and limit before the next `take()` (one engine step:
  the admission probe and the admission itself) is counted once: SGLang matches a waiting
  request once per scheduling pass.

- `TreeCpuModel`: one cost table per implementation (``engine.tree_core``): microseconds per
  unit of each feature, fitted on this machine by ``benchmarks/fit_tree_cpu.py`` into
  ``sim/opdata/tree_cpu.json``; the time is divided by the hardware preset's
  ``host_cpu_speed`` (the target host's single-thread speed relative to the calibration
  machine).

- `TreeCpuClock`: where the time goes (installed on an engine by `install`; the step time in
  `sim.simulator.CostExecutor`). SGLang's scheduler loop, per batch: schedule it (match, lock,
  evict: the *pre* work), run it on the GPU, process its result (cache_unfinished_req after a
  prefill, cache_finished_req at a finish: inserts and unlocks, the *post* work), and only then
  stream its tokens out. So here:

  - the post work counted while the engine completes a step delays that step's outputs: its
    first tokens (``first_token_s``, so the TTFT) and its finishes (``finish_s``), and the
    engine's listeners hear of the finished requests (a closed-loop client sends its next
    round) only after it; the scheduler is busy with it until then;
  - the next step starts after what is left of that post work plus its own pre work. Without
    the overlap scheduler (``engine.overlap_schedule: false``) that CPU time adds to the step.
    With it (SGLang's default) it runs while the previous GPU step runs, so only what exceeds
    that step's GPU time shows; after an idle gap (no GPU step ran up to now) nothing hides it.
"""
from __future__ import annotations

import json
from pathlib import Path

from cache_core.engine_types import TREE_CORES
from cache_core.records import TokenSeq

TABLE = Path(__file__).resolve().parent / "opdata" / "tree_cpu.json"

FEATURES = {
    "match": ("calls", "key_pages", "nodes", "pages", "copy_pages", "splits"),
    "insert": ("calls", "nodes", "pages", "copy_pages", "new_pages", "splits"),
    "lock": ("calls", "nodes"),
    "evict": ("calls", "tree_nodes", "popped"),
    "vote": ("votes", "tombstones", "mamba_votes", "mamba_tombstones"),
    "tier": ("ops",),
}
KINDS = tuple(FEATURES)
KEYS = tuple(f"{k}.{f}" for k, fs in FEATURES.items() for f in fs)


class TreeOpCounter:
    """Counts one cache's tree operations (module doc). `take()` returns the counts since the
    last take (a dict of `KEYS`, zeros omitted) and starts again; `totals` keeps them all."""

    def __init__(self):
        self.pending: dict = {}
        self.totals: dict = {}
        self.cache = None
        self._matched: set = set()  # (seq id, limit) matched since the last take

    def add(self, key: str, n: int = 1) -> None:
        if n:
            self.pending[key] = self.pending.get(key, 0) + n
            self.totals[key] = self.totals.get(key, 0) + n

    def take(self) -> dict:
        out, self.pending = self.pending, {}
        self._matched.clear()
        return out

    # -- wiring -----------------------------------------------------------------------------
    def attach(self, cache) -> "TreeOpCounter":
        """Wrap `cache`'s tree operations (instance attributes: the class is untouched)."""
        if self.cache is not None:
            raise ValueError("a TreeOpCounter counts one cache")
        self.cache = cache
        state = {"splits": 0, "removed": 0}
        walk = self._path_walker(cache.tree, state)
        cache.match = self._counted_match(cache, walk, state)
        cache.insert = self._counted_insert(cache, walk, state)
        self._wrap_lock_evict(cache, walk, state)
        self._wrap_voters(cache)
        self._wrap_tiers(cache)
        return self

    @staticmethod
    def _path_walker(tree, state: dict):
        """`walk(node, key_tokens)` -> `_walk`'s (nodes to the root, key tokens less their ends),
        from the path sums of the nearest node already seen; hooks `tree`'s splits and removals
        (counted in `state`), which clear those sums."""
        on_split, on_remove = tree._on_split, tree._on_remove
        paths: dict = {}  # node id -> (nodes to the root, their ends summed); a split or removal clears it

        def split_hook(upper, lower, upper_tokens):
            state["splits"] += 1
            paths.clear()
            return on_split(upper, lower, upper_tokens)

        def remove_hook(node):
            state["removed"] += 1
            paths.clear()
            return on_remove(node)

        tree._on_split, tree._on_remove = split_hook, remove_hook

        def walk(node, key_tokens: int) -> tuple[int, int]:
            """`_walk`, from the path sums of the nearest node already seen."""
            if node is None or node.parent is None:
                return 0, 0
            climb, n = [], node
            while n.parent is not None and n.id not in paths:
                climb.append(n)
                n = n.parent
            d, ends = paths.get(n.id, (0, 0))
            for n in reversed(climb):
                d, ends = d + 1, ends + n.end
                paths[n.id] = (d, ends)
            return d, d * key_tokens - ends
        return walk

    def _counted_match(self, cache, walk, state: dict):
        P, add, match, tree = cache.page_size, self.add, cache.match, cache.tree
        nmamba = sum(1 for c in cache.voters if getattr(c, "name", "") == "mamba")
        nvoters = len(cache.voters) - nmamba

        def counted_match(seq, limit_tokens=None):
            s0 = state["splits"]
            m = match(seq, limit_tokens)
            key = (id(seq), limit_tokens)
            if key in self._matched:
                return m  # matched already in this scheduling pass
            self._matched.add(key)
            n = seq.length if isinstance(seq, TokenSeq) else len(seq)
            n = n if limit_tokens is None else min(n, limit_tokens)
            nodes, left = walk(m.handle.node, n)
            if m.traversed > m.cached_tokens:  # voters walked further, then voted back (SWA, MAMBA)
                data = seq.data if isinstance(seq, TokenSeq) else TokenSeq(seq).data
                path = tree.path_nodes(data, m.traversed)
                nodes, left = walk(path[-1][0], n) if path else (0, 0)
            add("match.calls")
            add("match.key_pages", n // P)
            add("match.nodes", nodes)
            add("match.pages", m.traversed // P)
            add("match.copy_pages", left // P)
            add("match.splits", state["splits"] - s0)
            add("vote.votes", nodes * nvoters)
            add("vote.mamba_votes", nodes * nmamba)
            return m
        return counted_match

    def _counted_insert(self, cache, walk, state: dict):
        P, add, insert = cache.page_size, self.add, cache.insert

        def counted_insert(seq, num_tokens, *args, **kw):
            s0 = state["splits"]
            res = insert(seq, num_tokens, *args, **kw)
            nodes, left = walk(res.handle.node, num_tokens)
            add("insert.calls")
            add("insert.nodes", nodes)
            add("insert.pages", num_tokens // P)
            add("insert.copy_pages", left // P)
            add("insert.new_pages", max(num_tokens - res.prefix_tokens, 0) // P)
            add("insert.splits", state["splits"] - s0)
            return res
        return counted_insert

    def _wrap_lock_evict(self, cache, walk, state: dict) -> None:
        add, lock, unlock, evict, tree = self.add, cache.lock, cache.unlock, cache.evict, cache.tree

        def counted_lock(m):
            add("lock.calls")
            add("lock.nodes", walk(m.handle.node, 0)[0])
            return lock(m)

        def counted_unlock(m):
            add("lock.calls")
            add("lock.nodes", walk(m.handle.node, 0)[0])
            return unlock(m)

        def counted_evict(num_tokens):
            if num_tokens <= 0:
                return evict(num_tokens)
            r0, size = state["removed"], tree.num_nodes
            freed = evict(num_tokens)
            add("evict.calls")
            add("evict.tree_nodes", size)
            add("evict.popped", state["removed"] - r0)
            return freed

        cache.lock, cache.unlock, cache.evict = counted_lock, counted_unlock, counted_evict

    def _wrap_voters(self, cache) -> None:
        add = self.add
        for c in cache.voters:
            if hasattr(c, "window_pages"):  # SWA: a new leaf longer than the window starts with tombstones
                def counted_place(final, leaf, lo, hi, slots, _place=c.place, _c=c):
                    if leaf is not None and leaf.num_tokens > _c.window:
                        add("vote.tombstones")  # SGLang splits it at the window and frees the part before
                    return _place(final, leaf, lo, hi, slots)
                c.place = counted_place
            drop = getattr(c, "drop_l1", None)
            if drop is not None:
                def counted_drop(node, _drop=drop, _key="vote.mamba_tombstones" if getattr(c, "name", "") == "mamba"
                                 else "vote.tombstones"):
                    add(_key)
                    return _drop(node)
                c.drop_l1 = counted_drop

    def _wrap_tiers(self, cache) -> None:
        add = self.add
        for name in ("load", "prefetch", "ack"):
            if cache.hier is None:
                break
            f = getattr(cache, name)

            def counted_tier(*a, _f=f, **kw):
                add("tier.ops")
                return _f(*a, **kw)
            setattr(cache, name, counted_tier)


class TreeCpuModel:
    """Per-operation costs of one implementation: ``cost_us(counts)`` = sum over `KEYS` of
    count x microseconds per unit, divided by `host_cpu_speed`."""

    def __init__(self, core: str, coef: dict, host_cpu_speed: float = 1.0, machine: str = ""):
        unknown = sorted(set(coef) - set(KEYS))
        if unknown:
            raise ValueError(f"tree_cpu table {core}: unknown operation feature {unknown[0]}; expected one of "
                             f"{', '.join(KEYS)}")
        if not host_cpu_speed > 0:
            raise ValueError(f"host_cpu_speed must be > 0, got {host_cpu_speed!r}")
        self.core = core
        self.coef = {k: float(coef.get(k, 0.0)) for k in KEYS}
        self.host_cpu_speed = float(host_cpu_speed)
        self.machine = machine

    @classmethod
    def load(cls, core: str, host_cpu_speed: float = 1.0, path: Path | str = TABLE) -> "TreeCpuModel":
        doc = json.loads(Path(path).read_text())
        tables = doc["cores"]
        if core not in tables:
            raise ValueError(f"engine.tree_core: {core!r} is not in {path}; expected one of {', '.join(tables)}")
        return cls(core, tables[core]["us_per_unit"], host_cpu_speed, doc.get("machine", {}).get("cpu", ""))

    def cost_us(self, counts: dict) -> float:
        coef = self.coef
        return sum(coef[k] * n for k, n in counts.items()) / self.host_cpu_speed

    def by_kind_us(self, counts: dict) -> dict:
        out = dict.fromkeys(KINDS, 0.0)
        for k, n in counts.items():
            out[k.split(".", 1)[0]] += self.coef[k] * n / self.host_cpu_speed
        return out

    def __repr__(self) -> str:
        return f"TreeCpuModel({self.core}, host_cpu_speed={self.host_cpu_speed:g})"


class _Held(list):
    """An engine's listeners: while `clock.holding`, a call is kept (the step's results go out
    once their processing is done: `TreeCpuClock.complete`)."""

    def __init__(self, clock: "TreeCpuClock"):
        super().__init__()
        self.clock = clock

    def __iter__(self):
        it = list.__iter__(self)
        if not self.clock.holding:
            return it
        held = self.clock.held
        return (lambda r, f=f: held.append((f, r)) for f in it)


class TreeCpuClock:
    """Turns the counted tree work into scheduler time around GPU steps (module doc).
    `step_time_s(gpu_s, now)`: the step's length with the tree work gathered since the last
    step; `cpu_s` sums the whole tree CPU time, `exposed_s` the part that delayed a step's start
    (post work delays its step's outputs besides: `post_s`); `log` holds (time s, tree CPU s,
    shown s) per step start and per completion with post work (shown 0 there)."""

    def __init__(self, counter: TreeOpCounter, model: TreeCpuModel, overlap: bool):
        self.counter = counter
        self.model = model
        self.overlap = overlap
        self.cpu_s = 0.0
        self.exposed_s = 0.0
        self._gpu_end = None  # when the previous GPU step ended
        self._gpu_s = 0.0  # how long it ran
        self.busy_until = 0.0  # the scheduler processes the last step's results until then
        self.holding = False
        self.held: list = []  # (listener, request) calls kept while a step completes
        self.log: list = []

    def step_time_s(self, gpu_s: float, now: float) -> float:
        """The length of a step starting at `now` with `gpu_s` of GPU time: the pre work counted
        since the last step, plus what is left of the last step's post work, shown as the
        overlap rule says (module doc)."""
        pre = self.model.cost_us(self.counter.take()) * 1e-6
        cpu = pre + max(self.busy_until - now, 0.0)
        if self.overlap:
            hide = self._gpu_s if self._gpu_end is not None and now <= self._gpu_end else 0.0
            shown = max(cpu - hide, 0.0)
        else:
            shown = cpu
        self.cpu_s += pre
        self.exposed_s += shown
        self.log.append((now, pre, shown))
        self._gpu_end = now + shown + gpu_s
        self._gpu_s = gpu_s
        return shown + gpu_s

    def post_s(self, now: float, first_tokens, finished) -> float:
        """A step completed at `now`: the post work counted since its start (its results'
        processing) delays the first tokens of `first_tokens` and the finishes of `finished`
        (requests: their ``first_token_s`` / ``finish_s`` move) and keeps the scheduler busy;
        returns its length in seconds."""
        post = self.model.cost_us(self.counter.take()) * 1e-6
        self.cpu_s += post
        self.busy_until = now + post
        if post:
            self.log.append((now, post, 0.0))
            for r in first_tokens:
                r.first_token_s += post
            for r in finished:
                r.finish_s += post
        return post

    def install(self, env, engine) -> None:
        """Hold `engine`'s step completions to the post-work rule (module doc)."""
        loader = engine.loader
        complete = loader.complete
        engine.listeners = held = _Held(self)
        held.extend(engine.listeners)

        def timed_complete(step):
            self.holding = True
            try:
                now = complete(step)
            finally:
                self.holding = False
            calls, self.held = self.held, []
            first = [r for r, _, _ in step.prefill if r.first_token_s == now]
            done = [r for _, r in calls if r.finish_s == now]
            post = self.post_s(now, first, list(dict.fromkeys(done)))
            if calls and post:
                env.timeout(post).callbacks.append(lambda _e: [f(r) for f, r in calls])
            else:
                for f, r in calls:
                    f(r)
            return now

        loader.complete = timed_complete


def make_tree_cpu(cache, core: str | None, overlap: bool, host_cpu_speed: float = 1.0,
                  path: Path | str = TABLE) -> TreeCpuClock | None:
    """The tree-CPU clock of an engine's cache, or None (nothing attached) when `core` is None."""
    if core is None:
        return None
    model = TreeCpuModel.load(core, host_cpu_speed, path)
    return TreeCpuClock(TreeOpCounter().attach(cache), model, overlap)


__all__ = ["FEATURES", "KEYS", "KINDS", "TREE_CORES", "TreeOpCounter", "TreeCpuModel", "TreeCpuClock",
           "make_tree_cpu"]
