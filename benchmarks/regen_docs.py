"""Rerun the figures quoted in README.md and docs/ and compare them with the text (issue 27).

Every regenerated figure sits between two markers in its document:

    <!-- regen: NAME -->...<!-- /regen -->

(a block: a whole table or code block on the lines between them; or inline: one number or phrase
inside a sentence). NAME is an entry of REGISTRY (benchmarks/regen_core.py; the entries, by document,
in benchmarks/regen_entries_docs.py, regen_entries_fleet.py and regen_entries_lab.py): the document it
belongs to, its cost, the command that produces it (shown by --list) and the function that renders
the text from the runs. This file is the driver.

    python benchmarks/regen_docs.py --list              # every entry, its cost and its command
    python benchmarks/regen_docs.py --check [--cheap]   # rerun, diff; exit 1 on a difference
    python benchmarks/regen_docs.py --write [--cheap]   # rerun and rewrite the marked text
    python benchmarks/regen_docs.py --check --only fleet-agentic-table --jobs 2

`--cheap` keeps the entries that take seconds (what CI runs: tests/test_regen_docs.py); the others
rerun catalog scenarios at full size (minutes). A marker without an entry, or a selected entry
without its marker, is an error (exit 2). The runs are `radixsim run SCENARIO --set ...` in
subprocesses (`--jobs` at a time, default all cores), seeded: the same commit gives the same text;
docs/policy_lab.md's figures come from one in-process leaderboard (or curve) run shared by its
entries. An entry that needs a trace the repository does not ship (the real Mooncake conversation
trace) prints "NAME: skipped: TRACE not present ..." and leaves its text as written (exit 0).
Figures that are not covered (wall times, memory, "before" columns of fixed bugs) are plain text:
they describe one measurement, not something a rerun reproduces.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # benchmarks/: the registry and its entries
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from regen_core import EXIT_BAD, EXIT_DIFF, REGISTRY, ROOT, Ctx, Entry, Skipped  # noqa: E402
import regen_entries_docs  # noqa: E402,F401  (registers README and validation entries first)
import regen_entries_fleet  # noqa: E402,F401
import regen_entries_lab  # noqa: E402,F401

MARK = re.compile(r"<!-- regen: ([A-Za-z0-9_.-]+) -->(.*?)<!-- /regen -->", re.S)


# -- driver -----------------------------------------------------------------------------------
def marked(root: Path, doc: str) -> dict:
    """name -> (start, end) of the text between its markers in `doc` (each name at most once)."""
    text = (root / doc).read_text()
    spans: dict = {}
    for m in MARK.finditer(text):
        if m.group(1) in spans:
            raise ValueError(f"{doc}: regen marker {m.group(1)!r} appears twice; expected one")
        spans[m.group(1)] = (m.start(2), m.end(2))
    return spans


def docs_with_markers(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
                  if p.is_file() and "<!-- regen:" in p.read_text())


def check_markers(root: Path, selected: list) -> None:
    """Every marker names an entry of its document; every selected entry has its marker."""
    for doc in docs_with_markers(root):
        for name in marked(root, doc):
            if name not in REGISTRY or REGISTRY[name].doc != doc:
                raise ValueError(f"{doc}: regen marker {name!r}: no such entry for this document; expected one of "
                                 "benchmarks/regen_docs.py --list")
    for e in selected:
        if not (root / e.doc).is_file() or e.name not in marked(root, e.doc):
            raise ValueError(f"{e.doc}: regen marker {e.name!r} missing; expected <!-- regen: {e.name} --> ... "
                             "<!-- /regen --> around its text")


def wrap(e: Entry, text: str) -> str:
    return f"\n{text}\n" if e.block else text


def run(root: Path, selected: list, write: bool, jobs: int, verbose: bool = True) -> int:
    ctx = Ctx(jobs, verbose)
    ctx.runs.prefetch([k for e in selected for k in e.runs])
    new, skipped = {}, []
    for e in selected:
        try:
            new[e.name] = wrap(e, e.render(ctx))
        except Skipped as why:  # its text stays as written
            skipped.append(e.name)
            print(f"{e.name}: skipped: {why}")
    differ = 0
    for doc in sorted({e.doc for e in selected}):
        text = (root / doc).read_text()
        out = text
        for name, (a, b) in sorted(marked(root, doc).items(), key=lambda kv: -kv[1][0]):
            if name in new:
                out = out[:a] + new[name] + out[b:]
        if out != text:
            differ += 1
            if write:
                (root / doc).write_text(out)
                print(f"{doc}: rewritten")
            else:
                sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), out.splitlines(True),
                                                           f"{doc} (written)", f"{doc} (rerun)"))
    if not write:
        done = len(selected) - len(skipped)
        print(f"{done} entries checked" + (f" ({len(skipped)} skipped)" if skipped else "") + ": "
              + (f"{differ} document(s) differ" if differ else "all match"))
    return EXIT_DIFF if differ and not write else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="regen_docs.py", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="rerun and diff (exit 1 on a difference)")
    mode.add_argument("--write", action="store_true", help="rerun and rewrite the marked text")
    mode.add_argument("--list", action="store_true", help="list the entries with their cost and command")
    ap.add_argument("--cheap", action="store_true", help="only the entries that take seconds")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="only this entry (repeatable)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel runs (default: all cores)")
    ap.add_argument("--root", default=str(ROOT), help="the tree holding README.md and docs/ (default: this one)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.only if n not in REGISTRY]
    if unknown:
        print(f"regen_docs: --only {unknown[0]}: no such entry; expected one of --list", file=sys.stderr)
        return EXIT_BAD
    selected = [e for e in REGISTRY.values() if (not args.cheap or e.cheap) and (not args.only or e.name in args.only)]
    if args.list:
        for e in selected:
            print(f"{e.name:<40} {e.doc:<20} {'cheap' if e.cheap else 'expensive':<9} ~{e.seconds:>4} s  {e.command}")
        return 0
    root = Path(args.root)
    try:
        check_markers(root, selected)
    except ValueError as e:
        print(f"regen_docs: {e}", file=sys.stderr)
        return EXIT_BAD
    return run(root, selected, args.write, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
