"""Every model family of the preset catalog on the torch backend at reduced size, batched, on
CPU (issue 19, "done when"): one representative preset per family (named in the test id) runs
a tiny multi-turn scenario (3 layers, hidden 32, four clients at once, L1 -> L2 -> L3 tiers)
with ``--backend torch --device cpu`` and must finish every request, make the simulator's
cache decisions (the same request rows: hits per tier, times; modelled clock) and fail no
transfer."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from radixsim.run import request_rows, simulate  # noqa: E402
from scenarios.presets import MODELS  # noqa: E402
from scenarios.scenario import resolve  # noqa: E402

CATALOG = Path(__file__).resolve().parent.parent / "scenarios" / "catalog"

# family -> (what it covers, representative preset)
FAMILIES = {
    "qwen3": ("dense-gqa", "qwen3-32b"),
    "llama-3.1": ("dense-gqa", "llama-3.1-8b"),
    "qwen3-moe": ("moe-gqa", "qwen3-235b-a22b"),
    "glm-4.5": ("moe-gqa", "glm-4.5-air"),
    "deepseek-v3": ("mla-moe", "deepseek-v3"),
    "kimi-linear": ("mla+linear-attention", "kimi-k3"),
    "gpt-oss": ("moe-swa-hybrid", "gpt-oss-20b"),
    "qwen-gdn-hybrid": ("mamba-gdn-hybrid", "qwen3-next-80b"),
    "inkling": ("swa+mamba-hybrid", "inkling-small"),
    "deepseek-v4": ("dsv4-sidecars", "dsv4-flash"),
}
CASES = [pytest.param(preset, id=f"{family}-{covers}-{preset}") for family, (covers, preset) in FAMILIES.items()]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_cases_cover_every_family_of_the_presets_and_the_catalog():
    assert {p: MODELS[p].family for _, p in FAMILIES.values()} == {p: f for f, (_, p) in FAMILIES.items()}
    assert set(FAMILIES) == {m.family for m in MODELS.values()}
    named = {yaml.safe_load(f.read_text()).get("model") for f in sorted(CATALOG.glob("*.yaml"))}
    assert {n for n in named if isinstance(n, str)} <= set(MODELS)


def scenario(preset):
    return resolve({
        "seed": 3, "model": preset, "hardware": "h200x1",
        "cache": {"page_size": 16, "l1_tokens": 640, "l2_tokens": 1024, "l3_tokens": "unbounded",
                  "mem_fraction_static": 0.9, "swa_tokens": 4096, "mamba_slots": 64, "min_prefetch_tokens": 16},
        "engine": {"max_running_requests": 4, "chunked_prefill_tokens": 64, "mixed_chunk": True},
        "workload": {"kind": "multiturn", "num_clients": 4, "num_rounds": 5, "request_length": 96,
                     "output_length": 4, "max_parallel": 4, "request_rate": "inf"},
        "torch": {"layers": 3, "hidden": 32, "num_heads": 2, "head_dim": 8, "state_dim": 16, "vocab": 211}})


@pytest.mark.parametrize("preset", CASES)
def test_every_family_runs_batched_on_torch_cpu_with_the_simulator_s_decisions(preset):
    sc = scenario(preset)
    sim, *_ = simulate(sc)
    real, *_ = simulate(sc, backend="torch", device="cpu")
    assert len(real.finished) == len(sim.finished) == 20
    assert request_rows(real) == request_rows(sim)
    assert real.dataplane.failed == 0
    assert max(p + d for p, d in real.executor.batches) >= 2  # several requests in one forward
    assert sum(r.cached_host for r in real.finished) > 0 and sum(r.cached_storage for r in real.finished) > 0
