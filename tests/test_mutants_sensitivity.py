"""`radixsim sensitivity` by hand (radixsim/sensitivity.py): the planned variants of a hybrid
scenario sized in bytes, the efficiency cap at 1, and the cliff flag and band over given
figures (the runs replaced by a table, so each case is exact). benchmarks/mutants_sensitivity.txt
lists the mutants these tests kill."""
import pytest

from radixsim import sensitivity as sens
from radixsim.sensitivity import HEADLINE, plan_runs
from scenarios.scenario import apply_sets, load, resolve
from test_sensitivity import TIERED


def test_plan_of_a_hybrid_scenario_sized_in_bytes():
    """fig4-inkling-small-l1: FULL + SWA + MAMBA, tp 8, L1 auto capped by max_total_tokens 750,080
    (SWA 75,008 tokens, 1,041 MAMBA slots). KV bytes x f hold 1/f the tokens of the pools sized in
    bytes (L1, SWA), not the MAMBA slots; a key shared by two inputs takes the product."""
    raw = load("fig4-inkling-small-l1")
    sc = resolve(raw)
    assert (sc.doc["cache"]["l1_tokens"], sc.doc["cache"]["swa_tokens"], sc.doc["cache"]["mamba_slots"]) == (
        750080, 75008, 1041)
    l1 = ("cache.l1_tokens", "cache.swa_tokens", "cache.mamba_slots")
    hbm = ("hardware.hbm_bytes_per_s", "hardware.d2d_copy_bytes_per_s")
    eff = "cost.efficiency.hbm_efficiency"
    low = {**dict(zip(hbm, (3.84e12, 1.72e12))), "hardware.nvlink_bytes_per_s": 3.6e11, eff: 0.48}
    high = {**dict(zip(hbm, (5.76e12, 2.58e12))), "hardware.nvlink_bytes_per_s": 5.4e11, eff: 0.72}
    assert plan_runs(raw, sc, 20) == [
        ("nominal", 1.0, {}),
        ("l1", 0.8, dict(zip(l1, (600064, 60006, 832)))),  # floor(1041 x 0.8)
        ("l1", 1.2, dict(zip(l1, (900096, 90009, 1249)))),
        ("hbm", 0.8, dict(zip(hbm, (3.84e12, 1.72e12)))),
        ("hbm", 1.2, dict(zip(hbm, (5.76e12, 2.58e12)))),
        ("nvlink", 0.8, {"hardware.nvlink_bytes_per_s": 3.6e11}),  # tp 8
        ("nvlink", 1.2, {"hardware.nvlink_bytes_per_s": 5.4e11}),
        ("efficiency", 0.8, {eff: 0.48}),
        ("efficiency", 1.2, {eff: 0.72}),
        ("kv_bytes", 0.8, {"cache.l1_tokens": 937600, "cache.swa_tokens": 93760}),  # 750,080 / 0.8
        ("kv_bytes", 1.2, {"cache.l1_tokens": 625066, "cache.swa_tokens": 62506}),  # floor(750,080 / 1.2)
        # all_low: L1 x 0.8 with KV bytes x 1.2: floor(750,080 x 0.8 / 1.2) = 500,053
        ("all_low", None, {**dict(zip(l1, (500053, 50005, 832))), **low}),
        ("all_high", None, {**dict(zip(l1, (1125120, 112512, 1249))), **high}),  # 750,080 x 1.2 / 0.8
        ("capacity", 0.9, dict(zip(l1, (675072, 67507, 936)))),
        ("capacity", 1.1, dict(zip(l1, (825088, 82508, 1145)))),
    ]


def test_efficiencies_are_capped_at_1():
    raw = apply_sets(TIERED, ["cost.efficiency.hbm_efficiency=0.9"])
    runs = {(label, f): sets for label, f, sets in plan_runs(raw, resolve(raw), 20)}
    assert runs[("efficiency", 0.8)] == {"cost.efficiency.hbm_efficiency": 0.72}
    assert runs[("efficiency", 1.2)] == {"cost.efficiency.hbm_efficiency": 1.0}  # not 1.08
    assert runs[("all_high", None)]["cost.efficiency.hbm_efficiency"] == 1.0


def given_figures(monkeypatch, hit_rates: list):
    """Every run's figures from a table: run i has hit rate hit_rates[i], TTFT mean i seconds."""
    def run_all(tasks, jobs, progress):
        assert len(tasks) == len(hit_rates) == 17  # TIERED: nominal, 6 inputs x 2, 2 corners, 2 cliff runs
        return [{**dict.fromkeys(HEADLINE), "hit_rate": h, "ttft_mean_s": float(i)} for i, h in enumerate(hit_rates)]

    monkeypatch.setattr(sens, "_run_all", run_all)
    return sens.sensitivity(TIERED, 20)


def test_the_cliff_reads_the_plus_10_percent_run_and_the_band_leaves_the_cliff_runs_out(monkeypatch):
    res = given_figures(monkeypatch, [0.5] * 15 + [0.5, 0.625])
    assert res["cliff"] == {"pct": 10.0, "hit_rate": 0.5, "hit_rate_low": 0.5, "hit_rate_high": 0.625,
                            "moved_points": 12.5, "near_capacity_cliff": True}
    assert res["band"] == {**{k: [None, None] for k in HEADLINE}, "hit_rate": [0.5, 0.5], "ttft_mean_s": [0.0, 14.0]}


def test_the_cliff_flag_needs_more_than_10_points(monkeypatch):
    res = given_figures(monkeypatch, [0.0] * 16 + [0.1])
    assert res["cliff"]["moved_points"] == 10.0 and res["cliff"]["near_capacity_cliff"] is False
    res = given_figures(monkeypatch, [0.5] * 15 + [0.375, 0.5])
    assert res["cliff"]["moved_points"] == 12.5 and res["cliff"]["near_capacity_cliff"] is True


@pytest.mark.parametrize("key,value,f,want", [
    ("cache.l1_tokens", 4096, 0.9, 3686), ("cache.l1_tokens", 4096, 1.1, 4505),  # floor, never round up
    ("hardware.hbm_bytes_per_s", 3.35e12, 1.2, 4.02e12), ("cost.efficiency.mfu_decode", 0.9, 1.2, 1.0),
])
def test_scaled_values(key, value, f, want):
    assert sens._scaled(key, value, f) == want
