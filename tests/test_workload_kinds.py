"""Workload kinds are a registry (issue 16 item 4): a kind defined and registered in this file
alone (schema, build, smoke, replay with `register_workload_kind`; its simulator feed with
`sim.feeds.register_feed`) runs through `scenarios.scenario.resolve` ->
`radixsim.run.simulate`, shrinks for `--smoke`, and feeds `radixsim replay --workload`."""
from __future__ import annotations

import csv
from dataclasses import dataclass

import numpy as np
import pytest

from cache_core.engine_types import EngineRequest
from cache_core.records import TokenSeq
from radixsim import results
from radixsim.run import request_rows, simulate
from radixsim.cli import main
from scenarios.scenario import ScenarioError, resolve, smoke
from scenarios.workload_kinds import (ReplayHook, ReplayRequest, SessionClose, WorkloadSpec, register_workload_kind,
                                      unregister_workload_kind)
from sim.feeds import register_feed, unregister_feed


@dataclass(frozen=True)
class Burst(WorkloadSpec):
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


def smoke_burst(w: dict) -> None:
    w["requests"] = 1


@dataclass(frozen=True, kw_only=True)
class BurstConfig:  # the replay generator's knobs (`--set workload.KEY=VALUE`)
    requests: int = 3
    prompt_tokens: int = 256
    page_size: int = 1


def burst_items(cfg: BurstConfig, page_size: int, keyed: bool):
    """Session 7's requests, each the shared prompt plus its rid, then the session's close."""
    for rid in range(cfg.requests):
        prompt = np.arange(cfg.prompt_tokens + 1, dtype=np.int64)
        prompt[-1] = 10_000 + rid
        yield ReplayRequest(rid, 7, None, prompt, np.array([-1 - rid], dtype=np.int64))
    yield SessionClose(7)


BURST_SCHEMA = {"kind": ("multiturn", "workload_kind", "a registered workload kind"),
                "requests": (3, "int1", "an integer >= 1"), "prompt_tokens": (256, "int1", "an integer >= 1")}
BURST_REPLAY = ReplayHook(BurstConfig, lambda cfg: cfg, burst_items)


@pytest.fixture
def burst_kind():
    register_workload_kind("test-burst", BURST_SCHEMA, build_burst, smoke=smoke_burst, replay=BURST_REPLAY)
    register_feed("test-burst", feed_burst)
    yield
    unregister_feed("test-burst")
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


def test_a_kind_without_a_feed_or_with_a_build_that_is_no_workload_spec_is_refused(burst_kind):
    unregister_feed("test-burst")
    try:
        with pytest.raises(ValueError, match=r"^workload kind 'test-burst' has no simulator feed; expected one "
                                             r"registered with sim.feeds.register_feed \(registered: multiturn, "
                                             r"trace, azure, agentic, program, shared_prefix\)$"):
            simulate(resolve(_raw(requests=2)))
    finally:
        register_feed("test-burst", feed_burst)
    register_workload_kind("test-dict", BURST_SCHEMA, lambda w, ctx: dict(w))
    try:
        with pytest.raises(TypeError, match=r"^workload kind 'test-dict': its build returned a dict; expected a "
                                            r"scenarios.workload_kinds.WorkloadSpec$"):
            resolve({**_raw(), "workload": {"kind": "test-dict"}})
    finally:
        unregister_workload_kind("test-dict")


def test_an_unregistered_kind_is_refused():
    with pytest.raises(ScenarioError, match="workload.kind: got 'test-burst'; expected one of multiturn, trace"):
        resolve(_raw(), "s.yaml")


def test_a_registered_kind_has_its_smoke_size(burst_kind):
    raw = _raw(requests=40, prompt_tokens=128)
    small = smoke(raw)
    assert small["workload"] == {"kind": "test-burst", "requests": 1, "prompt_tokens": 128}
    assert raw["workload"]["requests"] == 40 and resolve(small).workload == Burst(1, 128)


def test_a_registered_kind_feeds_replay(burst_kind, tmp_path):
    out = tmp_path / "out"
    assert main(["replay", "--workload", "test-burst", "--set", "workload.requests=4", "--page-size", "64",
                 "--out", str(out), "--no-progress"]) == 0
    with open(out / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["rid"], r["session_id"], r["prompt_tokens"], r["cached_tokens"]) for r in rows] == [
        ("0", "7", "257", "0"), ("1", "7", "257", "256"), ("2", "7", "257", "256"), ("3", "7", "257", "256")]
    config = (out / "config.yaml").read_text()
    assert "workload:\n  kind: test-burst\n  requests: 4\n  prompt_tokens: 256\n  page_size: 64\n" in config


def test_replay_lists_the_kinds_with_a_replay_hook(burst_kind, capsys):
    with pytest.raises(SystemExit) as e:
        main(["replay", "--workload", "bogus", "--out", "x"])
    assert e.value.code == 2
    assert capsys.readouterr().err == ("radixsim replay: error: argument --workload: invalid choice: 'bogus' "
                                       "(choose from 'multiturn', 'agentic', 'shared_prefix', 'test-burst')\n")


def test_a_scenario_that_names_only_the_kind_runs_the_workload_configs_defaults():
    """`radixsim run` (the scenario schema) and `radixsim replay --workload` (the config
    dataclass) start from the same defaults: scenarios/schema.py reads the built-in kinds'
    defaults from their configs instead of keeping a copy that could drift."""
    from dataclasses import replace

    from scenarios.agentic import AgenticConfig
    from scenarios.workloads import MultiTurnConfig

    mt = resolve({"workload": {"kind": "multiturn"}}).workload
    assert mt == replace(MultiTurnConfig(), seed=0, page_size=64)  # the scenario's seed and page size
    ag = resolve({"workload": {"kind": "agentic"}}).workload
    assert ag.config == replace(AgenticConfig(), seed=0)


BUILT_IN_KINDS = ["multiturn", "trace", "azure", "agentic", "program", "shared_prefix"]


@pytest.mark.parametrize("first", ["scenarios.schema", "scenarios.workload_kinds", "scenarios.scenario"])
def test_the_registry_has_every_built_in_kind_whatever_is_imported_first(first):
    """Issue 30: `import scenarios.schema` alone left the registry empty (the built-in kinds were
    registered only as a side effect of importing scenario.py). In a fresh interpreter."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = (f"import {first}\nimport json\nfrom scenarios import schema, workload_kinds as w\n"
            "print(json.dumps([w.workload_kind_names(), w.replay_kind_names(), w.workload_kind('trace').name]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert json.loads(out.stdout) == [BUILT_IN_KINDS, ["multiturn", "agentic", "shared_prefix"], "trace"]
