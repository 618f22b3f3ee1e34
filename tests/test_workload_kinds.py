"""Workload kinds are a registry (issue 16 item 4): a kind defined and registered in this file
alone (schema, build, feed) runs through `scenarios.scenario.resolve` -> `radixsim.run.simulate`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from cache_core.engine_types import EngineRequest
from cache_core.records import TokenSeq
from radixsim import results
from radixsim.run import request_rows, simulate
from scenarios.scenario import ScenarioError, resolve
from scenarios.workload_kinds import register_workload_kind, unregister_workload_kind


@dataclass(frozen=True)
class Burst:
    requests: int
    prompt_tokens: int


def build_burst(w: dict, ctx) -> Burst:
    if w["prompt_tokens"] % ctx.page_size:
        raise ScenarioError(f"{ctx.where}: workload.prompt_tokens: expected a multiple of the page size")
    return Burst(w["requests"], w["prompt_tokens"])


def feed_burst(env, eng, spec: Burst):
    """Requests one second apart, all with the same prompt."""
    from sim.simulator import timed_arrivals

    prompt = np.arange(spec.prompt_tokens, dtype=np.int64)

    def items():
        for rid in range(spec.requests):
            yield float(rid), EngineRequest(rid=rid, session_id=None, prompt=prompt, output_length=1, arrival_s=0.0,
                                     seq=TokenSeq(prompt))

    return timed_arrivals(env, eng, items()), spec.requests


BURST_SCHEMA = {"kind": ("multiturn", "workload_kind", "a registered workload kind"),
                "requests": (3, "int1", "an integer >= 1"), "prompt_tokens": (256, "int1", "an integer >= 1")}


@pytest.fixture
def burst_kind():
    register_workload_kind("test-burst", BURST_SCHEMA, build_burst, feed_burst)
    yield
    unregister_workload_kind("test-burst")


def _raw(**workload):
    return {"seed": 1, "model": "qwen3-32b", "hardware": "h200x1",
            "cache": {"page_size": 64, "l1_tokens": 4096}, "workload": {"kind": "test-burst", **workload}}


def test_a_registered_kind_runs_through_scenario_and_simulation(burst_kind):
    sc = resolve(_raw(requests=4))
    assert sc.workload == Burst(4, 256) and sc.workload_kind == "test-burst"
    eng, env, _, _ = simulate(sc)
    rows = request_rows(eng)
    assert [r["rid"] for r in rows] == [0, 1, 2, 3]
    assert [r["cached_tokens"] for r in rows] == [0, 192, 192, 192]  # the shared prompt, whole pages, last kept out
    assert results.totals(rows, [])["requests"] == 4


def test_a_registered_kind_has_its_keys_and_errors(burst_kind):
    with pytest.raises(ScenarioError, match="workload.prompt_tokens: expected a multiple of the page size"):
        resolve(_raw(prompt_tokens=100), "s.yaml")
    with pytest.raises(ScenarioError, match="workload.num_clients: unknown key"):
        resolve(_raw(num_clients=3), "s.yaml")


def test_an_unregistered_kind_is_refused():
    with pytest.raises(ScenarioError, match="workload.kind: got 'test-burst'; expected one of multiturn, trace"):
        resolve(_raw(), "s.yaml")
