"""Issue 29 item 5: the cases added from published runs load and map to exact scenarios, and the
GPU presets they need hold exactly their cited figures."""
import pytest

from radixsim.validate import validate
from radixsim.validate_cases import CASE_DIR, case_files, hardware_for, scenario_of, skip_reason
from scenarios import presets

E2 = "E2-h20-dsv4flash-cold-no-hicache"
TiB, MiB = 2**40, 2**20


def test_h20_preset_fields_exact():
    h = presets.get_hardware("h20x8")
    assert (h.name, h.gpu_name, h.num_gpus) == ("h20x8", "NVIDIA H20 SXM 96GB", 8)
    assert h.hbm_bytes_per_gpu == 97_871 * MiB and h.hbm_bytes == 8 * 97_871 * MiB  # nvidia-smi, EIC snapshot
    assert (h.hbm_bytes_per_s, h.bf16_flops, h.fp8_flops) == (4.0e12, 148e12, 296e12)
    assert h.nvlink_bytes_per_s == 450e9  # 900 GB/s bidirectional
    assert (h.pcie_kernel_bytes_per_s, h.pcie_direct_bytes_per_s, h.pcie_peak_bytes_per_s) == (35.2e9, 35.2e9, 64e9)
    assert (h.host_dram_bytes, h.nic_bytes_per_s, h.l3_rdma_bytes_per_s) == (2 * TiB, 400e9, 190e9)
    # scaled by the H200's measured/peak ratios, as every non-H200 preset
    assert h.bf16_matmul_measured_flops == 148e12 * 790 / 989
    assert h.d2d_copy_bytes_per_s == 4.0e12 * 4.3 / 4.8 / 2
    # the GEMM fit is an explicit field with its assumption, never a silent default
    assert h.operator_fit == "h100" and h.sources["operator_fit"].startswith("assumption: no H20 GEMM profile")
    for field in ("hbm_bytes_per_gpu", "hbm_bytes_per_s", "bf16_flops", "fp8_flops", "nvlink_bytes_per_s"):
        assert h.sources[field].startswith("docs/sources/hardware.md H20:"), field
    assert [presets.get_hardware(f"h20x{n}").num_gpus for n in (1, 2, 4)] == [1, 2, 4]


def test_gpu_names_map_longest_first():
    """'H20' is inside 'H200': the longer name is tried first."""
    assert hardware_for("8x NVIDIA H20 (97,871 MiB each), driver 535.161.08").name == "h20x8"
    assert hardware_for("8x NVIDIA H200 SXM").name == "h200x8"
    assert hardware_for("2x NVIDIA H20").name == "h20x2"


def test_e2_case_loads_and_maps_exactly():
    ((path, case),) = case_files([E2])
    assert path == CASE_DIR / "sglang_eic_baseline_h20_dsv4flash.json"
    assert skip_reason(case) is None  # was "no hardware preset for ..." before the H20 preset
    raw, notes = scenario_of(case)
    assert (raw["name"], raw["model"], raw["hardware"], raw["tp"], raw["seed"]) == (
        E2, "DeepSeek-V4-Flash", "h20x8", 8, 0)
    # --mem-fraction-static 0.85 and --chunked-prefill-size 16384 as the server states them
    assert raw["cache"] == {"mem_fraction_static": 0.85, "page_size": 256, "l1_tokens": "auto"}
    assert raw["engine"] == {"chunked_prefill_tokens": 16384}
    # bench_serving: 32 prompts of 16,000 random ids, output 16, rate inf, 8 in flight
    assert raw["workload"] == {"num_clients": 32, "num_rounds": 1, "request_length": 16000, "output_length": 16,
                               "max_parallel": 8, "request_rate": "inf", "round_barrier": True,
                               "ready_queue_policy": "fifo", "kind": "multiturn"}
    assert notes == [
        "DeepSeek-V4-Flash on h20x8 tp=8; not stated, scenario defaults: engine.max_running_requests",
        "server flags not modelled: --attention-backend, --context-length, --enable-cache-report, --enable-metrics, "
        "--max-running-requests, --swa-full-tokens-ratio"]
    assert case["published"]["ttft_mean_s_per_round"] == [8.019] and case["published"]["hit_rate_per_round"] == [0.0]


def test_e2_smoke_runs_cold():
    """4 of the 32 prompts (smoke), one round: distinct random prompts, no hit."""
    (res,) = validate([E2], smoke=True)
    row, s = res["row"], res["series"]
    assert (row["status"], row["model"], row["hardware"], row["rounds"]) == ("ok", "DeepSeek-V4-Flash", "h20x8", 1)
    assert s["sim_hit_rate"] == [0.0] and s["published_ttft_mean_s"] == [8.019] and row["hit_mae_pts"] == 0.0
    assert "smoke: 4 clients x 1 rounds" in res["notes"]


@pytest.mark.parametrize("name", ["8x NVIDIA L40S", "8x AMD MI300X", "4x NVIDIA GB200"])
def test_gpus_without_a_preset_are_refused(name):
    assert hardware_for(name) is None
