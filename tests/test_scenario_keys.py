"""Model and hardware presets as scenario keys (issue 15 items 1-2): ``hardware: {base: ..., FIELD:
...}``, ``model: {base: ..., weight_dtype, kv_dtype}``, ``--set hardware.FIELD=V``, config.yaml's
resolved presets, and ``cache.hicache_size_gb`` (SGLang's --hicache-size, GB per rank).
Every figure below is worked out by hand from the preset's published numbers."""
import math

import pytest
import yaml

from radixsim.cli import main
from scenarios import presets
from scenarios.scenario import ScenarioError, apply_sets, resolve

GiB = 2**30
TINY = """\
model: qwen3-8b
hardware: h100x1
cache:
  l1_tokens: 20000
  page_size: 16
  hicache_ratio: 2
engine:
  chunked_prefill_tokens: 256
workload:
  num_clients: 2
  num_rounds: 2
  request_length: 200
  output_length: 4
  max_parallel: 2
"""
SMALL = {"model": "qwen3-8b", "hardware": "a100-40gbx1", "cache": {"page_size": 64},
         "workload": {"num_clients": 2, "num_rounds": 2, "request_length": 256}}


def run(capsys, tmp_path, sets=(), text=TINY):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    args = ["run", str(path), *[a for s in sets for a in ("--set", s)], "--out", str(tmp_path / "out"),
            "--no-plots", "--no-progress"]
    try:
        rc = main(args)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return str(path), rc, out, err


def test_overrides_round_trip_into_config_yaml(capsys, tmp_path):
    """--set on a hardware field and both dtype keys: config.yaml holds every hardware field, the
    overridden values and the names of the overridden fields."""
    _, rc, _, err = run(capsys, tmp_path, ["hardware.pcie_bytes_per_s=20e9", "hardware.pcie_latency_s=2e-5",
                                           "model.kv_dtype=fp8", "model.weight_dtype=fp8"])
    assert rc == 0, err
    cfg = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    hw, m = cfg["hardware"], cfg["model"]
    assert list(hw) == ["base", "name", *presets.HARDWARE_OVERRIDES, "overridden"]
    assert (hw["base"], hw["name"], hw["pcie_bytes_per_s"], hw["pcie_latency_s"]) == ("h100x1", "h100x1", 20e9, 2e-5)
    assert hw["overridden"] == ["pcie_bytes_per_s", "pcie_latency_s"]
    assert hw["pcie_peak_bytes_per_s"] == 64e9 and hw["bf16_flops"] == 989.4e12  # the rest: the preset's
    assert (m["base"], m["overridden"]) == ("qwen3-8b", ["kv_dtype", "weight_dtype"])
    assert (m["kv_dtype"], m["kv_dtype_bytes"], m["full_kv_bytes_per_token"]) == ("fp8", 1, 73_728)
    assert (m["weight_dtype"], m["weight_bytes"]) == ("fp8", 8_190_427_136)


def test_mapping_form_in_the_file_equals_set(tmp_path):
    """`hardware: {base: h100x1, pcie_bytes_per_s: 2.0e+10}` in the file resolves exactly as --set."""
    in_file = resolve({**yaml.safe_load(TINY), "hardware": {"base": "h100x1", "pcie_bytes_per_s": 2.0e10}})
    by_set = resolve(apply_sets(yaml.safe_load(TINY), ["hardware.pcie_bytes_per_s=20e9"]))
    assert in_file.hardware == by_set.hardware and in_file.doc == by_set.doc
    assert in_file.hardware.pcie_bytes_per_s == 20e9
    plain = resolve(yaml.safe_load(TINY))
    assert plain.hardware is presets.get_hardware("h100x1") and plain.doc["hardware"]["overridden"] == []


LINKS = TINY.replace("  hicache_ratio: 2\n", "  hicache_ratio: 2\n  l3_tokens: 1GiB\n  l3_model: mooncake\n"
                                                 "  l3_ssd_tokens: 2GiB\n")
H100_TCP = 190e9 / 4.6  # Mooncake README: RDMA 190 GB/s on 8x400 Gbps, about 4.6x TCP


@pytest.mark.parametrize("sets,link,want", [
    (["hardware.pcie_kernel_bytes_per_s=20e9"], ("L2", "L1"), (20e9, 10e-6)),
    (["hardware.pcie_direct_bytes_per_s=40e9"], ("L1", "L2"), (35.2e9, 10e-6)),  # kernel (the default) in use
    (["hardware.pcie_io_backend=direct", "hardware.pcie_direct_bytes_per_s=40e9"], ("L2", "L1"), (40e9, 10e-6)),
    (["hardware.pcie_io_backend=direct", "hardware.pcie_bytes_per_s=30e9"], ("L2", "L1"), (30e9, 10e-6)),
    (["hardware.l3_rdma_bytes_per_s=100e9"], ("L3", "L2"), (100e9, 100e-6)),
    (["hardware.l3_protocol=tcp"], ("L2", "L3"), (H100_TCP, 100e-6)),
    (["hardware.l3_protocol=tcp", "hardware.l3_tcp_bytes_per_s=10e9"], ("L3", "L2"), (10e9, 100e-6)),
    (["hardware.l3_bytes_per_s=50e9"], ("L3", "L2"), (50e9, 100e-6)),
    (["hardware.ssd_bytes_per_s=5e9"], "ssd", (5e9, 100e-6)),
    (["hardware.ssd_latency_s=1e-3"], "ssd", (27e9, 1e-3)),
])
def test_every_link_field_reaches_the_run(sets, link, want):
    """Each new hardware field, set with --set (the mapping form resolves the same), is the
    bandwidth or latency of the link the simulated run moves bytes on."""
    from radixsim.run import simulate

    sc = resolve(apply_sets(yaml.safe_load(LINKS), sets))
    eng, *_ = simulate(sc)
    got = eng.links.ssd if link == "ssd" else eng.links.get(*link)
    assert (got.bandwidth_Bps, got.latency_s) == pytest.approx(want, rel=1e-12)


def test_the_rates_in_use_follow_the_io_backend_and_the_protocol():
    hw = presets.get_hardware("h200x1")  # every Hopper preset: the SM copy 35.2 GB/s; no direct figure published
    assert (hw.pcie_io_backend, hw.pcie_bytes_per_s, hw.pcie_direct_bytes_per_s) == ("kernel", 35.2e9, 35.2e9)
    assert (hw.l3_protocol, hw.l3_bytes_per_s, hw.l3_tcp_bytes_per_s) == ("rdma", 190e9, 190e9 / 4.6)
    for gpu in ("h100", "h800", "b200"):
        h = presets.get_hardware(f"{gpu}x8")
        assert (h.pcie_kernel_bytes_per_s, h.pcie_direct_bytes_per_s) == (35.2e9, 35.2e9)
    a100 = presets.get_hardware("a100-40gbx1")  # no copy-engine figure: both at the measured 25.13 GB/s
    assert (a100.pcie_kernel_bytes_per_s, a100.pcie_direct_bytes_per_s, a100.l3_tcp_bytes_per_s) == (
        25.13e9, 25.13e9, 87e9 / 2.4)
    doc = resolve(apply_sets(yaml.safe_load(TINY), ["hardware.pcie_io_backend=direct",
                                                    "hardware.pcie_bytes_per_s=30e9"])).doc["hardware"]
    assert (doc["pcie_bytes_per_s"], doc["pcie_direct_bytes_per_s"], doc["pcie_kernel_bytes_per_s"]) == (
        30e9, 30e9, 35.2e9)
    assert doc["overridden"] == ["pcie_bytes_per_s", "pcie_io_backend"]


KNOWN = "expected one of base, gpu_name, num_gpus, hbm_bytes_per_gpu, "


@pytest.mark.parametrize("sets,text,needle", [
    (["hardware.pcie_h2d_bytes_per_s=1e9"], TINY,
     "--set hardware.pcie_h2d_bytes_per_s: unknown key 'hardware.pcie_h2d_bytes_per_s'; " + KNOWN),
    ([], TINY.replace("hardware: h100x1", "hardware: {base: h100x1, pcie_h2d_bytes_per_s: 1}"),
     "s.yaml: hardware.pcie_h2d_bytes_per_s: unknown field; " + KNOWN),
    (["hardware.pcie_bytes_per_s=-1"], TINY, "s.yaml: hardware.pcie_bytes_per_s: got -1; expected a finite number > 0"),
    (["hardware.host_dram_bytes=1.5"], TINY, "s.yaml: hardware.host_dram_bytes: got 1.5; expected an integer >= 1"),
    (["hardware.pcie_io_backend=dma"], TINY, "s.yaml: hardware.pcie_io_backend: got 'dma'; expected one of "
                                             "kernel, direct"),
    (["hardware.l3_protocol=udp"], TINY, "s.yaml: hardware.l3_protocol: got 'udp'; expected one of rdma, tcp"),
    (["hardware.pcie_bytes_per_s=1e9", "hardware.pcie_kernel_bytes_per_s=2e9"], TINY,
     "s.yaml: hardware.pcie_bytes_per_s: conflicts with hardware.pcie_kernel_bytes_per_s (the rate of "
     "pcie_io_backend kernel); expected one of them"),
    (["model.weight_dtype=int8"], TINY, "s.yaml: model.weight_dtype: got 'int8'; expected one of bf16, fp8, fp4"),
    (["model.kv_dtype=fp4"], TINY, "s.yaml: model.kv_dtype: got 'fp4'; expected one of bf16, fp8"),
    (["model.num_layers=3"], TINY, "--set model.num_layers: unknown key 'model.num_layers'; expected one of "
                                   "base, weight_dtype, kv_dtype"),
    # in one file (an override of one L2 size replaces the file's: tests/test_hostile_inputs.py)
    ([], TINY.replace("  hicache_ratio: 2", "  hicache_ratio: 2\n  hicache_size_gb: 30"),
     "s.yaml: cache.hicache_size_gb: conflicts with cache.hicache_ratio; "
     "expected one L2 size (l2_tokens, hicache_ratio or hicache_size_gb)"),
], ids=["unknown-set", "unknown-file", "negative", "fractional-int", "io-backend", "protocol", "rate-conflict",
        "weight-dtype", "kv-dtype", "model-field", "l2-conflict"])
def test_bad_keys_are_one_line_errors(capsys, tmp_path, sets, text, needle):
    path, rc, out, err = run(capsys, tmp_path, sets, text)
    assert (rc, out, err.count("\n")) == (2, "", 1), err
    assert err.startswith("radixsim run: ") and needle in err, err
    assert "Traceback" not in err


def test_dtype_keys_change_bytes_per_token_and_l1_auto_by_hand():
    """Qwen3-8B on one A100-40GB, mem_fraction_static 0.88, page 64: bf16 weights 8,190,427,136 x 2 B,
    KV 8 heads x 256 x 36 layers x 2 B = 147,456 B per token; fp8 halves each, fp4 weights 0.5 B/param."""
    hbm = 40 * GiB * 0.88
    cases = {  # (weight_dtype, kv_dtype): (weight bytes, KV bytes per token)
        ("bf16", "bf16"): (16_380_854_272, 147_456),
        ("fp8", "bf16"): (8_190_427_136, 147_456),
        ("bf16", "fp8"): (16_380_854_272, 73_728),
        ("fp8", "fp8"): (8_190_427_136, 73_728),
        ("fp4", "fp8"): (4_095_213_568, 73_728),
    }
    expect_l1 = {("bf16", "bf16"): 145_216, ("fp8", "bf16"): 200_768, ("bf16", "fp8"): 290_432,
                 ("fp8", "fp8"): 401_536, ("fp4", "fp8"): 457_088}
    for (wd, kd), (weights, bpt) in cases.items():
        sc = resolve({**SMALL, "model": {"base": "qwen3-8b", "weight_dtype": wd, "kv_dtype": kd}})
        assert (sc.model.weight_bytes, presets.bytes_per_token(sc.model, "full")) == (weights, bpt)
        assert sc.cache.capacity_tokens == math.floor((hbm - weights) / bpt) // 64 * 64 == expect_l1[wd, kd]


def test_kv_dtype_on_mla_and_swa_rows():
    """DeepSeek-V3 (MLA: (512 + 64) x 61 layers) and gpt-oss-20b (8 heads x 128 x 12 full + 12 SWA layers)."""
    m, _ = presets.resolve_model({"base": "deepseek-v3", "kv_dtype": "fp8"})
    assert (m.kv_dtype_bytes, m.full_kv_bytes_per_token) == (1, 576 * 1 * 61) == (1, 35_136)
    m, _ = presets.resolve_model({"base": "gpt-oss-20b", "kv_dtype": "fp8"})
    assert (m.full_kv_bytes_per_token, m.swa_kv_bytes_per_token) == (8 * 128 * 12, 8 * 128 * 12) == (12_288, 12_288)
    with pytest.raises(ValueError, match="model.kv_dtype: DeepSeek-V4-Flash's KV rows have a fixed mixed layout"):
        presets.resolve_model({"base": "dsv4-flash", "kv_dtype": "bf16"})


def test_hicache_size_gb_to_l2_tokens_by_hand():
    """SGLang: each rank's host pool holds int(GB x 1e9 // that rank's bytes per token) tokens."""
    sc = resolve({**SMALL, "hardware": "h100x1", "cache": {"page_size": 64, "hicache_size_gb": 30}})
    assert 30e9 // 147_456 == 203_450 and sc.doc["cache"]["l2_tokens"] == 203_392  # floored to 64-token pages
    assert sc.cache.tiers.l2_tokens == 203_392
    # Llama-3.1-70B over 8 ranks: 8 KV heads, one per rank, 327,680 / 8 = 40,960 B per token per rank
    sc = resolve({**SMALL, "model": "llama-3.1-70b", "hardware": "h200x8",
                  "cache": {"page_size": 64, "hicache_size_gb": 30}})
    assert 30e9 // 40_960 == 732_421 and sc.doc["cache"]["l2_tokens"] == 732_416
    # DeepSeek-V3 (MLA) over 8 ranks: the latent is replicated, all (512 + 64) x 2 B x 61 = 70,272 B per rank
    assert presets.host_pool_tokens(presets.get_model("deepseek-v3"), 8, 30) == 30e9 // 70_272 == 426_912
    with pytest.raises(ScenarioError, match="cache.hicache_size_gb: conflicts with cache.l2_tokens"):
        resolve({**SMALL, "cache": {"hicache_size_gb": 30, "l2_tokens": 100_000}})
