"""Result files and run directories (issue 14, items 3 and 6): one writer with plain numbers;
a run directory holds exactly one complete run (stale files gone, an interrupted run leaves
the earlier one untouched); an unwritable or foreign target is refused before simulating."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from radixsim import results
from radixsim import run as run_mod
from radixsim.cli import main
from scenarios.scenario import from_file

SMALL = ["workload.num_clients=3", "workload.num_rounds=2", "workload.request_length=256",
         "workload.output_length=4", "cache.page_size=16", "engine.chunked_prefill_tokens=256",
         "cache.l1_tokens=4096"]
SETS = sum((["--set", s] for s in SMALL), [])
FILES = {"config.yaml", "requests.csv", "rounds.csv", "timeline.csv", "summary.json", "tree.json"}
TABLE = {"prefill": [[16, 0, 0.01], [4096, 0, 0.2], [16, 4096, 0.02], [4096, 4096, 0.3]],
         "decode": [[1, 64, 0.005], [64, 64, 0.01], [1, 8192, 0.01], [64, 8192, 0.03]]}


def run_cli(out, *extra):
    return main(["run", "quickstart", *SETS, "--out", str(out), "--no-progress", "--no-plots", *extra])


def snapshot(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in d.iterdir()}


def test_table_priced_run_writes_plain_numbers_that_plot_and_report_read(tmp_path, capsys):
    table = tmp_path / "T.json"
    table.write_text(json.dumps(TABLE))
    out = tmp_path / "run"
    assert run_cli(out, "--set", "cost.kind=table", "--set", f"cost.table={table}") == 0
    texts = {p.name: p.read_text() for p in out.iterdir()}
    assert set(texts) == FILES
    assert [n for n, t in texts.items() if re.search(r"np\.\w+\(", t)] == []
    row = texts["requests.csv"].splitlines()[1].split(",")
    assert float(row[6]) > 0  # finish_s: priced by the table (np.float64 before the one writer)
    capsys.readouterr()
    assert main(["plot", str(out), "--kind", "rounds", "--out", str(tmp_path / "plots")]) == 0
    assert main(["report", str(out), "--out", str(tmp_path / "report.html")]) == 0
    assert capsys.readouterr().err == ""
    assert (tmp_path / "plots" / "rounds.png").read_bytes()[:4] == b"\x89PNG"
    assert "<html" in (tmp_path / "report.html").read_text()


def test_the_writer_converts_numpy_scalars_and_refuses_anything_else(tmp_path):
    from radixsim.outputs import plain, write

    doc = {"a": np.float64(0.5), "b": np.int64(3), "c": np.bool_(True), "d": (np.float32(0.25), None, "x")}
    assert plain(doc) == {"a": 0.5, "b": 3, "c": True, "d": [0.25, None, "x"]}
    assert [type(v) for v in plain(doc).values()][:3] == [float, int, bool]
    write(tmp_path / "s.json", doc)
    assert json.loads((tmp_path / "s.json").read_text()) == {"a": 0.5, "b": 3, "c": True, "d": [0.25, None, "x"]}
    write(tmp_path / "r.csv", [{"x": np.float64(1.5), "y": np.bool_(False)}, [None, 7]], columns=["x", "y"])
    assert (tmp_path / "r.csv").read_text() == "x,y\n1.5,0\n,7\n"
    with pytest.raises(TypeError, match=r"a\.json\.a: ndarray value"):
        write(tmp_path / "a.json", {"a": np.arange(3)})
    with pytest.raises(TypeError, match=r"b\.csv: row 1: .*object"):
        write(tmp_path / "b.csv", [[object()]], columns=["x"])
    with pytest.raises(TypeError, match="Path value"):
        write(tmp_path / "c.yaml", {"p": tmp_path})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "s.json"]  # nothing half-written


def test_a_rerun_replaces_every_file_of_the_earlier_run(tmp_path):
    out = tmp_path / "run"
    assert run_cli(out) == 0
    for stale in ("report.html", "hit_rate_per_round.png", "ttft_per_round.png"):
        (out / stale).write_text("from an earlier run\n")
    first = snapshot(out)
    assert run_cli(out, "--set", "seed=7") == 0
    assert set(snapshot(out)) == FILES
    assert snapshot(out)["config.yaml"] != first["config.yaml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temporary directory left


def test_a_rerun_through_a_symlink_replaces_the_directory_it_points_to(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    assert run_cli(real) == 0
    (real / "report.html").write_text("from an earlier run\n")
    link.symlink_to(real)
    assert run_cli(link) == 0
    assert link.is_symlink() and set(snapshot(real)) == FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_replay_into_a_run_directory_leaves_only_replay_files(tmp_path):
    out = tmp_path / "run"
    assert run_cli(out) == 0
    trace = Path(__file__).resolve().parent.parent / "scenarios" / "data" / "mooncake_synthetic_trace.jsonl"
    assert main(["replay", str(trace), "--out", str(out), "--no-progress", "--capacity-tokens", "100000"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "requests.csv", "summary.json"]


def test_an_interrupted_run_leaves_the_earlier_run_untouched_or_nothing(tmp_path, monkeypatch):
    out = tmp_path / "run"
    assert run_cli(out) == 0
    before = snapshot(out)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(results, "write_summary", interrupted)  # after requests.csv and rounds.csv
    sc = from_file("quickstart", SMALL + ["seed=7"])
    with pytest.raises(KeyboardInterrupt):
        run_mod.run_scenario(sc, out, progress=False, plots=False)
    assert snapshot(out) == before
    with pytest.raises(KeyboardInterrupt):
        run_mod.run_scenario(sc, tmp_path / "new", progress=False, plots=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def _no_simulation(*a, **k):
    raise AssertionError("simulated before checking the output directory")


@pytest.mark.parametrize("case", ["parent_is_a_file", "target_is_a_file", "foreign_files"])
def test_a_bad_target_is_refused_in_one_line_before_simulating(tmp_path, monkeypatch, capsys, case):
    monkeypatch.setattr(run_mod, "simulate", _no_simulation)
    (tmp_path / "afile").write_text("x\n")
    out = {"parent_is_a_file": tmp_path / "afile" / "run", "target_is_a_file": tmp_path / "afile",
           "foreign_files": tmp_path / "mine"}[case]
    if case == "foreign_files":
        out.mkdir()
        (out / "notes.txt").write_text("keep me\n")
        (out / "summary.json").write_text("{}\n")
    assert run_cli(out) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    expected = {"parent_is_a_file": f"cannot write results there ({tmp_path / 'afile'} is not a directory)",
                "target_is_a_file": "not a directory; expected a result directory (new or an earlier run's)",
                "foreign_files": "holds files that are not radixsim results (notes.txt); "
                                 "expected a new or empty directory or an earlier run's"}[case]
    assert err[0] == f"radixsim run: quickstart: {out}: {expected}"
    assert sorted(p.name for p in tmp_path.iterdir()) == (["afile", "mine"] if case == "foreign_files" else ["afile"])
    if case == "foreign_files":
        assert (out / "notes.txt").read_text() == "keep me\n"


def test_result_dir_refuses_when_foreign_files_appear_during_the_run(tmp_path):
    from radixsim.outputs import OutputError, result_dir

    out = tmp_path / "run"
    with pytest.raises(OutputError, match=r"not radixsim results \(late.txt\)"):
        with result_dir(out) as tmp:
            (tmp / "summary.json").write_text("{}\n")
            out.mkdir()
            (out / "late.txt").write_text("x\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(p.name for p in out.iterdir()) == ["late.txt"]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_a_run_says_what_it_is_doing_on_a_terminal_only(tmp_path, monkeypatch):
    sc = from_file("quickstart", SMALL)
    for stream, shown in ((_Tty(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        run_mod.run_scenario(sc, tmp_path / "run", progress=True, plots=False)
        text = stream.getvalue()
        assert (f"radixsim: writing the results to {tmp_path / 'run'}\n" in text) is shown
        assert ("6/6" in text) is shown  # the simulation's progress bar: 6 requests
