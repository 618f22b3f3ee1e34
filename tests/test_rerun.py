"""A run's config.yaml (or its result directory) reruns that run (scenarios/run_record.py): the same
result files byte for byte, config.yaml apart from provenance.command; --set and --smoke apply on top;
a replay's record and a record without the scenario document are refused in one line."""
import yaml

from helpers import run_main
from scenarios.scenario import from_file

NO = ["--no-progress", "--no-plots"]
RESULTS = ["requests.csv", "rounds.csv", "summary.json", "timeline.csv", "tree.json"]


def run(capsys, *args):
    rc, out, err = run_main(capsys, ["run", *[str(a) for a in args], *NO])
    assert (rc, err) == (0, ""), err
    return out


def assert_same_run(a, b, files=RESULTS):
    """Every result file byte-identical; config.yaml the same document but for provenance.command."""
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ca, cb = (yaml.safe_load((d / "config.yaml").read_text()) for d in (a, b))
    assert ca["provenance"].pop("command") != cb["provenance"].pop("command")
    assert ca == cb


def test_quickstart_smoke_reruns_from_its_config_yaml_and_its_directory(capsys, tmp_path):
    run(capsys, "quickstart", "--smoke", "--out", tmp_path / "q1")
    prov = yaml.safe_load((tmp_path / "q1" / "config.yaml").read_text())["provenance"]
    assert prov["scenario"]["workload"] == {"kind": "multiturn", "num_clients": 3, "num_rounds": 3,
                                            "request_length": 2048, "output_length": 64, "max_parallel": 3,
                                            "request_rate": 16, "round_barrier": True}  # the smoke size
    assert prov["scenario"]["name"] == "quickstart" and prov["scenario_file"].endswith("quickstart.yaml")
    run(capsys, tmp_path / "q1" / "config.yaml", "--out", tmp_path / "q2")
    run(capsys, tmp_path / "q1", "--out", tmp_path / "q3")
    run(capsys, tmp_path / "q2", "--out", tmp_path / "q4")  # a rerun's record reruns too
    for d in ("q2", "q3", "q4"):
        assert_same_run(tmp_path / "q1", tmp_path / d)


def test_set_applies_on_top_of_the_recorded_scenario(capsys, tmp_path):
    run(capsys, "quickstart", "--smoke", "--set", "workload.num_rounds=2", "--out", tmp_path / "a")
    run(capsys, tmp_path / "a", "--set", "seed=5", "--out", tmp_path / "b")
    run(capsys, "quickstart", "--smoke", "--set", "workload.num_rounds=2", "--set", "seed=5", "--out", tmp_path / "c")
    for name in RESULTS:
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "c" / name).read_bytes(), name
    assert (tmp_path / "a" / "requests.csv").read_bytes() != (tmp_path / "b" / "requests.csv").read_bytes()
    rows = (tmp_path / "b" / "rounds.csv").read_text().splitlines()
    assert len(rows) == 3  # header + the 2 recorded rounds, not quickstart's smoke 3
    b = yaml.safe_load((tmp_path / "b" / "config.yaml").read_text())
    assert b["seed"] == 5 and b["provenance"]["scenario"]["workload"]["num_rounds"] == 2


def test_a_fleet_smoke_run_reruns(capsys, tmp_path):
    run(capsys, "fleet-agentic-colocated-8", "--smoke", "--out", tmp_path / "f1")
    run(capsys, tmp_path / "f1", "--out", tmp_path / "f2")
    assert_same_run(tmp_path / "f1", tmp_path / "f2", RESULTS[:1] + RESULTS[2:] + ["engines.csv", "fleet.json"])


EVENTS = """\
model: qwen3-32b
hardware: h200x1
cache: {page_size: 64, l1_tokens: 200000, l2_tokens: 400000}
workload: {num_clients: 4, num_rounds: 3, request_length: 2000, output_length: 20, max_parallel: 4}
events:
  - {at_s: 0.5, kind: link_slow, link: L2->L1, factor: 4, duration_s: 1}
"""


def test_a_run_with_events_reruns(capsys, tmp_path):
    (tmp_path / "ev.yaml").write_text(EVENTS)
    run(capsys, tmp_path / "ev.yaml", "--out", tmp_path / "e1")
    assert len(yaml.safe_load((tmp_path / "e1" / "config.yaml").read_text())["events"]) == 1
    run(capsys, tmp_path / "e1" / "config.yaml", "--out", tmp_path / "e2")
    assert_same_run(tmp_path / "e1", tmp_path / "e2")


def test_a_relative_trace_is_found_beside_the_recorded_scenario_file(capsys, tmp_path, monkeypatch):
    run(capsys, "mooncake-trace", "--smoke", "--out", tmp_path / "m1")  # workload.path: ../data/... beside it
    monkeypatch.chdir(tmp_path)
    run(capsys, "m1", "--out", "m2")
    assert_same_run(tmp_path / "m1", tmp_path / "m2", ["requests.csv", "summary.json", "timeline.csv", "tree.json"])


def refused(capsys, tmp_path, *args):
    rc, out, err = run_main(capsys, ["run", *[str(a) for a in args], "--out", str(tmp_path / "x"), *NO])
    assert (rc, out, err.count("\n")) == (2, "", 1), err
    assert not (tmp_path / "x").exists()
    return err


def test_a_replays_record_points_to_radixsim_replay(capsys, tmp_path):
    (tmp_path / "t.jsonl").write_text('{"input_ids": [1, 2, 3, 4]}\n{"input_ids": [1, 2, 3, 5]}\n')
    assert run_main(capsys, ["replay", str(tmp_path / "t.jsonl"), "--page-size", "2", "--out", str(tmp_path / "r"),
                             "--no-progress"])[0] == 0
    err = refused(capsys, tmp_path, tmp_path / "r")
    assert err.startswith(f"radixsim run: {tmp_path / 'r' / 'config.yaml'}: mode: replay; a replay's record reruns "
                          f"with `radixsim replay` and the recorded options (radixsim replay {tmp_path / 't.jsonl'} ")


def test_an_older_record_without_the_scenario_is_refused(capsys, tmp_path):
    run(capsys, "quickstart", "--smoke", "--out", tmp_path / "q")
    cfg = tmp_path / "q" / "config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    del doc["provenance"]["scenario"]
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    err = refused(capsys, tmp_path, cfg)
    assert err.startswith(f"radixsim run: {cfg}: provenance.scenario: missing (a record from an older radixsim); "
                          "expected the scenario document a run records; rerun its scenario file instead "
                          "(radixsim run quickstart --smoke ")
    doc["mode"] = "lab"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert refused(capsys, tmp_path, cfg) == (f"radixsim run: {cfg}: mode: 'lab'; expected a `radixsim run` "
                                              "record (mode: sim or torch)\n")


def test_a_bad_set_on_a_rerun_names_the_record(capsys, tmp_path):
    run(capsys, "quickstart", "--smoke", "--out", tmp_path / "q")
    err = refused(capsys, tmp_path, tmp_path / "q", "--set", "workload.num_rounds=0")
    assert err.startswith(f"radixsim run: {tmp_path / 'q' / 'config.yaml'}: provenance.scenario: "
                          "workload.num_rounds: "), err


def test_a_torch_record_keeps_its_mode(capsys, tmp_path):
    run(capsys, "quickstart", "--smoke", "--out", tmp_path / "q")
    cfg = tmp_path / "q" / "config.yaml"
    assert from_file(cfg).recorded_mode == "sim"
    cfg.write_text(cfg.read_text().replace("mode: sim\n", "mode: torch\n", 1))
    sc = from_file(tmp_path / "q")
    assert (sc.recorded_mode, sc.doc["name"]) == ("torch", "quickstart")
    assert from_file("quickstart").recorded_mode is None
