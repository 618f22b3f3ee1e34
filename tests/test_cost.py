"""The step-time cost model: FLOPs, bytes and times against hand computations written out
here from the presets' geometry (MODELS.md) and HARDWARE.md's H200 numbers; monotonicity and
bounds that follow from the formulas; the fitted table's interpolation and its errors."""
import dataclasses
import json
import math

import numpy as np
import pytest

from scenarios.presets import get_hardware, get_model
from sim.cost import (
    EFFICIENCY_SOURCES, NVLINK_LATENCY_S, Efficiency, RooflineCostModel, TableCostModel,
    causal_keys, compressed_rows, parse_batch, parse_contexts, topk_rows, transfer_time_s, window_keys,
)

EXACT = dict(rel=1e-12)
# H200 (HARDWARE.md, as in scenarios/presets.py)
BF16_PEAK = 989e12
FP8_PEAK = 1979e12
HBM = 4.8e12
NVLINK = 450e9
# Efficiency defaults
MFU_P, MFU_D, HBM_EFF, AR_EFF, AR_LAT, STEP_OVH, LAYER_OVH = 0.5, 0.3, 0.6, 0.7, 10e-6, 3e-3, 10e-6

# Llama-3.1-8B (MODELS.md): 32 full layers, 32 q heads x 128, 8 KV heads x 128, bf16,
# 8.03B params (dense), hidden 4096.
L8_LAYERS, L8_PARAMS, L8_HIDDEN = 32, 8.03e9, 4096
L8_PAIR = 2 * 32 * (128 + 128)        # QK^T + PV per (query, key) pair = 4 x d_attn = 16,384
L8_ROW = 8 * (128 + 128) * 2          # KV bytes per token per layer = 4,096
L8_OVH = STEP_OVH + L8_LAYERS * LAYER_OVH


def llama(tp=1, hw=None, **eff):
    return RooflineCostModel("llama-3.1-8b", hw or f"h200x{max(tp, 1)}", tp, Efficiency(**eff))


# ------------------------------------------------------------------------------------------
# closed-form key counts
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m", [0, 1, 5, 127, 128, 129, 1000, 4097])
def test_key_sums_match_brute_force(m):
    q = np.arange(1, m + 1)
    assert causal_keys(m) == q.sum()
    assert window_keys(m, 128) == np.minimum(q, 128).sum()
    assert compressed_rows(m, 4) == (q // 4).sum()
    assert compressed_rows(m, 128) == (q // 128).sum()
    assert topk_rows(m, 4, 16) == np.minimum(q // 4, 16).sum()


# ------------------------------------------------------------------------------------------
# a known case, by hand
# ------------------------------------------------------------------------------------------

def test_llama_8b_1000_new_tokens_flops_bytes_and_time_by_hand():
    c = llama().cost([(1000, 0)])
    linear = 2 * 8.03e9 * 1000                                    # 1.606e13
    # token i (1..1000) sees i keys: 1000 x 1001 / 2 = 500,500 pairs per layer
    attention = L8_LAYERS * L8_PAIR * 500_500                     # 2.624e11
    assert c.linear_flops == pytest.approx(1.606e13, **EXACT)
    assert c.attention_flops == pytest.approx(attention, **EXACT) == pytest.approx(262_406_144_000, **EXACT)
    assert c.indexer_flops == 0 and c.recurrent_flops == 0
    weights = 2 * 8.03e9                                          # bf16, dense: all weights, tp 1
    kv = L8_LAYERS * 1000 * L8_ROW                                # 131,072,000 B
    assert c.weight_bytes == pytest.approx(weights, **EXACT)
    assert c.kv_bytes == pytest.approx(131_072_000, **EXACT) == pytest.approx(kv, **EXACT)
    assert c.state_bytes == 0 and c.allreduce_bytes == 0 and c.allreduce_s == 0
    compute = (linear + attention) / (BF16_PEAK * MFU_P)          # 33.0 ms
    memory = (weights + kv) / (HBM * HBM_EFF)                     # 5.62 ms
    assert c.compute_s == pytest.approx(compute, **EXACT)
    assert c.memory_s == pytest.approx(memory, **EXACT)
    assert c.bound == "compute"
    assert c.overhead_s == pytest.approx(3e-3 + 32 * 10e-6, **EXACT)
    assert c.total_s == pytest.approx(compute + L8_OVH, **EXACT)
    assert llama().prefill_time_s([(1000, 0)]) == c.total_s
    assert 0.030 < c.total_s < 0.040


def test_sliding_window_and_full_layers_by_hand_gpt_oss():
    # gpt-oss-20b: 12 full + 12 SWA layers (W=128), 64 q heads x 64, 8 KV heads x 64, tp 1.
    m = RooflineCostModel("gpt-oss-20b", "h200x1", 1)
    pair = 2 * 64 * (64 + 64)
    row = 8 * (64 + 64) * 2
    c = m.cost([(100, 1000)])
    full_keys = 100 * 1000 + 100 * 101 // 2        # 105,050 per full layer
    swa_keys = 100 * 128                           # every new token is past the window
    assert c.attention_flops == pytest.approx(pair * (12 * full_keys + 12 * swa_keys), **EXACT)
    # rows read: full layers the whole context, SWA layers the last W-1 cached + the new ones
    assert c.kv_bytes == pytest.approx(row * (12 * 1100 + 12 * (127 + 100)), **EXACT)


def test_deepseek_v4_decode_by_hand():
    # DeepSeek-V4-Flash, one decode token at context 100,000, TP4 (latent KV replicated).
    m = RooflineCostModel("dsv4-flash", "h200x4", 4)
    c = m.cost((), [100_000])
    pair = 2 * 64 * (512 + 512)                    # 64 q heads; the 512-wide latent is K and V
    c4_rows = 100_001 // 4                         # 25,000 compressed rows exist
    c128_rows = 100_001 // 128                     # 781
    keys = 43 * 128 + 21 * 512 + 20 * c128_rows    # window + C4 top-512 + all C128 rows
    assert c.attention_flops == pytest.approx(pair * keys, **EXACT)
    assert c.indexer_flops == pytest.approx(21 * 2 * 64 * 128 * c4_rows, **EXACT)
    assert c.linear_flops == pytest.approx(2 * 13e9, **EXACT)
    kv = 584 * (43 * 128 + 21 * 512 + 20 * c128_rows) + 132 * 21 * c4_rows
    assert c.kv_bytes == pytest.approx(kv, **EXACT)     # kv_shards = 1: not divided by tp
    # one token reads the active weights: shared + routed x 6/256 = 13B params x 1 B (fp8)
    assert c.weight_bytes == pytest.approx(13e9 / 4, rel=1e-9)


def test_moe_weight_reads_grow_to_all_experts():
    m = RooflineCostModel("dsv4-flash", "h200x4", 4)
    f = 6 / 256
    routed = (284e9 - 13e9) / (1 - f)              # routed params (fp8: 1 B each)
    shared = 284e9 - routed
    for t in (1, 16, 256):
        assert m.weight_read_bytes(t) == pytest.approx((shared + routed * (1 - (1 - f) ** t)) / 4, **EXACT)
    assert m.weight_read_bytes(16) < m.weight_read_bytes(256) < 284e9 / 4
    assert m.weight_read_bytes(100_000) == pytest.approx(284e9 / 4, rel=1e-9)
    assert m.weight_read_bytes(0) == 0
    dense = llama()
    assert dense.weight_read_bytes(1) == dense.weight_read_bytes(10_000) == pytest.approx(2 * 8.03e9)


def test_mla_decode_uses_the_absorbed_form_and_state_updates_are_linear():
    k3 = RooflineCostModel("kimi-k3", "h200x8", 8)
    assert k3.pair_flops_prefill == 2 * 96 * (192 + 128)
    assert k3.pair_flops_decode == 2 * 96 * (512 + 64 + 512)
    nxt = RooflineCostModel("qwen3-next-80b", "h200x1", 1)
    per_token = 36 * (6 * 32 * 128 * 128 + 2 * (32 * 128 + 2 * 16 * 128) * 3)
    assert nxt.cost([(10, 0)]).recurrent_flops == pytest.approx(10 * per_token, **EXACT)
    assert nxt.cost([(10, 5000)]).recurrent_flops == pytest.approx(10 * per_token, **EXACT)
    # state: written once; read too once there is a cached prefix
    assert nxt.cost([(10, 0)]).state_bytes == pytest.approx(77_266_944, **EXACT)
    assert nxt.cost([(10, 5000)]).state_bytes == pytest.approx(2 * 77_266_944, **EXACT)


# ------------------------------------------------------------------------------------------
# cached tokens are not recomputed
# ------------------------------------------------------------------------------------------

def test_cached_context_costs_only_through_attention():
    m = llama()
    a, b = m.cost([(100, 0)]), m.cost([(100, 10_000)])
    assert a.linear_flops == b.linear_flops and a.weight_bytes == b.weight_bytes
    assert b.attention_flops - a.attention_flops == pytest.approx(L8_LAYERS * L8_PAIR * 100 * 10_000, **EXACT)
    assert b.kv_bytes - a.kv_bytes == pytest.approx(L8_LAYERS * 10_000 * L8_ROW, **EXACT)
    # (100 new, 10k cached): 2.1e12 FLOPs -> 4.3 ms compute, 17.4 GB -> 6.0 ms memory, +3.3 ms
    # (10.1k new, 0 cached): 1.9e14 FLOPs -> 382 ms. Over 40x apart; ask for 10x.
    assert m.prefill_time_s([(100, 10_000)]) < m.prefill_time_s([(10_100, 0)]) / 10


def test_speedup_at_90_percent_cached_8k_prompt():
    m = llama()
    full, hit = [(8192, 0)], [(820, 7372)]
    # By hand: linear FLOPs fall 8192/820 = 10x; attention FLOPs only 5.3x (the cached keys are
    # still attended: 8192*8193/2 = 33.6M pairs vs 820*7372 + 820*821/2 = 6.38M). Both steps
    # are compute-bound, plus the same 3.32 ms of overhead.
    lin = lambda n: 2 * 8.03e9 * n
    attn_full = L8_LAYERS * L8_PAIR * 8192 * 8193 / 2
    attn_hit = L8_LAYERS * L8_PAIR * (820 * 7372 + 820 * 821 / 2)
    t_full = (lin(8192) + attn_full) / (BF16_PEAK * MFU_P) + L8_OVH
    t_hit = (lin(820) + attn_hit) / (BF16_PEAK * MFU_P) + L8_OVH
    assert m.prefill_time_s(full) == pytest.approx(t_full, **EXACT)
    assert m.prefill_time_s(hit) == pytest.approx(t_hit, **EXACT)
    speedup = t_full / t_hit
    # Sane range: below 1 / (1 - 0.9) = 10 (10% of tokens are computed and still attend to
    # the whole prefix; fixed overheads), above 5 (linear layers are 88% of the full prefill's
    # FLOPs and fall 10x; the overhead is 1% of it). Here: 8.3x.
    assert 5 < speedup < 10
    assert speedup == pytest.approx(8.3, abs=0.1)


# ------------------------------------------------------------------------------------------
# decode, tensor parallelism, sliding windows, mixed steps
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key,hw,tp", [("llama-3.1-8b", "h200x1", 1), ("dsv4-flash", "h200x4", 4),
                                        ("inkling-small", "h200x8", 8), ("kimi-k3", "h200x8", 8)])
def test_decode_grows_with_context_and_batch(key, hw, tp):
    m = RooflineCostModel(key, hw, tp)
    by_ctx = [m.decode_time_s([c] * 8) for c in (0, 1_000, 10_000, 100_000)]
    assert all(a < b for a, b in zip(by_ctx, by_ctx[1:]))
    by_batch = [m.decode_time_s([4_000] * b) for b in (1, 4, 16, 64)]
    assert all(a < b for a, b in zip(by_batch, by_batch[1:]))
    assert m.decode_time_s([4_000] * 16) == m.cost((), [4_000] * 16).total_s


def test_decode_is_memory_bound_weights_plus_kv_by_hand():
    m = llama()
    c = m.cost((), [1000] * 16)
    kv = 16 * L8_LAYERS * 1001 * L8_ROW            # each request reads its 1,000 + 1 rows per layer
    assert c.kv_bytes == pytest.approx(kv, **EXACT)
    assert c.bound == "memory"
    assert c.total_s == pytest.approx((2 * 8.03e9 + kv) / (HBM * HBM_EFF) + L8_OVH, **EXACT)


def test_tp4_is_faster_but_less_than_4x_because_of_all_reduce():
    t1 = llama(1).cost([(8192, 0)])
    t4 = llama(4).cost([(8192, 0)])
    msg = 2 * 32 * 8192 * 4096 * 2                 # two bf16 all-reduces per layer
    assert t4.allreduce_bytes == msg
    assert t4.allreduce_s == pytest.approx(2 * 3 / 4 * msg / (NVLINK * AR_EFF) + 2 * 32 * AR_LAT, **EXACT)
    assert t4.compute_s == pytest.approx(t1.compute_s / 4, **EXACT)
    assert 1 < t1.total_s / t4.total_s < 4
    # the all-reduce is what keeps it under 4x: compute and overhead alone scale by ~3.9x
    assert (t1.total_s / (t4.total_s - t4.allreduce_s)) > 3.8
    d1, d4 = llama(1).decode_time_s([8000] * 32), llama(4).decode_time_s([8000] * 32)
    assert 1 < d1 / d4 < 4


def test_swa_attention_stops_growing_past_the_window():
    # gpt-oss-20b: the increase from c to c' is the 12 full layers' share only, once c >= W - 1
    m = RooflineCostModel("gpt-oss-20b", "h200x1", 1)
    pair = 2 * 64 * (64 + 64)
    base = m.cost([(64, 127)])
    for c in (128, 1_000, 100_000):
        step = m.cost([(64, c)])
        assert step.attention_flops - base.attention_flops == pytest.approx(12 * pair * 64 * (c - 127), **EXACT)
    # and an SWA-only stack (DeepSeek-V4 window part): the window keys per token cap at W
    assert window_keys(10**6 + 64, 128) - window_keys(10**6, 128) == 64 * 128
    assert window_keys(10**4 + 64, 128) - window_keys(10**4, 128) == 64 * 128


def test_mixed_step_reads_weights_once():
    m = llama()
    pre, dec = [(2048, 4096)], [3000] * 16
    mixed = m.step_time_s(pre, dec)
    assert max(m.prefill_time_s(pre), m.decode_time_s(dec)) < mixed < m.prefill_time_s(pre) + m.decode_time_s(dec)
    c = m.cost(pre, dec)
    assert c.weight_bytes == pytest.approx(2 * 8.03e9)
    assert c.prefill_tokens == 2048 and c.decode_tokens == 16
    assert m.step_time_s() == 0.0 and m.prefill_time_s([]) == 0.0 and m.decode_time_s([]) == 0.0


def test_bad_inputs_raise():
    m = llama()
    for bad in ([(0, 5)], [(5, -1)], [(1.5, 0)], [(1, 2, 3)]):
        with pytest.raises(ValueError):
            m.prefill_time_s(bad)
    with pytest.raises(ValueError):
        m.decode_time_s([-1])
    with pytest.raises(ValueError, match="tp must be"):
        RooflineCostModel("llama-3.1-8b", "h200x4", 8)
    with pytest.raises(ValueError, match="mfu_prefill"):
        Efficiency(mfu_prefill=0)
    with pytest.raises(ValueError, match="per_step_overhead_s"):
        Efficiency(per_step_overhead_s=-1e-3)
    assert set(EFFICIENCY_SOURCES) == {f.name for f in dataclasses.fields(Efficiency)}


# ------------------------------------------------------------------------------------------
# transfers
# ------------------------------------------------------------------------------------------

def test_transfer_times_by_hand():
    hw = get_hardware("h200x8")
    assert transfer_time_s(hw, 1e9, "pcie") == pytest.approx(10e-6 + 1e9 / 35.2e9, **EXACT)
    assert transfer_time_s(hw, 1e9, "l3", blocks=16) == pytest.approx(100e-6 + 16 * 0.52e-6 + 1e9 / 190e9, **EXACT)
    assert transfer_time_s(hw, 1e9, "nvlink") == pytest.approx(NVLINK_LATENCY_S + 1e9 / 450e9, **EXACT)
    assert transfer_time_s(hw, 0, "pcie") == 0.0
    assert llama().transfer_time_s(2e9, "pcie") == pytest.approx(10e-6 + 2 / 35.2, **EXACT)
    with pytest.raises(ValueError, match="unknown link"):
        transfer_time_s(hw, 1, "ethernet")
    with pytest.raises(ValueError):
        transfer_time_s(hw, -1, "pcie")
    with pytest.raises(ValueError):
        transfer_time_s(hw, 1, "pcie", blocks=2)


# ------------------------------------------------------------------------------------------
# the fitted table
# ------------------------------------------------------------------------------------------

TABLE = {
    "prefill": [[1000, 0, 0.10], [2000, 0, 0.20], [4000, 0, 0.50],
                [1000, 10000, 0.30], [2000, 10000, 0.60], [4000, 10000, 1.10]],
    "decode": [[1, 1000, 0.010], [16, 1000, 0.020], [1, 100000, 0.030], [16, 100000, 0.090]],
}


def test_table_exact_on_grid_points():
    t = TableCostModel.from_dict(TABLE)
    for tokens, cached, s in TABLE["prefill"]:
        assert t.prefill_time_s([(tokens, cached)]) == pytest.approx(s, **EXACT)
    for batch, ctx, s in TABLE["decode"]:
        assert t.decode_time_s([ctx] * batch) == pytest.approx(s, **EXACT)


def test_table_linear_between_points():
    t = TableCostModel.from_dict(TABLE)
    # tokens 3000 at cached 0: halfway between 0.20 and 0.50
    assert t.prefill_time_s([(3000, 0)]) == pytest.approx(0.35, **EXACT)
    # cached 2500 = a quarter of the way from 0 to 10,000, at a grid token count
    assert t.prefill_time_s([(2000, 2500)]) == pytest.approx(0.20 + 0.25 * (0.60 - 0.20), **EXACT)
    # both axes: 1500 tokens, cached 5000 -> mean of (0.15 at cached 0, 0.45 at 10,000)
    assert t.prefill_time_s([(1500, 5000)]) == pytest.approx(0.30, **EXACT)
    # a batch is looked up at tokens = 2000 and the token-weighted mean cached = 5000
    assert t.prefill_time_s([(1000, 0), (1000, 10_000)]) == pytest.approx(0.5 * (0.20 + 0.60), **EXACT)
    # extrapolation in tokens continues the end segment; the other axis clamps to the nearest
    assert t.prefill_time_s([(5000, 0)]) == pytest.approx(0.50 + 1000 * 0.30 / 2000, **EXACT)
    assert t.prefill_time_s([(1000, 50_000)]) == pytest.approx(0.30, **EXACT)
    # decode: batch 8.5 is not a batch, but mean context interpolates: 50,500 is halfway
    assert t.decode_time_s([1000, 100_000]) == pytest.approx(
        0.5 * ((0.010 + (0.020 - 0.010) / 15) + (0.030 + (0.090 - 0.030) / 15)), **EXACT)
    # a mixed step is one prefill lookup with each decode request as a 1-token extend
    assert t.step_time_s([(1999, 0)], [0]) == pytest.approx(0.20, **EXACT)
    assert t.step_time_s((), [1000] * 16) == pytest.approx(0.020, **EXACT)
    assert t.step_time_s() == 0.0


def test_table_from_json_and_yaml_files(tmp_path):
    pj = tmp_path / "fit.json"
    pj.write_text(json.dumps(TABLE))
    py = tmp_path / "fit.yaml"
    py.write_text("prefill:\n" + "".join(f"  - {r}\n" for r in TABLE["prefill"])
                  + "decode:\n" + "".join(f"  - {r}\n" for r in TABLE["decode"]))
    a = TableCostModel.from_file(pj, hw="h200x8")
    b = TableCostModel.from_file(py)
    assert a.prefill_time_s([(3000, 0)]) == b.prefill_time_s([(3000, 0)]) == pytest.approx(0.35)
    assert a.transfer_time_s(1e9, "pcie") == pytest.approx(10e-6 + 1 / 35.2)
    with pytest.raises(ValueError, match="hardware preset"):
        b.transfer_time_s(1e9, "pcie")


@pytest.mark.parametrize("content,key", [
    ({"prefill": TABLE["prefill"]}, "'decode'"),
    ({"prefill": [], "decode": TABLE["decode"]}, "'prefill'"),
    ({"prefill": TABLE["prefill"], "decode": [[1, 1000]]}, "'decode' row 0"),
    ({"prefill": [[1000, 0, 0.1], [2000, 0, "x"]], "decode": TABLE["decode"]}, "'prefill' row 1"),
    ({"prefill": [[1000, 0, -0.1]], "decode": TABLE["decode"]}, "'prefill' row 0"),
    ({"prefill": [[1000, 0, 0.1], [1000, 0, 0.2]], "decode": TABLE["decode"]}, "'prefill' has duplicate"),
    ({"prefill": TABLE["prefill"], "decode": TABLE["decode"], "extra": []}, "'extra'"),
])
def test_bad_table_files_name_the_file_and_key(tmp_path, content, key):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(content))
    with pytest.raises(ValueError) as e:
        TableCostModel.from_file(p)
    assert str(p) in str(e.value) and key in str(e.value)


def test_unparseable_table_files_name_the_file(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="broken.json"):
        TableCostModel.from_file(p)
    y = tmp_path / "broken.yaml"
    y.write_text("prefill: [1, 2\n")
    with pytest.raises(ValueError, match="broken.yaml"):
        TableCostModel.from_file(y)
    z = tmp_path / "list.yaml"
    z.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="list.yaml"):
        TableCostModel.from_file(z)


def test_presets_used_here_match_the_hand_constants():
    m, hw = get_model("llama-3.1-8b"), get_hardware("h200x1")
    assert (m.full_layers, m.active_params, m.hidden_size, m.kv_row_bytes) == (32, 8.03e9, 4096, L8_ROW)
    assert (hw.bf16_flops, hw.fp8_flops, hw.hbm_bytes_per_s, hw.nvlink_bytes_per_s) == (
        BF16_PEAK, FP8_PEAK, HBM, NVLINK)
    assert math.isclose(get_model("dsv4-flash").kv_row_bytes, 584)


@pytest.mark.parametrize("key,hw,tp", [("dsv4-flash", "h200x4", 4), ("gpt-oss-20b", "h200x1", 1),
                                        ("inkling-small", "h200x8", 8), ("qwen3-next-80b", "h200x4", 4)])
def test_a_decode_token_is_a_one_token_prefill(key, hw, tp):
    m = RooflineCostModel(key, hw, tp)
    ctx = [0, 1, 3, 4, 127, 128, 511, 512, 513, 2047, 2048, 100_003]
    d, p = m.cost((), ctx), m.cost([(1, c) for c in ctx])
    for f in ("attention_flops", "indexer_flops", "recurrent_flops", "linear_flops", "kv_bytes", "state_bytes"):
        assert getattr(d, f) == pytest.approx(getattr(p, f), **EXACT), f


def test_a_registered_cost_model_is_built_by_cost_kind():
    """Cost models are a registry (issue 16 item 4): one registration and `cost.kind` names it."""
    from radixsim.run import make_cost
    from scenarios.scenario import resolve
    from scenarios.cost_kinds import unregister_cost_kind
    from sim.cost_models import _MODELS, register_cost_model

    class Flat:
        def __init__(self, s):
            self.s = s

    @register_cost_model("test-flat")
    def flat(sc):
        return Flat(0.001 * sc.tp)

    try:
        sc = resolve({"model": "qwen3-32b", "hardware": "h200x2", "tp": 2, "cache": {"l1_tokens": 4096},
                      "workload": {"num_rounds": 2, "request_length": 256, "output_length": 8},
                      "cost": {"kind": "test-flat"}}, "s.yaml")
        cost = make_cost(sc)
        assert type(cost) is Flat and cost.s == 0.002
    finally:
        del _MODELS._classes["test-flat"]
        unregister_cost_kind("test-flat")


def test_parsers_take_plain_ints_as_the_checked_path_does():
    """parse_batch/parse_contexts build the same int64 arrays from plain ints as from any
    other numbers, and reject the same bad input."""
    new, cached = parse_batch(((3, 0), (5, 7)))
    ref_new, ref_cached = parse_batch(np.array([[3, 0], [5, 7]]))
    assert new.dtype == cached.dtype == np.int64
    assert new.tolist() == ref_new.tolist() == [3, 5] and cached.tolist() == ref_cached.tolist() == [0, 7]
    assert [a.shape for a in parse_batch(())] == [(0,), (0,)]
    ctx = parse_contexts((0, 4, 9))
    assert ctx.dtype == np.int64 and ctx.tolist() == parse_contexts([0.0, 4.0, 9.0]).tolist() == [0, 4, 9]
    for bad in (((0, 1),), ((1, -1),), ((1.5, 0),)):
        with pytest.raises(ValueError, match=r"^prefill batch: "):
            parse_batch(bad)
    with pytest.raises(ValueError, match=r"^decode contexts must be integers >= 0"):
        parse_contexts((3, -1))
