"""The shared_prefix workload kind under staged load (issue 32 items 2 and 4): inference-perf's
shared-prefix prompts, its Poisson and constant timers, stage boundaries (drain + interval),
stages.csv figures hand-computed, the inference-perf config reader, and one-line refusals."""
import csv
import json

import numpy as np
import pytest

from helpers import run_main
from scenarios.scenario import ScenarioError, from_file, resolve
from scenarios.shared_prefix import SharedPrefixConfig, SharedPrefixWorkload, parse_stages, read_inference_perf
from sim.staged import stage_table, stage_windows

SMALL = dict(num_groups=2, num_prompts_per_group=3, system_prompt_len=32, question_len=16, output_len=4, seed=1)


def test_prompts_are_system_prompt_plus_question_and_cycle():
    w = SharedPrefixWorkload(SharedPrefixConfig(**SMALL, stages=((2, 3), (4, 2))))
    prompts = w.prompts()
    assert len(prompts) == 6 and all(len(p) == 48 for p in prompts)
    groups = [w.group_of(k) for k in range(6)]
    assert sorted(groups) == [0, 0, 0, 1, 1, 1]
    for i in range(6):
        for j in range(6):
            same = np.array_equal(prompts[i][:32], prompts[j][:32])
            assert same == (groups[i] == groups[j])  # the system prompt is the group's, and only its
    assert len({p[32:].tobytes() for p in prompts}) == 6  # every question differs
    assert all(w.prompt(k + 6) is w.prompt(k) for k in range(6))  # request k sends prompt k mod 6
    again = SharedPrefixWorkload(SharedPrefixConfig(**SMALL, stages=((2, 3), (4, 2)))).prompts()
    assert all(np.array_equal(a, b) for a, b in zip(prompts, again))  # deterministic
    assert len(w) == 6 + 8


def test_poisson_timer_spreads_each_seconds_count_over_that_second():
    w = SharedPrefixWorkload(SharedPrefixConfig(**SMALL, stages=((5, 20),)))
    t = w.arrival_offsets(0)
    assert len(t) == 100 and np.all(np.diff(t) >= 0)
    # each second's last request comes exactly at the second's end (gaps scaled to sum to 1 s)
    whole = t[np.isclose(t, np.round(t))]
    counts = np.bincount(np.ceil(t - 1e-9).astype(int))
    assert len(whole) == np.count_nonzero(counts[:int(np.ceil(t[-1]))])
    assert np.array_equal(t, w.arrival_offsets(0))


def test_constant_timer_ends_exactly_at_the_duration():
    t = SharedPrefixWorkload(SharedPrefixConfig(**SMALL, load_type="constant", stages=((2, 3),))).arrival_offsets(0)
    assert len(t) == 6 and t[-1] == pytest.approx(3.0) and np.all(np.diff(t) > 0)


def _rows(stage_of, arrival, first, finish, prompt, cached, out=5):
    return [{"round": s, "arrival_s": a, "ttft_s": f - a, "first_token_s": f, "finish_s": e, "prompt_tokens": p,
             "cached_tokens": c, "output_tokens": out, "rejected": False}
            for s, a, f, e, p, c in zip(stage_of, arrival, first, finish, prompt, cached)]


def test_stage_table_hand_computed():
    cfg = SharedPrefixConfig(**SMALL, stages=((1, 2), (2, 2)), stage_interval_s=0.5, stage_lead_s=1.0)
    rows = _rows([1, 1, 2, 2], [1.5, 3.0, 5.0, 5.5], [2.0, 3.5, 5.5, 6.5], [3.0, 6.0, 6.5, 7.5],
                 [100, 100, 100, 100], [0, 50, 60, 90])
    # stage 1: [0, max(0 + 1 + 2, 6.0)] = [0, 6]; stage 2 from 6.5 to max(6.5 + 3, 7.5) = 9.5
    assert stage_windows(cfg, rows) == [(0.0, 6.0), (6.5, 9.5)]
    t = stage_table(cfg, rows)
    assert [r["requests"] for r in t] == [2, 2]
    assert t[0]["output_tok_s"] == pytest.approx(10 / 6) and t[1]["output_tok_s"] == pytest.approx(10 / 3)
    assert t[0]["requests_s"] == pytest.approx(2 / 6) and t[1]["requests_s"] == pytest.approx(2 / 3)
    assert t[0]["ttft_mean_s"] == pytest.approx(0.5) and t[1]["ttft_mean_s"] == pytest.approx(0.75)
    assert t[1]["ttft_p90_s"] == pytest.approx(0.5 + 0.9 * 0.5)
    # ITL: decode seconds / decode gaps: stage 1 (1.0 + 2.5) / 8, stage 2 (1.0 + 1.0) / 8
    assert t[0]["itl_mean_s"] == pytest.approx(3.5 / 8) and t[1]["itl_mean_s"] == pytest.approx(2 / 8)
    assert t[0]["hit_rate"] == pytest.approx(0.25) and t[1]["hit_rate"] == pytest.approx(0.75)


SCEN = """\
model: qwen3-32b
hardware: h200x1
cache: {page_size: 16, l1_tokens: 200000}
workload:
  kind: shared_prefix
  num_groups: 2
  num_prompts_per_group: 3
  system_prompt_len: 512
  question_len: 64
  output_len: 16
  stages: [{rate: 2, duration: 3}, {rate: 20, duration: 2}]
  stage_interval_s: 0.5
"""


def test_staged_run_keeps_stage_boundaries(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text(SCEN)
    rc, _, err = run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-progress",
                                   "--no-plots"])
    assert rc == 0, err
    rows = list(csv.DictReader(open(tmp_path / "o" / "requests.csv")))
    stages = list(csv.DictReader(open(tmp_path / "o" / "stages.csv")))
    assert [int(s["requests"]) for s in stages] == [6, 40] and len(rows) == 46
    sc = from_file(str(tmp_path / "s.yaml"))
    w = SharedPrefixWorkload(sc.workload)
    start2 = float(stages[1]["start_s"])
    end1 = float(stages[0]["end_s"])
    assert start2 == pytest.approx(end1 + 0.5)
    last1 = max(float(r["finish_s"]) for r in rows if r["round"] == "1")
    assert end1 == pytest.approx(max(0 + 1 + 3, last1))
    for s, (offsets, start) in enumerate(((w.arrival_offsets(0), 0.0), (w.arrival_offsets(1), start2))):
        got = sorted(float(r["arrival_s"]) for r in rows if r["round"] == str(s + 1))
        assert got == pytest.approx([start + 1.0 + t for t in offsets])  # lead 1 s, then the timer's times
    # a repeated prompt or a group's later question reuses the group's system prompt (512 tokens: 32 pages)
    first_seen, cached = set(), {}
    for r in sorted(rows, key=lambda r: int(r["rid"])):
        g = w.group_of(int(r["rid"]))
        if g in first_seen:
            assert int(r["cached_tokens"]) >= 512
        first_seen.add(g)
        cached[int(r["rid"])] = int(r["cached_tokens"])
    assert cached[0] == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == [1, 2]


def test_fleet_run_writes_stages(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text(SCEN + "fleet: {engines: 2, router: round_robin}\n")
    rc, _, err = run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-progress",
                                   "--no-plots"])
    assert rc == 0, err
    stages = list(csv.DictReader(open(tmp_path / "o" / "stages.csv")))
    assert [int(s["requests"]) for s in stages] == [6, 40]


IPERF = """\
load:
  type: poisson
  interval: 2
  stages:
    - rate: 3
      duration: 4
data:
  type: shared_prefix
  shared_prefix:
    num_unique_system_prompts: 4
    num_users_per_system_prompt: 5
    system_prompt_len: 1000
    question_len: 100
    output_len: 20
"""


def test_inference_perf_config_is_read_with_its_aliases(tmp_path):
    (tmp_path / "ip.yaml").write_text(IPERF)
    got = read_inference_perf(tmp_path / "ip.yaml")
    assert got == {"num_groups": 4, "num_prompts_per_group": 5, "system_prompt_len": 1000, "question_len": 100,
                   "output_len": 20, "load_type": "poisson", "stage_interval_s": 2, "stages": [(3.0, 4.0)]}
    (tmp_path / "s.yaml").write_text("workload: {kind: shared_prefix, inference_perf: ip.yaml}\n")
    cfg = from_file(str(tmp_path / "s.yaml")).workload
    assert (cfg.num_groups, cfg.num_prompts_per_group, cfg.system_prompt_len, cfg.stages, cfg.stage_interval_s) == \
        (4, 5, 1000, ((3.0, 4.0),), 2)


@pytest.mark.parametrize("stages, message", [
    ([], "workload.stages: got []; expected a non-empty list of {rate: requests/s > 0, duration: seconds > 0}"),
    ([{"rate": -1, "duration": 5}], "workload.stages[0].rate: got -1; expected a number > 0 (requests/s)"),
    ([{"rate": 1, "duration": 5}, {"rate": 2, "duration": 0}],
     "workload.stages[1].duration: got 0; expected a number > 0 (seconds)"),
    ([{"rate": 0.1, "duration": 5}], "workload.stages[0]: rate 0.1 x duration 5 sends no request"),
    ([{"rate": 1, "duration": 5, "interval": 2}], "workload.stages[0].interval: unknown key"),
    ("fast", "workload.stages: got 'fast'; expected a non-empty list"),
])
def test_bad_stages_are_refused_in_one_line(stages, message):
    raw = {"workload": {"kind": "shared_prefix", "stages": stages}}
    with pytest.raises(ScenarioError) as e:
        resolve(raw, "s.yaml")
    assert str(e.value).startswith("s.yaml: " + message)


@pytest.mark.parametrize("edit, message", [
    (("data:\n  type: shared_prefix", "data:\n  type: random"), "data.type: got 'random'; expected shared_prefix"),
    (("output_len: 20", "output_len: 20\n    enable_multi_turn_chat: true"),
     "data.shared_prefix.enable_multi_turn_chat: not modelled"),
    (("question_len: 100", "question_len: {mean: 100, std_dev: 10}"),
     "data.shared_prefix.question_len: a distribution is not modelled"),
    (("type: poisson", "type: concurrent"), "load.type: got 'concurrent'; expected one of poisson, constant"),
    (("    - rate: 3\n      duration: 4\n", ""), "load.stages: empty; expected at least one stage"),
    (("interval: 2", "interval: 2\n  sweep: {type: linear}"), "load.sweep: not modelled"),
])
def test_bad_inference_perf_configs_are_refused_in_one_line(tmp_path, capsys, edit, message):
    (tmp_path / "ip.yaml").write_text(IPERF.replace(*edit))
    (tmp_path / "s.yaml").write_text("workload: {kind: shared_prefix, inference_perf: ip.yaml}\n")
    rc, out, err = run_main(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"workload.inference_perf: {tmp_path / 'ip.yaml'}: {message}" in err
    assert not (tmp_path / "o").exists()


def test_parse_stages_accepts_pairs_and_e_notation():
    assert parse_stages([[1, 2], {"rate": "2e1", "duration": 3}], "x") == [(1.0, 2.0), (20.0, 3.0)]


def test_replay_hits_on_the_shared_system_prompt(tmp_path, capsys):
    args = ["replay", "--workload", "shared_prefix", "--page-size", "16", "--out", str(tmp_path / "o"),
            "--no-progress"] + [x for k, v in SMALL.items() for x in ("--set", f"workload.{k}={v}")]
    rc, _, err = run_main(capsys, args)
    assert rc == 0, err
    rows = list(csv.DictReader(open(tmp_path / "o" / "requests.csv")))
    w = SharedPrefixWorkload(SharedPrefixConfig(**SMALL))
    seen = set()
    for r in rows:
        k = int(r["rid"])
        g = w.group_of(k)
        # a group's first request: nothing; then its 32-token system prompt (2 pages); a repeated
        # 48-token prompt: 2 pages too (the last token is always computed: at most 47 -> 32)
        assert int(r["cached_tokens"]) == (32 if g in seen else 0), k
        seen.add(g)
    assert len(rows) == 30
