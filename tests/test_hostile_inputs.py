"""Hostile inputs (issue 27, "Nonsense silently accepted"): every row of the corpus was once
accepted (a result written from nonsense) or crashed; each must now end with exit status 2,
nothing on stdout, nothing written, and exactly one stderr line naming the file (and line) or
option, the field and what was expected. Below the corpus: e-notation accepted for every
numeric key (scenario files, --set, sweep --grid), and the error path's own MemoryError.

Every command runs in-process (`radixsim.cli.main`) in a temporary working directory holding
the row's files, so that the messages name them by their relative paths.
"""
import pytest
import yaml

import radixsim.cli
from helpers import run_main
from scenarios.scenario import ScenarioError, apply_sets, load, resolve
from scenarios.schema import INT_CHECKS, NUMBER_CHECKS, SCHEMA, SIZE_CHECKS, validate_document

TINYT = """\
model: qwen3-32b
hardware: h200x1
cache: {page_size: 64, l1_tokens: 200000%s}
workload: {num_clients: 2, num_rounds: 2, request_length: 256, output_length: 8}
"""
TINY = TINYT % ""
FLEET = TINY + "fleet: %s\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
Q = "quickstart"
RUN = ["--no-plots", "--no-progress", "--out", "o"]
PLAN = ["plan", Q, "--vary", "cache.l2_tokens", "--range", "1000000:2000000", "--out", "o", "--no-progress"]
REPLAY = ["replay", "t.jsonl", "--out", "o", "--no-progress"]
TRACE = '{"tokens": [1, 2, 3], "timestamp": 1000}\n{"tokens": [1, 2, 4], "timestamp": 500}\n'

# (id, command line, files {name: text}, exit status, fragment of the one stderr line)
CORPUS = [
    # an empty scenario ran a default 48 x 60 and wrote its result
    ("empty_file", ["run", "s.yaml", *RUN], {"s.yaml": ""}, 2,
     "radixsim run: s.yaml: top level: the file is empty (no keys); expected a scenario (a mapping of keys)"),
    ("comments_only", ["run", "s.yaml", *RUN], {"s.yaml": "# nothing\n"}, 2,
     "radixsim run: s.yaml: top level: the file is empty (no keys)"),
    ("dev_null", ["run", "/dev/null", *RUN], {}, 2, "radixsim run: /dev/null: top level: the file is empty"),
    # duplicate keys: the last won, silently
    ("dup_top", ["run", "s.yaml", *RUN], {"s.yaml": "seed: 1\nseed: 2\n"}, 2,
     "radixsim run: s.yaml:2: seed: given twice (also on line 1); expected each key once"),
    ("dup_nested", ["run", "s.yaml", *RUN], {"s.yaml": "cache:\n  page_size: 64\n  l1_tokens: 1000\n  page_size: 32\n"},
     2, "radixsim run: s.yaml:4: cache.page_size: given twice (also on line 2)"),
    ("dup_flow", ["run", "s.yaml", *RUN], {"s.yaml": TINY.replace("num_rounds: 2", "num_rounds: 2, num_rounds: 3")},
     2, "radixsim run: s.yaml:4: workload.num_rounds: given twice (also on line 4)"),
    ("dup_deep", ["run", "s.yaml", *RUN], {"s.yaml": FLEET % "\n  groups:\n    - {count: 1, cache: {page_size: 64, "
                                                               "page_size: 16}}"}, 2,
     "radixsim run: s.yaml:7: fleet.groups[0].cache.page_size: given twice (also on line 7)"),
    ("dup_in_set_value", ["run", "s.yaml", "--set", "cache={page_size: 64, page_size: 16}", *RUN],
     {"s.yaml": TINY}, 2, "radixsim run: --set 'cache={page_size: 64, page_size: 16}': page_size: given twice"),
    # two L2 sizes: one silently won
    ("l2_tokens_and_ratio", ["run", "s.yaml", *RUN], {"s.yaml": TINYT % ", l2_tokens: 1000000, hicache_ratio: 2"}, 2,
     "radixsim run: s.yaml: cache.hicache_ratio: conflicts with cache.l2_tokens; expected one L2 size "
     "(l2_tokens, hicache_ratio or hicache_size_gb)"),
    ("l2_tokens_and_size_gb", ["run", "s.yaml", *RUN], {"s.yaml": TINYT % ", l2_tokens: 1000000, hicache_size_gb: 30"},
     2, "radixsim run: s.yaml: cache.hicache_size_gb: conflicts with cache.l2_tokens; expected one L2 size"),
    ("ratio_and_size_gb", ["run", "s.yaml", *RUN], {"s.yaml": TINYT % ", hicache_ratio: 2, hicache_size_gb: 30"}, 2,
     "radixsim run: s.yaml: cache.hicache_size_gb: conflicts with cache.hicache_ratio; expected one L2 size"),
    ("two_l2_sets", ["run", "s.yaml", "--set", "cache.l2_tokens=1000000", "--set", "cache.hicache_ratio=2", *RUN],
     {"s.yaml": TINY}, 2, "radixsim run: --set cache.hicache_ratio: conflicts with --set cache.l2_tokens; "
                               "expected one L2 size"),
    # DP attention: dp ranks split an engine's tp ranks (dp 16 on TP8 gave hit rate 0.0000)
    ("dp_above_tp", ["run", "s.yaml", *RUN], {"s.yaml": FLEET % "{engines: 1, dp: 3}"}, 2,
     "radixsim run: s.yaml: fleet.dp: 3 with tp 1; expected a divisor of tp"),
    ("dp_16_on_tp8", ["run", "s.yaml", "--set", "hardware=h200x8", "--set", "fleet.dp=16", *RUN],
     {"s.yaml": TINY}, 2, "radixsim run: s.yaml: fleet.dp: 16 with tp 8; expected a divisor of tp"),
    ("dp_not_dividing_tp", ["run", "s.yaml", "--set", "hardware=h200x4", "--set", "fleet.dp=3", *RUN],
     {"s.yaml": TINY}, 2, "radixsim run: s.yaml: fleet.dp: 3 with tp 4; expected a divisor of tp"),
    ("dp_in_a_group", ["run", "s.yaml", *RUN],
     {"s.yaml": FLEET % "{dp: 2, groups: [{count: 1, hardware: h200x2}, {count: 1}]}"}, 2,
     "radixsim run: s.yaml: fleet.dp: 2 with tp 1; expected a divisor of tp"),
    # tp must split the attention heads
    ("tp_3_query_heads", ["run", "s.yaml", "--set", "hardware=h200x4", "--set", "tp=3", *RUN], {"s.yaml": TINY},
     2, "radixsim run: s.yaml: tp: 3 does not divide the 64 query heads of Qwen3-32B; expected one of 1, 2, 4"),
    ("tp_6_kv_heads", ["run", "s.yaml", "--set", "model=glm-4.5-air", "--set", "hardware=h200x8", "--set", "tp=6",
                       *RUN], {"s.yaml": TINY}, 2,
     "radixsim run: s.yaml: tp: 6 does not divide the 8 KV heads of GLM-4.5-Air; expected one of 1, 2, 4, 8"),
    # non-finite Azure timestamps: inf wrote Infinity/NaN into summary.json, nan read as 0
    ("azure_inf", ["run", "s.yaml", *RUN], {"s.yaml": "workload: {kind: azure, path: a.csv}\n",
                                            "a.csv": AZURE + "0,100,10\ninf,100,10\n"}, 2,
     "radixsim run: s.yaml: a.csv:3: TIMESTAMP 'inf': expected a date-time or a finite number of seconds"),
    ("azure_inf_first", ["run", "s.yaml", *RUN], {"s.yaml": "workload: {kind: azure, path: a.csv}\n",
                                                  "a.csv": AZURE + "inf,100,10\n"}, 2,
     "radixsim run: s.yaml: a.csv:2: TIMESTAMP 'inf': expected a date-time or a finite number of seconds"),
    ("azure_nan", ["run", "s.yaml", *RUN], {"s.yaml": "workload: {kind: azure, path: a.csv}\n",
                                            "a.csv": AZURE + "5,100,10\nnan,100,10\n"}, 2,
     "radixsim run: s.yaml: a.csv:3: TIMESTAMP 'nan': expected a date-time or a finite number of seconds"),
    # JSONL timestamps going back: silently clamped by run
    ("jsonl_back_in_time", ["run", "s.yaml", *RUN],
     {"s.yaml": "cache: {page_size: 16, l1_tokens: 100000}\nworkload: {kind: trace, path: t.jsonl}\n",
      "t.jsonl": TRACE}, 2,
     "radixsim run: s.yaml: t.jsonl:2: 'timestamp' 500 ms goes back in time (line 1 has 1000); "
     "expected file order = time order"),
    ("jsonl_event_back_in_time", ["run", "s.yaml", *RUN],
     {"s.yaml": "cache: {page_size: 16, l1_tokens: 100000}\nworkload: {kind: trace, path: t.jsonl}\n",
      "t.jsonl": TRACE.splitlines()[0] + '\n{"event": "close_session", "session_id": 1, "timestamp": 999}\n'}, 2,
     "radixsim run: s.yaml: t.jsonl:2: 'timestamp' 999 ms goes back in time (line 1 has 1000)"),
    # absurd integer options
    ("replay_page_size_overflow", [*REPLAY, "--page-size", "99999999999999999999"], {"t.jsonl": TRACE}, 2,
     "radixsim replay: error: argument --page-size: expected at most 1,048,576 (a sanity limit), "
     "got '99999999999999999999'"),
    ("replay_min_prefetch_huge", [*REPLAY, "--min-prefetch-tokens", "1e30"], {"t.jsonl": TRACE}, 2,
     "radixsim replay: error: argument --min-prefetch-tokens: expected at most 1,099,511,627,776 (a sanity limit)"),
    ("replay_ratio_nan", [*REPLAY, "--hicache-ratio", "nan"], {"t.jsonl": TRACE}, 2,
     "radixsim replay: error: argument --hicache-ratio: expected a finite number, got 'nan'"),
    ("replay_swa_ratio_negative", [*REPLAY, "--swa-full-tokens-ratio", "-1"], {"t.jsonl": TRACE}, 2,
     "radixsim replay: error: argument --swa-full-tokens-ratio: expected a number > 0, got '-1'"),
    # plan targets and costs
    ("plan_target_nan", [*PLAN, "--target", "hit_rate >= nan"], {}, 2,
     "radixsim plan: --target 'hit_rate >= nan': 'nan' is not a finite number"),
    ("plan_target_inf", [*PLAN, "--target", "hit_rate >= inf"], {}, 2,
     "radixsim plan: --target 'hit_rate >= inf': 'inf' is not a finite number"),
    ("plan_cost_negative", [*PLAN, "--target", "hit_rate >= 0.5", "--cost-gpu-hour", "-5"], {}, 2,
     "radixsim plan: error: argument --cost-gpu-hour: expected a number >= 0, got '-5'"),
    ("plan_cost_inf", [*PLAN, "--target", "hit_rate >= 0.5", "--cost-l3-gib", "inf"], {}, 2,
     "radixsim plan: error: argument --cost-l3-gib: expected a finite number, got 'inf'"),
    ("plan_bytes_for_a_count", ["plan", Q, "--vary", "workload.num_clients", "--range", "1:10GiB", "--target",
                                "hit_rate >= 0.5", "--out", "o", "--no-progress"], {}, 2,
     "radixsim plan: --range '10GiB' is in bytes: workload.num_clients is not a size; expected plain numbers"),
    # validate CASE --set: the override was silently ignored
    ("validate_set_ignored", ["validate", "any-case", "--set", "tp=2", "--out", "o"], {}, 2,
     "radixsim validate: error: --set tp=2: only with --backend torch; expected no --set for the published cases"),
    # numbers above any sane limit (engines: 100000000 ran 111 s, then a MemoryError traceback)
    ("engines_1e8", ["run", "s.yaml", *RUN], {"s.yaml": FLEET % "{engines: 100000000}"}, 2,
     "radixsim run: s.yaml: fleet.engines: got 100000000; expected at most 4,096 (a sanity limit)"),
    ("group_count_huge", ["run", "s.yaml", *RUN], {"s.yaml": FLEET % "{groups: [{count: 1e9}]}"}, 2,
     "radixsim run: s.yaml: fleet.groups[0].count: got '1e9'; expected at most 4,096 (a sanity limit)"),
    ("engines_times_dp", ["run", "s.yaml", "--set", "hardware=h200x8", *RUN],
     {"s.yaml": FLEET % "{engines: 1000, dp: 8}"}, 2,
     "radixsim run: s.yaml: fleet.dp: 8,000 ranks (engines x dp); expected at most 4,096 (a sanity limit)"),
    ("clients_1e8", ["run", "s.yaml", "--set", "workload.num_clients=100000000", *RUN], {"s.yaml": TINY}, 2,
     "radixsim run: s.yaml: workload.num_clients: got 100000000; expected at most 100,000 (a sanity limit)"),
    ("rounds_1e9", ["run", "s.yaml", "--set", "workload.num_rounds=1e9", *RUN], {"s.yaml": TINY}, 2,
     "radixsim run: s.yaml: workload.num_rounds: got '1e9'; expected at most 100,000 (a sanity limit)"),
    ("request_length_2e40", ["run", "s.yaml", "--set", "workload.request_length=1099511627776", *RUN],
     {"s.yaml": TINY}, 2, "radixsim run: s.yaml: workload.request_length: got 1099511627776; expected at most "
                               "268,435,456 (a sanity limit)"),
    ("running_requests_huge", ["run", "s.yaml", "--set", "engine.max_running_requests=1e12", *RUN],
     {"s.yaml": TINY}, 2, "radixsim run: s.yaml: engine.max_running_requests: got '1e12'; expected at most "
                               "100,000 (a sanity limit)"),
    ("page_size_huge", ["run", "s.yaml", "--set", "cache.page_size=1073741824", *RUN], {"s.yaml": TINY}, 2,
     "radixsim run: s.yaml: cache.page_size: got 1073741824; expected at most 1,048,576 (a sanity limit)"),
    ("agentic_sessions_huge", ["run", "s.yaml", *RUN], {"s.yaml": "workload: {kind: agentic, num_sessions: 1e9}\n"}, 2,
     "radixsim run: s.yaml: workload.num_sessions: got '1e9'; expected at most 100,000 (a sanity limit)"),
    ("agentic_turns_huge", ["run", "s.yaml", *RUN], {"s.yaml": "workload: {kind: agentic, turns: [1, 1e9]}\n"}, 2,
     "radixsim run: s.yaml: workload.turns: got [1, '1e9']; expected finite values of at most 100,000"),
    ("smoke_clients_huge", ["run", "s.yaml", "--smoke", *RUN],
     {"s.yaml": TINY.replace("num_clients: 2", "num_clients: 1e12")},
     2, "radixsim run: s.yaml: workload.num_clients: got '1e12'; expected at most 100,000 (a sanity limit)"),
    # e-notation that is not an integer where an integer is expected
    ("enote_not_integral_file", ["run", "s.yaml", *RUN],
     {"s.yaml": TINY.replace("num_clients: 2", "num_clients: 2.5e0")},
     2, "radixsim run: s.yaml: workload.num_clients: got '2.5e0'; not integral; expected an integer >= 1"),
    ("enote_not_integral_set", ["run", "s.yaml", "--set", "cache.page_size=6.45e1", *RUN], {"s.yaml": TINY}, 2,
     "radixsim run: s.yaml: cache.page_size: got '6.45e1'; not integral; expected an integer >= 1"),
    ("enote_not_integral_float", ["run", "s.yaml", "--set", "workload.num_rounds=2.5e+0", *RUN], {"s.yaml": TINY},
     2, "radixsim run: s.yaml: workload.num_rounds: got 2.5; not integral; expected an integer >= 1"),
    ("enote_not_integral_size", ["run", "s.yaml", "--set", "cache.l2_tokens=1.5e0", *RUN], {"s.yaml": TINY}, 2,
     "radixsim run: s.yaml: cache.l2_tokens: got '1.5e0'; not integral; expected null or a token count"),
    ("enote_not_integral_smoke", ["run", "s.yaml", "--smoke", *RUN],
     {"s.yaml": TINY.replace("num_clients: 2", "num_clients: 2.5e0")}, 2,
     "radixsim run: s.yaml: workload.num_clients: got '2.5e0'; not integral; expected an integer >= 1"),
    ("enote_overflow", ["run", "s.yaml", "--set", "workload.num_clients=1e999", *RUN], {"s.yaml": TINY}, 2,
     "radixsim run: s.yaml: workload.num_clients: got '1e999'; expected an integer >= 1"),
    ("enote_not_integral_grid", ["sweep", "s.yaml", "--grid", "workload.num_clients=2e0,2.5e0", "--out", "o",
                                 "--no-progress"], {"s.yaml": TINY}, 2,
     "workload.num_clients: got '2.5e0'; not integral; expected an integer >= 1"),
    ("enote_fleet_count_not_integral", ["run", "s.yaml", *RUN], {"s.yaml": FLEET % "{engines: 2.5e0}"}, 2,
     "radixsim run: s.yaml: fleet.engines: got '2.5e0'; not integral; expected an integer >= 1"),
    ("fleet_seconds_nan", ["run", "s.yaml", *RUN],
     {"s.yaml": FLEET % "{groups: [{count: 1, role: prefill}, {count: 1, role: decode}], pd: {kv_latency_s: .nan}}"},
     2, "radixsim run: s.yaml: fleet.pd.kv_latency_s: got nan; expected seconds >= 0"),
]


def run_in(tmp_path, monkeypatch, capsys, args, files):
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return run_main(capsys, args)


@pytest.mark.parametrize("args,files,status,fragment", [row[1:] for row in CORPUS], ids=[row[0] for row in CORPUS])
def test_hostile_input_is_refused_in_one_line(tmp_path, monkeypatch, capsys, args, files, status, fragment):
    rc, out, err = run_in(tmp_path, monkeypatch, capsys, args, files)
    assert (rc, out) == (status, ""), err
    assert "Traceback" not in err and err.endswith("\n")
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert fragment in lines[0], lines[0]
    assert not (tmp_path / "o").exists()  # nothing written


def test_corpus_ids_are_unique():
    assert len({row[0] for row in CORPUS}) == len(CORPUS) == 53


# -- e-notation: every numeric key -----------------------------------------------------------------
SAMPLES = {  # a valid plain value per numeric check
    "fraction": 0.5, "pos_or_none": 2.0, "nonneg": 3.0, "rate": 4.0, "pos": 1.5,
    "int0": 16, "int1": 16, "int1_or_none": 16,
    "size_auto": 640000, "size_or_none": 640000, "size_l3": 640000}


def _numeric_keys():
    """(kind, dotted key, check, a valid plain value) for every numeric leaf of the schema and
    of every workload kind's schema."""
    sample = SAMPLES
    out = []

    def walk(schema, prefix, kind):
        for k, spec in schema.items():
            if isinstance(spec, dict):
                walk(spec, f"{prefix}{k}.", kind)
            elif isinstance(spec[1], str) and spec[1] in sample:
                out.append((kind, prefix + k, spec[1], sample[spec[1]]))
            elif spec[1] == "range":
                out.append((kind, prefix + k, "range", [2, 16]))

    walk({k: v for k, v in SCHEMA.items() if k != "workload"}, "", "multiturn")
    from scenarios.workload_kinds import workload_kind, workload_kind_names

    for kind in workload_kind_names():  # every registered kind (shared_prefix registers itself)
        walk(workload_kind(kind).schema, "workload.", kind)
    return out


NUMERIC_KEYS = _numeric_keys()


def _e(v):
    """`v` in e-notation as YAML 1.1 reads it: a string ('1.6e1'); a list element by element."""
    if isinstance(v, list):
        return [_e(x) for x in v]
    mantissa, exp = f"{v:.1e}".split("e")
    return f"{mantissa}e{int(exp)}"


def _yaml_float(v):
    """`v` as PyYAML reads '1.6e+01': a float (a list element by element)."""
    return [_yaml_float(x) for x in v] if isinstance(v, list) else yaml.safe_load(f"{float(v):.1e}")


def _set(raw, key, value):
    node = raw
    *path, last = key.split(".")
    for p in path:
        node = node.setdefault(p, {})
    node[last] = value


@pytest.mark.parametrize("kind,key,check,plain", NUMERIC_KEYS, ids=[f"{k}:{key}" for k, key, _, _ in NUMERIC_KEYS])
def test_every_numeric_key_reads_e_notation(kind, key, check, plain):
    """`2e1` (a string to PyYAML) and `2.0e+1` (a float) give what `20` gives; an integer key
    holds an int."""
    docs = []
    assert isinstance(_yaml_float(plain), (float, list)) and isinstance(_e(plain), (str, list))
    for v in (plain, _e(plain), _yaml_float(plain)):
        raw = {"workload": {"kind": kind, **({"path": "t"} if kind in ("trace", "azure") else {})}}
        _set(raw, key, v)
        docs.append(validate_document(raw, SCHEMA, "s.yaml"))
    assert docs[0] == docs[1] == docs[2]
    got = docs[1]
    for p in key.split("."):
        got = got[p]
    assert got == plain and type(got) is type(plain)


def test_numeric_key_table_covers_the_schema():
    """The keys the test above walks (so that a new numeric key is covered as it is added)."""
    keys = {key for _, key, _, _ in NUMERIC_KEYS}
    assert {"seed", "tp", "cache.page_size", "cache.l1_tokens", "cache.mem_fraction_static", "cache.l2_tokens",
            "cache.hicache_size_gb", "cache.l3_tokens", "engine.max_running_requests", "engine.new_token_ratio",
            "workload.num_clients", "workload.request_rate", "workload.speedup", "workload.max_requests",
            "workload.turns", "workload.think_time_s", "torch.layers"} <= keys
    assert len(NUMERIC_KEYS) == 76  # 64 + engine.l3_get_batch_pages + shared_prefix's 7 + engine.kind vllm's 4
    assert set(SAMPLES) == set(INT_CHECKS + NUMBER_CHECKS + SIZE_CHECKS)


def test_yaml_float_e_notation_is_read_too():
    """PyYAML (YAML 1.1) reads `1.0e+6` as a float and `1e6` as a string: both are numbers."""
    raw = load("quickstart")
    a = resolve(apply_sets(raw, ["workload.num_clients=2.4e1", "cache.hicache_ratio=2e0",
                                 "workload.request_rate=1.6e+1", "cache.page_size=6.4e+1"]), "q").doc
    b = resolve(raw, "q").doc
    assert a == b
    assert (a["workload"]["num_clients"], a["cache"]["page_size"]) == (24, 64)


@pytest.mark.parametrize("text,key,value", [
    ("workload: {num_clients: 2e1}", ("workload", "num_clients"), 20),
    ("cache: {l2_tokens: 1e6}", ("cache", "l2_tokens"), 1000000),
    ("cache: {l2_tokens: 1.0e+6}", ("cache", "l2_tokens"), 1000000),
    ("cache: {l1_tokens: 2e6}", ("cache", "l1_tokens"), 2000000),
    ("cache: {l3_tokens: 2.5e6, hicache_ratio: 2}", ("cache", "l3_tokens"), 2500000 // 64 * 64),
    ("engine: {new_token_ratio: 7e-1}", ("engine", "new_token_ratio"), 0.7),
    ("cache: {mem_fraction_static: 8.5e-1}", ("cache", "mem_fraction_static"), 0.85),
    ("workload: {request_rate: 1e1}", ("workload", "request_rate"), 10.0),
])
def test_scenario_file_e_notation(tmp_path, text, key, value):
    p = tmp_path / "s.yaml"
    p.write_text("model: qwen3-8b\n" + text + "\n")
    from scenarios.scenario import from_file

    doc = from_file(p).doc
    assert doc[key[0]][key[1]] == value


def test_fleet_keys_read_e_notation():
    raw = yaml.safe_load(TINY + "fleet: {engines: 2e0, slo_ttft_s: 2e0, "
                         "groups: [{count: 1e0}, {count: 1.0e+0}]}\n")
    spec = resolve(raw, "s.yaml").fleet
    assert (len(spec.engines), spec.slo_ttft_s, [g["count"] for g in spec.doc["groups"]]) == (2, 2.0, [1, 1])


def test_free_form_numbers_read_e_notation():
    """cost.efficiency values and program knobs (mappings the schema does not list key by key)."""
    raw = yaml.safe_load(TINY + "cost: {kind: roofline, efficiency: {mfu_prefill: 5e-1, per_step_overhead_s: 1e-3}}\n")
    assert resolve(raw, "s").efficiency == {"mfu_prefill": 0.5, "per_step_overhead_s": 0.001}
    raw = {"workload": {"kind": "program", "program": "few_shot", "knobs": {"num_instances": "2e0"}}}
    assert resolve(raw, "s").workload.config.num_instances == 2
    with pytest.raises(ScenarioError, match=r"s: workload.knobs: .*num_instances must be an integer >= 1, got 2.5"):
        resolve({"workload": {"kind": "program", "program": "few_shot", "knobs": {"num_instances": "2.5e0"}}}, "s")


def test_sweep_grid_reads_e_notation(tmp_path):
    from radixsim.sweep import make_points, parse_grid

    raw = yaml.safe_load(TINY)
    pts = make_points(raw, parse_grid(["workload.num_clients=2e0,3e0"]), 1, "s.yaml")
    assert [p.raw["workload"]["num_clients"] for p in pts] == ["2e0", "3e0"]
    assert [resolve(p.raw, "s").doc["workload"]["num_clients"] for p in pts] == [2, 3]


def test_smoke_reads_e_notation(tmp_path, monkeypatch, capsys):
    """`--smoke` shrinks an e-notation count (it was int('2e1'): a ValueError traceback)."""
    rc, out, err = run_in(tmp_path, monkeypatch, capsys, ["run", "s.yaml", "--smoke", *RUN],
                          {"s.yaml": TINY.replace("num_clients: 2", "num_clients: 2.4e1")})
    assert (rc, err) == (0, "")
    assert yaml.safe_load((tmp_path / "o" / "config.yaml").read_text())["workload"]["num_clients"] == 3


def test_replay_options_read_e_notation(tmp_path, monkeypatch, capsys):
    rc, out, err = run_in(tmp_path, monkeypatch, capsys, [*REPLAY, "--page-size", "1e0",
                                                          "--capacity-tokens", "1e2"], {"t.jsonl": TRACE})
    assert (rc, err) == (0, "")
    assert yaml.safe_load((tmp_path / "o" / "config.yaml").read_text())["cache"]["capacity_tokens"] == 100


# -- what stays accepted -------------------------------------------------------------------------
@pytest.mark.parametrize("sets,tp", [
    (["hardware=h200x8", "model=qwen3-next-80b", "tp=8"], 8),  # 2 KV heads replicated over 8 ranks (SGLang)
    (["hardware=h200x8", "model=qwen3-235b-a22b", "tp=8"], 8),  # 4 KV heads, 8 ranks
    (["hardware=h200x8", "model=deepseek-v3", "tp=8"], 8),  # MLA: one latent, replicated
    (["hardware=h200x4", "tp=2"], 2),
])
def test_tp_that_splits_the_heads_is_accepted(sets, tp):
    assert resolve(apply_sets(yaml.safe_load(TINY), sets), "s").tp == tp


def test_dp_dividing_tp_is_accepted():
    raw = apply_sets(yaml.safe_load(FLEET % "{engines: 1, dp: 2}"), ["hardware=h200x4"])
    spec = resolve(raw, "s").fleet
    assert (spec.dp, len(spec.engines)) == (2, 2)


def test_an_l2_override_replaces_the_scenario_l2_size():
    """`--set cache.l2_tokens=N` on a scenario with hicache_ratio (README's sweep and plan
    examples): the override is the L2 size, not a conflict; so is a fleet group's."""
    raw = yaml.safe_load(TINYT % ", hicache_ratio: 2")
    doc = resolve(apply_sets(raw, ["cache.l2_tokens=1000000"]), "s").doc
    assert (doc["cache"]["l2_tokens"], doc["cache"]["hicache_ratio"]) == (1000000, None)
    raw["fleet"] = {"groups": [{"count": 1, "cache": {"hicache_size_gb": 30}}, {"count": 1}]}
    spec = resolve(raw, "s").fleet
    assert [e.doc["cache"]["hicache_ratio"] for e in spec.engines] == [None, 2]


def test_merge_key_override_is_not_a_duplicate(tmp_path):
    from scenarios.yamlfile import read_mapping

    p = tmp_path / "s.yaml"
    p.write_text("base: &B {page_size: 64, l1_tokens: 1000}\ncache:\n  <<: *B\n  page_size: 16\n")
    assert read_mapping(p, "a scenario")["cache"] == {"page_size": 16, "l1_tokens": 1000}


def test_empty_run_config_still_reads_as_empty(tmp_path):
    from scenarios.yamlfile import read_mapping

    (tmp_path / "c.yaml").write_text("")
    assert read_mapping(tmp_path / "c.yaml", "a configuration") == {}
    with pytest.raises(ValueError, match="c.yaml: top level: the file is empty"):
        read_mapping(tmp_path / "c.yaml", "a scenario", allow_empty=False)


def test_azure_finite_seconds_still_read(tmp_path):
    from scenarios.azure import read_azure

    (tmp_path / "a.csv").write_text(AZURE + "1e1,100,10\n12.5,100,10\n")
    assert [r.arrival_s for r in read_azure(tmp_path / "a.csv")] == [0.0, 2.5]


def test_jsonl_replay_keeps_file_order_without_timestamps_checked(tmp_path, monkeypatch, capsys):
    """replay runs in file order: a timestamp going back is metadata there, not an error."""
    rc, out, err = run_in(tmp_path, monkeypatch, capsys, REPLAY, {"t.jsonl": TRACE})
    assert (rc, err) == (0, "")


# -- the error path itself -------------------------------------------------------------------------
def test_memory_error_inside_the_error_path_is_one_line(tmp_path, monkeypatch, capsys):
    """A failure whose wording needs memory the machine no longer has (the error path imports
    modules): one line, exit 2, no traceback."""
    def boom(args):
        raise OSError(28, "No space left on device")

    def no_memory(e):
        raise MemoryError()

    monkeypatch.setitem(radixsim.cli.COMMANDS, "run", boom)
    monkeypatch.setattr(radixsim.cli, "failure_line", no_memory)
    rc, out, err = run_in(tmp_path, monkeypatch, capsys, ["run", "s.yaml"], {})
    assert (rc, out, err) == (2, "", "radixsim run: out of memory: an allocation failed\n")


def test_memory_error_is_reported_after_its_traceback_is_let_go(tmp_path, monkeypatch, capsys):
    def boom(args):
        raise MemoryError("Unable to allocate 8.00 EiB\nfor an array")

    monkeypatch.setitem(radixsim.cli.COMMANDS, "run", boom)
    monkeypatch.setattr(radixsim.cli, "failure_line", lambda e: pytest.fail("not needed for a MemoryError"))
    rc, out, err = run_in(tmp_path, monkeypatch, capsys, ["run", "s.yaml"], {})
    assert (rc, out, err) == (2, "", "radixsim run: out of memory: Unable to allocate 8.00 EiB\n")


def test_scenario_errors_are_scenario_errors():
    with pytest.raises(ScenarioError, match=r"s: workload.num_clients: got '2.5e0'; not integral"):
        resolve({"workload": {"num_clients": "2.5e0"}}, "s")
