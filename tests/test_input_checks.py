"""Inputs that used to pass silently or crash (issue 14, "One error path for every command"):
identifiers that are not scalars, duplicate rids, a trace scenario without requests, absurd
sizes, a capacity below one page in replay, odd but legal tier sizes (a warning, once), and
capacities floored to whole pages (the floored value in config.yaml).
"""
import pathlib
import subprocess
import sys

import pytest
import yaml

from helpers import run_main as run_inproc
from scenarios.scenario import ScenarioError, apply_sets, load, resolve

ROOT = pathlib.Path(__file__).resolve().parent.parent


def replay(tmp_path, capsys, text, *extra):
    trace = tmp_path / "t.jsonl"
    trace.write_text(text)
    rc, out, err = run_inproc(capsys, ["replay", str(trace), "--out", str(tmp_path / "o"), "--no-progress", *extra])
    return rc, out, err.replace(str(trace), "T")


# -- identifiers -----------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["lru", "session"])  # session: a TypeError traceback before
@pytest.mark.parametrize("text,err", [
    ('{"tokens": [1, 2], "session_id": [1, 2]}\n', "T:1: 'session_id' must be a string or an integer, got [1, 2]"),
    ('{"tokens": [1]}\n{"tokens": [1, 2], "session_id": {"a": 1}}\n',
     "T:2: 'session_id' must be a string or an integer, got {\"a\": 1}"),
    ('{"tokens": [1], "session_id": 1.5}\n', "T:1: 'session_id' must be a string or an integer, got 1.5"),
    ('{"tokens": [1], "session_id": true}\n', "T:1: 'session_id' must be a string or an integer, got true"),
    ('{"tokens": [1]}\n{"event": "close_session", "session_id": [1]}\n',
     "T:2: 'session_id' must be a string or an integer, got [1]"),
    ('{"tokens": [1], "rid": [7]}\n', "T:1: 'rid' must be a string or an integer, got [7]"),
])
def test_identifiers_must_be_scalars(tmp_path, capsys, text, err, policy):
    rc, out, e = replay(tmp_path, capsys, text, "--policy", policy)
    assert (rc, out, e) == (2, "", f"radixsim replay: {err}\n")


@pytest.mark.parametrize("text,err", [
    ('{"tokens": [1], "rid": 5}\n{"tokens": [2], "rid": 5}\n', "T:2: duplicate rid 5 (also on line 1)"),
    ('{"tokens": [1], "rid": "a"}\n\n{"event": "close_session", "session_id": 1}\n{"tokens": [2], "rid": "a"}\n',
     "T:4: duplicate rid \"a\" (also on line 1)"),
    # a default rid is the request's position: requests.csv could not tell these two apart
    ('{"tokens": [1]}\n{"tokens": [2], "rid": 0}\n', "T:2: duplicate rid 0 (also on line 1)"),
    ('{"tokens": [1], "rid": 1}\n{"tokens": [2]}\n', "T:2: duplicate rid 1 (also on line 1)"),
    ('{"tokens": [1], "rid": "3"}\n{"tokens": [2], "rid": 3}\n', "T:2: duplicate rid 3 (also on line 1)"),
])
def test_duplicate_rid_is_refused_naming_the_line(tmp_path, capsys, text, err):
    rc, out, e = replay(tmp_path, capsys, text)
    assert (rc, out, e) == (2, "", f"radixsim replay: {err}; expected a unique rid per request\n")
    assert not (tmp_path / "o").exists()


def test_unique_rids_and_null_ids_pass(tmp_path, capsys):
    text = ('{"tokens": [1], "rid": "a", "session_id": null}\n{"tokens": [2], "rid": null}\n'
            '{"tokens": [3], "rid": 7, "session_id": "s"}\n')
    rc, out, err = replay(tmp_path, capsys, text)
    assert (rc, err) == (0, "")
    rows = (tmp_path / "o" / "requests.csv").read_text().splitlines()[1:]
    assert [r.split(",")[:2] for r in rows] == [["a", ""], ["1", ""], ["7", "s"]]


# -- a trace scenario without requests -----------------------------------------------------------
TRACE_SCENARIO = """model: qwen3-32b
hardware: h200x1
cache: {page_size: 16, l1_tokens: 100000}
workload: {kind: trace, path: t.jsonl}
"""


@pytest.mark.parametrize("text", ["", "\n\n", '{"event": "close_session", "session_id": 1}\n'])
def test_trace_scenario_without_requests_is_refused(tmp_path, capsys, text):
    (tmp_path / "t.jsonl").write_text(text)
    (tmp_path / "s.yaml").write_text(TRACE_SCENARIO)
    rc, out, err = run_inproc(capsys, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"),
                                       "--no-plots", "--no-progress"])
    assert (rc, out) == (2, "")
    assert err == (f"radixsim run: {tmp_path / 's.yaml'}: workload.path: {tmp_path / 't.jsonl'}: no requests "
                   "in the trace; expected at least one\n")
    assert not (tmp_path / "o").exists()


# -- absurd sizes: refused up front, naming the key ------------------------------------------------------
def quickstart(*sets):
    return resolve(apply_sets(load("quickstart"), list(sets)), "Q")


@pytest.mark.parametrize("sets,err", [
    (["cache.l1_tokens=1000000000000000000"],
     "Q: cache.l1_tokens 1000000000000000000: 1e+18 tokens exceeds the limit of 1,099,511,627,776 (2**40); "
     "expected a smaller size"),
    (["cache.l2_tokens=1000000000000000000000000000000"],
     "Q: cache.l2_tokens 1000000000000000000000000000000: 1e+30 tokens exceeds the limit of 1,099,511,627,776 "
     "(2**40); expected a smaller size"),
    (["cache.l3_tokens=1000000000000000000"],
     "Q: cache.l3_tokens 1000000000000000000: 1e+18 tokens exceeds the limit of 1,099,511,627,776 (2**40); "
     "expected a smaller size"),
    (["cache.l2_tokens=1000000TiB"],  # 262,144 bytes per token
     "Q: cache.l2_tokens '1000000TiB': 4.19e+12 tokens exceeds the limit of 1,099,511,627,776 (2**40); "
     "expected a smaller size"),
    (["cache.l2_tokens=100000TiB"],
     "Q: cache.l2_tokens: 419,430,400,000 tokens are 6,553,600,000 pages of 64, more than the 1,073,741,824 "
     "(2**30) a pool can index; expected a smaller size"),
    (["cache.page_size=1", "cache.l2_tokens=1073741825"],
     "Q: cache.l2_tokens: 1,073,741,825 tokens are 1,073,741,825 pages of 1, more than the 1,073,741,824 (2**30) "
     "a pool can index; expected a smaller size"),
    (["cache.hicache_ratio=1.0e+12"],
     "Q: cache.hicache_ratio: 254,336,000,000,000,000 tokens are 3,974,000,000,000,000 pages of 64, more than the "
     "1,073,741,824 (2**30) a pool can index; expected a smaller size"),
])
def test_absurd_sizes_name_the_key(sets, err):
    with pytest.raises(ScenarioError) as e:
        quickstart(*sets)
    assert str(e.value) == err


def test_absurd_mamba_slots_name_the_key():
    with pytest.raises(ScenarioError) as e:
        resolve(apply_sets(load("tree-core-200-qwen3-next-80b"), ["cache.mamba_slots=1099511627776"]), "Q")
    assert str(e.value) == ("Q: cache.mamba_slots: 1,099,511,627,776 slots are more than the 1,073,741,824 (2**30) "
                            "a pool can index; expected a smaller size")


def test_absurd_size_run_is_one_line_before_simulating(tmp_path):
    # used to simulate the whole scenario, then fail in the invariant check with a numpy traceback
    r = subprocess.run([sys.executable, "-m", "radixsim", "run", "quickstart", "--set", "cache.l1_tokens=10**18",
                        "--set", "cache.l1_tokens=1000000000000000000", "--out", str(tmp_path / "o"),
                        "--no-plots", "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"radixsim run: {ROOT / 'scenarios/catalog/quickstart.yaml'}: cache.l1_tokens "
                        "1000000000000000000: 1e+18 tokens exceeds the limit of 1,099,511,627,776 (2**40); "
                        "expected a smaller size\n")
    assert not (tmp_path / "o").exists()


def test_limits_are_far_above_real_sizes():
    # a 500 TiB L3 fits with room to spare
    from scenarios.units import MAX_POOL_PAGES, MAX_TOKENS

    assert MAX_TOKENS == 2**40 and MAX_POOL_PAGES == 2**30
    sc = quickstart("cache.l3_tokens=500TiB")
    assert sc.doc["cache"]["l3_tokens"] < MAX_TOKENS


@pytest.mark.parametrize("extra,err", [
    (["--capacity-tokens", "1000000000000000000"],
     "--capacity-tokens '1000000000000000000': 1e+18 tokens exceeds the limit of 1,099,511,627,776 (2**40); "
     "expected a smaller size"),
    # 2**40 pages: were this not refused, their index (8 TiB) would fail to allocate at once, not swap
    (["--capacity-tokens", "1099511627776"],
     "--capacity-tokens: 1,099,511,627,776 tokens are 1,099,511,627,776 pages of 1, more than the 1,073,741,824 "
     "(2**30) a pool can index; expected a smaller size"),
    (["--capacity-tokens", "100", "--l2-tokens", "1000000000000000000000000000000"],
     "--l2-tokens '1000000000000000000000000000000': 1e+30 tokens exceeds the limit of 1,099,511,627,776 (2**40); "
     "expected a smaller size"),
    (["--capacity-tokens", "100", "--hicache-ratio", "1e20"],
     "--hicache-ratio: 10,000,000,000,000,000,000,000 tokens are 10,000,000,000,000,000,000,000 pages of 1, more "
     "than the 1,073,741,824 (2**30) a pool can index; expected a smaller size"),
    (["--capacity-tokens", "100", "--components", "full,swa:8", "--swa-tokens", "1099511627776"],
     "--swa-tokens: 1,099,511,627,776 tokens are 1,099,511,627,776 pages of 1, more than the 1,073,741,824 "
     "(2**30) a pool can index; expected a smaller size"),
    (["--components", "full,mamba", "--mamba-slots", "1099511627776"],
     "--mamba-slots: 1,099,511,627,776 slots are more than the 1,073,741,824 (2**30) a pool can index; "
     "expected a smaller size"),
])
def test_replay_absurd_sizes_name_the_option(tmp_path, capsys, extra, err):
    rc, out, e = replay(tmp_path, capsys, '{"tokens": [1, 2, 3]}\n', *extra)
    assert (rc, out, e) == (2, "", f"radixsim replay: {err}\n")
    assert not (tmp_path / "o").exists()


# -- below one page: replay refuses as run does ---------------------------------------------------------
@pytest.mark.parametrize("caps", ["8", "0", "15", "64,8"])
def test_replay_capacity_below_one_page_is_refused(tmp_path, capsys, caps):
    rc, out, err = replay(tmp_path, capsys, '{"tokens": [1, 2, 3]}\n', "--page-size", "16", "--capacity-tokens", caps)
    small = caps.split(",")[-1]
    assert (rc, out, err) == (2, "", f"radixsim replay: --capacity-tokens: {small} tokens is less than one page "
                                     "(16); expected more\n")
    assert not (tmp_path / "o").exists()


def test_run_capacity_below_one_page_is_refused_with_the_same_words():
    with pytest.raises(ScenarioError) as e:
        quickstart("cache.l1_tokens=8")
    assert str(e.value) == "Q: cache.l1_tokens: 8 tokens is less than one page (64); expected more"


# -- odd but legal tier sizes: one warning each, once ------------------------------------------------
L2_SMALL = "L2 (49,984 tokens) is smaller than L1 (99,968): only part of L1 can be backed up"
L2_ZERO = "L2 is 0 tokens: the host tier holds nothing, so nothing is backed up or staged through it"
L3_SMALL = "L3 (960 tokens) is smaller than L2 (49,984)"


@pytest.mark.parametrize("sets,warnings", [
    (["cache.l1_tokens=100000", "cache.l2_tokens=50000"], (L2_SMALL,)),
    (["cache.l1_tokens=100000", "cache.l2_tokens=0"], (L2_ZERO,)),
    (["cache.l1_tokens=100000", "cache.hicache_ratio=0.5"], (L2_SMALL,)),
    (["cache.l1_tokens=100000", "cache.l2_tokens=50000", "cache.l3_tokens=1000"], (L2_SMALL, L3_SMALL)),
    (["cache.l1_tokens=100000", "cache.l2_tokens=200000", "cache.l3_tokens=unbounded"], ()),
    (["cache.l1_tokens=100000", "cache.l2_tokens=100000", "cache.l3_tokens=100000"], ()),
    (["cache.l1_tokens=100000", "cache.hicache_ratio=null"], ()),
])
def test_tier_size_warnings(sets, warnings):
    assert quickstart(*sets).warnings == warnings


def test_run_warns_once_on_stderr_and_runs(tmp_path, capsys):
    rc, out, err = run_inproc(capsys, ["run", "quickstart", "--set", "workload.num_clients=2", "--set",
                                       "workload.num_rounds=2", "--set", "cache.l1_tokens=100000", "--set",
                                       "cache.l2_tokens=50000", "--set", "cache.l3_tokens=1000", "--out",
                                       str(tmp_path / "o"), "--no-plots", "--no-progress"])
    assert rc == 0
    assert err == f"radixsim run: warning: {L2_SMALL}\nradixsim run: warning: {L3_SMALL}\n"


def test_replay_warns_once_for_a_comparison(tmp_path, capsys):
    rc, out, err = replay(tmp_path, capsys, '{"tokens": [1, 2, 3]}\n', "--capacity-tokens", "100,200",
                          "--policy", "lru,fifo", "--l2-tokens", "0")
    assert rc == 0
    assert err == f"radixsim replay: warning: {L2_ZERO}\n"


# -- capacities floored to whole pages, the floored value recorded ------------------------------------
def test_scenario_records_floored_capacities():
    c = quickstart("cache.l1_tokens=100001", "cache.l2_tokens=50001", "cache.l3_tokens=1001").doc["cache"]
    assert (c["l1_tokens"], c["l2_tokens"], c["l3_tokens"]) == (99_968, 49_984, 960)
    # hicache_ratio x the floored L1, floored: what the core's L2 pool holds (it was 2 x 100001)
    c = quickstart("cache.l1_tokens=100001", "cache.hicache_ratio=1.5").doc["cache"]
    assert (c["l1_tokens"], c["l2_tokens"]) == (99_968, 149_952)


def test_swa_pool_is_floored_too():
    c = resolve(apply_sets(load("fig4-dsv4-flash-l1"), ["cache.l1_tokens=1000063", "cache.swa_tokens=50001"]),
                "Q").doc["cache"]
    assert (c["l1_tokens"], c["swa_tokens"]) == (1_000_000, 49_984)


def test_run_config_yaml_has_the_floored_values(tmp_path, capsys):
    rc, _, _ = run_inproc(capsys, ["run", "quickstart", "--set", "workload.num_clients=2", "--set",
                                   "workload.num_rounds=2", "--set", "cache.l1_tokens=100001", "--set",
                                   "cache.l2_tokens=200063", "--set", "cache.l3_tokens=300001", "--out",
                                   str(tmp_path / "o"), "--no-plots", "--no-progress"])
    assert rc == 0
    c = yaml.safe_load((tmp_path / "o" / "config.yaml").read_text())["cache"]
    assert (c["l1_tokens"], c["l2_tokens"], c["l3_tokens"]) == (99_968, 200_000, 299_968)


def test_replay_config_yaml_has_the_floored_values(tmp_path, capsys):
    rc, _, _ = replay(tmp_path, capsys, '{"tokens": [1, 2, 3]}\n', "--page-size", "16", "--capacity-tokens",
                      "1000", "--hicache-ratio", "1.5", "--l3-tokens", "5000")
    assert rc == 0
    c = yaml.safe_load((tmp_path / "o" / "config.yaml").read_text())["cache"]
    assert (c["capacity_tokens"], c["usable_tokens"]) == (1000, 992)
    assert (c["tiers"]["l2_resolved_tokens"], c["tiers"]["l3_tokens"]) == (1488, 4992)
