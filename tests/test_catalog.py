"""Every catalog scenario runs (at --smoke size) so that none can rot, and lists in `radixsim scenarios`."""
from __future__ import annotations

import json

import pytest

from radixsim.cli import main
from scenarios.scenario import catalog_names, from_file, load, smoke


@pytest.mark.parametrize("name", catalog_names())
def test_catalog_scenario_runs_at_smoke_size(name, tmp_path):
    out = tmp_path / name
    assert main(["run", name, "--smoke", "--out", str(out), "--no-plots", "--no-progress"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["requests"] > 0 and s["rejected"] == 0
    assert s["duration_s"] > 0 and s["effective_input_tps"] > 0


def test_smoke_shrinks_only_the_workload():
    raw = load("fig4-dsv4-flash-l3")
    small = smoke(raw)
    assert (small["workload"]["num_clients"], small["workload"]["num_rounds"]) == (6, 3)
    assert {k: v for k, v in small.items() if k != "workload"} == {k: v for k, v in raw.items() if k != "workload"}
    full, tiny = from_file("fig4-dsv4-flash-l3"), from_file("fig4-dsv4-flash-l3", smoke_run=True)
    assert tiny.cache == full.cache and tiny.engine == full.engine
    assert raw["workload"]["num_clients"] == 48  # the file's mapping is untouched
