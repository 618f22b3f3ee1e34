"""`radixsim replay` on broken input: exit status 2 and exactly one stderr line that names the
file (and line, for a line error) and the problem; never a traceback (cli.py docstring,
DESIGN.md "Trace format").

Most cases run in-process through `radixsim.cli.main`; a few run the real command line in a
subprocess. Inputs that once crashed the reader (deep nesting, huge literals, NaN, huge blocks) are at the end of the file.
"""
import ast
import csv
import pathlib
import subprocess
import sys

import pytest

from helpers import run_main

ROOT = pathlib.Path(__file__).resolve().parent.parent
PREFIX = "radixsim replay: "


# -- helpers (run_main: tests/helpers.py) -------------------------------------------------------
def run_subproc(args, timeout=120):
    r = subprocess.run([sys.executable, "-m", "radixsim", *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def write(tmp_path, text, name="trace.jsonl"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def assert_one_line_error(rc, out, err, where, *needles):
    """Exit 2, nothing on stdout, exactly one stderr line 'radixsim replay: WHERE: ...' that
    contains every needle, and no traceback."""
    assert rc == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.endswith("\n")
    lines = err.splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"{PREFIX}{where}: "), line
    for n in needles:
        assert n in line, (n, line)


def replay_args(trace, out, *extra):
    return ["replay", str(trace), "--out", str(out), "--no-progress", *extra]


# -- the corpus of broken trace lines ---------------------------------------------------------
# (id, file text, line number the error must name, extra CLI args, substrings of the problem)
OK = '{"tokens": [1, 2, 3]}\n'
LINE_CASES = [
    ("bad_json", '{"tokens": [1, 2\n', 1, [], ["invalid JSON"]),
    ("bad_json_later_line", OK + OK + '{"tokens": [1, 2,]}\n', 3, [], ["invalid JSON"]),
    ("not_utf8", b'{"tokens": [1]}\n\xff\xff\xff\n', 2, [], ["invalid JSON"]),
    ("json_array_line", "[1, 2, 3]\n", 1, [], ["expected a JSON object", "list"]),
    ("json_number_line", OK + "5\n", 2, [], ["expected a JSON object", "int"]),
    ("json_null_line", "null\n", 1, [], ["expected a JSON object"]),
    ("missing_prompt", '{"rid": 7, "output_length": 3}\n', 1, [],
     ["request needs", "tokens", "input_ids", "hash_ids"]),
    ("tokens_and_hash_ids", '{"tokens": [1, 2], "hash_ids": [1]}\n', 1, [],
     ["give only one of", "tokens", "hash_ids"]),
    ("tokens_and_input_ids", '{"tokens": [1], "input_ids": [1]}\n', 1, [],
     ["give only one of", "tokens", "input_ids"]),
    ("tokens_strings", '{"tokens": ["a", "b"]}\n', 1, [],
     ["tokens", "must be a flat list of non-negative integers"]),
    ("tokens_mixed_str_int", '{"tokens": [1, "2"]}\n', 1, [],
     ["tokens", "must be a flat list of non-negative integers"]),
    ("tokens_floats", '{"tokens": [1.5, 2.0]}\n', 1, [],
     ["tokens", "must be a flat list of non-negative integers"]),
    ("tokens_integral_floats", '{"tokens": [1.0, 2.0]}\n', 1, [],
     ["tokens", "must be a flat list of non-negative integers"]),
    ("tokens_negative", '{"tokens": [1, -2, 3]}\n', 1, [], ["tokens", "values must be in [0, 2**62)"]),
    ("tokens_too_large", '{"tokens": [4611686018427387904]}\n', 1, [],
     ["tokens", "values must be in [0, 2**62)"]),
    ("tokens_beyond_uint64", '{"tokens": [18446744073709551616]}\n', 1, [],
     ["tokens", "must be a flat list of non-negative integers"]),
    ("tokens_nested", '{"tokens": [[1, 2], [3, 4]]}\n', 1, [],
     ["tokens", "must be a flat list of non-negative integers"]),
    ("tokens_nested_ragged", '{"tokens": [[1, 2], [3]]}\n', 1, [],
     ["tokens", "must be a flat list of non-negative integers"]),
    ("tokens_bools", '{"tokens": [true, false]}\n', 1, [],
     ["tokens", "must be a flat list of non-negative integers"]),
    ("tokens_null_item", '{"tokens": [1, null]}\n', 1, [],
     ["tokens", "must be a flat list of non-negative integers"]),
    ("tokens_not_a_list", '{"tokens": "1 2 3"}\n', 1, [],
     ["tokens", "must be a list of non-negative integers, got str"]),
    ("input_ids_negative", '{"input_ids": [-1]}\n', 1, [], ["input_ids", "values must be in [0, 2**62)"]),
    ("empty_tokens", '{"tokens": []}\n', 1, [], ["empty prompt"]),
    ("empty_hash_ids", '{"hash_ids": [], "block_size": 4}\n', 1, [], ["empty prompt"]),
    ("hash_ids_negative", '{"hash_ids": [0, -1], "block_size": 4}\n', 1, [],
     ["hash_ids", "values must be in [0, 2**62)"]),
    ("hash_ids_too_large_for_block", '{"hash_ids": [4611686018427387903], "block_size": 4}\n', 1, [],
     ["hash_ids", "too large for the block size"]),
    ("input_length_too_long", '{"hash_ids": [1, 2], "block_size": 4, "input_length": 9}\n', 1, [],
     ["input_length", "9 exceeds 2 hash_ids x block size 4 = 8"]),
    ("input_length_too_long_default_block", '{"hash_ids": [1], "input_length": 513}\n', 1, [],
     ["input_length", "513 exceeds 1 hash_ids x block size 512 = 512"]),
    ("input_length_zero", '{"hash_ids": [1], "block_size": 4, "input_length": 0}\n', 1, [],
     ["input_length", "must be >= 1, got 0"]),
    ("input_length_float", '{"hash_ids": [1], "block_size": 4, "input_length": 2.5}\n', 1, [],
     ["input_length", "must be an integer, got 2.5"]),
    ("block_size_zero", '{"hash_ids": [1], "block_size": 0}\n', 1, [], ["block_size", "must be >= 1, got 0"]),
    ("block_size_bool", '{"hash_ids": [1], "block_size": true}\n', 1, [],
     ["block_size", "must be an integer, got true"]),
    ("block_size_vs_option", '{"hash_ids": [1, 2], "block_size": 8}\n', 1, ["--block-size", "4"],
     ["block_size", "8 differs from the trace's block size 4"]),
    ("block_size_between_lines",
     '{"hash_ids": [1, 2], "block_size": 4}\n' + OK + '{"hash_ids": [1, 2], "block_size": 8}\n', 3, [],
     ["block_size", "8 differs from the trace's block size 4"]),
    ("block_size_after_default",
     '{"hash_ids": [1]}\n{"hash_ids": [1], "block_size": 4}\n', 2, [],
     ["block_size", "4 differs from the trace's block size 512"]),
    ("output_length_string", '{"tokens": [1], "output_length": "3"}\n', 1, [],
     ["output_length", "must be an integer"]),
    ("output_length_float", '{"tokens": [1], "output_length": 3.0}\n', 1, [],
     ["output_length", "must be an integer, got 3.0"]),
    ("output_length_bool", '{"tokens": [1], "output_length": true}\n', 1, [],
     ["output_length", "must be an integer, got true"]),
    ("output_length_negative", '{"tokens": [1], "output_length": -1}\n', 1, [],
     ["output_length", "must be >= 0, got -1"]),
    ("output_len_negative", '{"tokens": [1], "output_len": -4}\n', 1, [], ["output_len", "must be >= 0, got -4"]),
    ("output_tokens_negative", '{"tokens": [1], "output_tokens": [5, -1]}\n', 1, [],
     ["output_tokens", "values must be in [0, 2**62)"]),
    ("output_tokens_not_list", '{"tokens": [1], "output_tokens": 3}\n', 1, [],
     ["output_tokens", "must be a list of non-negative integers, got int"]),
    ("output_tokens_and_length", '{"tokens": [1], "output_tokens": [1], "output_length": 1}\n', 1, [],
     ["give only one of", "output_tokens", "output_length"]),
    ("priority_bool", '{"tokens": [1], "priority": true}\n', 1, [], ["priority", "must be an integer, got true"]),
    ("priority_float", '{"tokens": [1], "priority": 1.5}\n', 1, [], ["priority", "must be an integer, got 1.5"]),
    ("priority_string", '{"tokens": [1], "priority": "high"}\n', 1, [],
     ["priority", 'must be an integer, got "high']),  # closing quote: see test_messages_keep_their_quotes
    ("timestamp_negative", '{"tokens": [1], "timestamp": -5}\n', 1, [],
     ["timestamp", "must be a non-negative number of milliseconds, got -5"]),
    ("timestamp_string", '{"tokens": [1], "timestamp": "5"}\n', 1, [],
     ["timestamp", "must be a non-negative number of milliseconds"]),
    ("timestamp_bool", '{"tokens": [1], "timestamp": true}\n', 1, [],
     ["timestamp", "must be a non-negative number of milliseconds, got true"]),
    ("event_unknown", '{"event": "open_session", "session_id": 1}\n', 1, [],
     ["unknown event 'open_session'", "close_session"]),
    ("event_close_without_session", OK + '{"event": "close_session"}\n', 2, [],
     ["close_session event needs", "session_id"]),
    ("event_negative_timestamp", '{"event": "close_session", "session_id": 1, "timestamp": -1}\n', 1, [],
     ["timestamp", "got -1"]),
    ("error_after_blank_lines", OK + "\n   \n" + '{"tokens": []}\n', 4, [], ["empty prompt"]),
]


@pytest.mark.parametrize("text,lineno,extra,needles",
                         [c[1:] for c in LINE_CASES], ids=[c[0] for c in LINE_CASES])
def test_bad_trace_line_inprocess(tmp_path, capsys, text, lineno, extra, needles):
    trace = write(tmp_path, text)
    rc, out, err = run_main(capsys, replay_args(trace, tmp_path / "out", *extra))
    assert_one_line_error(rc, out, err, f"{trace}:{lineno}", *needles)


def test_corpus_is_large_enough():
    assert len(LINE_CASES) >= 20
    assert len({c[0] for c in LINE_CASES}) == len(LINE_CASES)


@pytest.mark.parametrize("case", ["bad_json", "json_array_line", "tokens_nested", "block_size_vs_option",
                                  "event_close_without_session"])
def test_bad_trace_line_subprocess(tmp_path, case):
    _, text, lineno, extra, needles = next(c for c in LINE_CASES if c[0] == case)
    trace = write(tmp_path, text)
    rc, out, err = run_subproc(replay_args(trace, tmp_path / "out", *extra))
    assert_one_line_error(rc, out, err, f"{trace}:{lineno}", *needles)


# -- bad options and bad paths ---------------------------------------------------------------
OPTION_CASES = [
    ("page_size_zero", ["--page-size", "0"], "--page-size", "expected an integer >= 1, got 0"),
    ("page_size_negative", ["--page-size", "-3"], "--page-size", "got -3"),
    ("page_size_text", ["--page-size", "four"], "--page-size", "expected a non-negative integer, got 'four'"),
    ("capacity_negative", ["--capacity-tokens", "-1"], "--capacity-tokens/--l1-tokens",
     "expected a non-negative token count or a size like 500GiB, got '-1'"),
    ("capacity_float", ["--capacity-tokens", "1.5"], "--capacity-tokens/--l1-tokens",
     "expected a non-negative token count or a size like 500GiB, got '1.5'"),
    ("l3_text", ["--l3-tokens", "lots"], "--l3-tokens",
     "expected a non-negative token count or a size like 500GiB, got 'lots'"),
    ("policy_unknown", ["--policy", "random"], "--policy", "unknown policy 'random'"),
    ("block_size_zero", ["--block-size", "0"], "--block-size", "expected an integer >= 1, got 0"),
]


@pytest.mark.parametrize("extra,option,needle", [c[1:] for c in OPTION_CASES], ids=[c[0] for c in OPTION_CASES])
def test_bad_option_inprocess(tmp_path, capsys, extra, option, needle):
    trace = write(tmp_path, OK)
    rc, out, err = run_main(capsys, replay_args(trace, tmp_path / "out", *extra))
    assert_one_line_error(rc, out, err, f"error: argument {option}", needle)
    assert not (tmp_path / "out").exists()


def test_policy_error_lists_the_policies(tmp_path, capsys):
    trace = write(tmp_path, OK)
    rc, out, err = run_main(capsys, replay_args(trace, tmp_path / "out", "--policy", "LRU"))
    assert_one_line_error(rc, out, err, "error: argument --policy", "unknown policy 'LRU'", "expected one of ",
                          *(f"{p}, " for p in ("belady-node", "fifo", "lfu", "lru", "priority", "session")), "slru")


def test_missing_out_option_is_one_line(tmp_path, capsys):
    trace = write(tmp_path, OK)
    rc, out, err = run_main(capsys, ["replay", str(trace)])
    assert rc == 2
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("radixsim replay: error: ") and "--out" in err


def test_page_size_zero_subprocess(tmp_path):
    trace = write(tmp_path, OK)
    rc, out, err = run_subproc(replay_args(trace, tmp_path / "out", "--page-size", "0"))
    assert_one_line_error(rc, out, err, "error: argument --page-size", "expected an integer >= 1, got 0")


def test_missing_file_inprocess(tmp_path, capsys):
    trace = tmp_path / "nope.jsonl"
    rc, out, err = run_main(capsys, replay_args(trace, tmp_path / "out"))
    assert_one_line_error(rc, out, err, str(trace), "no such file")
    assert err == f"{PREFIX}{trace}: no such file\n"


def test_missing_file_subprocess(tmp_path):
    trace = tmp_path / "nope.jsonl"
    rc, out, err = run_subproc(replay_args(trace, tmp_path / "out"))
    assert_one_line_error(rc, out, err, str(trace), "no such file")


def test_directory_as_trace_inprocess(tmp_path, capsys):
    d = tmp_path / "adir"
    d.mkdir()
    rc, out, err = run_main(capsys, replay_args(d, tmp_path / "out"))
    assert_one_line_error(rc, out, err, str(d), "is a directory")


def test_directory_as_trace_subprocess(tmp_path):
    d = tmp_path / "adir"
    d.mkdir()
    rc, out, err = run_subproc(replay_args(d, tmp_path / "out"))
    assert_one_line_error(rc, out, err, str(d), "is a directory")


def test_out_is_a_file(tmp_path, capsys):
    trace = write(tmp_path, OK)
    blocker = tmp_path / "out"
    blocker.write_text("x")
    rc, out, err = run_main(capsys, replay_args(trace, blocker))
    assert rc == 2
    assert out == ""
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1
    assert err.startswith(PREFIX) and str(blocker) in err


# -- what is skipped, and default rids -------------------------------------------------------
def read_rows(out_dir):
    with open(out_dir / "requests.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_blank_lines_skipped(tmp_path, capsys):
    text = "\n" + '{"tokens": [1, 2, 3]}\n' + "   \n\t\n" + '{"tokens": [1, 2, 3, 4]}\n' + "\n\n"
    trace = write(tmp_path, text)
    out_dir = tmp_path / "out"
    rc, out, err = run_main(capsys, replay_args(trace, out_dir))
    assert rc == 0
    assert err == ""
    rows = read_rows(out_dir)
    assert [r["rid"] for r in rows] == ["0", "1"]
    assert [r["prompt_tokens"] for r in rows] == ["3", "4"]
    # page 1: the second prompt matches the first prompt's 3 tokens (limit 4 - 1 = 3)
    assert [r["cached_tokens"] for r in rows] == ["0", "3"]


def test_events_skipped_and_default_rid_counts_requests_only(tmp_path, capsys):
    text = (
        '{"event": "close_session", "session_id": "a"}\n'
        '{"tokens": [1, 2, 3], "session_id": "a"}\n'
        '{"event": "close_session", "session_id": "a", "timestamp": 5}\n'
        '{"tokens": [4, 5], "rid": "named"}\n'
        "\n"
        '{"event": "close_session", "session_id": 9}\n'
        '{"tokens": [1, 2, 3, 9]}\n'
        '{"hash_ids": [0], "block_size": 2, "rid": 17}\n'
        '{"tokens": [6]}\n'
    )
    trace = write(tmp_path, text)
    out_dir = tmp_path / "out"
    rc, out, err = run_main(capsys, replay_args(trace, out_dir))
    assert rc == 0
    assert err == ""
    assert out.startswith("5 requests, ")
    rows = read_rows(out_dir)
    assert [r["rid"] for r in rows] == ["0", "named", "2", "17", "4"]
    assert [r["session_id"] for r in rows] == ["a", "", "", "", ""]
    assert [r["prompt_tokens"] for r in rows] == ["3", "2", "4", "2", "1"]


def test_events_only_trace(tmp_path, capsys):
    """No request to measure: bad input, as `radixsim run` (exit 2, one line, nothing written)."""
    trace = write(tmp_path, '{"event": "close_session", "session_id": 1}\n\n')
    out_dir = tmp_path / "out"
    rc, out, err = run_main(capsys, replay_args(trace, out_dir))
    assert_one_line_error(rc, out, err, str(trace), "no requests in the trace; expected at least one")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.jsonl"]


def test_no_command_exits_2(capsys):
    rc, out, err = run_main(capsys, [])
    assert rc == 2


# -- inputs that once escaped the reader (fixed; kept as regressions) -------------------------------
def test_deeply_nested_json_line(tmp_path):
    trace = write(tmp_path, OK + '{"tokens": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    rc, out, err = run_subproc(replay_args(trace, tmp_path / "out"))
    # valid JSON that orjson parses (then the field check names 'tokens'), or the standard
    # parser's recursion limit ("invalid JSON"): either way one line naming file:line
    problem = "invalid JSON" if "invalid JSON" in err else "'tokens' must be a flat list"
    assert_one_line_error(rc, out, err, f"{trace}:2", problem)


def test_huge_integer_literal(tmp_path):
    trace = write(tmp_path, OK + '{"tokens": [' + "9" * 5000 + "]}\n")
    rc, out, err = run_subproc(replay_args(trace, tmp_path / "out"))
    assert_one_line_error(rc, out, err, f"{trace}:2")


def test_timestamp_nan(tmp_path, capsys):
    trace = write(tmp_path, '{"tokens": [1], "timestamp": NaN}\n')
    rc, out, err = run_main(capsys, replay_args(trace, tmp_path / "out"))
    assert_one_line_error(rc, out, err, f"{trace}:1", "timestamp")


def test_timestamp_infinity(tmp_path, capsys):
    trace = write(tmp_path, '{"tokens": [1], "timestamp": Infinity}\n')
    rc, out, err = run_main(capsys, replay_args(trace, tmp_path / "out"))
    assert_one_line_error(rc, out, err, f"{trace}:1", "timestamp")


def test_huge_block_size_small_input_length(tmp_path):
    trace = write(tmp_path, '{"hash_ids": [0], "block_size": 1099511627776, "input_length": 3}\n')
    rc, out, err = run_subproc(replay_args(trace, tmp_path / "out"))
    # either accepted (3 tokens) or refused with one line naming the line: never a traceback
    assert "Traceback" not in err
    if rc != 0:
        assert_one_line_error(rc, out, err, f"{trace}:1", "block")


def test_huge_block_size(tmp_path):
    trace = write(tmp_path, '{"hash_ids": [0], "block_size": 1099511627776}\n')
    rc, out, err = run_subproc(replay_args(trace, tmp_path / "out"))
    assert_one_line_error(rc, out, err, f"{trace}:1")


@pytest.mark.parametrize("text,quoted", [
    ('{"tokens": [1.5]}\n', "'tokens' must be a flat list of non-negative integers"),
    ('{"tokens": [1], "output_length": -1}\n', "'output_length' must be >= 0, got -1"),
    ('{"output_length": 1}\n', "request needs 'tokens' (or 'input_ids') or 'hash_ids'"),
    ('{"tokens": [1], "priority": "high"}\n', "'priority' must be an integer, got \"high\""),
])
def test_messages_keep_their_quotes(tmp_path, capsys, text, quoted):
    trace = write(tmp_path, text)
    rc, out, err = run_main(capsys, replay_args(trace, tmp_path / "out"))
    assert err == f"{PREFIX}{trace}:1: {quoted}\n"


def test_exit_bad_input_is_defined_once_in_args():
    """One exit status for bad input: radixsim/args.py defines it, every command imports it."""
    defining = sorted(p.name for p in (ROOT / "radixsim").glob("*.py")
                      if any(isinstance(t, ast.Name) and t.id == "EXIT_BAD_INPUT"
                             for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.Assign)
                             for t in node.targets))
    assert defining == ["args.py"]
