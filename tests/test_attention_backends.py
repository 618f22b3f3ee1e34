"""engine.attention_backend: the measured curve's efficiency and the prefill attention it prices,
by hand on small cases; interpolation and clamping at the data's edges; no backend = the
previous prices exactly; layouts, GPUs and models without a measured curve refused."""
import math

import numpy as np
import pytest

from sim.attention_backends import backend_names, curve_for, pairs
from sim.operators import OperatorCostModel

EXACT = {"rel": 1e-12}
PEAK = 312e12            # A100 bf16 peak, the curve's peak_flops
FLOPS_PER_PAIR = 16384   # 2 x 32 query heads x (128 + 128): QK^T and PV per (query, key) pair
LAYERS = 36              # Qwen3-8B, every layer full attention


def eff(n, c, ms):
    """A measured point's efficiency: FLOPs of n new tokens after c cached (causal) / (time x peak)."""
    return FLOPS_PER_PAIR * (n * c + n * (n + 1) / 2) / (ms * 1e-3 * PEAK)


def test_backends_listed():
    assert backend_names() == ("flashinfer", "triton")


def test_pairs_by_hand():
    # 3 new tokens after 2 cached: keys 3, 4, 5 -> 12
    assert pairs(3, 2) == 12.0 and pairs(4096, 0) == 4096 * 4097 / 2 == 8_390_656


def test_efficiency_at_measured_points_and_between_them():
    c = curve_for("flashinfer", "a100", 32, 8, 128)
    # a measured point: chunk 4096 after no prefix, 0.967 ms per layer
    assert eff(4096, 0, 0.967) == pytest.approx(0.45565358067509876, **EXACT)
    e = c.efficiency(np.array([4096, 608, 608]), np.array([0, 0, 608]))
    assert e == pytest.approx([0.45565358067509876, 0.17056164102564103, 0.2913411282051282], **EXACT)
    # halfway between two prefixes of one chunk: the mean of their efficiencies
    assert c.efficiency(np.array([608]), np.array([304]))[0] == pytest.approx((0.17056164102564103
                                                                               + 0.2913411282051282) / 2, **EXACT)
    # between two chunk sizes, linear in log n: at their geometric mean, the mean
    n = math.sqrt(2240 * 2560)
    assert eff(2240, 0, 0.361) == pytest.approx(0.3651052034945664, **EXACT)
    assert eff(2560, 0, 0.438) == pytest.approx(0.393016499238965, **EXACT)
    assert c.efficiency(np.array([n]), np.array([0]))[0] == pytest.approx((0.3651052034945664
                                                                            + 0.393016499238965) / 2, **EXACT)


def test_no_extrapolation_beyond_the_data():
    c = curve_for("flashinfer", "a100", 32, 8, 128)
    last = eff(4096, 12288, 5.632)  # chunk 4096's longest measured prefix
    got = c.efficiency(np.array([4096, 4096, 20000, 32]), np.array([12288, 40000, 0, 0]))
    # a longer prefix holds the last efficiency; a larger / smaller chunk holds the largest / smallest one's
    assert got == pytest.approx([last, last, eff(12288, 0, 7.225), eff(64, 0, 0.011)], **EXACT)


def test_prefill_attention_priced_on_the_curve_by_hand():
    m = OperatorCostModel("Qwen3-8B", "a100-40gbx1", 1, attention_backend="flashinfer")
    b = m.breakdown(((4096, 12288),))
    # on the measured points the time is the measured time x layers (compute-bound here: the
    # 16,384 x 36 x 4,096 B of KV read in ~2 ms at the HBM rate, no per-layer t0 added)
    assert b["attn_new"] == pytest.approx(LAYERS * 0.967e-3, **EXACT)
    assert b["attn_new"] + b["attn_prefix"] == pytest.approx(LAYERS * 5.632e-3, **EXACT)
    # halfway: chunk 608 after 304 tokens, efficiency the mean of its two neighbours
    b = m.breakdown(((608, 304),))
    flops = LAYERS * FLOPS_PER_PAIR * (608 * 304 + 608 * 609 / 2)
    assert b["attn_new"] + b["attn_prefix"] == pytest.approx(flops / (PEAK * 0.23095138461538461), **EXACT)
    assert flops / LAYERS / (PEAK * 0.23095138461538461) == pytest.approx(8.41218735788995e-05, **EXACT)
    # two requests in one step: each its own sequence, the times add
    two = m.breakdown(((4096, 12288), (608, 304)))
    assert two["attn_new"] + two["attn_prefix"] == pytest.approx(LAYERS * 5.632e-3 + flops / (PEAK * 0.23095138461538461),
                                                                 **EXACT)
    # the step's total carries the same attention: the difference from no backend is the attention's
    base = OperatorCostModel("Qwen3-8B", "a100-40gbx1", 1)
    bb = base.breakdown(((4096, 12288),))
    diff = m.cost(((4096, 12288),)).total_s - base.cost(((4096, 12288),)).total_s
    assert diff == pytest.approx(LAYERS * 5.632e-3 - bb["attn_new"] - bb["attn_prefix"], rel=1e-9)


def test_triton_is_flashinfers_curve_as_its_stated_proxy():
    fi = OperatorCostModel("Qwen3-8B", "a100-40gbx1", 1, attention_backend="flashinfer")
    tr = OperatorCostModel("Qwen3-8B", "a100-40gbx1", 1, attention_backend="triton")
    batch = ((4096, 8192), (100, 3000))
    assert tr.cost(batch).total_s == fi.cost(batch).total_s
    assert "triton" in repr(tr)


def test_decode_keeps_the_models_curve():
    base = OperatorCostModel("Qwen3-8B", "a100-40gbx1", 1)
    fi = OperatorCostModel("Qwen3-8B", "a100-40gbx1", 1, attention_backend="flashinfer")
    assert fi.cost((), (5000, 7000)).total_s == base.cost((), (5000, 7000)).total_s
    assert fi.breakdown((), (5000, 7000))["attn_decode"] == base.breakdown((), (5000, 7000))["attn_decode"]


def test_unset_backend_prices_as_before():
    """Figures pinned from the code before engine.attention_backend existed (same batches)."""
    from radixsim.run import make_cost
    from scenarios.scenario import load, resolve

    raw = {**load("quickstart"), "model": "qwen3-8b", "hardware": "a100-40gbx1", "tp": 1}
    sc = resolve(raw)
    assert sc.doc["engine"]["attention_backend"] is None
    m = make_cost(sc)
    assert m.attn_curve is None
    assert m.cost(((4096, 12288),)).total_s == 0.4611358857878334
    assert m.breakdown(((4096, 12288),))["attn_prefix"] == 0.13034252700189675
    assert m.cost(((4096, 8192), (100, 3000))).total_s == 0.4257633477278362
    assert m.breakdown(((4096, 8192), (100, 3000)))["attn_prefix"] == 0.08767192000337198
    assert m.cost(((4096, 12288),), (5000, 7000)).total_s == 0.4633826380528244
    assert make_cost(resolve({**raw, "engine": {"attention_backend": "triton"}})).attn_curve is not None


@pytest.mark.parametrize("model, hw, tp, match", [
    ("Qwen3-32B", "a100-80gbx1", 1, r"no measured curve for a100 with 64 query heads, 8 KV heads, head dim 128 per "
                                    r"GPU; measured: a100 with 32 query heads, 8 KV heads, head dim 128 per GPU"),
    ("Qwen3-8B", "h100x1", 1, r"no measured curve for h100 with 32 query heads"),
    ("Qwen3-8B", "a100-80gbx8", 2, r"no measured curve for a100 with 16 query heads, 4 KV heads"),
    ("DeepSeek-V3", "h200x8", 8, r"DeepSeek-V3 has mla attention; expected full GQA layers only"),
])
def test_no_curve_is_refused(model, hw, tp, match):
    with pytest.raises(ValueError, match=match):
        OperatorCostModel(model, hw, tp, attention_backend="flashinfer")


def test_scenario_key_checked_in_one_line():
    from scenarios.scenario import ScenarioError, load, resolve

    base = {**load("quickstart"), "model": "qwen3-8b", "hardware": "a100-40gbx1", "tp": 1}
    with pytest.raises(ScenarioError, match=r"engine\.attention_backend: .*expected null \(the model's own "
                                            r"attention curve\) or one of flashinfer, triton"):
        resolve({**base, "engine": {"attention_backend": "fa3"}})
    with pytest.raises(ScenarioError, match=r"engine\.attention_backend: triton is modelled by cost\.kind operators "
                                            r"only; expected null with cost\.kind roofline"):
        resolve({**base, "engine": {"attention_backend": "triton"}, "cost": {"kind": "roofline"}})
    with pytest.raises(ScenarioError, match=r"engine\.attention_backend: attention backend triton: no measured curve "
                                            r"for h100"):
        resolve({**base, "hardware": "h100x1", "engine": {"attention_backend": "triton"}})


def test_cli_bad_backend_is_one_line_exit_2(capsys, tmp_path):
    from radixsim.cli import main

    assert main(["run", "quickstart", "--set", "engine.attention_backend=fa3", "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "engine.attention_backend" in err[0] and "Traceback" not in err[0]
