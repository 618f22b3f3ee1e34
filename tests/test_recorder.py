"""Result rows and summaries of simulated runs come from sim/recorder.py, and the mode is what
the data plane says it is (issue 16 item 4: no `hasattr(eng.dataplane, "pools")` sniffing)."""
from __future__ import annotations

import dataclasses

from radixsim.run import simulate
from scenarios.scenario import from_file
from sim.recorder import request_rows, round_table, summarise, timeline_rows


def _run():
    sc = from_file("quickstart", smoke_run=True)
    eng, env, _, _ = simulate(sc)
    return eng, env


def test_summary_mode_and_bytes_come_from_the_data_plane():
    eng, env = _run()
    rows = request_rows(eng)
    s = summarise(eng, rows, round_table(rows), env.now)
    assert s["mode"] == "sim" and s["requests"] == len(rows) > 0
    assert set(s["bytes_per_link"]) == {"L2->L1", "L1->L2"}

    @dataclasses.dataclass
    class Plane:  # a torch data plane as the recorder sees it (no pools needed)
        mode: str = "torch"
        bytes_moved: dict = dataclasses.field(default_factory=lambda: {"L1->L2": 7, "L2->L1": 3})

    eng.dataplane = Plane()
    t = summarise(eng, rows, round_table(rows), env.now)
    assert (t["mode"], t["bytes_per_link"]) == ("torch", {"L1->L2": 7, "L2->L1": 3})
    header, trows = timeline_rows(eng, s["duration_s"])
    assert header[:3] == ["t_s", "running", "waiting"] and len(trows) > 0
