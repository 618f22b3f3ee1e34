"""`radixsim calibrate` (operator table) -> `cost.table` -> the simulator's step times: on the
table's grid points a step costs exactly the table's values times the layer counts (plus the
terms the table does not hold), between them the interpolation; bad tables are one line."""
from __future__ import annotations

import json

import pytest

from radixsim.cli import main
from radixsim.run import make_cost, request_rows, simulate
from scenarios.scenario import from_file
from sim.optable import OperatorTable, OperatorTableCostModel, gemm_shapes, load_cost_table

torch = pytest.importorskip("torch")

SCENARIO = {"seed": 3, "model": "llama-3.1-8b", "hardware": "h200x1",
            "cache": {"page_size": 16, "l1_tokens": 4096},
            "engine": {"max_running_requests": 2, "chunked_prefill_tokens": 4096},
            "workload": {"num_clients": 2, "num_rounds": 2, "request_length": 48, "output_length": 3,
                         "max_parallel": 2, "request_rate": "inf"}}


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    import yaml

    d = tmp_path_factory.mktemp("optable")
    path, table = d / "s.yaml", d / "ops.json"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert main(["calibrate", str(path), "--device", "cpu", "--quick", "--out", str(table)]) == 0
    sc = from_file(str(path), ["cost.kind=table", f"cost.table={table}"])
    return sc, json.loads(table.read_text())


def curve(data, n, k):
    return {m: s for g in data["gemm"] if (g["n"], g["k"]) == (n, k) for m, s in g["points"]}


def test_calibrate_times_the_shapes_the_simulator_prices(calibrated):
    sc, data = calibrated
    cost = make_cost(sc)
    assert isinstance(cost, OperatorTableCostModel)
    inner = round(cost.shared_params / cost.model.num_layers / (2 * 4096))
    assert gemm_shapes(cost) == [(inner, 4096), (4096, inner)]
    assert [(g["n"], g["k"], [m for m, _ in g["points"]]) for g in data["gemm"]] == \
        [(inner, 4096, [1, 16]), (4096, inner, [1, 16])]
    assert [r[:2] for r in data["prefill_attention"]] == [[0, 16], [0, 64], [64, 16], [64, 64]]
    assert [r[0] for r in data["decode_attention"]] == [64, 256]
    assert data["heads"] == {"q_heads": 32, "kv_heads": 8, "head_dim": 128, "v_head_dim": 128}


def test_step_times_equal_the_table_on_grid_points_and_interpolate_between(calibrated):
    sc, data = calibrated
    cost = make_cost(sc)
    L = cost.model.num_layers  # llama-3.1-8b: every layer full attention
    (up, k), (k2, _) = gemm_shapes(cost)
    g_up, g_down = curve(data, up, k), curve(data, k2, up)
    pre = {(c, n): s for c, n, s in data["prefill_attention"]}
    dec = dict(data["decode_attention"])

    c = cost.cost([(16, 64)])  # 16 rows, prefix 64: every operator on a grid point
    assert c.compute_s - cost.elementwise_s(16) == pytest.approx(L * (g_up[16] + g_down[16]) + L * pre[64, 16],
                                                                 rel=1e-12)
    c = cost.cost([(64, 0), (16, 0)])  # two requests: attention priced per request, GEMMs over 80 rows
    gemm80 = [g[1] + (80 - 1) * (g[16] - g[1]) / 15 for g in (g_up, g_down)]  # extrapolated past 16
    assert c.compute_s - cost.elementwise_s(80) == pytest.approx(L * sum(gemm80) + L * (pre[0, 64] + pre[0, 16]),
                                                                 rel=1e-12)
    c = cost.cost((), [64, 256])  # decode of two requests: 2 rows, interpolated between 1 and 16
    gemm2 = [g[1] + (g[16] - g[1]) / 15 for g in (g_up, g_down)]
    assert c.compute_s - cost.elementwise_s(2) == pytest.approx(L * sum(gemm2) + L * (dec[64] + dec[256]), rel=1e-12)
    mid = cost.cost([(16, 32)])  # prefix 32: halfway between the prefix-0 and prefix-64 curves
    assert mid.compute_s - cost.elementwise_s(16) == pytest.approx(
        L * (g_up[16] + g_down[16]) + L * (pre[0, 16] + pre[64, 16]) / 2, rel=1e-12)
    assert cost.transfer_time_s(1 << 16, "pcie") == dict(data["copy"])[1 << 16]


def test_a_part_is_priced_from_its_own_work_and_a_step_parses_its_batch_once(calibrated, monkeypatch):
    """No state kept between calls: the part `request_work` returns (its requests included) is
    all `attention_s` needs; one step parses its prefill batch and its decode contexts once."""
    import numpy as np

    import sim.operators
    import sim.optable
    from sim.cost import parse_batch, parse_contexts

    sc, data = calibrated
    cost = make_cost(sc)
    L = cost.model.num_layers
    pre = {(c, n): s for c, n, s in data["prefill_attention"]}
    dec = dict(data["decode_attention"])
    new, cached = parse_batch([(16, 64), (64, 0)])
    p = {**cost.request_work(new, cached, decode=False), "decode": False}
    assert cost.attention_s(p, 80) == pytest.approx(L * (pre[64, 16] + pre[0, 64]), rel=1e-12)
    ctx = parse_contexts([64, 256])
    d = {**cost.request_work(np.ones_like(ctx), ctx, decode=True), "decode": True}
    assert cost.attention_s(d, 2) == pytest.approx(L * (dec[64] + dec[256]), rel=1e-12)
    calls = []
    for mod in (sim.operators, sim.optable):
        for fn in (parse_batch, parse_contexts):
            if hasattr(mod, fn.__name__):
                monkeypatch.setattr(mod, fn.__name__, lambda *a, fn=fn: calls.append(fn.__name__) or fn(*a))
    cost.cost([(16, 64)], [64])
    assert calls == ["parse_batch", "parse_contexts"]


def test_the_simulator_runs_on_the_operator_table(calibrated):
    sc, _ = calibrated
    eng, _env, cost, _wall = simulate(sc)
    assert isinstance(cost, OperatorTableCostModel)
    a, b = request_rows(eng)[:2]  # round 1: both prompts in the first step, priced by the table
    assert [(r["round"], r["cached_tokens"], r["queue_s"]) for r in (a, b)] == [(1, 0, 0.0), (1, 0, 0.0)]
    step = cost.step_time_s([(a["prompt_tokens"], 0), (b["prompt_tokens"], 0)])
    assert a["compute_s"] == pytest.approx(step, rel=1e-9) and b["compute_s"] == pytest.approx(step, rel=1e-9)


def test_a_table_for_another_shape_is_one_line(tmp_path, calibrated):
    _, data = calibrated
    bad = {**data, "gemm": [{"n": 7, "k": 9, "points": [[1, 0.1]]}]}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    cost = load_cost_table(p, "llama-3.1-8b", "h200x1", 1)
    with pytest.raises(ValueError, match=r"bad\.json: no GEMM of shape N x K = .* \(has 7x9\)"):
        cost.cost([(16, 0)])
    with pytest.raises(ValueError, match=r"x\.json: key 'copy' is missing"):
        OperatorTable({k: v for k, v in data.items() if k != "copy"}, "x.json")
    with pytest.raises(ValueError, match=r"decode_attention: expected a non-empty list"):
        OperatorTable({**data, "decode_attention": [[1, 2, 3]]}, "x.json")


@pytest.mark.parametrize("model,tp,ep", [("gpt-oss-20b", 1, 1), ("gpt-oss-20b", 2, 2), ("deepseek-v3", 8, 1),
                                         ("qwen3-next-80b", 2, 1)])
def test_every_gemm_the_model_prices_has_a_shape_in_the_table(model, tp, ep):
    from sim.operators import OperatorCostModel

    shapes = gemm_shapes(OperatorCostModel(model, "h200x8", tp, ep=ep))
    data = {"format": "radixsim-operators/1", "gemm": [{"n": n, "k": k, "points": [[1, 1e-6], [64, 2e-6]]}
                                                       for n, k in shapes],
            "prefill_attention": [[0, 16, 1e-6]], "decode_attention": [[64, 1e-6]], "copy": [[1, 1e-6]]}
    cost = OperatorTableCostModel(OperatorTable(data), model, "h200x8", tp, ep=ep)
    assert cost.cost([(512, 1024), (16, 0)], [300, 4000]).compute_s > 0  # a missing shape would raise
