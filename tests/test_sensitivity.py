"""`radixsim sensitivity` (issue 15 item 8): the variants are exactly the --set keys they list, the
table is deterministic (one process or a pool), and the capacity-cliff flag is raised near a
cliff and not far from it."""
import csv
import json

import pytest
import yaml

from radixsim.cli import main
from radixsim.sensitivity import HEADLINE, format_table, headline, sensitivity
from scenarios.scenario import apply_sets

TIERED = yaml.safe_load("""
name: tiny
seed: 3
model: qwen3-8b
hardware: h100x1
cache: {l1_tokens: 4096, page_size: 16, hicache_ratio: 2}
engine: {chunked_prefill_tokens: 256}
workload: {num_clients: 4, num_rounds: 3, request_length: 200, output_length: 4, max_parallel: 2}
""")
# L1 only, 8 clients whose histories reach ~13,000 tokens by round 6: with LRU the hit rate
# climbs steeply with L1 until it holds them all (0.7123 from ~12,500 tokens on)
CLIFF = yaml.safe_load("""
name: cliff
model: qwen3-8b
hardware: h100x1
cache: {l1_tokens: 11000, page_size: 16}
engine: {chunked_prefill_tokens: 256}
workload: {num_clients: 8, num_rounds: 6, request_length: 256, output_length: 16, max_parallel: 8}
""")
# H100: PCIe 35.2e9 kernel and direct (peak 64e9; the sensitivity scales all three), HBM 3.35e12,
# device copy 3.35e12 x 4.3 / 4.8 / 2; Efficiency defaults, of which the default operator cost model
# reads one fraction (the roofline's are in test_roofline_efficiencies)
EFF_LO = "cost.efficiency.hbm_efficiency=0.48"
EFF_HI = "cost.efficiency.hbm_efficiency=0.72"
L2 = "cache.hicache_ratio=null cache.hicache_size_gb=null"
EXPECTED_SETS = [
    ("nominal", 1.0, ""),
    ("l1", 0.8, "cache.l1_tokens=3276"),  # floor(4096 x 0.8)
    ("l1", 1.2, "cache.l1_tokens=4915"),
    ("l2", 0.8, f"cache.l2_tokens=6553 {L2}"),  # L2 = 2 x 4096 = 8192 tokens
    ("l2", 1.2, f"cache.l2_tokens=9830 {L2}"),
    ("pcie", 0.8, "hardware.pcie_kernel_bytes_per_s=28160000000.0 hardware.pcie_direct_bytes_per_s=28160000000.0 "
                  "hardware.pcie_peak_bytes_per_s=51200000000.0"),
    ("pcie", 1.2, "hardware.pcie_kernel_bytes_per_s=42240000000.0 hardware.pcie_direct_bytes_per_s=42240000000.0 "
                  "hardware.pcie_peak_bytes_per_s=76800000000.0"),
    ("hbm", 0.8, "hardware.hbm_bytes_per_s=2680000000000.0 hardware.d2d_copy_bytes_per_s=1200416666670.0"),
    ("hbm", 1.2, "hardware.hbm_bytes_per_s=4020000000000.0 hardware.d2d_copy_bytes_per_s=1800625000000.0"),
    ("efficiency", 0.8, EFF_LO),
    ("efficiency", 1.2, EFF_HI),
    # L1 and L2 are given in tokens: more KV bytes per token only slow the PCIe link (35.2e9 / f)
    ("kv_bytes", 0.8, "hardware.pcie_kernel_bytes_per_s=44000000000.0 hardware.pcie_direct_bytes_per_s=44000000000.0 "
                      "hardware.pcie_peak_bytes_per_s=80000000000.0"),
    ("kv_bytes", 1.2, "hardware.pcie_kernel_bytes_per_s=29333333333.3 hardware.pcie_direct_bytes_per_s=29333333333.3 "
                      "hardware.pcie_peak_bytes_per_s=53333333333.3"),
    ("all_low", None, f"cache.l1_tokens=3276 cache.l2_tokens=6553 {L2} hardware.pcie_kernel_bytes_per_s=23466666666.7 "
                      "hardware.pcie_direct_bytes_per_s=23466666666.7 hardware.pcie_peak_bytes_per_s=42666666666.7 "
                      "hardware.hbm_bytes_per_s=2680000000000.0 "
                      f"hardware.d2d_copy_bytes_per_s=1200416666670.0 {EFF_LO}"),
    ("all_high", None, f"cache.l1_tokens=4915 cache.l2_tokens=9830 {L2} hardware.pcie_kernel_bytes_per_s=52800000000.0 "
                       "hardware.pcie_direct_bytes_per_s=52800000000.0 hardware.pcie_peak_bytes_per_s=96000000000.0 "
                       "hardware.hbm_bytes_per_s=4020000000000.0 "
                       f"hardware.d2d_copy_bytes_per_s=1800625000000.0 {EFF_HI}"),
    ("capacity", 0.9, f"cache.l1_tokens=3686 cache.l2_tokens=7372 {L2}"),
    ("capacity", 1.1, f"cache.l1_tokens=4505 cache.l2_tokens=9011 {L2}"),
]


def test_variants_are_their_set_keys_and_the_table_is_deterministic():
    res = sensitivity(TIERED, 20, jobs=1)
    assert [(r["input"], r["factor"], r["sets"]) for r in res["runs"]] == EXPECTED_SETS
    for r in res["runs"]:  # each row = a plain run of the scenario with its listed --set items
        by_hand = headline((apply_sets(TIERED, r["sets"].split()), "by hand"))
        assert {k: r[k] for k in HEADLINE} == by_hand, r["input"]
    assert sensitivity(TIERED, 20, jobs=2) == res  # the process pool gives the same table
    for k in HEADLINE:
        xs = [r[k] for r in res["runs"][:-2]]
        assert res["band"][k] == [min(xs), max(xs)]
    lines = format_table(res).splitlines()
    assert lines[0] == "sensitivity of tiny at +-20% (17 runs)" and len(lines) == 2 + 17 + 3
    assert lines[1].split() == ["input", "factor", "hit", "L1", "L2", "L3", "TTFT", "mean", "s", "TTFT", "p90", "s",
                                "tok/s"]
    assert lines[-1].startswith("not near a capacity cliff: capacity x0.90 / x1.10 moves the hit rate ")


def test_roofline_efficiencies():
    """Under cost.kind roofline the efficiency input scales every MFU and efficiency fraction."""
    from radixsim.sensitivity import inputs
    from scenarios.scenario import resolve

    raw = apply_sets(TIERED, ["cost.kind=roofline"])
    (eff,) = [i for i in inputs(raw, resolve(raw)) if i.name == "efficiency"]
    assert sorted(eff.keys) == ["cost.efficiency.allreduce_efficiency", "cost.efficiency.hbm_efficiency",
                                "cost.efficiency.mfu_decode", "cost.efficiency.mfu_prefill"]


def test_cliff_flag_near_and_far():
    near = sensitivity(CLIFF, 20)["cliff"]
    # 351 x k prompt tokens: hit rates are exact fractions of the same total
    assert (near["hit_rate"], near["hit_rate_low"], near["hit_rate_high"]) == (
        0.5851139601139601, 0.4601139601139601, 0.6862535612535613)
    assert near["near_capacity_cliff"] is True and round(near["moved_points"], 6) == 12.5
    far = sensitivity({**CLIFF, "cache": {"l1_tokens": 40000, "page_size": 16}}, 20)["cliff"]
    assert far == {"pct": 10.0, "hit_rate": 250 / 351, "hit_rate_low": 250 / 351, "hit_rate_high": 250 / 351,
                   "moved_points": 0.0, "near_capacity_cliff": False}


def test_command_writes_json_and_csv_and_refuses_bad_input(capsys, tmp_path):
    path = tmp_path / "cliff.yaml"
    path.write_text(yaml.safe_dump(CLIFF))
    rc = main(["sensitivity", str(path), "--pct", "10", "--jobs", "1", "--out", str(tmp_path / "o"), "--no-progress"])
    out, err = capsys.readouterr()
    assert (rc, err) == (0, "")
    assert "sensitivity of cliff at +-10% (11 runs)" in out and "NEAR A CAPACITY CLIFF" in out
    doc = json.loads((tmp_path / "o" / "sensitivity.json").read_text())
    with open(tmp_path / "o" / "sensitivity.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["input"] for r in rows] == [r["input"] for r in doc["runs"]] == [
        "nominal", "l1", "l1", "hbm", "hbm", "efficiency", "efficiency", "all_low", "all_high", "capacity", "capacity"]
    # L1 11,000 holds 10,992 tokens (whole 16-token pages); x 0.9 = 9,892.8
    assert rows[1]["sets"] == "cache.l1_tokens=9892" and doc["cliff"]["near_capacity_cliff"] is True


@pytest.mark.parametrize("args,line", [
    (["--pct", "0"], "radixsim sensitivity: --pct 0.0: expected a number in (0, 100)\n"),
    (["--set", "hardware.nope=1"], "radixsim sensitivity: --set hardware.nope: unknown key 'hardware.nope'; "),
])
def test_command_errors_are_one_line(capsys, tmp_path, args, line):
    path = tmp_path / "cliff.yaml"
    path.write_text(yaml.safe_dump(CLIFF))
    rc = main(["sensitivity", str(path), *args, "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert (rc, out, err.count("\n")) == (2, "", 1) and err.startswith(line), err
    assert not (tmp_path / "o").exists()
