"""benchmarks/regen_docs.py's machinery: the registry of entries (`entry`), the runs they read
(`Runs`, `Ctx`: `radixsim run` in subprocesses, each once per process) and the helpers every
entry module uses (`table`, `fail`, `Skipped`). The entries live in benchmarks/regen_entries_*.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXIT_DIFF, EXIT_BAD = 1, 2


def fail(msg: str):
    """Stop with one line on stderr and exit status 2 (a run or a check that could not be done)."""
    print(f"regen_docs: {msg}", file=sys.stderr)
    raise SystemExit(EXIT_BAD)


# -- runs -------------------------------------------------------------------------------------
Run = tuple  # (scenario, (--set KEY=VALUE, ...))


def run_key(scenario: str, *sets: str) -> Run:
    return (scenario, tuple(sets))


class Runs:
    """The summaries (summary.json) of `radixsim run` invocations, each run once per process."""

    def __init__(self, jobs: int, verbose: bool = True):
        self.jobs, self.verbose = jobs, verbose
        self.done: dict = {}
        self.tmp = tempfile.TemporaryDirectory(prefix="regen-docs-")

    def _one(self, i: int, key: Run) -> dict:
        scenario, sets = key
        out = Path(self.tmp.name) / f"run{i}"
        cmd = [sys.executable, "-m", "radixsim", "run", scenario, *[a for s in sets for a in ("--set", s)],
               "--out", str(out), "--no-plots", "--no-progress"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        if self.verbose:
            print("running: radixsim run " + " ".join([scenario, *[f"--set {s}" for s in sets]]), file=sys.stderr)
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"radixsim run {scenario} {' '.join(sets)} failed: "
                             f"{(p.stderr.strip().splitlines() or ['?'])[-1]}")
        return json.loads((out / "summary.json").read_text())

    def prefetch(self, keys) -> None:
        todo = [k for k in dict.fromkeys(keys) if k not in self.done]
        with ThreadPoolExecutor(max_workers=max(1, self.jobs)) as ex:
            for k, s in zip(todo, ex.map(self._one, range(len(self.done), len(self.done) + len(todo)), todo)):
                self.done[k] = s

    def __call__(self, scenario: str, *sets: str) -> dict:
        key = run_key(scenario, *sets)
        if key not in self.done:
            self.prefetch([key])
        return self.done[key]


class Ctx:
    """What renderers read: `runs(scenario, *sets)` and the validation results (once)."""

    def __init__(self, jobs: int, verbose: bool = True):
        self.runs = Runs(jobs, verbose)
        self._validate: dict = {}

    def validate(self, names: tuple = ()) -> list:
        if names not in self._validate:
            from radixsim import validate

            self._validate[names] = validate.validate(names)
        return self._validate[names]


# -- the registry -----------------------------------------------------------------------------
@dataclass
class Entry:
    name: str
    doc: str            # path relative to the repository root
    cheap: bool         # seconds (CI) or minutes
    seconds: int        # rough cost on a 2-core machine
    command: str        # what reproduces it by hand
    render: Callable    # Ctx -> text between the markers
    block: bool = True  # a block (text on its own lines) or an inline figure
    runs: list = field(default_factory=list)  # the runs it needs (prefetched in parallel)


REGISTRY: dict = {}


def entry(name, doc, *, cheap, seconds, command, block=True, runs=()):
    def deco(fn):
        REGISTRY[name] = Entry(name, doc, cheap, seconds, command, fn, block, list(runs))
        return fn
    return deco


def table(header: list, rows: list) -> str:
    """A Markdown table."""
    def line(cells):
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"
    return "\n".join([line(header), "|" + "---|" * len(header)] + [line(r) for r in rows])


class Skipped(Exception):
    """An entry that cannot run here (it needs a trace that is not in the repository): its text is
    left as written and the run says so."""
