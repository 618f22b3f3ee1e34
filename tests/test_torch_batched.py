"""The torch backend's batched steps and every pool the core names (issue 19 items 1 and 2).

Several requests in flight (max_parallel and max_running_requests 4, mixed chunks): each
engine step is one batched forward; the logits of every token a forward ends with (prefill
chunks and decodes) equal the same position of a no-cache forward of the whole sequence. The
scenarios run on the modelled clock, so the torch backend makes the simulator's decisions.
Tiny dimensions (3 layers, hidden 32) on one thread: the whole file runs in seconds."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from cache_core.topology import Topology  # noqa: E402
from radixsim.run import request_rows, simulate  # noqa: E402
from scenarios.scenario import apply_sets, resolve  # noqa: E402
from sim.simulator import SimDataPlane  # noqa: E402

MODELS = {"full": "qwen3-32b", "full+swa": "gpt-oss-20b", "full+mamba": "qwen3-next-80b",
          "full+swa+mamba": "inkling-small", "sidecars": "dsv4-flash"}
TINY = {"layers": 3, "hidden": 32, "num_heads": 2, "head_dim": 8, "state_dim": 16, "vocab": 211}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def scenario(model, *, l1=4096, l2=None, l3=None, rounds=3, length=96, clients=4, sets=(), workload=None):
    raw = {"seed": 3, "model": model, "hardware": "h200x1",
           "cache": {"page_size": 16, "l1_tokens": l1, "mem_fraction_static": 0.9, "swa_tokens": 4096,
                     "mamba_slots": 64},
           "engine": {"max_running_requests": 4, "chunked_prefill_tokens": 64, "mixed_chunk": True},
           "workload": workload or {"kind": "multiturn", "num_clients": clients, "num_rounds": rounds,
                                    "request_length": length, "output_length": 4, "max_parallel": clients,
                                    "request_rate": "inf"},
           "torch": dict(TINY)}
    if l2 is not None:
        raw["cache"]["l2_tokens"] = l2
    if l3 is not None:
        raw["cache"]["l3_tokens"] = l3
    return resolve(apply_sets(raw, list(sets)))


def worst_logit_error(eng) -> float:
    """Max abs difference, over every recorded position of every request, between the batched
    forward's logits and a no-cache forward of the request's whole sequence."""
    ex = eng.executor
    assert set(ex.positions) == {r.rid for r in eng.finished}
    worst = 0.0
    with torch.no_grad():
        for rid, recorded in ex.positions.items():
            ref = ex.model.forward(ex.sequences[rid], start=0)
            for pos, got in recorded:
                worst = max(worst, float((ref[pos] - got).abs().max()))
    return worst


@pytest.mark.parametrize("kind,layout", [(k, "page_first") for k in MODELS] +
                         [("full+swa+mamba", "layer_first"), ("sidecars", "layer_first")])
def test_batched_prefill_and_decode_logits_equal_no_cache(kind, layout):
    eng, *_ = simulate(scenario(MODELS[kind], sets=[f"torch.layout={layout}"]), backend="torch", record_logits=True)
    ex = eng.executor
    assert len(eng.finished) == 12
    assert sum(r.cached_tokens for r in eng.finished) > 0  # prefixes were reused
    assert max(p for p, _ in ex.batches) >= 2  # several prefills in one forward
    assert any(p and d for p, d in ex.batches)  # prefill chunks and decodes in one forward
    assert max(p + d for p, d in ex.batches) >= 4
    assert ex.steps == len(ex.batches)  # one forward per step
    assert worst_logit_error(eng) <= 1e-4


def test_sidecar_pools_are_built_and_filled_through_the_index_translation():
    """DeepSeek-V4 (every layer SWA; C4/C128 compressed KV follow FULL, the compressor rings
    SWA): each sidecar has its own pool, indexed like the pool it follows, and the forward
    wrote rows into it (a pool never written stays all zero)."""
    eng, *_ = simulate(scenario("dsv4-flash"), backend="torch")
    pools = eng.executor.pools
    names = ("c4_kv", "c4_indexer", "c128_kv", "c4_compressor", "c128_compressor")
    assert pools.sidecars == names
    for name in names:
        follows = "full" if name.endswith("_kv") or name == "c4_indexer" else "swa"
        t = pools.tensor("L1", name)
        assert t.shape[0] == pools.tensor("L1", follows).shape[0]
        assert t.shape[3] == (4 if name.startswith("c4") else 1)  # rows per 16-token page: 16/4, 16/16
        assert int((t.abs().sum(dim=(1, 2, 3, 4)) > 0).sum()) > 0


def _trace(tmp_path, prompts):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 1000 * i, "tokens": p, "output_length": 2}) + "\n"
                            for i, p in enumerate(prompts)))
    return {"kind": "trace", "path": str(path)}


def test_mamba_every_k_snapshots_reused_on_torch_give_equal_logits(tmp_path):
    """Request A (100 tokens) leaves checkpoints at 96 (its end) and every-32 snapshots at 64 and
    32; B shares A's first 70 tokens and C its first 40: they reuse the snapshots at 64 and 32,
    whose states the executor wrote during A's forward (the private slot by then held A's
    later state)."""
    a = list(range(1, 101))
    wl = _trace(tmp_path, [a, a[:70] + list(range(500, 530)), a[:40] + list(range(600, 630))])
    sc = scenario("qwen3-next-80b", workload=wl, sets=["cache.mamba_every_tokens=32"])
    sim, *_ = simulate(sc)
    eng, *_ = simulate(sc, backend="torch", record_logits=True)
    assert [r.cached_tokens for r in sorted(eng.finished, key=lambda r: r.rid)] == [0, 64, 32]
    assert request_rows(sim) == request_rows(eng)
    assert eng.dataplane.snapshots == 2 and eng.dataplane.copies == 2  # 2 snapshots written in A's forward
    assert worst_logit_error(eng) <= 1e-4


@pytest.fixture
def decisions(monkeypatch):
    """Record the order of node removals (evictions) and of transfers, whoever runs them."""
    log = []
    remove, submit = Topology.on_remove, SimDataPlane.submit

    def on_remove(self, node):
        log.append(("remove", node.end, node.num_tokens))
        remove(self, node)

    def on_submit(self, t, on_done):
        log.append((t.kind, t.component, t.tokens, str(t.src), str(t.dst), None if t.keys is None else
                    tuple(int(k) for k in t.keys)))
        submit(self, t, on_done)

    monkeypatch.setattr(Topology, "on_remove", on_remove)
    monkeypatch.setattr(SimDataPlane, "submit", on_submit)
    return log


@pytest.mark.parametrize("kind,tiers", [("full", dict(l1=768)), ("full", dict(l1=768, l2=1536, l3="unbounded")),
                                        ("full+swa+mamba", dict(l1=1024, l2=2048))])
def test_sim_and_torch_make_the_same_decisions_with_requests_in_flight(kind, tiers, decisions):
    """Four clients at once, a small L1 (evictions, demotions, loads): the same request rows
    (hits per tier, times), the same node removals and transfers in the same order."""
    sc = scenario(MODELS[kind], sets=["cache.min_prefetch_tokens=16"], **tiers)
    sim, *_ = simulate(sc)
    sim_log = list(decisions)
    decisions.clear()
    real, *_ = simulate(sc, backend="torch")
    assert request_rows(sim) == request_rows(real)
    assert sum(x[0] in ("remove", "load") for x in sim_log) > 0  # L1 evicted (removed, or demoted and loaded back)
    assert max(p + d for p, d in real.executor.batches) >= 2
    assert decisions == sim_log


@pytest.mark.parametrize("kind", ["full+mamba", "full+swa+mamba", "sidecars"])
def test_component_payloads_go_to_l3_with_the_full_store_on_l2_evict(kind):
    """`l3_write: on_l2_evict` on a hybrid model: the FULL store of an L2-evicted node also
    carries its SWA pages and MAMBA checkpoint (the core records them in L3 at that store), so
    the later prefetches of those payloads find them (checksummed pages, like FULL; sidecar
    pages with the pages they follow): no failed transfer, the simulator's decisions, storage
    hits and exact logits. (Before: those payloads never reached the store, every prefetch of
    one failed, and the torch run lost the simulator's storage hits.)"""
    sc = scenario(MODELS[kind], l1=768, l2=1024, l3="unbounded", clients=4, rounds=5,
                  sets=["cache.min_prefetch_tokens=16", "cache.l3_write=on_l2_evict"])
    sim, *_ = simulate(sc)
    real, *_ = simulate(sc, backend="torch", record_logits=True)
    assert real.dataplane.failed == 0
    assert sum(r.cached_storage for r in real.finished) > 0
    assert request_rows(sim) == request_rows(real)
    assert worst_logit_error(real) <= 1e-4


def test_null_widths_are_the_preset_s():
    """`torch.hidden: null` (and heads, head_dim, vocab): the preset's real dimensions (for a
    GPU); `torch.layers` keeps the preset's mix (the measured clock then scales times by 48 / 3:
    tests/test_torch_backend.py::test_measured_clocks_advance_by_the_measured_step_times)."""
    from gpu_backend.backend import TorchOptions
    from gpu_backend.spec import HybridSpec, preset_counts

    sc = scenario("qwen3-next-80b", sets=[f"torch.{k}=null" for k in ("hidden", "num_heads", "head_dim", "vocab")])
    opts = TorchOptions(**sc.doc["torch"])
    spec = HybridSpec.from_preset(sc.model, max_layers=opts.layers, hidden=opts.hidden, num_heads=opts.num_heads,
                                  head_dim=opts.head_dim, vocab=opts.vocab, page_size=16)
    m = sc.model
    assert (spec.hidden, spec.num_heads, spec.head_dim, spec.vocab) == (m.hidden_size, m.num_kv_heads, m.head_dim,
                                                                        m.vocab_size)
    assert spec.kinds == ("rec", "rec", "full") and sum(preset_counts(m).values()) == 48


def test_retracted_requests_start_over_with_exact_logits():
    """Decode outgrows a small L1 (new_token_ratio 0): the engine retracts requests while others
    run; the executor's scratch state slots and SWA rings of a retracted request are reclaimed
    (none is left at the end), its recomputation is exact and the decisions the simulator's."""
    sc = scenario(MODELS["full+swa+mamba"], l1=384, rounds=2, length=48,
                  sets=["workload.output_length=64", "engine.new_token_ratio=0"])
    sim, *_ = simulate(sc)
    eng, *_ = simulate(sc, backend="torch", record_logits=True)
    assert eng.counters["retractions"] == sim.counters["retractions"] == 3
    assert request_rows(sim) == request_rows(eng)
    assert worst_logit_error(eng) <= 1e-4
    assert eng.executor.scratch_in_use == 0
