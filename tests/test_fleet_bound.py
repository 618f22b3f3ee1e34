"""The fleet's upper reference (issue 27): ``hit_rate_bound`` in fleet.json, the prompt tokens
whose whole-page prefix some other request's tokens contain (`Fleet.hit_bound`). No router may
beat it: checked for every router on every fleet scenario of the catalog at smoke size, and
exactly on a constructed trace. (The router once called `oracle`, now `cache_aware_exact`, is
no such bound: cache_aware beat it on fleet-agentic-pd-4p4d.)"""
from __future__ import annotations

import copy
import json

import pytest

from fleet.routers import ROUTERS
from radixsim.fleet_run import fleet_rows, simulate_fleet
from radixsim.run import run_scenario
from scenarios.scenario import catalog_names, from_file, resolve

FLEETS = [n for n in catalog_names() if from_file(n).doc.get("fleet")]


def test_the_catalog_has_these_fleet_scenarios():
    assert FLEETS == ["fleet-agentic-colocated-8", "fleet-agentic-pd-4p4d", "fleet-dsv4-flash-dp1",
                      "fleet-dsv4-flash-dp8", "fleet16-agentic", "fleet16-multiturn", "fleet4-shared-prefix",
                      "fleet4-shared-prefix-vllm"]


@pytest.mark.parametrize("name", FLEETS)
def test_no_router_beats_the_hit_bound_on_a_catalog_fleet(name):
    for router in ROUTERS:
        f, *_ = simulate_fleet(from_file(name, [f"fleet.router={router}"], smoke_run=True))
        rows = fleet_rows(f)
        cached, prompt = sum(r["cached_tokens"] for r in rows), sum(r["prompt_tokens"] for r in rows)
        assert len(f.seq_keys) == len(rows) > 0
        assert cached <= f.hit_bound() <= prompt, (name, router)


def test_the_hit_bound_of_two_requests_sharing_32_pages(tmp_path):
    """A: 32 pages (+ 4 output tokens); B: A's 32 pages + 2 new ones. Each has 32 prompt pages
    that the other holds (A's counted as if B came first: the bound is loose there), B's last
    two pages nobody else holds: 64 pages of 66. On one engine B hits A's 32 pages."""
    path = tmp_path / "two.jsonl"
    lines = [{"timestamp": 0, "hash_ids": list(range(32)), "output_length": 4},
             {"timestamp": 20000, "hash_ids": list(range(32)) + [100, 101], "output_length": 4}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    raw = {"name": "bound", "seed": 3, "model": "qwen3-32b", "hardware": "h200x1",
           "cache": {"page_size": 64, "l1_tokens": 200_000, "hicache_ratio": 2},
           "workload": {"kind": "trace", "path": str(path), "block_size": 64}, "fleet": {"engines": 1}}
    f, *_ = simulate_fleet(resolve(copy.deepcopy(raw), "test"))
    assert f.hit_bound() == 64 * 64
    assert [r["cached_tokens"] for r in fleet_rows(f)] == [0, 32 * 64]
    lines[1]["hash_ids"] = [200] + list(range(32))  # B now starts elsewhere: no prefix of it is shared
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    s = run_scenario(resolve(copy.deepcopy(raw), "test"), tmp_path / "out", progress=False, plots=False)
    assert s["fleet"]["hit_rate_bound"] == 0.0 and s["hit_rate"] == 0.0
    on_disk = json.loads((tmp_path / "out" / "fleet.json").read_text())
    assert on_disk["hit_rate_bound"] == 0.0
