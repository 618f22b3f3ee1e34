"""Model and hardware presets: every byte count recomputed by hand from the layer counts,
heads, dims and dtypes of MODELS.md; every numeric field sourced; l1_tokens_auto by hand."""
import dataclasses
import math

import pytest

from cache_core.config import CacheConfig, MambaConfig, SidecarConfig, SwaConfig
from cache_core import RadixCache
from scenarios.presets import (
    HARDWARE, MODELS, GiB, HardwarePreset, ModelPreset, bytes_per_token, describe, get_hardware,
    get_model, kv_shards, l1_plan, l1_tokens_auto,
)

GB = 10**9
BF16, FP8, FP32 = 2, 1, 4
K_AND_V = 2

# (FULL KV, SWA KV, MAMBA state) bytes, written out by hand from MODELS.md's geometry.
DSV4_ROW = 448 * FP8 + 64 * BF16 + 8          # 584 B: nope fp8 + rope bf16 + scales
HAND = {
    # every layer is SWA (W=128); FULL has no KV of its own (its compressed KV is sidecars)
    "dsv4-flash": (0, DSV4_ROW * 43, 0),                                    # 25,112
    "dsv4-pro": (0, DSV4_ROW * 61, 0),                                      # 35,624
    # 24 MLA layers x (kv_lora 512 + rope 64) x bf16; 69 KDA layers of state
    "kimi-k3": ((512 + 64) * BF16 * 24, 0,
                69 * (3 * (96 * 128) * 3 * BF16 + 96 * 128 * 128 * FP32)),   # 27,648 / 449,372,160
    # 7 FULL + 35 SWA layers x 8 kv heads x 128 x (K,V) x bf16; short conv on all 42 layers
    "inkling-small": (7 * 8 * 128 * K_AND_V * BF16, 35 * 8 * 128 * K_AND_V * BF16,
                      42 * 3 * (4 * 1024 + 2 * 4096) * BF16),                 # 28,672 / 143,360 / 3,096,576
    "qwen3-32b": (64 * 8 * 128 * K_AND_V * BF16, 0, 0),                    # 262,144
    # 12 full + 12 SWA layers x 8 kv heads x head_dim 64 x (K,V) x bf16
    "gpt-oss-20b": (12 * 8 * 64 * K_AND_V * BF16, 12 * 8 * 64 * K_AND_V * BF16, 0),  # 24,576 each
    # 12 full layers x 2 kv heads x 256 x (K,V) x bf16; 36 GDN layers (16 K, 32 V heads x 128)
    "qwen3-next-80b": (12 * 2 * 256 * K_AND_V * BF16, 0,
                       36 * ((32 * 128 + 2 * 16 * 128) * 3 * BF16 + 32 * 128 * 128 * FP32)),
    # 15 full layers x 2 kv heads x 256 x (K,V) x bf16; 45 GDN layers (16 K, 64 V heads x 128)
    "qwen3.5-397b": (15 * 2 * 256 * K_AND_V * BF16, 0,
                     45 * ((64 * 128 + 2 * 16 * 128) * 3 * BF16 + 64 * 128 * 128 * FP32)),
    "llama-3.1-8b": (32 * 8 * 128 * K_AND_V * BF16, 0, 0),                 # 131,072
    "llama-3.1-70b": (80 * 8 * 128 * K_AND_V * BF16, 0, 0),                # 327,680
    # docs/sources/models.md
    "qwen3-8b": (36 * 8 * 128 * K_AND_V * BF16, 0, 0),                     # 147,456
    "qwen3-235b-a22b": (94 * 4 * 128 * K_AND_V * BF16, 0, 0),              # 192,512
    "deepseek-v3": (61 * (512 + 64) * BF16, 0, 0),                         # MLA latent + rope: 70,272
    "glm-4.5-air": (46 * 8 * 128 * K_AND_V * BF16, 0, 0),                  # 188,416
    "gpt-oss-120b": (18 * 8 * 64 * K_AND_V * BF16, 18 * 8 * 64 * K_AND_V * BF16, 0),  # 36,864 each
}
SOURCE_PREFIXES = ("MODELS.md", "HARDWARE.md", "docs/sources/models.md", "docs/sources/hardware.md", "assumption:")


def test_registry_has_every_family():
    assert set(MODELS) == set(HAND)
    assert set(HARDWARE) == {f"{gpu}x{n}" for gpu in ("h200", "a100-40gb", "a100-80gb", "h100", "h800", "b200",
                                                          "h20")
                             for n in (1, 2, 4, 8)}


@pytest.mark.parametrize("key", sorted(HAND))
def test_kv_and_state_bytes_match_hand_computation(key):
    m = get_model(key)
    full, swa, state = HAND[key]
    assert m.full_kv_bytes_per_token == full
    assert m.swa_kv_bytes_per_token == swa
    assert m.state_bytes == state
    assert m.kv_bytes_per_token == {"full": full, "swa": swa}
    assert bytes_per_token(m, "full", sidecars=False) == full
    assert bytes_per_token(m, "swa", sidecars=False) == swa


def test_hand_numbers_match_the_models_md_derived_lines():
    assert HAND["dsv4-flash"][1] == 25_112 and HAND["dsv4-pro"][1] == 35_624
    assert HAND["kimi-k3"] == (27_648, 0, 449_372_160)
    assert HAND["inkling-small"] == (28_672, 143_360, 3_096_576)
    assert HAND["qwen3-32b"][0] == 262_144
    assert HAND["gpt-oss-20b"] == (24_576, 24_576, 0)
    assert HAND["qwen3-next-80b"] == (24_576, 0, 77_266_944)
    assert HAND["qwen3.5-397b"] == (30_720, 0, 192_061_440)
    assert HAND["llama-3.1-8b"][0] == 131_072


def test_llama_70b_matches_hardware_md_320_kib_reference():
    # 80 layers x 8 kv heads x 128 dim x 2 (K,V) x 2 bytes = 327,680 B = 320 KiB/token
    assert get_model("llama-3.1-70b").full_kv_bytes_per_token == 80 * 8 * 128 * 2 * 2 == 320 * 1024


@pytest.mark.parametrize("key,c4,c128", [("dsv4-flash", 21, 20), ("dsv4-pro", 30, 31)])
def test_dsv4_sidecars_by_hand(key, c4, c128):
    m = get_model(key)
    sc = {s.name: s for s in m.sidecars}
    assert {n: s.follows for n, s in sc.items()} == {
        "c4_kv": "full", "c4_indexer": "full", "c128_kv": "full",      # three follow FULL
        "c4_compressor": "swa", "c128_compressor": "swa"}              # two follow SWA
    assert sc["c4_kv"].bytes_per_token == 584 / 4 * c4                # one row per 4 tokens
    assert sc["c4_indexer"].bytes_per_token == (128 + 4) / 4 * c4     # 128 fp8 + 4 B scale
    assert sc["c128_kv"].bytes_per_token == 584 / 128 * c128
    c4_ring = 8 * (4 * 512 + 4 * 128) * FP32                          # 81,920 B per request per layer
    c128_ring = 128 * 4096                                            # 524,288 B
    assert sc["c4_compressor"].bytes_per_token == c4_ring / 256 * c4 == 320 * c4
    assert sc["c128_compressor"].bytes_per_token == c128_ring / 256 * c128 == 2048 * c128
    assert m.compressed_layers == ((4, c4), (128, c128))
    assert m.state_bytes == 0 and m.components == ("full", "swa")
    assert m.swa_window_tokens == 128 and m.kv_dtype_bytes == 1 and m.swa_full_tokens_ratio == 0.1


def test_dsv4_sidecar_totals_match_models_md():
    flash, pro = get_model("dsv4-flash"), get_model("dsv4-pro")
    assert flash.sidecar_bytes_per_token("full") == 3_850.25        # MODELS.md: 3,850.25 B/token
    assert pro.sidecar_bytes_per_token("full") == 5_511.4375        # MODELS.md: 5,511.4 B/token
    # the SWA sidecars = the per-request compressor rings over one 256-token SWA page
    assert flash.sidecar_bytes_per_token("swa") * 256 == 12_206_080
    assert pro.sidecar_bytes_per_token("swa") * 256 == 18_710_528
    assert bytes_per_token(flash, "full") == 3_850.25
    assert bytes_per_token(flash, "SWA") == 25_112 + 47_680
    assert bytes_per_token(flash, RadixCache(CacheConfig(swa=SwaConfig(window_tokens=8))).swa) == 25_112 + 47_680


def test_layer_mix_of_each_family():
    ink = get_model("inkling-small")
    assert (ink.full_layers, ink.swa_layers, ink.swa_window_tokens, ink.state_layers) == (7, 35, 512, 42)
    assert ink.recurrent_kind == "short-conv" and ink.components == ("full", "swa", "mamba")
    oss = get_model("gpt-oss-20b")
    assert (oss.full_layers, oss.swa_layers, oss.swa_window_tokens) == (12, 12, 128)
    nxt = get_model("qwen3-next-80b")
    assert nxt.recurrent_layers == 3 * nxt.full_layers                # 3:1 linear : full
    q35 = get_model("qwen3.5-397b")
    assert q35.recurrent_layers == 3 * q35.full_layers
    k3 = get_model("kimi-k3")
    assert (k3.full_layers, k3.recurrent_layers, k3.recurrent_kind) == (24, 69, "kda")
    assert k3.components == ("full", "mamba")
    assert get_model("qwen3-32b").components == ("full",)


@pytest.mark.parametrize("key", sorted(HAND))
def test_every_numeric_field_has_a_source(key):
    m = get_model(key)
    for f in dataclasses.fields(m):
        v = getattr(m, f.name)
        numeric = (isinstance(v, (int, float)) and not isinstance(v, bool)) or f.name == "compressed_layers" and v
        if numeric:
            assert f.name in m.sources, f"{key}.{f.name} has no source"
    for s in m.sidecars:
        assert f"sidecar:{s.name}" in m.sources
    for k, text in m.sources.items():
        assert text.startswith(SOURCE_PREFIXES), (key, k, text)


@pytest.mark.parametrize("key", sorted(HARDWARE))
def test_every_hardware_field_has_a_source(key):
    h = get_hardware(key)
    for f in dataclasses.fields(h):
        v = getattr(h, f.name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert f.name in h.sources and h.sources[f.name].startswith(SOURCE_PREFIXES)


def test_params_and_weights():
    assert get_model("dsv4-flash").total_params == 284 * GB
    assert get_model("dsv4-flash").weight_bytes == 284 * GB              # fp8, 1 B/param
    experts = 384 * 3 * 7168 * 3072 * 61
    assert get_model("dsv4-pro").weight_bytes == experts // 2 + (1600 * GB - experts)
    assert get_model("inkling-small").weight_bytes == 276 * GB * 2
    assert get_model("llama-3.1-70b").weight_bytes == 70_550_000_000 * 2
    for m in MODELS.values():
        assert m.active_params <= m.total_params


def test_hardware_presets():
    h = get_hardware("h200x4")
    assert h.num_gpus == 4 and h.hbm_bytes_per_gpu == 140 * GiB and h.hbm_bytes == 4 * 140 * GiB
    assert h.nvlink_bytes_per_s == 450e9 and h.pcie_bytes_per_s == 35.2e9 and h.pcie_peak_bytes_per_s == 64e9
    assert h.d2d_copy_bytes_per_s == 4.3e12 / 2
    assert h.host_dram_bytes == 32 * 64 * GiB and h.l3_bytes_per_s == 190e9
    assert [get_hardware(f"h200x{n}").num_gpus for n in (1, 4, 8)] == [1, 4, 8]


def test_l1_tokens_auto_dsv4_flash_h200x4_by_hand():
    # seed figure 4: --tp 4 --mem-fraction-static 0.9 --page-size 64
    budget = 140 * GiB * 0.9 - 284 * GB / 4                 # per GPU, weights split over 4 ranks
    full_side = 146 * 21 + 33 * 21 + 4.5625 * 20            # C4 KV + C4 indexer + C128 KV
    swa_side = 320 * 21 + 2048 * 20                         # compressor rings
    cell = 0 + full_side + 0.1 * (584 * 43 + swa_side)      # 1 KV head: replicated on every rank
    assert cell == 11_129.45
    tokens = math.floor(budget / cell)
    assert l1_tokens_auto("dsv4-flash", "h200x4", 4, 0.9) == tokens == 5_776_697
    plan = l1_plan(get_model("dsv4-flash"), get_hardware("h200x4"), 4, 0.9, page_size=64)
    assert plan.full_tokens == tokens // 64 * 64 == 5_776_640
    assert plan.swa_tokens == int(5_776_640 * 0.1) and plan.mamba_slots is None
    assert plan.kv_shards == 1


def test_l1_tokens_auto_inkling_h200x8_by_hand():
    # seed figure 4: --tp 8 --mem-fraction-static 0.85 --swa-full-tokens-ratio 0.1
    # --mamba-full-memory-ratio 0.1 --max-total-tokens 750080 --page-size 64
    budget = 140 * GiB * 0.85 - 276 * GB * 2 / 8
    attn = 28_672 / 8 + 0.1 * 143_360 / 8                  # 8 kv heads over 8 ranks
    cell = attn * (1 + 0.1)
    assert math.isclose(cell, 5_913.6)
    tokens = math.floor(budget / cell)
    got = l1_tokens_auto("inkling-small", "h200x8", 8, 0.85, mamba_full_memory_ratio=0.1)
    assert got == tokens == 9_939_001
    capped = l1_plan("inkling-small", "h200x8", 8, 0.85, mamba_full_memory_ratio=0.1,
                     page_size=64, max_total_tokens=750_080)
    assert capped.full_tokens == 750_080 and capped.uncapped_full_tokens == tokens // 64 * 64
    assert capped.swa_tokens == 75_008
    assert capped.mamba_slots == math.floor(0.1 * 750_080 * attn / (3_096_576 / 8)) == 1_041


def test_l1_plan_default_mamba_ratio_and_gqa_replication():
    plan = l1_plan("qwen3-next-80b", "h200x8", 8, 0.9)
    assert plan.kv_shards == 2                               # 2 kv heads: replicated 4x at TP8
    assert plan.cell_bytes_per_gpu == 24_576 / 2 * (1 + 0.9)
    assert kv_shards(get_model("llama-3.1-70b"), 4) == 4
    assert kv_shards(get_model("kimi-k3"), 8) == 1


def test_l1_plan_feeds_cache_config():
    m = get_model("inkling-small")
    plan = l1_plan(m, "h200x8", 8, 0.85, mamba_full_memory_ratio=0.1, page_size=64, max_total_tokens=750_080)
    cfg = CacheConfig(page_size=64, capacity_tokens=plan.full_tokens,
                      swa=SwaConfig(window_tokens=m.swa_window_tokens, full_tokens_ratio=m.swa_full_tokens_ratio),
                      mamba=MambaConfig(slots=plan.mamba_slots), sidecars=m.sidecars)
    assert cfg.swa_tokens == plan.swa_tokens
    d = get_model("dsv4-flash")
    assert CacheConfig(capacity_tokens=1000, swa=SwaConfig(window_tokens=128), sidecars=d.sidecars).components[-1] \
        == "sidecar:c128_compressor@swa"


def test_l1_plan_rejects_what_does_not_fit_or_is_malformed():
    with pytest.raises(ValueError, match="exceed"):
        l1_tokens_auto("kimi-k3", "h200x8", 8, 0.9)          # ~1.5 TB of weights
    with pytest.raises(ValueError, match="tp"):
        l1_tokens_auto("llama-3.1-8b", "h200x4", 8, 0.9)
    with pytest.raises(ValueError, match="mem_fraction_static"):
        l1_tokens_auto("llama-3.1-8b", "h200x1", 1, 1.5)


def test_unknown_names_raise_with_the_known_list():
    with pytest.raises(ValueError) as e:
        get_model("gpt-5")
    for key in MODELS:
        assert key in str(e.value)
    with pytest.raises(ValueError) as e:
        get_hardware("mi300xx8")
    assert "h200x1, h200x2, h200x4, h200x8, a100-40gbx1" in str(e.value)
    assert get_model("Llama-3.1-70B") is MODELS["llama-3.1-70b"]


def test_post_init_validates():
    m = get_model("llama-3.1-8b")
    with pytest.raises(ValueError, match="full_kv_bytes_per_token"):
        dataclasses.replace(m, full_kv_bytes_per_token=1)
    with pytest.raises(ValueError, match="layers"):
        dataclasses.replace(m, num_layers=33)
    src = dict(m.sources)
    del src["hidden_size"]
    with pytest.raises(ValueError, match="no source"):
        dataclasses.replace(m, sources=src)
    with pytest.raises(ValueError, match="cite"):
        dataclasses.replace(m, sources={**m.sources, "hidden_size": "trust me"})
    with pytest.raises(ValueError, match="follows 'swa'"):
        dataclasses.replace(m, sidecars=(SidecarConfig(name="x", follows="swa", bytes_per_token=1.0),),
                            sources={**m.sources, "sidecar:x": "assumption: test"})
    with pytest.raises(ValueError, match="state_bytes"):
        dataclasses.replace(get_model("kimi-k3"), state_bytes=1)
    h = get_hardware("h200x1")
    with pytest.raises(ValueError, match="PCIe"):
        dataclasses.replace(h, pcie_direct_bytes_per_s=1e12)
    with pytest.raises(ValueError, match="no source"):
        dataclasses.replace(h, sources={})
    assert isinstance(m, ModelPreset) and isinstance(h, HardwarePreset)


def test_bytes_per_token_and_describe():
    m = get_model("inkling-small")
    assert bytes_per_token(m, "FULL") == 28_672 and bytes_per_token(m, "swa") == 143_360
    with pytest.raises(ValueError, match="state_bytes"):
        bytes_per_token(m, "mamba")
    with pytest.raises(ValueError):
        bytes_per_token(m, "l3")
    for key, model in MODELS.items():
        line = describe(model)
        assert "\n" not in line and model.name in line
    assert "SWA 25,112+47,680 sidecar" in describe(get_model("dsv4-flash"))
