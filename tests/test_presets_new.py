"""The presets added from docs/sources/ (issue 15): weight bytes and parameter counts from the
configs by hand, every hardware field of the new GPUs and node slices, and l1_tokens_auto for the
published runs' setups (Qwen3-8B on one A100-40GB, Qwen3-235B-A22B on 8x H800)."""
import math

import pytest

from scenarios.presets import GiB, get_hardware, get_model, l1_plan

GB = 10**9


def test_qwen3_8b_params_and_weights_by_hand():
    embed = 2 * 151_936 * 4096                              # embedding + untied LM head
    layer = 4096 * 128 * (32 + 2 * 8) + 32 * 128 * 4096 + 3 * 4096 * 12_288
    m = get_model("Qwen3-8B")
    assert m.total_params == m.active_params == 36 * layer + embed == 8_190_427_136
    assert m.weight_bytes == 2 * 8_190_427_136                # bf16


def test_qwen3_235b_params_and_weights_by_hand():
    attn = 4096 * 128 * (64 + 2 * 4) + 64 * 128 * 4096      # 71,303,168 (models.md)
    expert = 3 * 4096 * 1536
    router = 4096 * 128
    embed = 2 * 151_936 * 4096
    m = get_model("qwen3-235b-a22b")
    assert attn == 71_303_168
    assert m.total_params == 94 * (attn + 128 * expert + router) + embed == 235_092_836_352
    assert m.active_params == 94 * (attn + 8 * expert + router) + embed == 22_189_965_312
    assert m.weight_bytes == 470_185_672_704
    assert (m.num_kv_heads, m.full_layers, m.components) == (4, 94, ("full",))


def test_deepseek_v3_glm_gpt_oss_120b_weights_by_hand():
    dsv3 = get_model("deepseek-v3")
    assert dsv3.attention == "mla" and dsv3.kv_row_bytes == (512 + 64) * 2 == 1152
    assert dsv3.weight_bytes == 671_030_000_000                # fp8, 1 B/param
    assert get_model("glm-4.5-air").weight_bytes == 213_700_000_000
    experts = 128 * 3 * 2880 * 2880 * 36                      # 114,661,785,600 MXFP4 params
    oss = get_model("gpt-oss-120b")
    assert oss.weight_bytes == experts * 17 // 32 + (116_790_000_000 - experts) * 2 == 65_170_502_400
    assert (oss.full_layers, oss.swa_layers, oss.swa_window_tokens) == (18, 18, 128)


@pytest.mark.parametrize("key,hbm,hbm_bw,bf16,fp8,nvlink,pcie,peak,nic,l3", [
    ("a100-40gb", 40 * GiB, 1.555e12, 312e12, 312e12, 300e9, 25.13e9, 32e9, 200e9, 95e9),
    ("a100-80gb", 80 * GiB, 2.039e12, 312e12, 312e12, 300e9, 25.13e9, 32e9, 200e9, 95e9),
    ("h100", 81_559 * 2**20, 3.35e12, 989.4e12, 1978.9e12, 450e9, 35.2e9, 64e9, 400e9, 190e9),
    ("h800", 81_559 * 2**20, 3.35e12, 989.4e12, 1978.9e12, 200e9, 35.2e9, 64e9, 400e9, 190e9),
    ("b200", 179 * GB, 8e12, 2250e12, 4500e12, 900e9, 35.2e9, 64e9, 400e9, 190e9),
])
def test_new_hardware_fields(key, hbm, hbm_bw, bf16, fp8, nvlink, pcie, peak, nic, l3):
    for n in (1, 2, 4, 8):
        h = get_hardware(f"{key}x{n}")
        assert (h.num_gpus, h.hbm_bytes_per_gpu, h.hbm_bytes) == (n, hbm, n * hbm)
        assert (h.hbm_bytes_per_s, h.bf16_flops, h.fp8_flops) == (hbm_bw, bf16, fp8)
        assert (h.nvlink_bytes_per_s, h.pcie_bytes_per_s, h.pcie_peak_bytes_per_s) == (nvlink, pcie, peak)
        assert (h.nic_bytes_per_s, h.l3_bytes_per_s) == (nic, l3)
        assert h.bf16_matmul_measured_flops == bf16 * 790 / 989
        assert h.d2d_copy_bytes_per_s == hbm_bw * 4.3 / 4.8 / 2
        assert (h.pcie_latency_s, h.l3_latency_s, h.l3_block_overhead_s) == (10e-6, 100e-6, 0.52e-6)


def test_l1_auto_qwen3_8b_on_one_a100_40gb_by_hand():
    budget = 40 * GiB * 0.88 - 2 * 8_190_427_136             # one rank holds every weight
    tokens = math.floor(budget / 147_456)
    plan = l1_plan("qwen3-8b", "a100-40gbx1", 1, 0.88, page_size=64)
    assert tokens == 145_228 and plan.full_tokens == tokens // 64 * 64 == 145_216


def test_l1_auto_qwen3_235b_on_8x_h800_by_hand():
    budget = 81_559 * 2**20 * 0.88 - 470_185_672_704 / 8
    cell = 192_512 / 4                                        # 4 KV heads over 8 ranks: 4 shards
    plan = l1_plan("qwen3-235b-a22b", "h800x8", 8, 0.88, page_size=64)
    assert plan.kv_shards == 4 and plan.cell_bytes_per_gpu == cell == 48_128
    assert plan.full_tokens == math.floor(budget / cell) // 64 * 64 == 342_464
