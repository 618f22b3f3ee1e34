"""`radixsim validate --explain` (issue 29 item 1): the TTFT split of a small case pinned from the
fixed seed, its parts adding up to the simulated TTFT that `validate` reports, the operator
split of a step adding up to the step's time (the step times themselves unchanged), the load
split by link by hand, and the non-negative least squares by hand."""
import math
from pathlib import Path

import numpy as np
import pytest

from radixsim.cli import main
from radixsim.validate import validate
from radixsim.validate_cases import case_files
from radixsim.validate_explain import explain_case, nnls, residual_fit
from sim.operators import OPERATOR_PARTS, OperatorCostModel
from sim.ttft_split import BETWEEN, OTHER_LOAD, TtftRecorder

CASE = str(Path(__file__).parent / "data" / "explain_case.json")

EXPECTED = """\
T1-explain-l2 (Qwen3-8B on a100-40gbx1 tp=1): per round, mean per request; times in ms (sim = queue + load + compute parts)
  round  new cached    pub    sim queue load L2->L1_exposed  gemm attn_prefix attn_new elementwise overhead others'_loads between_steps
      1 4096      0 1500.0 1232.5 901.7                 0.0 293.2         0.0     24.4         9.8      3.4           0.0           0.0
      2 4097   4096 2000.0 1426.4 697.8                 0.4 570.3        95.8     35.9        19.0      6.7           0.4           0.0
      3 4951   7339 2500.0 1728.4 845.6                 0.9 631.6       179.9     41.0        21.1      7.4           0.9           0.0
  split check over 72 requests: max |load parts - engine load_s| = 0.0 ms, min between steps = 0.0 ms (>= 0 up to round-off)
  residual published - sim ~ a + b new + c cached, over 3 rounds (diagnosis, not applied):
    nnls:  a = 274.7 ms/request, b = 0.00 us/new token, c = 68.96 us/cached token; rms left 11.6 ms
    lstsq: a = 480.2 ms/request, b = -51.93 us/new token, c = 74.75 us/cached token; rms left 0.0 ms; negative: b
    design rank 3 of 3, condition number 116 (columns: 1, new/1000, cached/1000)
  queue-scaled: published - sim ~ m (a + b new + c cached), m = sim / (sim - queue) per round, over 3 rounds (diagnosis, not applied):
    nnls:  a = 75.5 ms/request, b = 0.00 us/new token, c = 45.72 us/cached token; rms left 40.0 ms
    lstsq: a = 426.9 ms/request, b = -86.70 us/new token, c = 54.02 us/cached token; rms left 0.0 ms; negative: b
    design rank 3 of 3, condition number 124 (columns: 1, new/1000, cached/1000)
"""  # noqa: E501


def test_explain_reproduces_its_split_from_the_fixed_seed(capsys):
    assert main(["validate", "--explain", CASE]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (EXPECTED, "")


def test_split_adds_up_to_the_ttft_validate_reports():
    ((_, case),) = case_files([CASE])
    res = explain_case(case)
    (val,) = validate([CASE])
    sim = [r["sim_ttft"] for r in res["rounds"]]
    assert sim == val["series"]["sim_ttft_mean_s"]  # the same run as `validate`'s, to the bit
    for r in res["rounds"]:
        assert r["requests"] == 24
        assert sum(r["parts"].values()) == pytest.approx(r["sim_ttft"], rel=1e-12, abs=0)
        ops = sum(v for k, v in r["parts"].items() if k != "queue" and k[0] == "compute" and k[1] in OPERATOR_PARTS)
        assert ops > 0.25  # the steps' operators carry the compute; "between steps" is round-off here
        assert abs(r["parts"].get(("compute", BETWEEN), 0.0)) < 1e-12
    assert res["checks"]["load_s"] < 1e-12 and res["checks"]["between"] > -1e-12


def test_load_split_by_link_by_hand():
    rec = TtftRecorder()
    # request 7 waits in load phases over [1, 5] and [8, 9]; its transfers: an L3->L2 prefetch
    # submitted at 0, done at 3; an L2->L1 load submitted at 2, done at 4; one submitted at 8, done at 10
    rec.load_stretches[7] = [(1.0, 5.0), (8.0, 9.0)]
    rec.owned[7] = [1, 2, 3]
    rec.transfers.update({1: ["L3->L2", 0.0, 3.0], 2: ["L2->L1", 2.0, 4.0], 3: ["L2->L1", 8.0, 10.0]})
    # [1, 2]: only the prefetch in flight; [2, 3]: both, the load finishes last; [3, 4]: the load;
    # [4, 5]: nothing in flight; [8, 9]: the second load
    assert rec._load_parts(7) == {"L3->L2": 1.0, "L2->L1": 3.0, OTHER_LOAD: 1.0}


@pytest.mark.parametrize("model, hw, tp, ep", [("Qwen3-8B", "a100-40gbx1", 1, 1),
                                               ("Qwen3-235B-A22B", "h800x8", 8, 1),
                                               ("DeepSeek-V3", "h800x8", 8, 8)])
def test_operator_split_adds_up_and_step_times_unchanged(model, hw, tp, ep):
    c = OperatorCostModel(model, hw, tp, ep=ep)
    batches = [(((1000, 3000),), ()), (((4096, 0), (2000, 8192)), (5000, 7000)), ((), (30000,) * 8)]
    # step_time_s of these batches before the split existed (commit 6acfa0a), to the bit
    before = {"Qwen3-8B": [0.09258612807314863, 0.5263510771765897, 0.055466125939735385],
              "Qwen3-235B-A22B": [0.06584472542044655, 0.24299530537123126, 0.02773284553253052],
              "DeepSeek-V3": [0.06459452541970936, 0.2101405121478364, 0.023113930223936825]}[model]
    assert [c.step_time_s(p, d) for p, d in batches] == before
    for (p, d), t in zip(batches, before):
        parts = c.breakdown(p, d)
        assert list(parts) == list(OPERATOR_PARTS) and min(parts.values()) >= 0
        assert sum(parts.values()) == pytest.approx(t, rel=1e-12, abs=0)
    cold, warm = c.breakdown(((1000, 0),)), c.breakdown(((1000, 3000),))
    assert cold["attn_prefix"] == 0.0 and warm["attn_prefix"] > 0
    assert warm["attn_new"] == cold["attn_new"]  # the new tokens' attention as if no prefix
    assert (warm["moe"] > 0) == (model != "Qwen3-8B")
    assert (warm["allreduce"] > 0) == (tp > 1) and (warm["alltoall"] > 0) == (ep > 1)
    step = c.cost((), (30000,) * 8)
    assert c.breakdown((), (30000,) * 8)["hbm_excess"] == max(step.memory_s - step.compute_s, 0.0)


def test_nnls_by_hand():
    x = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]])
    y = np.array([3.0, 2.0, 1.0])
    # least squares: 4 - x (b < 0); NNLS: b = 0 and a = mean(y) = 2 (rss 2, against 6.86 for b alone)
    assert np.linalg.lstsq(x, y, rcond=None)[0] == pytest.approx([4.0, -1.0])
    assert nnls(x, y) == pytest.approx([2.0, 0.0])
    # gap = 0.1 s + 20 us per cached token exactly: both fits find it
    fit = residual_fit([4096, 4097, 4000], [0, 4096, 10000], [0.1, 0.1 + 0.08192, 0.3])
    for key in ("nnls", "lstsq"):
        assert fit[key] == pytest.approx((0.1, 0.0, 2e-5), abs=1e-12)
    assert fit["rank"] == 3 and math.isfinite(fit["cond"]) and fit["rms_nnls"] < 1e-12


def test_explain_with_torch_backend_is_one_line(capsys):
    assert main(["validate", "--explain", "--backend", "torch", CASE]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "radixsim validate: error: --explain: only with --backend published (got --backend torch)\n"


def test_explain_of_an_unknown_case_is_one_line(capsys):
    # the same error path as `radixsim validate` (validate._case_errors)
    assert main(["validate", "--explain", "no-such-case"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("radixsim validate: error: no-such-case: no such case file or case id")
