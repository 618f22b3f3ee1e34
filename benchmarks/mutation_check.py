"""Mutation check: do the tests notice a small, plausible bug?

    python benchmarks/mutation_check.py [--area arc] [--jobs 1] [-k store.py] [--timeout 300]

Reads benchmarks/mutants_<AREA>.txt, one block per mutant, blocks separated by a blank line:

    file: cache_core/policies/arc.py
    old: max(b2 / b1, 1.0) * pages
    new: pages
    tests: tests/test_policy_lab.py tests/test_mutants_arc.py::test_x

`old` must occur exactly once in `file`, else the mutant is refused (one line on stderr naming
the mutants file, its line and what was expected) and nothing runs (exit status 2); `new`
replaces it. Lines starting with `#` are comments. For each mutant the script applies the one
replacement to a private copy of the tracked and untracked-unignored files (`git ls-files`, one
copy per job, restored after each mutant), runs the listed tests there with pytest (`-x`, a
per-test timeout from pytest-timeout, default 300 s) and reports `fail` (killed), `timeout`
(killed: a hang is a failure) or `pass` (survived). The unmutated tests run once per distinct
test list first: a list that fails unmutated is reported and its mutants are not counted (exit
status 2). Then one row per area: killed/total, rate, timeouts, errors and the survivors, each
survivor spelled out below. Exit status 0 when every mutant was killed, 1 when one survived.

Why not mutmut: mutmut generates every operator mutation of whole modules and runs the whole
suite (or its own coverage-picked subset) per mutant; on this project (about 1700 tests, two CPU
cores) that is hours, and most generated mutants are trivially equivalent. Here the mutants are
hand-written, each a realistic bug next to the tests meant to catch it, reviewed like code, and a
run of one area takes minutes. No timing is asserted anywhere: the timeout only turns a hang into
a verdict.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import pathlib
import queue
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIELDS = ("file", "old", "new", "tests")


@dataclasses.dataclass
class Mutant:
    area: str
    index: int  # 1-based within its area's file
    line: int  # line of its `file:` in the mutants file
    file: str
    old: str
    new: str
    tests: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.area}#{self.index}"


class BadInput(Exception):
    pass


def parse(path: pathlib.Path) -> list[Mutant]:
    """The mutants of one `mutants_<area>.txt`; BadInput names the file, line and field."""
    area = path.stem[len("mutants_"):]
    out: list[Mutant] = []
    block: dict[str, str] = {}
    start = 0

    def close(lineno: int) -> None:
        if not block:
            return
        missing = [f for f in FIELDS if f not in block]
        if missing:
            raise BadInput(f"{path.name}:{start}: mutant lacks field '{missing[0]}' (expected {', '.join(FIELDS)})")
        tests = tuple(block["tests"].split())
        if not tests:
            raise BadInput(f"{path.name}:{start}: field 'tests' is empty (expected test paths or node ids)")
        out.append(Mutant(area, len(out) + 1, start, block["file"], block["old"], block["new"], tests))
        block.clear()

    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        if not raw.strip():
            close(lineno)
            continue
        if raw.startswith("#"):
            continue
        field, sep, value = raw.partition(":")
        if not sep or field not in FIELDS:
            raise BadInput(f"{path.name}:{lineno}: expected 'FIELD: TEXT' with FIELD one of {', '.join(FIELDS)}")
        if field in block:
            raise BadInput(f"{path.name}:{lineno}: field '{field}' given twice in one mutant")
        if not block:
            start = lineno
        block[field] = value[1:] if value.startswith(" ") else value
    close(0)
    return out


def check_applies(m: Mutant, root: pathlib.Path) -> str | None:
    """None when `old` occurs exactly once in the file, else why not (one line)."""
    src = root / m.file
    if not src.is_file():
        return f"{m.name} (mutants_{m.area}.txt:{m.line}): file '{m.file}' not found"
    n = src.read_text().count(m.old)
    if n != 1:
        what = "not found" if n == 0 else f"found {n} times, expected once"
        return f"{m.name} (mutants_{m.area}.txt:{m.line}): old text {what} in {m.file}: {m.old!r}"
    if m.old == m.new:
        return f"{m.name} (mutants_{m.area}.txt:{m.line}): new text equals old text"
    return None


def copy_tree(root: pathlib.Path, dest: pathlib.Path) -> None:
    """The tracked files of `root` (as they are in the work tree) and untracked, unignored ones."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        src = root / f.decode()
        if not src.is_file():  # deleted in the work tree
            continue
        dst = dest / f.decode()
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def run_tests(tree: pathlib.Path, tests: tuple[str, ...], timeout: int) -> tuple[str, str]:
    """('pass' | 'fail' | 'timeout', last output line) of pytest on `tests` in `tree`."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           f"--timeout={timeout}", *tests]
    env = {**__import__("os").environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        # backstop for a hang pytest-timeout cannot break (e.g. in C code): the whole list's budget
        r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout * 4 + 60)
    except subprocess.TimeoutExpired:
        return "timeout", "the whole test run timed out"
    out = r.stdout + r.stderr
    lines = [ln for ln in out.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if r.returncode == 0:
        return "pass", last
    if "Timeout" in out and ("+++ Timeout" in out or "Failed: Timeout" in out):
        return "timeout", last
    if r.returncode not in (1, 2):  # 2: a collection error (the mutant broke an import); 4, 5: bad list
        return "error", f"pytest exit {r.returncode}: {last}"
    return "fail", last


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--area", action="append", help="only this area (mutants_AREA.txt); repeatable")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    ap.add_argument("-k", dest="keyword", default=None,
                    help="only mutants whose name (area#N), file, old or new text contains this")
    ap.add_argument("--timeout", type=int, default=300, help="per-test timeout in seconds (default 300)")
    ap.add_argument("--no-baseline", action="store_true", help="skip running the unmutated tests first")
    return ap


def main(argv=None, root: pathlib.Path = ROOT) -> int:
    """The command (`root`: the repository whose benchmarks/mutants_*.txt are read and mutated)."""
    args = parser().parse_args(argv)
    if args.jobs < 1:
        print("mutation_check: option --jobs: expected an integer >= 1", file=sys.stderr)
        return 2
    mutants = select(args, root)
    if mutants is None:  # bad input, said on stderr: nothing runs
        return 2
    results, broken = run_mutants(mutants, root, args)
    return report(mutants, results, broken)


def select(args, root: pathlib.Path) -> list[Mutant] | None:
    """The mutants of the selected areas that match -k, or None (each reason on stderr) when an
    area, a mutant file or a mutant's old text is bad."""
    files = sorted((root / "benchmarks").glob("mutants_*.txt"))
    if args.area:
        known = {p.stem[len("mutants_"):]: p for p in files}
        for a in args.area:
            if a not in known:
                print(f"mutation_check: option --area: no benchmarks/mutants_{a}.txt "
                      f"(expected one of {', '.join(sorted(known))})", file=sys.stderr)
                return None
        files = [known[a] for a in args.area]
    mutants: list[Mutant] = []
    try:
        for p in files:
            mutants += parse(p)
    except BadInput as e:
        print(f"mutation_check: {e}", file=sys.stderr)
        return None
    if args.keyword:
        k = args.keyword
        mutants = [m for m in mutants if k in m.name or k in m.file or k in m.old or k in m.new]
    refused = {}
    for m in mutants:
        why = check_applies(m, root)
        if why:
            refused[m.name] = why
            print(f"mutation_check: refused {why}", file=sys.stderr)
    return None if refused else mutants


def run_mutants(todo: list[Mutant], root: pathlib.Path, args) -> tuple[dict, dict]:
    """Each mutant's (verdict, last line) by name, on `args.jobs` copies of the tree, after a
    baseline run of each test list (unless --no-baseline); and the test lists that fail unmutated."""
    with tempfile.TemporaryDirectory(prefix="mutation_check_") as tmp:
        trees: queue.Queue = queue.Queue()
        for j in range(min(args.jobs, max(len(todo), 1))):
            d = pathlib.Path(tmp) / f"tree{j}"
            copy_tree(root, d)
            trees.put(d)

        def with_tree(fn, *a):
            d = trees.get()
            try:
                return fn(d, *a)
            finally:
                trees.put(d)

        def baseline(d, tests):
            return run_tests(d, tests, args.timeout)

        def mutate(d, m):
            src = d / m.file
            text = src.read_text()
            src.write_text(text.replace(m.old, m.new, 1))
            try:
                return run_tests(d, m.tests, args.timeout)
            finally:
                src.write_text(text)

        broken: dict[tuple, str] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
            if not args.no_baseline:
                lists = sorted({m.tests for m in todo})
                for tests, (verdict, last) in zip(lists, ex.map(lambda t: with_tree(baseline, t), lists)):
                    if verdict != "pass":
                        broken[tests] = f"{verdict}: {last}"
                        print(f"baseline fails unmutated ({verdict}): {' '.join(tests)}: {last}", file=sys.stderr)
            counted = [m for m in todo if m.tests not in broken]
            results = {}
            for m, res in zip(counted, ex.map(lambda m: with_tree(mutate, m), counted)):
                results[m.name] = res
                print(f"  {m.name:<24} {res[0]:<8} {m.file}: {m.old.strip()!r} -> {m.new.strip()!r}", flush=True)
    return results, broken


def report(mutants: list[Mutant], results: dict, broken: dict) -> int:
    """The per-area table and the survivors; exit status 2 (a baseline failed), 1 (a mutant
    survived) or 0."""
    survived_any = False
    areas = sorted({m.area for m in mutants})
    print()
    print(f"{'area':<20} {'killed':>7} {'total':>6} {'rate':>6}  timeouts  errors  survivors")
    for a in areas:
        ms = [m for m in mutants if m.area == a]
        res = [(m, results.get(m.name)) for m in ms if m.name in results]
        killed = [m for m, r in res if r[0] in ("fail", "timeout")]
        timeouts = [m for m, r in res if r[0] == "timeout"]
        errors = [m for m, r in res if r[0] == "error"] + [m for m in ms if m.tests in broken]
        surv = [m for m, r in res if r[0] == "pass"]
        survived_any |= bool(surv)
        total = len(res)
        rate = f"{100 * len(killed) / total:.0f}%" if total else "-"
        print(f"{a:<20} {len(killed):>7} {total:>6} {rate:>6}  {len(timeouts):>8}  {len(errors):>6}  "
              + (", ".join(m.name for m in surv) or "-"))
    for m in mutants:
        r = results.get(m.name)
        if r and r[0] == "pass":
            print(f"SURVIVED {m.name}: {m.file}: {m.old!r} -> {m.new!r} (tests: {' '.join(m.tests)})")
        elif r and r[0] == "error":
            print(f"ERROR {m.name}: {r[1]}")
    if broken:
        return 2
    return 1 if survived_any else 0

if __name__ == "__main__":
    sys.exit(main())
