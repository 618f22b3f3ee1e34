"""The core names no component (issue 30 item 5): what it used to ask SWA and MAMBA by name
it now asks every component through a hook (components/base.py), so a component defined in
a test file takes part: session references (`add_session_ref`/`drop_session_ref`/
`session_node_removed`), the `session` policy's payload key (`session_referenced`), per-page
slot reporting (`page_slots`, `RadixCache.slots_of`), the tree snapshot (`snapshot_state`)
and the match memo (`match_state`: the memo is on with any components)."""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import yaml

from cache_core import CacheConfig, RadixCache, ReplayStepper, invariants
from cache_core.config import register_component, unregister_component
from cache_core.snapshot import snapshot
from cache_core.tiers import TierConfig
from cache_core.tree import RadixTree
from helpers import node_at, toks
from radixsim.run import request_rows, simulate
from scenarios import scenario
from test_engine import make, req, run
from test_fourth_component import Ring, RingSpec, ring_of
from test_scenario import PREFIX, VALID, assert_one_line, run_file


class SessionRing(Ring):
    """RING with session references: the payload at a session's frontier counts them and the
    `session` policy takes unreferenced payloads first; it reports one slot per page and a
    state in the tree snapshot."""

    name = "sring"
    slots_per_page = True

    def __init__(self, link, window: int, slots: int):
        super().__init__(link, window, slots)
        self.refs: Counter = Counter()  # node id -> session references
        self.calls: list = []

    def session_referenced(self, node) -> bool:
        return self.refs[node.id] > 0

    def add_session_ref(self, node):
        pl = node.comp[self.kind]
        self.calls.append(("add", node.end))
        if pl is None:
            return None
        self.refs[node.id] += 1
        self.touched(node)
        return node

    def drop_session_ref(self, node, token) -> None:
        self.calls.append(("drop", node.end, token.end))
        self.refs[token.id] -= 1
        self.touched(token)

    def session_node_removed(self, node, token):
        self.calls.append(("removed", node.end))
        return None if token is node else token

    def page_slots(self, node, npages: int):
        pl = node.comp[self.kind]
        return np.full(npages, -1 if pl is None else pl.slot, dtype=np.int32)

    def snapshot_state(self, node):
        pl = node.comp[self.kind] if node.comp else None
        return None if pl is None else f"slot {pl.slot}"


class SessionRingSpec(RingSpec):
    name = "sring"

    def build(self, link) -> SessionRing:
        return SessionRing(link, self.window, self.slots)


def _sring(cache) -> SessionRing:
    (c,) = [c for c in cache.components if c.name == "sring"]
    return c


A = toks("abcdefghijklmnop")  # 16 tokens
B = toks("ABCDEFGHIJKLMNOP")
C = toks("0123456789+-*/=<")


def test_every_component_is_built_through_its_spec_in_slot_order():
    from cache_core.config import FullSpec

    cache = RadixCache(CacheConfig(page_size=4, capacity_tokens=256, extra_components=(RingSpec(window=8, slots=2),)))
    assert [(c.name, c.kind) for c in cache.components] == [("full", 0), ("ring", 1)]
    assert cache.component("ring") is ring_of(cache) and cache.component("swa") is None and cache.swa is None
    assert type(FullSpec().build(cache.topo.link(0, 64))).__name__ == "FullComponent"
    with pytest.raises(ValueError, match=r"component names must be unique, got \['full', 'ring', 'ring'\]"):
        CacheConfig(extra_components=(RingSpec(window=8, slots=2), RingSpec(window=4, slots=1)))


def test_session_references_reach_an_extra_component_through_its_hooks():
    cache = RadixCache(CacheConfig(page_size=4, capacity_tokens=256, policy="session",
                                   extra_components=(SessionRingSpec(window=8, slots=2),)))
    ring = _sring(cache)
    st = ReplayStepper(cache)
    st.step(A, session_id="s")  # its region ends at A's leaf, which holds A's RING payload
    st.step(B)
    a = node_at(cache, A)
    assert ring.calls == [("add", 16)] and ring.refs[a.id] == 1
    invariants.check(cache)
    # RING is full: C needs a slot. The session policy takes B's unreferenced payload first (its
    # leaf goes whole), though A's is older: LRU would take A's
    st.step(C)
    assert node_at(cache, A) is a and node_at(cache, B) is None and node_at(cache, C) is not None
    cache.close_session("s")
    assert ring.calls == [("add", 16), ("drop", 16, 16)] and ring.refs[a.id] == 0
    invariants.check(cache)


def test_without_the_session_policy_lru_takes_the_older_payload():
    cache = RadixCache(CacheConfig(page_size=4, capacity_tokens=256, extra_components=(SessionRingSpec(window=8, slots=2),)))
    st = ReplayStepper(cache)
    for s in (A, B, C):
        st.step(s, session_id="s")
    assert node_at(cache, A) is None and node_at(cache, B) is not None and _sring(cache).calls == []


def test_a_removed_frontier_drops_the_reference_that_went_with_it():
    cache = RadixCache(CacheConfig(page_size=4, capacity_tokens=256, policy="session",
                                   extra_components=(SessionRingSpec(window=8, slots=1),)))
    ring = _sring(cache)
    st = ReplayStepper(cache)
    st.step(A, session_id="s")
    a_id = node_at(cache, A).id
    st.step(B)  # the one RING slot: A's referenced payload is the only candidate, its leaf goes
    assert node_at(cache, A) is None and ring.calls == [("add", 16), ("removed", 16)]
    cache.close_session("s")  # nothing left to drop
    assert ring.calls == [("add", 16), ("removed", 16)] and ring.refs[a_id] == 1
    invariants.check(cache)


def test_slots_of_and_the_snapshot_report_every_component_by_name():
    cache = RadixCache(CacheConfig(page_size=4, capacity_tokens=256, extra_components=(SessionRingSpec(window=8, slots=2),)))
    st = ReplayStepper(cache)
    st.step(A)
    got = cache.slots_of(A)
    assert list(got) == ["full", "sring"]
    assert got["full"].tolist() == [0, 1, 2, 3] and got["sring"].tolist() == [0, 0, 0, 0]
    nodes = snapshot(cache)["nodes"]
    assert [(n["swa"], n["mamba"], n["sring"]) for n in nodes] == [(None, None, None), (None, None, "slot 0")]
    assert list(nodes[1])[-4:] == ["lock_ref", "srefs", "children", "sring"]


def _count_walks(monkeypatch) -> Counter:
    walks: Counter = Counter()
    orig = RadixTree.path_nodes

    def counted(self, qb, *a, **kw):
        walks[id(qb)] += 1
        return orig(self, qb, *a, **kw)

    monkeypatch.setattr(RadixTree, "path_nodes", counted)
    return walks


def _requests(seed: int) -> list:
    rng = random.Random(seed)
    prefixes = [np.arange(rng.randrange(8, 64)) + 10_000 * k for k in range(4)]
    out = []
    for i in range(40):
        tail = np.array([rng.randrange(100) for _ in range(rng.randrange(1, 24))], dtype=np.int64) + 1000 * (i + 1)
        out.append((0.002 * i, req(i, np.concatenate([rng.choice(prefixes), tail]), rng.randrange(1, 4))))
    return out


@pytest.mark.parametrize("tiers", [None, TierConfig(hicache_ratio=2, write_policy="write_through")])
def test_the_match_memo_gives_an_extra_component_the_same_results(monkeypatch, tiers):
    """The memo is on with any components (`match_state`): a cache with RING serves 40 seeded
    requests through the engine with the memo and without it, `invariants.check` after every
    step: every request's row is the same, and the memo walks fewer times."""
    got = []
    for memo in (True, False):
        walks = _count_walks(monkeypatch)
        cfg = CacheConfig(page_size=4, capacity_tokens=384, tiers=tiers, extra_components=(RingSpec(window=8, slots=6),))
        env, cache, e, _ = make(cfg, max_running_requests=3, chunked_prefill_tokens=None, seed=7)
        assert (cache.matcher.memo is not None) is True
        if not memo:
            cache.matcher.memo, cache.matcher.quiet = None, False  # every match queries
        orig = e.executor.execute

        def checked(step, _orig=orig, _cache=cache):
            yield from _orig(step)
            invariants.check(_cache)

        e.executor.execute = checked
        run(env, e, _requests(5))
        got.append((request_rows(e), sum(walks.values()), ring_of(cache).evicted))
        monkeypatch.undo()
    (rows_on, walks_on, ev_on), (rows_off, walks_off, ev_off) = got
    print("walks", walks_on, walks_off, "ring evictions", ev_on)
    assert len(rows_on) == 40 and rows_on == rows_off and ev_on == ev_off
    assert ev_on > 0 and walks_on < walks_off


# -- components named by scenario files (scenarios/cache_pools.py) ------------------------------
@pytest.fixture
def ring_kind():
    register_component("ring")(RingSpec)  # the toy of tests/test_fourth_component.py, one line
    yield
    unregister_component("ring")


def _scenario(tmp_path, components) -> str:
    doc = yaml.safe_load(VALID)
    doc["cache"]["components"] = components
    path = tmp_path / "ring.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def test_a_scenario_names_a_registered_component_with_its_fields(tmp_path, ring_kind):
    path = _scenario(tmp_path, ["full", {"kind": "ring", "window": 16, "slots": 3}])
    sc = scenario.resolve(scenario.load(path), path)
    (spec,) = sc.cache.extra_components
    assert (type(spec), spec.window, spec.slots) == (RingSpec, 16, 3)
    assert sc.cache.components == ("full", "ring") and sc.doc["cache"]["components"][1] == {
        "kind": "ring", "window": 16, "slots": 3}
    e = simulate(sc)[0]
    ring = ring_of(e.cache)
    assert (ring.pool.capacity_pages, ring.W) == (3, 16)
    # 2 clients x 2 rounds: 100 prompt + 3 output tokens, 96 in whole pages of 16; round 2 reuses
    # them (RING accepts 96: its payload ends there). 4 payloads (one per request) in 3 slots:
    # one is evicted
    assert [r["cached_tokens"] for r in request_rows(e)] == [0, 0, 96, 96] and ring.evicted == 1
    invariants.check(e.cache)


@pytest.mark.parametrize("components,needles", [
    (["full", {"kind": "ring", "windw": 8, "slots": 2}],
     ["cache.components[1].windw: not a field of component 'ring'", "expected one of window, slots"]),
    (["full", {"kind": "rings", "window": 8}],
     ["cache.components[1].kind: 'rings' is not a registered component kind", "expected one of ring"]),
    (["full", {"kind": "ring", "window": 8}],
     ["cache.components[1]: component 'ring': ", "missing 1 required", "'slots'"]),
    (["full", "rings"], ["cache.components[1]: 'rings' is not a component", "expected one of full, swa, mamba, ring"]),
])
def test_a_bad_component_in_a_scenario_is_one_line_naming_file_and_field(capsys, tmp_path, ring_kind, components,
                                                                        needles):
    path = _scenario(tmp_path, components)
    _, rc, out, err = run_file(capsys, tmp_path, path=path)
    assert_one_line(rc, out, err, f"{PREFIX}{path}: {needles[0]}", *needles[1:])
    assert not (tmp_path / "out").exists()


# -- the torch backend's pools (gpu_backend/pool_kinds.py) --------------------------------------
def _torch_cache(extra=(), **kw):
    return RadixCache(CacheConfig(page_size=4, capacity_tokens=256, extra_components=extra, **kw),
                      record_actions="transfers")


def test_the_torch_pools_of_each_component_come_from_its_hook():
    from cache_core.config import MambaConfig, SwaConfig
    from gpu_backend.pool_kinds import component_pools

    cache = _torch_cache(swa=SwaConfig(window_tokens=8, capacity_tokens=64), mamba=MambaConfig(slots=5))
    pools, ex = component_pools(cache.voters, max_running=3, chunk_tokens=16, page_size=4)
    # SWA: 16 core pages + (3 + 1) rings of (2 window pages + 4 chunk pages + 2) = 48; MAMBA: 5 + 3 + 1
    assert pools == {"swa_pages": {"L1": 16 + 4 * 8, "L2": 0}, "state_slots": {"L1": 9, "L2": 0}}
    assert ex == {"swa_scratch_base": 16, "swa_scratch_pages": 8, "scratch_base": 5}


def test_a_component_without_torch_pools_is_refused_and_a_registered_hook_is_used():
    import simpy

    from gpu_backend.backend import TorchOptions, build_plugins
    from gpu_backend.pool_kinds import register_torch_pool, unregister_torch_pool
    from scenarios.presets import get_model

    cache = _torch_cache((RingSpec(window=8, slots=2),))
    with pytest.raises(ValueError, match=r"^the torch backend has no pools for component 'ring'; expected components "
                                         r"among full, swa, mamba \(gpu_backend/pool_kinds.py: register_torch_pool\)$"):
        build_plugins(simpy.Environment(), cache, get_model("qwen3-32b"), TorchOptions(), 2)
    seen = []
    register_torch_pool("ring")(lambda comp, **kw: (seen.append((comp.name, kw)) or {}, {}))  # RING: no tensors
    try:
        _, pools, _, _ = build_plugins(simpy.Environment(), cache, get_model("qwen3-32b"), TorchOptions(), 2)
    finally:
        unregister_torch_pool("ring")
    assert seen == [("ring", {"max_running": 2, "chunk_tokens": 8192, "page_size": 4})]
    # qwen3-32b: FULL only; the SWA and state pools stay empty (no hook asked for them)
    assert [pools.size("L1", k) for k in ("full", "swa", "state")] == [64, 0, 0]
