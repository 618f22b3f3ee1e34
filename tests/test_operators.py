"""sim/operators.py against hand computations written out here from the presets' geometry
(docs/sources/models.md), the hardware presets and the fitted tables (sim/opdata): a small
dense model, an MoE, an MLA model and a hybrid SWA + short-conv-state MoE. Every expected time
is built term by term from the module docstring's formulas, with the attention (query, key)
pairs counted by explicit loops over token positions rather than the closed forms."""
import math

import pytest

from scenarios.presets import get_hardware, get_model
from sim.cost import Efficiency, RooflineCostModel
from sim.operators import (A2A_COMBINE_EFFICIENCY, A2A_DISPATCH_EFFICIENCY, CUDA_GRAPH_MAX_BS, FA_E_MAX, FA_L_HALF, MOE_IMBALANCE, OperatorCostModel,
                           load_fits, moe_block_m)

EXACT = dict(rel=1e-12)
EFF = Efficiency()  # hbm_efficiency 0.6, per_step_overhead_s 3 ms, per_layer_overhead_s 10 us


def gemm(f, peak, hbm, m, n, k, wbytes, full_tiles=False):
    e = f["e_max"] * n / (n + f["n_half"]) * k / (k + f["k_half"]) * (1 if full_tiles else m / (m + f["m_half"]))
    return max(2 * m * n * k / (peak * e), (wbytes + m * (k + n) * 2) / (hbm * f["e_bw"])) + f["t0_s"]


def pair(f, peak, hbm, hidden, m, params, wbytes, full_tiles=False):
    inner = params / (2 * hidden)
    return (gemm(f, peak, hbm, m, inner, hidden, wbytes / 2, full_tiles)
            + gemm(f, peak, hbm, m, hidden, inner, wbytes / 2, full_tiles))


def routed(f, peak, hbm, hidden, tokens, E, k, L, tp, routed_params, routed_bytes, ep=1):
    """One layer's grouped expert GEMM pair: rows per touched expert padded to blocks of 16
    (tokens <= E) or 64, times the imbalance, whole-tile efficiency. With EP (ep = tp) a rank
    runs its E/ep whole experts: 1/ep of the rows, each expert unsharded."""
    cover = 1 - (1 - k / E) ** tokens
    touched = E * cover
    block = 16 if tokens <= E else 64
    rows = touched * block * math.ceil(tokens * k / touched / block) * MOE_IMBALANCE / ep
    per_expert = routed_params / E / L if ep > 1 else routed_params / E / (L * tp)
    return pair(f, peak, hbm, hidden, rows, per_expert, routed_bytes * cover / (L * tp), True)


def fa(keys_per_query):
    return FA_E_MAX * keys_per_query / (keys_per_query + 512 * (0.73 / 0.5 - 1))


def elementwise(el, layers, tokens, hidden, hbm):
    return layers * (6 * el["t0_s"] + tokens * hidden * el["bytes_per_token_hidden"] / hbm)


def allreduce(ar, layers, tokens, hidden, tp, nvlink):
    msg = tokens * hidden * 2
    return 2 * layers * (2 * (tp - 1) / tp * msg / (nvlink * ar["e_ar"]) + 2 * (tp - 1) * ar["latency_per_step_s"])


def keys_full(n, c):
    return sum(p + 1 for p in range(c, c + n))


def keys_window(n, c, w):
    return sum(min(p + 1, w) for p in range(c, c + n))


def test_constants_and_fit_file():
    assert FA_L_HALF == 512 * (0.73 / 0.5 - 1)
    assert MOE_IMBALANCE == 1.25 and CUDA_GRAPH_MAX_BS == 160
    assert (moe_block_m(128, 128), moe_block_m(129, 128)) == (16, 64)
    fits = load_fits()
    assert sorted(fits) == ["a100", "h100"]
    for f in fits.values():
        assert 0 < f["gemm"]["e_max"] <= 1 and 0 < f["gemm"]["e_bw"] <= 1
        assert f["gemm"]["residuals"]["median_abs_rel"] < 0.1  # the fit describes Vidur's GEMMs within 10%


def test_dense_qwen3_8b_a100_tp1():
    """Qwen3-8B (36 full GQA layers, 32 q x 128, 8 kv heads, hidden 4096, 8.19B bf16 params)
    on one A100-40GB: a prefill of 1000 new tokens after 3000 cached, then a decode step."""
    hw, f = get_hardware("a100-40gbx1"), load_fits()["a100"]
    g, el = f["gemm"], f["elementwise"]
    peak, hbm = 312e12, 1.555e12
    assert (hw.bf16_flops, hw.hbm_bytes_per_s) == (peak, hbm)
    L, hidden, params, wbytes = 36, 4096, 8_190_427_136, 16_380_854_272
    pair_flops = 4 * 32 * 128
    row = 8 * 256 * 2
    om = OperatorCostModel("qwen3-8b", hw, 1)

    n, c = 1000, 3000
    linear = L * pair(g, peak, hbm, hidden, n, params / L, wbytes / L)
    keys = L * keys_full(n, c)
    attn = max(pair_flops * keys / (peak * fa(keys / (n * L))), L * (c + n) * row / (hbm * 0.6)) + L * g["t0_s"]
    expect = linear + attn + elementwise(el, L, n, hidden, hbm) + 3e-3 + L * 10e-6
    assert om.prefill_time_s([(n, c)]) == pytest.approx(expect, **EXACT)

    ctx = [5000, 7000]  # decode: a CUDA graph, no per-layer launch gaps
    linear = L * pair(g, peak, hbm, hidden, 2, params / L, wbytes / L)
    keys = L * (5001 + 7001)
    attn = max(pair_flops * keys / (peak * fa(keys / (2 * L))), L * 12002 * row / (hbm * 0.6)) + L * g["t0_s"]
    expect = linear + attn + elementwise(el, L, 2, hidden, hbm) + 3e-3
    assert om.decode_time_s(ctx) == pytest.approx(expect, **EXACT)
    # a decode batch above the CUDA-graph limit pays the launch gaps
    big = OperatorCostModel("qwen3-8b", hw, 1, cuda_graph_max_bs=1)
    assert big.decode_time_s(ctx) == pytest.approx(expect + L * 10e-6, **EXACT)
    with pytest.raises(ValueError, match=r"cuda_graph_max_bs must be an integer >= 0, got -1"):
        OperatorCostModel("qwen3-8b", hw, 1, cuda_graph_max_bs=-1)


def test_mixed_step_shares_the_gemms():
    """A mixed step runs one GEMM over prefill + decode tokens (weights read once) and times
    the prefill and decode attention apart."""
    om = OperatorCostModel("qwen3-8b", "a100-40gbx1", 1)
    hw, f = get_hardware("a100-40gbx1"), load_fits()["a100"]
    g, el = f["gemm"], f["elementwise"]
    peak, hbm, L, hidden = 312e12, 1.555e12, 36, 4096
    pair_flops, row = 4 * 32 * 128, 8 * 256 * 2
    linear = L * pair(g, peak, hbm, hidden, 513, 8_190_427_136 / L, 16_380_854_272 / L)
    kp = L * keys_full(512, 0)
    ap = max(pair_flops * kp / (peak * fa(kp / (512 * L))), L * 512 * row / (hbm * 0.6)) + L * g["t0_s"]
    kd = L * 2001
    ad = max(pair_flops * kd / (peak * fa(kd / L)), L * 2001 * row / (hbm * 0.6)) + L * g["t0_s"]
    expect = linear + ap + ad + elementwise(el, L, 513, hidden, hbm) + 3e-3 + L * 10e-6
    assert om.step_time_s([(512, 0)], [2000]) == pytest.approx(expect, **EXACT)
    assert om.step_time_s([(512, 0)], [2000]) < om.prefill_time_s([(512, 0)]) + om.decode_time_s([2000])
    assert om.step_time_s() == 0.0


def test_moe_qwen3_235b_h800_tp8():
    """Qwen3-235B-A22B (94 layers, 128 experts top-8, bf16) at TP8 on H800: shared weights
    (attention, embeddings) as one GEMM pair, routed experts as a grouped pair per layer,
    two ring all-reduces per layer over H800's 200 GB/s NVLink."""
    hw, f = get_hardware("h800x8"), load_fits()["h100"]
    g, el, ar = f["gemm"], f["elementwise"], f["allreduce"]
    peak, hbm, nvlink = 989.4e12, 3.35e12, 200e9
    assert (hw.bf16_flops, hw.hbm_bytes_per_s, hw.nvlink_bytes_per_s) == (peak, hbm, nvlink)
    L, hidden, tp, E, k = 94, 4096, 8, 128, 8
    total, active = 235_092_836_352, 22_189_965_312
    routed_p = (total - active) / (1 - k / E)
    shared = total - routed_p
    n = 2048
    linear = L * pair(g, peak, hbm, hidden, n, shared / (L * tp), shared * 2 / (L * tp))
    linear += L * routed(g, peak, hbm, hidden, n, E, k, L, tp, routed_p, routed_p * 2)
    keys = L * keys_full(n, 0)
    kv = L * n * (4 * 256 * 2) / 4  # 4 KV heads: split 4 ways at TP8
    attn = max(4 * 64 * 128 * keys / (tp * peak * fa(keys / (n * L))), kv / (hbm * 0.6)) + L * g["t0_s"]
    expect = (linear + attn + elementwise(el, L, n, hidden, hbm) + allreduce(ar, L, n, hidden, tp, nvlink)
              + 3e-3 + L * 10e-6)
    om = OperatorCostModel("qwen3-235b-a22b", hw, tp)
    assert om.prefill_time_s([(n, 0)]) == pytest.approx(expect, **EXACT)
    # the roofline knows the routing too (MOE_ROUTING): 64 tokens read the shared weights and
    # the share of the 128 experts that top-8 routing touches (was: every parameter routed)
    rf = RooflineCostModel("qwen3-235b-a22b", hw, tp)
    expect = (shared * 2 + routed_p * 2 * (1 - (1 - k / E) ** 64)) / tp
    assert rf.weight_read_bytes(64) == pytest.approx(expect, **EXACT)


def test_moe_expert_parallel_qwen3_235b_h800_ep8():
    """The same prefill with --ep-size 8: each rank runs 16 whole experts (1/8 of the padded
    rows), one all-reduce per layer instead of two (tokens scattered for the MoE), and per layer
    a dispatch + combine all-to-all of 2048/8 tokens x 4096 x top-8 x 7/8 bf16 values each way
    over 200 GB/s NVLink at DeepEP's 153/160 and 158/160, plus one NVLink step latency each."""
    hw, f = get_hardware("h800x8"), load_fits()["h100"]
    g, el, ar = f["gemm"], f["elementwise"], f["allreduce"]
    peak, hbm, nvlink = 989.4e12, 3.35e12, 200e9
    L, hidden, tp, E, k = 94, 4096, 8, 128, 8
    total, active = 235_092_836_352, 22_189_965_312
    routed_p = (total - active) / (1 - k / E)
    shared = total - routed_p
    n = 2048
    assert (A2A_DISPATCH_EFFICIENCY, A2A_COMBINE_EFFICIENCY) == (153 / 160, 158 / 160)
    linear = L * pair(g, peak, hbm, hidden, n, shared / (L * tp), shared * 2 / (L * tp))
    linear += L * routed(g, peak, hbm, hidden, n, E, k, L, tp, routed_p, routed_p * 2, ep=8)
    keys = L * keys_full(n, 0)
    kv = L * n * (4 * 256 * 2) / 4
    attn = max(4 * 64 * 128 * keys / (tp * peak * fa(keys / (n * L))), kv / (hbm * 0.6)) + L * g["t0_s"]
    elems = 256 * 4096 * 8 * 7 / 8  # 1,835,008 values each way per layer
    a2a = L * (elems * 2 / (nvlink * 153 / 160) + elems * 2 / (nvlink * 158 / 160) + 2 * ar["latency_per_step_s"])
    one_ar = allreduce(ar, L, n, hidden, tp, nvlink) / 2
    expect = linear + attn + elementwise(el, L, n, hidden, hbm) + one_ar + a2a + 3e-3 + L * 10e-6
    om = OperatorCostModel("qwen3-235b-a22b", hw, tp, ep=8)
    c = om.cost([(n, 0)])
    assert c.alltoall_s == pytest.approx(a2a, **EXACT)
    assert c.allreduce_s == pytest.approx(one_ar, **EXACT)
    assert c.allreduce_bytes == L * n * hidden * 2
    assert c.total_s == pytest.approx(expect, **EXACT)
    assert OperatorCostModel("qwen3-235b-a22b", hw, tp).cost([(n, 0)]).alltoall_s == 0.0
    # fp8 weights dispatch fp8 (1 B) and combine bf16 (2 B): DeepSeek-V3 at EP8 on H200 (450 GB/s)
    v3 = OperatorCostModel("deepseek-v3", "h200x8", 8, ep=8)
    elems = 64 * 7168 * 8 * 7 / 8
    assert v3.alltoall_s(512) == pytest.approx(61 * (elems / (450e9 * 153 / 160) + elems * 2 / (450e9 * 158 / 160)
                                                      + 2 * ar["latency_per_step_s"]), **EXACT)
    for bad in (2, 4, True):
        with pytest.raises(ValueError, match="ep must be 1, or tp"):
            OperatorCostModel("qwen3-235b-a22b", hw, tp, ep=bad)
    with pytest.raises(ValueError, match="ep must be 1, or tp"):
        OperatorCostModel("qwen3-8b", "a100-80gbx8", 8, ep=8)


def test_scenario_ep_size_and_kernel_factor():
    """engine.ep_size reaches the cost model (1 or tp, MoE, operators only);
    model.kernel_factor multiplies the operator times and nothing else."""
    from radixsim.run import make_cost
    from scenarios.scenario import ScenarioError, load, resolve
    base = {**load("quickstart"), "model": "qwen3-235b-a22b", "hardware": "h800x8", "tp": 8}
    assert resolve(base).doc["engine"]["ep_size"] == 1
    assert make_cost(resolve({**base, "engine": {"ep_size": 8}})).ep == 8
    with pytest.raises(ScenarioError, match=r"engine\.ep_size: 4 with tp 8; expected 1 or 8 \(= tp\)"):
        resolve({**base, "engine": {"ep_size": 4}})
    with pytest.raises(ScenarioError, match=r"engine\.ep_size: 8, but Qwen3-8B has no routed experts; expected 1"):
        resolve({**base, "model": "qwen3-8b", "engine": {"ep_size": 8}})
    with pytest.raises(ScenarioError, match=r"engine\.ep_size: 8 is modelled by cost\.kind operators only"):
        resolve({**base, "engine": {"ep_size": 8}, "cost": {"kind": "roofline"}})
    sc = resolve({**base, "model": {"base": "qwen3-235b-a22b", "kernel_factor": 2.5}})
    assert sc.model.kernel_factor == 2.5 and resolve(base).model.kernel_factor == 1.0
    one, two = make_cost(resolve(base)).cost([(2048, 4096)]), make_cost(sc).cost([(2048, 4096)])
    assert two.compute_s == pytest.approx(2.5 * one.compute_s, **EXACT)
    assert (two.allreduce_s, two.overhead_s, two.memory_s) == (one.allreduce_s, one.overhead_s, one.memory_s)
    roof = {"cost": {"kind": "roofline"}}  # the roofline scales its compute term the same way
    factor = {"model": {"base": "qwen3-235b-a22b", "kernel_factor": 2.5}}
    one, two = (make_cost(resolve({**base, **roof, **b})).cost([(2048, 4096)]) for b in ({}, factor))
    assert two.compute_s == pytest.approx(2.5 * one.compute_s, **EXACT) and two.memory_s == one.memory_s
    for bad in (0, -1, "x", True):
        with pytest.raises(ScenarioError, match=r"model\.kernel_factor: got .*; expected a number > 0"):
            resolve({**base, "model": {"base": "qwen3-235b-a22b", "kernel_factor": bad}})


def test_mla_deepseek_v3_h200_tp8():
    """DeepSeek-V3 (61 MLA layers, 128 heads, kv_lora 512, rope 64, nope 128, v 128; fp8
    weights, 256 experts top-8) at TP8 on H200: prefill decompresses every attended latent row
    (c + n) into K(nope) and V; decode runs absorbed MLA over the replicated latent."""
    hw, f = get_hardware("h200x8"), load_fits()["h100"]
    g, el, ar = f["gemm"], f["elementwise"], f["allreduce"]
    peak8, peak, hbm, nvlink = 1979e12, 989e12, 4.8e12, 450e9
    assert (hw.fp8_flops, hw.bf16_flops, hw.hbm_bytes_per_s) == (peak8, peak, hbm)
    L, hidden, tp, E, k = 61, 7168, 8, 256, 8
    total, active, wb = 671_030_000_000, 37_550_000_000, 1.0
    routed_p = (total - active) / (1 - k / E)
    shared = total - routed_p
    row = (512 + 64) * 2
    n, c = 512, 1024
    linear = L * pair(g, peak8, hbm, hidden, n, shared / (L * tp), shared * wb / (L * tp))
    linear += L * routed(g, peak8, hbm, hidden, n, E, k, L, tp, routed_p, routed_p * wb)
    keys = L * keys_full(n, c)
    pair_prefill = 2 * 128 * (192 + 128)
    attn = (max(pair_prefill * keys / (tp * peak * fa(keys / (n * L))), L * (c + n) * row / (hbm * 0.6))
            + L * g["t0_s"])
    dn, dk = 128 * (128 + 128) / tp, 512
    mla = L * gemm(g, peak8, hbm, c + n, dn, dk, dn * dk * 2)
    expect = (linear + attn + mla + elementwise(el, L, n, hidden, hbm) + allreduce(ar, L, n, hidden, tp, nvlink)
              + 3e-3 + L * 10e-6)
    om = OperatorCostModel("deepseek-v3", hw, tp)
    assert om.prefill_time_s([(n, c)]) == pytest.approx(expect, **EXACT)

    ctx = 4000  # decode, absorbed: pairs of (512 + 64) + 512 per head
    linear = L * pair(g, peak8, hbm, hidden, 1, shared / (L * tp), shared * wb / (L * tp))
    linear += L * routed(g, peak8, hbm, hidden, 1, E, k, L, tp, routed_p, routed_p * wb)
    keys = L * (ctx + 1)
    attn = (max(2 * 128 * (512 + 64 + 512) * keys / (tp * peak * fa(keys / L)), L * (ctx + 1) * row / (hbm * 0.6))
            + L * g["t0_s"])
    expect = linear + attn + elementwise(el, L, 1, hidden, hbm) + allreduce(ar, L, 1, hidden, tp, nvlink) + 3e-3
    assert om.decode_time_s([ctx]) == pytest.approx(expect, **EXACT)


def test_hybrid_swa_state_inkling_small_h200_tp4():
    """Inkling-Small (42 layers: 7 full + 35 sliding-window of 512 tokens, a short-conv state
    of 36,864 elements in all 42 layers, 3,096,576 state bytes per request; 256 experts top-6,
    bf16) at TP4 on H200. The window caps a late chunk's keys at 512 per token and its KV rows
    at 511 + n; the state is read (c > 0) and written."""
    hw, f = get_hardware("h200x4"), load_fits()["h100"]
    g, el, ar = f["gemm"], f["elementwise"], f["allreduce"]
    peak, hbm, nvlink = 989e12, 4.8e12, 450e9
    L, hidden, tp, E, k, W = 42, 4096, 4, 256, 6, 512
    total, active = 276_000_000_000, 12_000_000_000
    routed_p = (total - active) / (1 - k / E)
    shared = total - routed_p
    n, c = 256, 2000
    linear = L * pair(g, peak, hbm, hidden, n, shared / (L * tp), shared * 2 / (L * tp))
    linear += L * routed(g, peak, hbm, hidden, n, E, k, L, tp, routed_p, routed_p * 2)
    keys = 7 * keys_full(n, c) + 35 * keys_window(n, c, W)
    assert keys_window(n, c, W) == n * W
    row = 8 * 256 * 2
    kv = (7 * (c + n) + 35 * (W - 1 + n)) * row / 4
    attn = max(4 * 32 * 128 * keys / (tp * peak * fa(keys / (n * 42))), kv / (hbm * 0.6)) + 42 * g["t0_s"]
    state = max(42 * 2 * 36_864 * n / (tp * peak * g["e_max"]), 3_096_576 * 2 / tp / (hbm * 0.6))
    expect = (linear + attn + state + elementwise(el, L, n, hidden, hbm)
              + allreduce(ar, L, n, hidden, tp, nvlink) + 3e-3 + L * 10e-6)
    om = OperatorCostModel("inkling-small", hw, tp)
    assert om.prefill_time_s([(n, c)]) == pytest.approx(expect, **EXACT)


def test_scenario_default_is_operators_and_rejects_unused_knobs():
    from radixsim.run import make_cost
    from scenarios.scenario import ScenarioError, load, resolve
    base = {**load("quickstart"), "model": "qwen3-8b", "hardware": "a100-40gbx1", "tp": 1}
    sc = resolve(base)
    assert sc.doc["cost"]["kind"] == "operators"
    assert type(make_cost(sc)) is OperatorCostModel
    with pytest.raises(ScenarioError, match=r"cost\.efficiency\.mfu_prefill: not used by cost\.kind operators"):
        resolve({**base, "cost": {"efficiency": {"mfu_prefill": 0.1}}})
    rf = resolve({**base, "cost": {"kind": "roofline", "efficiency": {"mfu_prefill": 0.1}}})
    assert type(make_cost(rf)) is RooflineCostModel


@pytest.mark.parametrize("device", ["a100", "h100"])
def test_the_fit_script_fits_the_gemm_time_the_simulator_prices(device):
    """benchmarks/fit_operators.py fits `gemm_time` to Vidur's profiles: with the fitted values it
    is `OperatorCostModel.gemm_s` of a bf16 weight (N x K x 2 bytes) on the preset fitted against."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "fit_operators.py"
    spec = importlib.util.spec_from_file_location("fit_operators", path)
    fit_operators = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_operators)
    fit = load_fits()[device]
    hw = get_hardware(fit["fit_against"]["preset"])
    cost = OperatorCostModel("llama-3.1-8b", hw, 1)
    assert cost.gemm_fit is fit["gemm"] and cost.linear_peak_flops == hw.bf16_flops
    params = [fit["gemm"][name] for name in fit_operators.GEMM_PARAMS]
    for m, n, k in ((1, 4096, 4096), (16, 14336, 4096), (333, 4096, 14336), (8192, 6144, 4096)):
        got = fit_operators.gemm_time(params, m, n, k, hw.bf16_flops, hw.hbm_bytes_per_s)
        assert got == pytest.approx(cost.gemm_s(m, n, k, 2 * n * k), **EXACT)


def test_token_terms_are_priced_once_per_token_count():
    """A step's terms that depend only on its token count (weight bytes, GEMMs, elementwise,
    all-reduce, all-to-all) are computed once per count and reused, with the same values."""
    om = OperatorCostModel("qwen3-8b", get_hardware("a100-40gbx1"), 1)
    calls = []
    linear_s = om.linear_s
    om.linear_s = lambda tokens: calls.append(tokens) or linear_s(tokens)
    a = om.cost([(3, 10)], [5000])       # 4 tokens
    b = om.cost((), [1, 2, 3, 4])         # 4 tokens again: reused
    om.cost([(5, 0)], ())                 # 5 tokens
    assert calls == [4, 5]
    assert om.token_terms(4) == (om.weight_read_bytes(4), linear_s(4), om.elementwise_s(4),
                                 om.allreduce_s(4), om.alltoall_s(4))
    assert (a.weight_bytes, a.allreduce_s, a.alltoall_s) == (b.weight_bytes, b.allreduce_s, b.alltoall_s)
    fresh = OperatorCostModel("qwen3-8b", get_hardware("a100-40gbx1"), 1)
    assert fresh.cost((), [1, 2, 3, 4]) == b


# -- the fit is a preset field (issue 30: a new GPU family silently used the H100 fits) --------

def test_every_preset_names_the_fit_its_gpu_used_before():
    from scenarios.presets import HARDWARE

    fits = {name: hw.operator_fit for name, hw in HARDWARE.items()}
    family = {"h200": "h100", "a100-40gb": "a100", "a100-80gb": "a100", "h100": "h100", "h800": "h100", "b200": "h100",
              "h20": "h100"}
    assert fits == {f"{key}x{n}": fit for key, fit in family.items() for n in (1, 2, 4, 8)}
    assert all("operator_fit" in hw.sources for hw in HARDWARE.values())


def test_the_fit_comes_from_the_field_not_the_gpu_name():
    import dataclasses

    from sim.operators import device_fit

    a100 = get_hardware("a100-80gbx1")
    assert device_fit(a100) == load_fits()["a100"]
    assert device_fit(dataclasses.replace(a100, operator_fit="h100")) == load_fits()["h100"]


def test_a_preset_without_fits_is_refused_naming_the_preset_and_the_field():
    import dataclasses

    new = dataclasses.replace(get_hardware("h200x1"), name="x300x1", gpu_name="NVIDIA X300", operator_fit=None)
    with pytest.raises(ValueError) as e:
        OperatorCostModel(get_model("qwen3-8b"), new, 1)
    assert str(e.value) == ("hardware x300x1: operator_fit None: expected one of a100, h100 (the fits of "
                            "sim/opdata/vidur_fit.json; a scenario may set hardware.operator_fit), "
                            "or cost.kind roofline or table")
    RooflineCostModel(get_model("qwen3-8b"), new, 1)  # a model that needs no fit still runs


def test_a_scenario_naming_an_unknown_fit_is_refused_in_one_line(tmp_path, capsys):
    from helpers import run_main

    out = tmp_path / "out"
    rc, stdout, err = run_main(capsys, ["run", "quickstart", "--smoke", "--no-plots", "--no-progress",
                                        "--set", "hardware.operator_fit=b200", "--out", str(out)])
    assert (rc, stdout) == (2, "")
    assert err == ("radixsim run: quickstart: hardware h200x1: operator_fit 'b200': expected one of a100, h100 "
                   "(the fits of sim/opdata/vidur_fit.json; a scenario may set hardware.operator_fit), "
                   "or cost.kind roofline or table\n")
    assert not out.exists()
