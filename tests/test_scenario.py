"""Scenario files (scenarios/scenario.py) and `radixsim run` input handling.

Bad input: exit status 2 and exactly one stderr line "radixsim run: WHERE: KEY: ...; expected ..."
(cli.py and scenario.py docstrings), never a traceback. Resolution: catalog names, `l1_tokens:
auto`, hicache ratio, byte sizes and --set overrides give the documented numbers. A tiny valid
run writes the result schema and is reproducible byte for byte.
"""
import csv
import dataclasses
import json
import math
from fractions import Fraction

import pytest
import yaml

from helpers import run_main as run_cli
from radixsim import results
from scenarios import presets, scenario
from sim.cost import Efficiency

PREFIX = "radixsim run: "

# A small valid scenario: broken cases below start from it so that a case that (wrongly)
# passes validation runs in well under a second instead of simulating the 48 x 60 default.
VALID = """\
model: qwen3-32b
hardware: h200x1
cache:
  page_size: 16
  l1_tokens: 20000
workload:
  num_clients: 2
  num_rounds: 2
  request_length: 100
  output_length: 4
  max_parallel: 2
engine:
  chunked_prefill_tokens: 256
"""


def valid_with(**sections):
    """VALID with keys replaced or added: valid_with(cache={"policy": "mru"}, seed=-1)."""
    doc = yaml.safe_load(VALID)
    for k, v in sections.items():
        if isinstance(v, dict) and isinstance(doc.get(k), dict):
            doc[k].update(v)
        else:
            doc[k] = v
    return yaml.safe_dump(doc, sort_keys=False)


def run_file(capsys, tmp_path, text=None, path=None, sets=()):
    if path is None:
        path = tmp_path / "scenario.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    args = ["run", str(path), *[a for s in sets for a in ("--set", s)],
            "--out", str(tmp_path / "out"), "--no-plots", "--no-progress"]
    return (str(path),) + run_cli(capsys, args)


def assert_one_line(rc, out, err, *needles):
    assert "Traceback" not in err
    assert rc == 2, (rc, err)
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(PREFIX), err
    for n in needles:
        assert n in err, (n, err)


# -- 1. broken scenario files -----------------------------------------------------------------
# (id, file text, needles after the path: the offending key, then what was expected)
BROKEN = [
    ("unknown-top-key", valid_with(foo=1), ["foo: unknown key", "expected one of cache, cost, description"]),
    ("unknown-cache-key", valid_with(cache={"foo": 1}), ["cache.foo: unknown key", "expected one of", "page_size"]),
    ("unknown-engine-key", valid_with(engine={"bar": 1}), ["engine.bar: unknown key", "chunked_prefill_tokens"]),
    ("unknown-workload-key", valid_with(workload={"baz": 1}), ["workload.baz: unknown key", "num_clients"]),
    ("page-size-str", valid_with(cache={"page_size": "x"}), ["cache.page_size: got 'x'", "expected an integer >= 1"]),
    ("page-size-0", valid_with(cache={"page_size": 0}), ["cache.page_size: got 0", "expected an integer >= 1"]),
    ("seed-negative", valid_with(seed=-1), ["seed: got -1", "expected an integer >= 0"]),
    ("bool-for-int", valid_with(workload={"num_clients": True}),
     ["workload.num_clients: got True", "expected an integer >= 1"]),
    ("unknown-model", valid_with(model="gpt-9"), ["model: unknown model preset 'gpt-9'", "known: ", "qwen3-32b"]),
    ("unknown-hardware", valid_with(hardware="tpu9"), ["hardware: unknown hardware preset 'tpu9'", "h200x1"]),
    ("tp-too-large", valid_with(tp=4), ["tp: 4 exceeds the 1 GPUs of h200x1", "expected 1..1"]),
    ("l1-lots", valid_with(cache={"l1_tokens": "lots"}),
     ["cache.l1_tokens: got 'lots'", "expected 'auto' or a token count, a size like 500GiB"]),
    ("l1-below-page", valid_with(cache={"l1_tokens": 10}),
     ["cache.l1_tokens: 10 tokens is less than one page (16)", "expected more"]),
    ("l3-without-l2", valid_with(cache={"l3_tokens": 1000000}),
     ["cache.l3_tokens: an L3 tier needs L2", "expected one of them too"]),
    ("unknown-eviction", valid_with(cache={"policy": "nonesuch"}),
     ["cache.policy: got 'nonesuch'", "expected an eviction policy name"]),
    ("bad-write-policy", valid_with(cache={"write_policy": "sometimes"}),
     ["cache.write_policy: got 'sometimes'", "expected one of write_through, write_through_selective, write_back"]),
    ("bad-prefetch-policy", valid_with(cache={"prefetch_policy": "eager"}),
     ["cache.prefetch_policy: got 'eager'", "expected one of best_effort, wait_complete, timeout"]),
    ("bad-schedule-policy", valid_with(engine={"schedule_policy": "sjf"}),
     ["engine.schedule_policy: got 'sjf'", "expected one of dfs-weight, fcfs, lpm, random"]),
    ("bad-load-overlap", valid_with(engine={"load_overlap": "always"}),
     ["engine.load_overlap: got 'always'", "expected one of layerwise, none"]),
    ("chunk-not-page-multiple", valid_with(engine={"chunked_prefill_tokens": 100}),
     ["engine.chunked_prefill_tokens: 100 is not a multiple of cache.page_size (16)", "expected a multiple"]),
    ("l1-too-small-for-longest", valid_with(cache={"l1_tokens": 5000}, workload={"num_rounds": 60}),
     ["cache.l1_tokens: 4992 tokens cannot hold the longest request (6240 tokens)", "expected more L1"]),
    ("components-model-lacks", valid_with(cache={"components": ["full", "swa"]}),
     ["cache.components: ['full', 'swa'] names a component Qwen3-32B does not have", "expected a subset"]),
    ("components-empty", valid_with(cache={"components": []}),
     ["cache.components: got []", "expected null or a list with full: swa, mamba (sized from the model) and any "
                                  "registered component kind"]),
    ("components-unknown-name", valid_with(cache={"components": ["full", "ring9"]}),
     ["cache.components[1]: 'ring9' is not a component", "expected one of full, swa, mamba"]),
    ("components-unknown-kind", valid_with(cache={"components": ["full", {"kind": "ring9", "window": 8}]}),
     ["cache.components[1].kind: 'ring9' is not a registered component kind", "expected a registered kind"]),
    ("components-swa-with-fields", valid_with(cache={"components": ["full", {"kind": "swa", "window_tokens": 8}]}),
     ["cache.components[1]: swa is sized from the model preset and the cache.* keys", "expected the name 'swa' alone"]),
    ("efficiency-unknown", valid_with(cost={"efficiency": {"mfu_foo": 0.5}}),
     ["cost.efficiency.mfu_foo: unknown key", "expected one of mfu_prefill"]),
    ("efficiency-not-number", valid_with(cost={"efficiency": {"mfu_decode": "high"}}),
     ["cost.efficiency.mfu_decode: got 'high'", "expected a number"]),
    ("cost-table-missing", valid_with(cost={"kind": "table"}),
     ["cost.table: missing", "expected a file of measured step times"]),
    ("cache-not-mapping", valid_with(cache=[1]), ["cache: expected a mapping, got [1]"]),
    ("min-prefetch-negative", valid_with(cache={"min_prefetch_tokens": -1}),
     ["cache.min_prefetch_tokens: got -1", "expected an integer >= 0"]),
    ("l2-float", valid_with(cache={"l2_tokens": 1.5}), ["cache.l2_tokens: got 1.5", "expected null or a token"]),
    ("l1-unbounded", valid_with(cache={"l1_tokens": "unbounded"}),
     ["cache.l1_tokens 'unbounded'", "expected a token count or a size like 500GiB"]),
    ("rate-nan", valid_with(workload={"request_rate": float("nan")}),
     ["workload.request_rate: got nan", "expected a number > 0 or inf"]),
]


@pytest.mark.parametrize("text,needles", [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_broken_scenario(capsys, tmp_path, text, needles):
    """Each broken file: exit 2, one line naming the file, the key and what was expected."""
    path, rc, out, err = run_file(capsys, tmp_path, text)
    assert_one_line(rc, out, err, f"{PREFIX}{path}: {needles[0]}", *needles[1:])
    assert not (tmp_path / "out").exists()


def test_invalid_yaml_names_the_line(capsys, tmp_path):
    path, rc, out, err = run_file(capsys, tmp_path, "seed: 1\ncache:\n  page_size: 64\n  l1_tokens: [1, 2\nfoo: bar\n")
    assert_one_line(rc, out, err, f"{PREFIX}{path}:5: not valid YAML (")


def test_tab_indent_names_the_line(capsys, tmp_path):
    path, rc, out, err = run_file(capsys, tmp_path, "cache:\n\tpage_size: 16\n")
    assert_one_line(rc, out, err, f"{PREFIX}{path}:2: not valid YAML (found character")


def test_top_level_list(capsys, tmp_path):
    path, rc, out, err = run_file(capsys, tmp_path, "- a\n- b\n")
    assert_one_line(rc, out, err, f"{PREFIX}{path}: top level: expected a scenario (a mapping of keys), got list")


def test_missing_file(capsys, tmp_path):
    path, rc, out, err = run_file(capsys, tmp_path, path=tmp_path / "nope.yaml")
    assert_one_line(rc, out, err, f"{PREFIX}{path}: no such scenario file (catalog: ",
                    ", ".join(scenario.catalog_names()))


def test_directory_instead_of_file(capsys, tmp_path):
    d = tmp_path / "adir"
    d.mkdir()
    path, rc, out, err = run_file(capsys, tmp_path, path=d)
    assert_one_line(rc, out, err, f"{PREFIX}{path}: is a directory; expected a scenario file (YAML), a catalog name or "
                    "a result directory (with config.yaml)")


@pytest.mark.parametrize("item,needles", [
    ("foo", ["--set 'foo': expected KEY=VALUE"]),
    ("=1", ["--set '=1': expected KEY=VALUE"]),
    ("cache.bogus=1", ["--set cache.bogus: unknown key 'cache.bogus'", "expected one of", "page_size"]),
    ("bogus.x=1", ["--set bogus.x: unknown key 'bogus'", "expected one of cache, cost"]),
    ("cache.page_size.x=1", ["--set cache.page_size.x: unknown key 'cache.page_size.x'", "expected one of"]),
    ("cache.page_size=[", ["", "quickstart.yaml: cache.page_size: got '['", "expected an integer >= 1"]),
], ids=["no-equals", "no-key", "unknown-nested", "unknown-top", "below-leaf", "bad-value"])
def test_bad_set(capsys, tmp_path, item, needles):
    """--set problems name the option (or the scenario, for a bad value) and the dotted key."""
    _, rc, out, err = run_file(capsys, tmp_path, path="quickstart", sets=[item])
    assert_one_line(rc, out, err, PREFIX + needles[0], *needles[1:])


# Inputs that once escaped as tracebacks or lost the key: each gives the same one-line error.
def test_deeply_nested_yaml(capsys, tmp_path):
    path, rc, out, err = run_file(capsys, tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert_one_line(rc, out, err, f"{PREFIX}{path}")


def test_non_utf8_file(capsys, tmp_path):
    path, rc, out, err = run_file(capsys, tmp_path, b"seed: \xff\xfe\n")
    assert_one_line(rc, out, err, f"{PREFIX}{path}")


def test_belady_policy_in_run(capsys, tmp_path):
    path, rc, out, err = run_file(capsys, tmp_path, valid_with(cache={"policy": "belady-node"}))
    assert_one_line(rc, out, err, f"{PREFIX}{path}: cache.policy", "expected")


def test_infinite_byte_size(capsys, tmp_path):
    path, rc, out, err = run_file(capsys, tmp_path, valid_with(cache={"l2_tokens": "1e400GiB"}))
    assert_one_line(rc, out, err, f"{PREFIX}{path}: cache.l2_tokens", "expected")


def test_mamba_every_not_page_multiple(capsys, tmp_path):
    text = "model: inkling-small\nhardware: h200x8\ncache:\n  mamba_every_tokens: 100\n"
    path, rc, out, err = run_file(capsys, tmp_path, text)
    assert_one_line(rc, out, err, f"{PREFIX}{path}: cache.mamba_every_tokens", "expected")


def test_efficiency_out_of_range(capsys, tmp_path):
    path, rc, out, err = run_file(capsys, tmp_path, valid_with(cost={"efficiency": {"mfu_prefill": 2}}))
    assert_one_line(rc, out, err, f"{PREFIX}{path}: cost.efficiency.mfu_prefill", "expected")


def test_cost_table_file_missing(capsys, tmp_path):
    text = valid_with(cost={"kind": "table", "table": str(tmp_path / "none.json")})
    path, rc, out, err = run_file(capsys, tmp_path, text)
    assert_one_line(rc, out, err, f"{PREFIX}{path}: cost.table", "expected")


# -- 2. resolution ------------------------------------------------------------------------------
def test_fig4_dsv4_flash_l3_resolution():
    """L1 from l1_plan, L2 = 2 x L1, L3 = floor(500 GiB / FULL bytes per token) in whole pages."""
    sc = scenario.from_file("fig4-dsv4-flash-l3")  # a catalog name, no path
    model, hw = presets.get_model("dsv4-flash"), presets.get_hardware("h200x4")
    plan = presets.l1_plan(model, hw, 4, 0.9, swa_full_tokens_ratio=model.swa_full_tokens_ratio,
                           mamba_full_memory_ratio=presets.DEFAULT_MAMBA_FULL_MEMORY_RATIO, page_size=64,
                           max_total_tokens=None)
    c = sc.doc["cache"]
    assert c["l1_tokens"] == sc.cache.capacity_tokens == plan.full_tokens > 0
    assert c["l1_tokens"] % 64 == 0
    assert c["l2_tokens"] == 2 * plan.full_tokens
    assert c["l3_tokens"] == math.floor(Fraction(500 * 2**30) / Fraction(presets.bytes_per_token(model, "full"))) \
        // 64 * 64  # floored to whole pages: what the L3 index holds
    assert c["swa_tokens"] == plan.swa_tokens and c["components"] == ["full", "swa"]
    assert sc.tp == sc.doc["tp"] == 4 and sc.seed == 20260626
    assert sc.cache.tiers.l3 and sc.doc["name"] == "fig4-dsv4-flash-l3"


def test_inkling_l1_capped_by_max_total_tokens():
    sc = scenario.from_file("fig4-inkling-small-l1")
    c = sc.doc["cache"]
    assert c["l1_tokens"] == sc.cache.capacity_tokens == 750080
    assert c["l1_plan"]["uncapped_full_tokens"] > 750080
    assert c["components"] == ["full", "swa", "mamba"] and c["swa_tokens"] == 75008


def test_apply_sets_changes_exactly_the_given_keys():
    raw = scenario.load("fig4-dsv4-flash-l3")
    sets = ["cache.l2_tokens=4000000", "workload.num_rounds=3", "cache.l3_tokens=unbounded"]
    new = scenario.apply_sets(raw, sets)
    assert raw == scenario.load("fig4-dsv4-flash-l3")  # the input is not modified
    expect = yaml.safe_load(yaml.safe_dump(raw))
    expect["cache"].update(l2_tokens=4000000, l3_tokens="unbounded")
    del expect["cache"]["hicache_ratio"]  # an L2 size given replaces the scenario's (one L2 size)
    expect["workload"]["num_rounds"] = 3
    assert new == expect
    base = scenario.resolve(raw, "base").doc
    doc = scenario.resolve(new, "set").doc
    assert doc["cache"]["l2_tokens"] == 4000000 and doc["cache"]["l3_tokens"] == "unbounded"
    assert doc["workload"]["num_rounds"] == 3
    assert (base["cache"]["hicache_ratio"], doc["cache"]["hicache_ratio"]) == (2, None)
    for d in (base, doc):
        d["cache"].pop("l2_tokens"), d["cache"].pop("l3_tokens"), d["workload"].pop("num_rounds")
        d["cache"].pop("hicache_ratio")
    assert doc == base
    # from_file(..., sets) is the same as apply_sets then resolve
    assert scenario.from_file("fig4-dsv4-flash-l3", sets).doc["cache"]["l3_tokens"] == "unbounded"


def test_set_creates_missing_section():
    new = scenario.apply_sets({"seed": 1}, ["cost.efficiency.mfu_decode=0.25"])
    assert new == {"seed": 1, "cost": {"efficiency": {"mfu_decode": 0.25}}}


def test_bytes_units_convert_through_full_bytes_per_token():
    model = presets.get_model("qwen3-32b")
    bpt = presets.bytes_per_token(model, "full")
    sc = scenario.from_file("quickstart", ["cache.l2_tokens=2GiB", "cache.l3_tokens=1_000_000"])
    assert sc.doc["cache"]["l2_tokens"] == math.floor(Fraction(2 * 2**30) / Fraction(bpt)) // 64 * 64
    assert sc.doc["cache"]["l3_tokens"] == 1_000_000 // 64 * 64  # whole pages of 64 (999,936)
    sc = scenario.from_file("quickstart", ["cache.l1_tokens=100GB"])
    assert sc.cache.capacity_tokens == math.floor(Fraction(100 * 10**9) / Fraction(bpt)) // 64 * 64


# -- 3. catalog listing -------------------------------------------------------------------------
def test_scenarios_lists_the_catalog(capsys):
    """One line per file in scenarios/catalog: the name, then the description's first line."""
    rc, out, err = run_cli(capsys, ["scenarios"])
    assert rc == 0 and err == ""
    files = sorted(scenario.CATALOG_DIR.iterdir(), key=lambda f: f.stem)  # as the listing (a-b.yaml sorts before a.yaml)
    assert files and all(f.suffix == ".yaml" for f in files)
    lines = out.splitlines()
    assert len(lines) == len(files)
    for line, f in zip(lines, files):
        name, _, desc = line.partition(" ")
        assert name == f.stem
        expect = yaml.safe_load(f.read_text())["description"].strip().splitlines()[0]
        assert desc.strip() == expect


def test_every_catalog_scenario_resolves():
    for name in scenario.catalog_names():
        sc = scenario.from_file(name)
        assert sc.doc["name"] == name and sc.cache.capacity_tokens > 0


# -- 4. cost.efficiency mirrors sim/cost.py -------------------------------------------------------
def test_efficiency_fields_match_dataclass():
    """scenarios/cost_kinds.py mirrors the Efficiency field names (it may not import sim/): they must not drift."""
    from scenarios.cost_kinds import EFFICIENCY_FIELDS

    assert list(EFFICIENCY_FIELDS) == [f.name for f in dataclasses.fields(Efficiency)]


# -- 5. a tiny valid run --------------------------------------------------------------------------
TINY = """\
seed: 7
model: qwen3-32b
hardware: h200x1
cache:
  l1_tokens: 20000
  page_size: 16
  hicache_ratio: 2
engine:
  chunked_prefill_tokens: 256
workload:
  num_clients: 3
  num_rounds: 3
  request_length: 300
  output_length: 4
  max_parallel: 3
"""
FILES = ["config.yaml", "requests.csv", "rounds.csv", "timeline.csv", "summary.json"]


def test_tiny_run_is_reproducible(capsys, tmp_path):
    """Result schema written; the same seed gives byte-identical results in two directories."""
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        rc, stdout, err = run_cli(capsys, ["run", str(path), "--out", str(out), "--no-plots", "--no-progress"])
        assert rc == 0, err
        assert "Traceback" not in err
        assert stdout.startswith("tiny: Qwen3-32B TP1, L1+L2, L1 20,000 tokens, L2 40,000")
        for f in FILES:
            assert (out / f).is_file(), f
    for f in FILES[1:]:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    with open(outs[0] / "requests.csv", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = [dict(zip(header, r)) for r in reader]
    assert header == results.REQUEST_COLUMNS
    assert len(rows) == 9
    assert sorted((int(r["session_id"]), int(r["round"])) for r in rows) == \
        sorted({(int(r["session_id"]), int(r["round"])) for r in rows})
    for r in rows:
        ttft = float(r["ttft_s"])
        assert ttft > 0
        assert abs(ttft - (float(r["queue_s"]) + float(r["load_s"]) + float(r["compute_s"]))) <= 1e-9
        assert r["rejected"] == "0"
    with open(outs[0] / "rounds.csv", newline="") as fh:
        rounds = list(csv.DictReader(fh))
    assert len(rounds) == 3 and [int(r["requests"]) for r in rounds] == [3, 3, 3]
    first = min(rounds, key=lambda r: int(r["round"]))
    assert float(first["hit_rate"]) == 0.0 and int(first["cached_tokens"]) == 0
    summary = json.loads((outs[0] / "summary.json").read_text())
    assert summary["requests"] == 9 and summary["rejected"] == 0
    assert list(summary)[:len(results.SUMMARY_KEYS)] == results.SUMMARY_KEYS
    config = yaml.safe_load((outs[0] / "config.yaml").read_text())
    assert config["mode"] == "sim" and config["seed"] == 7
    assert config["cache"]["l1_tokens"] == 20000 and config["cache"]["l2_tokens"] == 40000
    assert config["provenance"]["seed"] == 7
