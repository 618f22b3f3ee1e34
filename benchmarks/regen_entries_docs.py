"""regen_docs entries of README.md, docs/validation.md, docs/sources/clock_terms.md and
docs/store_model.md (registered on import, in this order; benchmarks/regen_docs.py runs them)."""
from __future__ import annotations

import re
import subprocess
import sys

from regen_core import ROOT, entry, fail, run_key, table


# README ------------------------------------------------------------------------------------
@entry("readme-commands", "README.md", cheap=True, seconds=1, block=False,
       command="python -m radixsim --help (its COMMAND list)")
def _readme_commands(ctx) -> str:
    from radixsim.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return ", ".join(sub.choices)


def _trace_requests() -> int:
    from scenarios.traces import JsonlTrace

    return sum(1 for r in JsonlTrace(ROOT / "scenarios/data/mooncake_synthetic_trace.jsonl")
               if not hasattr(r, "event"))


@entry("readme-trace-requests", "README.md", cheap=True, seconds=1, block=False,
       command="wc -l scenarios/data/mooncake_synthetic_trace.jsonl (requests of the bundled trace)")
def _readme_trace(ctx) -> str:
    return f"{_trace_requests():,}"


@entry("readme-fleet-requests", "README.md", cheap=True, seconds=1, block=False,
       command="3 x the bundled Mooncake trace's requests (benchmarks/bench_fleet.py --copies 3)")
def _readme_fleet_requests(ctx) -> str:
    return f"{3 * _trace_requests():,}"


_VLLM_RUNS = [run_key("vllm-quickstart"), run_key("quickstart", "cache.hicache_ratio=null")]  # engine.kind vllm, sglang


@entry("readme-vllm-quickstart", "README.md", cheap=True, seconds=8, block=False, runs=_VLLM_RUNS,
       command="radixsim run vllm-quickstart; radixsim run quickstart --set cache.hicache_ratio=null (hit_rate)")
def _readme_vllm_quickstart(ctx) -> str:
    return " against ".join(f"{ctx.runs(k[0], *k[1])['hit_rate']:.3f}" for k in _VLLM_RUNS)


_VLLM_L2_RUNS = [run_key("vllm-quickstart-l2"), run_key("quickstart")]  # vLLM's CPU offloading, SGLang's HiCache L2


@entry("readme-vllm-quickstart-l2", "README.md", cheap=True, seconds=8, block=False, runs=_VLLM_L2_RUNS,
       command="radixsim run vllm-quickstart-l2; radixsim run quickstart (hit_rate_device / hit_rate_host)")
def _readme_vllm_quickstart_l2(ctx) -> str:
    return " against ".join("{hit_rate_device:.3f} + {hit_rate_host:.3f}".format(**ctx.runs(k[0], *k[1]))
                            for k in _VLLM_L2_RUNS)


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
    return clock_renderers().clock_residual_after(ctx)


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


def clock_renderers():
    """benchmarks/regen_clock.py (the clock's and the attention backends' renderers)."""
    import regen_clock

    return regen_clock
