"""benchmarks/mutation_check.py on a toy repository: a killed, a surviving and a hanging mutant
(the hang is killed by the per-test timeout: a verdict, no time asserted), the table, and the
one-line refusals of a mutant whose old text is missing or not unique."""
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import mutation_check  # noqa: E402

pytest.importorskip("pytest_timeout")  # the dev extra

MOD = """def add(a, b):
    return a + b


def count(n):
    i = 0
    while i < n:
        i += 1
    return i
"""
TESTS = """from mod import add, count


def test_add():
    assert add(2, 3) == 5


def test_count():
    assert count(3) == 3
"""
MUTANTS = """# a comment line
file: mod.py
old: return a + b
new: return a - b
tests: tests/test_mod.py

file: mod.py
old: i = 0
new: i = -0
tests: tests/test_mod.py

file: mod.py
old: i += 1
new: i += 0
tests: tests/test_mod.py
"""


def toy(tmp_path, mutants: str) -> Path:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "benchmarks").mkdir()
    (root / "mod.py").write_text(MOD)
    (root / "tests" / "test_mod.py").write_text(TESTS)
    (root / "benchmarks" / "mutants_toy.txt").write_text(mutants)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_killed_survived_and_hung_mutants_in_the_table(tmp_path, capsys):
    root = toy(tmp_path, MUTANTS)
    rc = mutation_check.main(["--timeout", "2"], root=root)
    out, err = capsys.readouterr()
    assert rc == 1 and err == ""  # a mutant survived
    lines = out.splitlines()
    assert [ln.split()[:2] for ln in lines[:3]] == [["toy#1", "fail"], ["toy#2", "pass"], ["toy#3", "timeout"]]
    assert lines[4].split() == ["area", "killed", "total", "rate", "timeouts", "errors", "survivors"]
    assert lines[5].split() == ["toy", "2", "3", "67%", "1", "0", "toy#2"]
    assert lines[6] == "SURVIVED toy#2: mod.py: 'i = 0' -> 'i = -0' (tests: tests/test_mod.py)"
    assert (root / "mod.py").read_text() == MOD  # the repository itself is never touched


def test_only_the_filtered_mutants_run(tmp_path, capsys):
    root = toy(tmp_path, MUTANTS)
    assert mutation_check.main(["-k", "a - b", "--no-baseline"], root=root) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["toy#1", "fail"] and out[3].split()[:4] == ["toy", "1", "1", "100%"]


@pytest.mark.parametrize("old,why", [
    ("return a * b", "old text not found in mod.py: 'return a * b'"),
    ("i", "old text found 5 times, expected once in mod.py: 'i'"),
])
def test_a_missing_or_repeated_old_text_is_refused_in_one_line_and_nothing_runs(tmp_path, capsys, old, why):
    root = toy(tmp_path, MUTANTS + f"\nfile: mod.py\nold: {old}\nnew: x\ntests: tests/test_mod.py\n")
    assert mutation_check.main([], root=root) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"mutation_check: refused toy#4 (mutants_toy.txt:17): {why}\n"


@pytest.mark.parametrize("text,line", [
    ("file: mod.py\nold: a\nnew: b\n", "mutants_toy.txt:1: mutant lacks field 'tests'"),
    ("file: mod.py\nwhat: a\n", "mutants_toy.txt:2: expected 'FIELD: TEXT' with FIELD one of file, old, new, tests"),
])
def test_a_malformed_mutants_file_is_one_line(tmp_path, capsys, text, line):
    root = toy(tmp_path, text)
    assert mutation_check.main([], root=root) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"mutation_check: {line}") and err.count("\n") == 1
