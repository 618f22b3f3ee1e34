"""Rerun the figures quoted in README.md and docs/ and compare them with the text (issue 27).

Every regenerated figure sits between two markers in its document:

    <!-- regen: NAME -->...<!-- /regen -->

(a block: a whole table or code block on the lines between them; or inline: one number or phrase
inside a sentence). NAME is an entry of REGISTRY below: the document it belongs to, its cost, the
command that produces it (shown by --list) and the function that renders the text from the runs.

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
import json
import os
import re
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

MARK = re.compile(r"<!-- regen: ([A-Za-z0-9_.-]+) -->(.*?)<!-- /regen -->", re.S)
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


# README ------------------------------------------------------------------------------------
@entry("readme-commands", "README.md", cheap=True, seconds=1, block=False,
       command="python -m radixsim --help (its COMMAND list)")
def _readme_commands(ctx) -> str:
    from radixsim.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return ", ".join(sub.choices)


def _trace_requests() -> int:
    from scenarios.traces import JsonlTrace

    return sum(1 for r in JsonlTrace(ROOT / "scenarios/data/mooncake_synthetic_trace.jsonl") if not hasattr(r, "event"))


entry("readme-trace-requests", "README.md", cheap=True, seconds=1, block=False,
      command="wc -l scenarios/data/mooncake_synthetic_trace.jsonl (requests of the bundled trace)")(
    lambda ctx: f"{_trace_requests():,}")
entry("readme-fleet-requests", "README.md", cheap=True, seconds=1, block=False,
      command="3 x the bundled Mooncake trace's requests (benchmarks/bench_fleet.py --copies 3)")(
    lambda ctx: f"{3 * _trace_requests():,}")
_VLLM_RUNS = [run_key("vllm-quickstart"), run_key("quickstart", "cache.hicache_ratio=null")]  # engine.kind vllm, sglang
entry("readme-vllm-quickstart", "README.md", cheap=True, seconds=8, block=False, runs=_VLLM_RUNS,
      command="radixsim run vllm-quickstart; radixsim run quickstart --set cache.hicache_ratio=null (hit_rate)")(
    lambda ctx: " against ".join(f"{ctx.runs(k[0], *k[1])['hit_rate']:.3f}" for k in _VLLM_RUNS))


@entry("readme-test-count", "README.md", cheap=False, seconds=60, block=False,
       command="python -m pytest -o addopts= --collect-only -q (the number of tests collected)")
def _readme_tests(ctx) -> str:
    p = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "--collect-only", "-q",
                        "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    m = re.search(r"^(\d+) tests? collected", p.stdout, re.M)
    if not m:
        fail("pytest --collect-only printed no count: " + " ".join((p.stdout[-300:] + p.stderr[-300:]).split()))
    return f"{int(m.group(1)):,} tests"


# docs/validation.md -------------------------------------------------------------------------
@entry("validation-table", "docs/validation.md", cheap=True, seconds=10,
       command="radixsim validate --out validation-out (its printed table)")
def _validation_table(ctx) -> str:
    from radixsim import validate

    return "```\n" + validate.table(ctx.validate()) + "\n```"


@entry("validation-per-round", "docs/validation.md", cheap=True, seconds=10,
       command="radixsim validate --out validation-out (validation.json: series per case)")
def _validation_per_round(ctx) -> str:
    parts = []
    for res in ctx.validate():
        s = res["series"]
        if s is None:
            continue
        n = max(len(s["sim_hit_rate"]), len(s["published_hit_rate"]))

        def cells(xs, fmt):
            return [fmt(xs[i]) if i < len(xs) and xs[i] is not None else "-" for i in range(n)]

        pct = lambda v: f"{100 * v:.0f}%"  # noqa: E731
        sec = lambda v: f"{v:.2f}"  # noqa: E731
        rows = [["hit published", *cells(s["published_hit_rate"], pct)],
                ["hit radixsim", *cells(s["sim_hit_rate"], pct)],
                ["TTFT published (s)", *cells(s["published_ttft_mean_s"], sec)],
                ["TTFT radixsim (s)", *cells(s["sim_ttft_mean_s"], sec)]]
        parts.append(f"**{res['row']['case']}**\n\n" + table(["round", *map(str, range(1, n + 1))], rows))
    return "\n\n".join(parts)


@entry("serving-terms", "docs/validation.md", cheap=False, seconds=80,
       command="python benchmarks/serving_terms.py (its printed table)")
def _serving_terms(ctx) -> str:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serving_terms.py")], cwd=ROOT,
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail("serving_terms.py failed: " + " ".join(p.stderr.split()[-40:]))
    return p.stdout.strip()


@entry("clock-residual-after", "docs/sources/clock_terms.md", cheap=False, seconds=15,
       command="radixsim validate --explain (each full case's residual fits, as mapped today)")
def _clock_residual_after(ctx) -> str:
    return _clock().clock_residual_after(ctx)


# docs/store_model.md ------------------------------------------------------------------------
_ROUNDS: dict = {}


def _case_rounds(case_id: str, cache: dict) -> list:
    """Hit rate per round (%) of one validation case with `cache` keys set in its mapped scenario
    (each (case, keys) simulated once per process)."""
    key = (case_id, tuple(sorted(cache.items())))
    if key not in _ROUNDS:
        _ROUNDS[key] = _simulate_case(case_id, cache)
    return _ROUNDS[key]


def _simulate_case(case_id: str, cache: dict) -> list:
    from radixsim import results
    from radixsim.run import request_rows, simulate
    from radixsim.validate_cases import case_files, scenario_of
    from scenarios.scenario import resolve

    (_path, case), = case_files([case_id])
    raw, _notes = scenario_of(case, 0)
    raw["cache"].update(cache)
    eng, *_ = simulate(resolve(raw, case_id), progress=False)
    return [100 * (r["hit_rate"] or 0.0) for r in results.round_table(request_rows(eng))]


def _hit_row(label2: str, sim: list, pub: list, n: int, first: str = "") -> list:
    from radixsim.validate import compare

    mae = compare([v / 100 for v in sim], [0.0] * len(sim), [v / 100 for v in pub], [1.0] * len(pub))["hit_mae_pts"]
    cells = [f"{sim[i]:.0f}" if i < len(sim) else "-" for i in range(n)]
    return [first, label2, *cells, f"{mae:.1f}"]


def _pub_row(first: str, pub: list, n: int) -> list:
    return [first, "published", *[f"{pub[i]:.0f}" if i < len(pub) else "-" for i in range(n)], ""]


def _published(case_id: str) -> list:
    from radixsim.validate_cases import case_files

    (_path, case), = case_files([case_id])
    return [100 * v for v in case["published"]["hit_rate_per_round"]]


POOL_WIDE = {"l3_eviction_shards": 1, "l3_objects_per_page": 1}
A3, A4, H3 = "A3-ssdbench-mooncake80g", "A4-ssdbench-mooncake-ssd", "H3-h800-qwen235b-mooncake-760g"


@entry("store-model-validation", "docs/store_model.md", cheap=True, seconds=15,
       command="radixsim validate A3-ssdbench-mooncake80g A4-ssdbench-mooncake-ssd "
               "H3-h800-qwen235b-mooncake-760g, with cache.l3_model prefix / pool-wide eviction set in the "
               "mapped scenario")
def _store_model_validation(ctx) -> str:
    prefix = {"l3_model": "prefix", "l3_ssd_tokens": None}
    rows = []
    for case, label, mc_label in ((A3, "A3 80 GB pool", "mooncake"), (A4, "A4 pool + SSD", "mooncake + SSD")):
        pub = _published(case)
        rows.append(_pub_row(label, pub, 10))
        rows.append(_hit_row("prefix" if case == A3 else "prefix, no SSD", _case_rounds(case, prefix), pub, 10))
        rows.append(_hit_row(mc_label, _case_rounds(case, POOL_WIDE), pub, 10))
    pub = _published(H3)
    both = _case_rounds(H3, {})
    if both != _case_rounds(H3, prefix):
        fail("H3's prefix and mooncake rows differ; the table's 'both' row no longer holds")
    rows += [_pub_row("H3 760 GB pool", pub, 10), _hit_row("both", both, pub, 10)]
    return table(["case", "", *map(str, range(1, 11)), "hit MAE"], rows)


@entry("store-model-per-shard", "docs/store_model.md", cheap=True, seconds=15,
       command="radixsim validate A3-ssdbench-mooncake80g A4-ssdbench-mooncake-ssd, with the eviction shards / "
               "objects per page set in the mapped scenario")
def _store_model_shards(ctx) -> str:
    pub3, pub4 = _published(A3), _published(A4)
    rows = [_pub_row("A3", pub3, 9),
            _hit_row("pool-wide pass (before)", _case_rounds(A3, POOL_WIDE), pub3, 9),
            _hit_row("per shard, one object per page", _case_rounds(A3, {"l3_objects_per_page": 1}), pub3, 9),
            _hit_row("per shard, K and V objects", _case_rounds(A3, {}), pub3, 9),
            _pub_row("A4", pub4, 9),
            _hit_row("both", _case_rounds(A4, {}), pub4, 9)]
    return table(["case", "", *map(str, range(1, 10)), "hit MAE"], rows)


# docs/fleet.md ------------------------------------------------------------------------------
ROUTERS = ["round_robin", "least_load", "session_affinity", "cache_aware", "kv_overlap", "cache_aware_exact"]
SWEEP_CMD = "radixsim sweep {} --grid fleet.router=" + ",".join(ROUTERS) + " --out DIR"


def _router_runs(scenario: str) -> list:
    return [run_key(scenario, f"fleet.router={r}") for r in ROUTERS]


def _fleet(ctx, scenario: str, *sets: str) -> dict:
    return ctx.runs(scenario, *sets)["fleet"]


FLEET_COLUMNS = {  # a fleet table's column: (its figure in the run's "fleet" result, the format)
    "hit": (lambda f: f["hit_rate"], ".3f"), "device": (lambda f: f["hit_rate_device"], ".3f"),
    "storage": (lambda f: f["hit_rate_storage"], ".3f"),
    "TTFT p50 s": (lambda f: f["ttft_p50_s"], ".3f"), "TTFT p90 s": (lambda f: f["ttft_p90_s"], ".3f"),
    "TPOT p50 s": (lambda f: f["tpot_p50_s"], ".4f"), "TPOT p90 s": (lambda f: f["tpot_p90_s"], ".4f"),
    "SLO att.": (lambda f: f["slo_attainment"], ".3f"), "goodput req/s": (lambda f: f["goodput_rps"], ".2f"),
    "max/mean req": (lambda f: f["load_balance"]["requests"]["max_over_mean"], ".2f"),
}


def _fleet_table(first: str, runs: list, columns: list) -> str:
    """One row a run: [(its label, its "fleet" result)], the columns named in FLEET_COLUMNS."""
    return table([first, *columns], [[label, *(format(FLEET_COLUMNS[c][0](f), FLEET_COLUMNS[c][1]) for c in columns)]
                                     for label, f in runs])


def _router_table(ctx, scenario: str, columns: list) -> str:
    return _fleet_table("router", [(r, _fleet(ctx, scenario, f"fleet.router={r}")) for r in ROUTERS], columns)


@entry("fleet-multiturn-table", "docs/fleet.md", cheap=False, seconds=600, runs=_router_runs("fleet16-multiturn"),
       command=SWEEP_CMD.format("fleet16-multiturn"))
def _fleet_multiturn(ctx) -> str:
    return _router_table(ctx, "fleet16-multiturn", ["hit", "TTFT p50 s", "TTFT p90 s", "TPOT p90 s", "SLO att.",
                                                    "goodput req/s", "max/mean req"])


@entry("fleet-agentic-table", "docs/fleet.md", cheap=False, seconds=600, runs=_router_runs("fleet16-agentic"),
       command=SWEEP_CMD.format("fleet16-agentic"))
def _fleet_agentic(ctx) -> str:
    return _router_table(ctx, "fleet16-agentic", ["hit", "device", "storage", "TTFT p50 s", "TTFT p90 s",
                                                  "TPOT p90 s", "SLO att.", "goodput req/s", "max/mean req"])


def _inline_fleet(name: str, scenario: str, router: str, fmt: Callable) -> None:
    """An inline figure of one router's run (the prose beside the tables)."""
    entry(name, "docs/fleet.md", cheap=False, seconds=120, block=False,
          runs=[run_key(scenario, f"fleet.router={router}")],
          command=f"radixsim run {scenario} --set fleet.router={router}")(
        lambda ctx: fmt(_fleet(ctx, scenario, f"fleet.router={router}")))


_inline_fleet("fleet-multiturn-cache-aware-hit", "fleet16-multiturn", "cache_aware", lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-agentic-cache-aware-hit4", "fleet16-agentic", "cache_aware", lambda f: f"{f['hit_rate']:.4f}")
_inline_fleet("fleet-agentic-exact-hit4", "fleet16-agentic", "cache_aware_exact", lambda f: f"{f['hit_rate']:.4f}")
_inline_fleet("fleet-agentic-cache-aware-storage", "fleet16-agentic", "cache_aware",
              lambda f: f"{f['hit_rate_storage']:.3f}")
_inline_fleet("fleet-agentic-session-affinity-hit", "fleet16-agentic", "session_affinity",
              lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-multiturn-session-affinity-hit", "fleet16-multiturn", "session_affinity",
              lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-multiturn-kv-overlap-hit", "fleet16-multiturn", "kv_overlap", lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-agentic-kv-overlap-hit", "fleet16-agentic", "kv_overlap", lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-agentic-cache-aware-imbalance", "fleet16-agentic", "cache_aware",
              lambda f: f"{f['load_balance']['requests']['max_over_mean']:.2f}")

PD_RUNS = [run_key("fleet-agentic-pd-4p4d"), run_key("fleet-agentic-colocated-8")]


@entry("fleet-pd-table", "docs/fleet.md", cheap=False, seconds=300, runs=PD_RUNS,
       command="radixsim run fleet-agentic-pd-4p4d; radixsim run fleet-agentic-colocated-8")
def _fleet_pd(ctx) -> str:
    return _fleet_table("fleet", [(label, _fleet(ctx, sc, *sets)) for label, (sc, sets) in
                                  zip(["4P + 4D", "8 colocated"], PD_RUNS)],
                        ["hit", "TTFT p50 s", "TTFT p90 s", "TPOT p50 s", "TPOT p90 s", "SLO att.", "goodput req/s"])


DP_RUNS = [("DP1 (one tree)", run_key("fleet-dsv4-flash-dp1")),
           ("DP8, round-robin dispatcher", run_key("fleet-dsv4-flash-dp8")),
           ("DP8, session-affinity dispatcher",
            run_key("fleet-dsv4-flash-dp8", "fleet.dp_router.kind=session_affinity"))]


@entry("fleet-dp-table", "docs/fleet.md", cheap=False, seconds=300, runs=[k for _, k in DP_RUNS],
       command="radixsim run fleet-dsv4-flash-dp1; radixsim run fleet-dsv4-flash-dp8 "
               "[--set fleet.dp_router.kind=session_affinity]")
def _fleet_dp(ctx) -> str:
    rows = []
    for label, (sc, sets) in DP_RUNS:
        s = ctx.runs(sc, *sets)
        f = s["fleet"]
        rows.append([label, f"{f['hit_rate']:.3f}", f"{f['hit_rate_device']:.3f}", f"{f['hit_rate_host']:.3f}",
                     f"{f['ttft_p50_s']:.3f}", f"{f['ttft_p90_s']:.3f}", f"{s['duration_s']:.1f}"])
    return table(["attention", "hit", "device", "host", "TTFT p50 s", "TTFT p90 s", "simulated s"], rows)


for _i, (_label, (_sc, _sets)) in enumerate(DP_RUNS):
    entry(f"fleet-dp-hit-{_i + 1}", "docs/fleet.md", cheap=False, seconds=120, block=False, runs=[(_sc, _sets)],
          command=f"radixsim run {_sc}" + "".join(f" --set {s}" for s in _sets))(
        lambda ctx, _sc=_sc, _sets=_sets: f"{_fleet(ctx, _sc, *_sets)['hit_rate']:.3f}")


SCORER_PROFILES = {  # llm_d's scheduler profiles in the router comparison (docs/fleet.md)
    "llm_d precise": "{kind: llm_d, scorers: [{type: precise-prefix-cache-scorer, weight: 3}, "
                     "{type: kv-cache-utilization-scorer, weight: 2}, {type: queue-scorer, weight: 2}]}",
    "llm_d approximate": "llm_d",
    "llm_d load": "{kind: llm_d, scorers: [{type: kv-cache-utilization-scorer, weight: 2}, "
                  "{type: queue-scorer, weight: 2}]}",
    "llm_d random": "{kind: llm_d, picker: random-picker}",
}
SCORER_TABLE = [*SCORER_PROFILES.items(), *((r, r) for r in ROUTERS)]  # (label, fleet.router)
SCORER_SCENARIO = "fleet4-shared-prefix"


@entry("fleet-router-comparison", "docs/fleet.md", cheap=False, seconds=60,
       runs=[run_key(SCORER_SCENARIO, f"fleet.router={r}") for _, r in SCORER_TABLE],
       command=f"radixsim run {SCORER_SCENARIO} --set fleet.router=R (R: each row's router; llm_d's profiles "
               "as listed above the table)")
def _fleet_router_comparison(ctx) -> str:
    rows, rates = [], None
    for label, r in SCORER_TABLE:
        s = ctx.runs(SCORER_SCENARIO, f"fleet.router={r}")
        rates = [st["rate"] for st in s["stages"]]
        f = s["fleet"]
        rows.append([label, f"{f['hit_rate']:.3f}", f"{s['ttft_mean_s']:.3f}", f"{f['ttft_p90_s']:.3f}",
                     *(f"{st['ttft_p90_s']:.3f}" for st in s["stages"]),
                     f"{f['load_balance']['requests']['max_over_mean']:.2f}"])
    return table(["router", "hit", "TTFT mean s", "TTFT p90 s", *(f"p90 @ {r:g}/s" for r in rates), "max/mean req"],
                 rows)


# docs/figure4.md ----------------------------------------------------------------------------
def _resolved(name: str, doc: str, scenario: str, key: str) -> None:
    """An inline figure of a scenario's resolved cache (config.yaml's `cache.KEY`, e.g. `l1_tokens: auto`)."""
    def render(ctx):
        from scenarios.scenario import load, resolve

        return f"{resolve(load(scenario), scenario).doc['cache'][key]:,}"
    entry(name, doc, cheap=True, seconds=1, block=False,
          command=f"radixsim run {scenario} (config.yaml: cache.{key})")(render)


for _name, _sc, _key in (("figure4-dsv4-l1", "fig4-dsv4-flash-l3", "l1_tokens"),
                         ("figure4-inkling-l1", "fig4-inkling-small-l3", "l1_tokens"),
                         ("figure4-dsv4-swa", "fig4-dsv4-flash-l3", "swa_tokens"),
                         ("figure4-inkling-swa", "fig4-inkling-small-l3", "swa_tokens"),
                         ("figure4-inkling-mamba", "fig4-inkling-small-l3", "mamba_slots"),
                         ("figure4-dsv4-l2", "fig4-dsv4-flash-l3", "l2_tokens"),
                         ("figure4-inkling-l2", "fig4-inkling-small-l3", "l2_tokens")):
    _resolved(_name, "docs/figure4.md", _sc, _key)
for _name, _sc, _key in (("figure6-dsv4-pro-l1", "fig6-dsv4-pro-b128-lru", "l1_tokens"),
                         ("figure6-dsv4-pro-l2", "fig6-dsv4-pro-b128-lru", "l2_tokens"),
                         ("figure6-qwen-l1", "fig6-qwen3.5-397b-b32-lru", "l1_tokens"),
                         ("figure6-qwen-l2", "fig6-qwen3.5-397b-b32-lru", "l2_tokens"),
                         ("figure6-qwen-mamba", "fig6-qwen3.5-397b-b32-lru", "mamba_slots")):
    _resolved(_name, "docs/figure6.md", _sc, _key)


FIG4 = [("DSV4 L1", "fig4-dsv4-flash-l1", 9400, "9.4K"), ("DSV4 L1+L2", "fig4-dsv4-flash-l2", 14300, "14.3K"),
        ("DSV4 L1+L2+L3", "fig4-dsv4-flash-l3", 145500, "145.5K, hit ~98%, TTFT < 9 s"),
        ("Inkling L1", "fig4-inkling-small-l1", 15500, "15.5K"),
        ("Inkling L1+L2", "fig4-inkling-small-l2", 21100, "21.1K"),
        ("Inkling L1+L2+L3", "fig4-inkling-small-l3", 67100, "67.1K, hit 96.8%, TTFT 1.23 s")]
# the seed's figure 4 (its effective input throughput per run), as docs/figure4.md quotes it


def _fig4_sets(name: str, kind: str) -> tuple:
    if kind == "operators":
        return ()
    if kind == "roofline":
        return ("cost.kind=roofline",)
    return ("cost.kind=roofline", f"cost.efficiency.mfu_prefill={0.04 if 'dsv4' in name else 0.06}")


FIG4_RUNS = [run_key(sc, *_fig4_sets(sc, k)) for _, sc, _, _ in FIG4 for k in ("operators", "cal", "roofline")]


def _secs(v: float) -> str:
    """A mean TTFT to three significant digits: 12.5, 0.590, 0.164."""
    return f"{v:.3g}" if v >= 1 else f"{v:.3f}"


@entry("figure4-table", "docs/figure4.md", cheap=False, seconds=240, runs=FIG4_RUNS,
       command="radixsim run fig4-* (the six catalog files); 'was cal.' with --set cost.kind=roofline --set "
               "cost.efficiency.mfu_prefill=0.04 (DSV4) / 0.06 (Inkling), 'was roofline' with --set cost.kind=roofline")
def _figure4(ctx) -> str:
    rows = []
    for label, sc, seed_tps, seed_text in FIG4:
        s = ctx.runs(sc)
        tier = sc.rsplit("-", 1)[1]
        split = [f"{s['hit_rate_device']:.3f}", f"{s['hit_rate_host']:.3f}" if tier != "l1" else "-",
                 f"{s['hit_rate_storage']:.3f}" if tier == "l3" else "-"]
        cal, roof = (ctx.runs(sc, *_fig4_sets(sc, k))["effective_input_tps"] for k in ("cal", "roofline"))
        rows.append([label, f"{s['hit_rate']:.3f} / {s['hit_rate_last10']:.3f}", " / ".join(split),
                     f"{_secs(s['ttft_mean_s'])} s", f"{s['effective_input_tps']:,.0f}", f"{cal:,.0f}", f"{roof:,.0f}",
                     seed_text, f"{s['effective_input_tps'] / seed_tps:.1f}x"])
    return table(["run", "hit rate (all / last 10 rounds)", "device / host / storage", "mean TTFT",
                  "eff. input tok/s", "was cal.", "was roofline", "seed", "ours / seed"], rows)


# docs/figure6.md ----------------------------------------------------------------------------
FIG6 = [("DSV4-Pro, batch 128", "fig6-dsv4-pro-b128", "device 42% -> 51%, TTFT -11.0%"),
        ("DSV4-Pro, batch 256", "fig6-dsv4-pro-b256", "TTFT -2.9%"),
        ("Qwen3.5-397B, batch 32", "fig6-qwen3.5-397b-b32", "device 5% -> 34%, TTFT -13.5%"),
        ("Qwen3.5-397B, batch 64", "fig6-qwen3.5-397b-b64", "device+host 58% -> 67%, TTFT -16.6%")]
# the seed's figure 6 as docs/figure6.md quotes it


def _arrow(a: float, b: float) -> str:
    """'0.417 -> **0.430**': the session value bold where it gains half a point or more."""
    bb = f"{b:.3f}"
    return f"{a:.3f} -> " + (f"**{bb}**" if b - a >= 0.005 else bb)


def _ttft_arrow(a: float, b: float) -> str:
    fmt = (lambda v: f"{v:.1f}") if max(a, b) >= 10 else (lambda v: f"{v:.3f}")
    pct = 100 * (b - a) / a
    p = "0%" if abs(pct) < 0.05 else f"{pct:+.1f}%"
    return f"{fmt(a)} -> {fmt(b)} s ({f'**{p}**' if pct <= -10 else p})"


@entry("figure6-table", "docs/figure6.md", cheap=False, seconds=600,
       runs=[run_key(f"{sc}-{p}") for _, sc, _ in FIG6 for p in ("lru", "session")],
       command="for f in $(radixsim scenarios | awk '/^fig6/ {print $1}'); do radixsim run $f; done")
def _figure6(ctx) -> str:
    rows = []
    for label, sc, seed in FIG6:
        a, b = ctx.runs(f"{sc}-lru"), ctx.runs(f"{sc}-session")
        dh = [x["hit_rate_device"] + x["hit_rate_host"] for x in (a, b)]
        rows.append([label, _arrow(a["hit_rate_device"], b["hit_rate_device"]), _arrow(*dh),
                     _ttft_arrow(a["ttft_mean_s"], b["ttft_mean_s"]), seed])
    return table(["configuration", "device hit LRU -> session", "device + host", "mean TTFT LRU -> session", "seed"],
                 rows)


# docs/policy_lab.md -------------------------------------------------------------------------
class Skipped(Exception):
    """An entry that cannot run here (it needs a trace that is not in the repository): its text is
    left as written and the run says so."""


# the real Mooncake conversation trace: fetched by hand, git ignores it (docs/policy_lab.md, Corpus)
CONVERSATION = "scenarios/data/conversation_trace.jsonl"
_LEADERBOARDS: dict = {}


def _conversation() -> Path:
    path = ROOT / CONVERSATION
    if not path.is_file():
        raise Skipped(f"{CONVERSATION} not present (fetch it: docs/policy_lab.md, Corpus)")
    return path


def _leaderboard(ctx, which: str) -> list:
    """The leaderboard rows, one run per process: "corpus" (the built-in corpus and its variants,
    without the conversation trace even when it is there) or "conversation" (that trace at 2M)."""
    if which not in _LEADERBOARDS:
        from radixsim.leaderboard import corpus, run_leaderboard

        if which == "corpus":
            sources = {n: o for n, o in corpus(None, 16).items() if n != "mooncake_conversation"}
            caps, cmd = None, "radixsim leaderboard"
        else:
            sources, caps = corpus([_conversation()], 16), [2_000_000]
            cmd = f"radixsim leaderboard {CONVERSATION} --capacities 2000000"
        if ctx.runs.verbose:
            print(f"running: {cmd} --jobs {ctx.runs.jobs}", file=sys.stderr)
        _LEADERBOARDS[which] = run_leaderboard(sources, capacities=caps, jobs=ctx.runs.jobs)
    return _LEADERBOARDS[which]


def _pct1(g) -> str:
    return "-" if g is None else f"{round(100 * g, 1) + 0.0:.1f}"  # no -0.0


def _best_online(by: dict, trace: str, cap: int) -> list:
    """The online policies (not lru, not belady-node or the bound) with the highest hit rate, ties all."""
    from radixsim.leaderboard import OFFLINE

    cands = {p: r for (t, c, p), r in by.items() if (t, c) == (trace, cap) and p not in ("lru", *OFFLINE)}
    top = max(r["hit_rate"] for r in cands.values())
    return sorted(p for p, r in cands.items() if r["hit_rate"] == top)


LB_CMD = "radixsim leaderboard --jobs 2 --out DIR (the built-in corpus and its variants)"


@entry("policy-lab-leaderboard", "docs/policy_lab.md", cheap=False, seconds=900, command=LB_CMD)
def _policy_lab_leaderboard(ctx) -> str:
    from radixsim.leaderboard import BOUND

    lb = _leaderboard(ctx, "corpus")
    by = {(r["trace"], r["capacity_tokens"], r["policy"]): r for r in lb}
    out = []
    for trace, cap in dict.fromkeys((r["trace"], r["capacity_tokens"]) for r in lb):
        h = {p: r["hit_rate"] for (t, c, p), r in by.items() if (t, c) == (trace, cap)}
        lru, old, new = h["lru"], h["belady-node"], h[BOUND]

        def gaps(p):
            o = (h[p] - lru) / (old - lru) if old - lru > 1e-3 else None
            return f"{_pct1(o)} -> {_pct1(by[(trace, cap, p)]['gap_closed'])}"

        best = _best_online(by, trace, cap)
        out.append([trace, f"{cap:,}", f"{100 * lru:.2f}", f"{100 * old:.2f}", f"{100 * new:.2f}",
                    f"{' / '.join(best)} {100 * h[best[0]]:.2f}", gaps(best[0]), gaps("session-next")])
    return table(["trace", "capacity", "LRU %", "old bound (belady-node) %", "true bound %", "best online",
                  "gap closed old -> new", "session-next old -> new"], out)


VARIANT_POLICIES = ("arc", "belady-node", "filo", "lru", "mru", "s3fifo", "session", "session-next", "slru",
                    "tlru", "bound")


@entry("policy-lab-variants", "docs/policy_lab.md", cheap=False, seconds=900,
       command=LB_CMD + "; its variant tables (leaderboard.txt), these policies, the two smallest capacities")
def _policy_lab_variants(ctx) -> str:
    from radixsim.leaderboard import variant_table

    lb = _leaderboard(ctx, "corpus")
    caps: dict = {}
    for r in lb:
        caps.setdefault(r["trace"], sorted({x["capacity_tokens"] for x in lb if x["trace"] == r["trace"]})[:2])
    rows = [r for r in lb if r["policy"] in VARIANT_POLICIES and r["capacity_tokens"] in caps[r["trace"]]]
    return "```\n" + variant_table(rows) + "\n```"


@entry("policy-lab-conversation", "docs/policy_lab.md", cheap=False, seconds=600,
       command=f"radixsim leaderboard {CONVERSATION} --capacities 2000000 --jobs 2 (needs the trace)")
def _policy_lab_conversation(ctx) -> str:
    from radixsim.leaderboard import format_table

    return "```\n" + format_table(_leaderboard(ctx, "conversation"), times=False) + "\n```"


@entry("policy-lab-conversation-best", "docs/policy_lab.md", cheap=False, seconds=600, block=False,
       command=f"radixsim leaderboard {CONVERSATION} --capacities 2000000 (best online policies; needs the trace)")
def _policy_lab_conversation_best(ctx) -> str:
    from radixsim.leaderboard import BOUND, OFFLINE

    lb = _leaderboard(ctx, "conversation")
    h = {r["policy"]: r for r in lb}
    online = sorted((r for r in lb if r["policy"] not in ("lru", *OFFLINE)), key=lambda r: -r["hit_rate"])
    a, b = online[:2]
    return (f"{a['policy']} {100 * a['hit_rate']:.2f} % ({_pct1(a['gap_closed'])} % of the "
            f"{100 * h['lru']['hit_rate']:.2f} -> {100 * h[BOUND]['hit_rate']:.2f} gap; {b['policy']} "
            f"{100 * b['hit_rate']:.2f} %, {_pct1(b['gap_closed'])} %); belady-node "
            f"{100 * h['belady-node']['hit_rate']:.2f} % ({_pct1(h['belady-node']['gap_closed'])} %)")


def _short(n: float) -> str:
    """Tokens to three significant digits: 219k, 1.58M, 21.9M."""
    for div, unit in ((1e6, "M"), (1e3, "k"), (1, "")):
        if n >= div:
            v = n / div
            return f"{v:.{max(0, 2 - len(str(int(v))) + 1)}f}{unit}"
    return str(n)


def _curve_check(opts, points: int, k: int, capacities=None, jobs: int = 1) -> dict:
    from radixsim.curve import run_curve

    return run_curve(opts, ["lru"], capacities, points, None, jobs, k)["check"]


def _curve_cells(chk: dict) -> str:
    """'8 (219k .. 21.9M tokens) | 0.36 points (curve 19.91 vs replay 19.55 % at 1.58M)'."""
    pts = chk["points"]
    w = max(pts, key=lambda p: abs(p["curve"] - p["replay"]))
    d = chk["max_diff_points"]
    diff = f"{d:.2f}" if d >= 0.01 else f"{d:.3f}"
    return (f"{len(pts)} ({_short(pts[0]['capacity_tokens'])} .. {_short(pts[-1]['capacity_tokens'])} tokens) | "
            f"{diff} points (curve {100 * w['curve']:.2f} vs replay {100 * w['replay']:.2f} % at "
            f"{_short(w['capacity_tokens'])})")


def _curve_entry(name, command, seconds, cheap, make):
    entry(name, "docs/policy_lab.md", cheap=cheap, seconds=seconds, block=False, command=command)(
        lambda ctx: _curve_cells(make(ctx)))


def _opts(**kw):
    from radixsim.replay import ReplayOptions

    return ReplayOptions(page_size=16, progress=False, **kw)


_curve_entry("policy-lab-curve-synthetic", "radixsim curve scenarios/data/mooncake_synthetic_trace.jsonl "
             "--page-size 16 --points 50 --check 8", 60, False,
             lambda ctx: _curve_check(_opts(trace=str(ROOT / "scenarios/data/mooncake_synthetic_trace.jsonl")),
                                      50, 8, jobs=ctx.runs.jobs))
_curve_entry("policy-lab-curve-conversation", f"radixsim curve {CONVERSATION} --page-size 16 --points 20 --check 6 "
             "(needs the trace)", 120, False,
             lambda ctx: _curve_check(_opts(trace=str(_conversation())), 20, 6, jobs=ctx.runs.jobs))
_curve_entry("policy-lab-curve-multiturn", "radixsim curve --workload multiturn --page-size 16 --points 10 --check 5",
             150, False, lambda ctx: _curve_check(_opts(workload="multiturn"), 10, 5, jobs=ctx.runs.jobs))

AGENTIC8 = (("num_sessions", 8), ("concurrency", 4))


@entry("policy-lab-curve-agentic", "docs/policy_lab.md", cheap=True, seconds=10, block=False,
       command="radixsim curve --workload agentic --set workload.num_sessions=8 --set workload.concurrency=4 "
               "--page-size 16 --capacities C1,C2,C3 --check 3 (C: the leaderboard's 10/25/50 % of the working set)")
def _policy_lab_curve_agentic(ctx) -> str:
    from radixsim.curve import lru_curve
    from radixsim.leaderboard import DEFAULT_FRACTIONS

    opts = _opts(workload="agentic", workload_set=AGENTIC8)
    ws = lru_curve(opts).pages * 16
    caps = sorted({max(16, int(ws * f) // 16 * 16) for f in DEFAULT_FRACTIONS})
    chk = _curve_check(opts, 0, 3, caps, ctx.runs.jobs)
    return (" / ".join(_short(p["capacity_tokens"]) for p in chk["points"]) + " | " +
            " / ".join(f"{100 * abs(p['curve'] - p['replay']):.1f}" for p in chk["points"]) + " points")


# docs/sources/attention_backends.md, docs/sources/clock_terms.md (renderers: benchmarks/regen_clock.py)
def _clock():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import regen_clock

    return regen_clock


@entry("attention-backend-curve", "docs/sources/attention_backends.md", cheap=True, seconds=1,
       command="sim/opdata/attention_backends.json (flashinfer, a100) against OperatorCostModel('Qwen3-8B', "
               "'a100-40gbx1', 1).breakdown(((n, c),)) per layer")
def _attention_backend_curve(ctx) -> str:
    return _clock().attention_backend_curve(ctx, table)


@entry("attention-backend-effect", "docs/sources/attention_backends.md", cheap=False, seconds=150,
       command="radixsim validate A1..A4 as mapped (engine.attention_backend triton, the runs' flag) and with "
               "the key removed (the model's own curve), seed 0")
def _attention_backend_effect(ctx) -> str:
    return _clock().attention_backend_effect(ctx, table)


# docs/figure7.md ----------------------------------------------------------------------------
def _fig7():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fig7_tree_core

    return fig7_tree_core


@entry("figure7-reductions", "docs/figure7.md", cheap=False, seconds=300,
       command="python benchmarks/fig7_tree_core.py (figure7.json reduction_pct)")
def _figure7_reductions(ctx) -> str:
    return _fig7().reduction_table()


@entry("figure7-tree-cpu", "docs/figure7.md", cheap=False, seconds=300,
       command="python benchmarks/fig7_tree_core.py (figure7.json tree_cpu_us_per_request)")
def _figure7_tree_cpu(ctx) -> str:
    return _fig7().cpu_table()


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
