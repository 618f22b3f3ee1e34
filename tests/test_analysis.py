"""The analysis layer: result directories -> Runs, metrics, figures, reports, the SGLang
bench_multiturn reader, tree snapshots and the `plot` / `report` commands.

Fixture runs are real: two small `radixsim run quickstart` configurations (L1 + host L2, and
L1 only), a clockless multi-turn replay and a policy x capacity comparison, made once per
module. Figures are checked by reading their artists back (line y data, bar heights, texts,
scatter offsets), not by pixels; files by their PNG/SVG signatures.
"""
from __future__ import annotations

import json
import shutil

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from analysis import figures, plots
from analysis.external import load_bench_multiturn, read_log
from analysis.load import Run, load_run, load_runs
from analysis.metrics import (effective_input_tps, error_table, evictions, hit_rate_by_tier, latency_percentiles,
                              link_bytes, link_utilisation, match_ttft, per_round, time_breakdown)
from analysis.report import fmt_rate, fmt_s, write_report
from analysis.style import OPT_LABEL, colour_of
from cache_core import (CacheConfig, MambaConfig, RadixCache, ReplayStepper, SwaConfig, TokenSeq)
from cache_core.snapshot import snapshot, write_snapshot
from cache_core.tiers import TierConfig
from radixsim import cli, report_cli

QUICK = ["--set", "workload.num_rounds=3", "--set", "workload.num_clients=4", "--set", "cache.l1_tokens=10000",
         "--no-plots", "--no-progress"]
REPLAY = ["--workload", "multiturn", "--set", "workload.num_clients=4", "--set", "workload.num_rounds=3",
          "--page-size", "16", "--no-progress"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("analysis")
    d = {"l2": base / "quick-l2", "l1": base / "quick-l1", "replay": base / "replay", "cmp": base / "cmp"}
    assert cli.main(["run", "quickstart", *QUICK, "--out", str(d["l2"])]) == 0
    assert cli.main(["run", "quickstart", *QUICK, "--set", "cache.hicache_ratio=null", "--out", str(d["l1"])]) == 0
    assert cli.main(["replay", *REPLAY, "--capacity-tokens", "40000", "--out", str(d["replay"])]) == 0
    assert cli.main(["replay", *REPLAY, "--policy", "lru,belady-node", "--capacity-tokens", "20000,40000,80000",
                     "--out", str(d["cmp"])]) == 0
    return d


@pytest.fixture(scope="module")
def runs(dirs):
    return {k: load_run(v) for k, v in dirs.items() if k != "cmp"}


def csv_col(path, col) -> np.ndarray:
    return pd.read_csv(path)[col].to_numpy(dtype=float)


def is_png(path) -> bool:
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and mpimg.imread(path).shape[0] > 10


def is_svg(path) -> bool:
    return path.stat().st_size > 0 and b"<svg" in path.read_bytes()[:2000]


# ---------------------------------------------------------------------------------------------
# loading and metrics
# ---------------------------------------------------------------------------------------------
def test_load_run_reads_every_file(dirs, runs):
    a, rep = runs["l2"], runs["replay"]
    assert (a.mode, a.name, a.path) == ("sim", "quickstart", dirs["l2"])
    assert a.summary == json.loads((dirs["l2"] / "summary.json").read_text())
    assert a.config["cache"]["l1_tokens"] == 9984 and a.config["cache"]["hicache_ratio"] == 2  # floored to pages
    assert len(a.requests) == 12 and list(a.rounds["round"]) == [1, 2, 3]
    assert a.timeline is not None and "util_L2_to_L1" in a.timeline.columns and a.tree["nodes"]
    assert rep.mode == "replay" and rep.timeline is None and rep.requests["ttft_s"].isna().all()
    # two runs named "quickstart": labels fall back to the directory names
    assert [r.label for r in load_runs([dirs["l2"], dirs["l1"]])] == ["quick-l2", "quick-l1"]
    assert [r.label for r in load_runs([dirs["l2"], dirs["l1"]], ["A", "B"])] == ["A", "B"]


def _broken(tmp_path, src, name, text=None):
    d = tmp_path / name
    shutil.copytree(src, d)
    return d


@pytest.mark.parametrize("case, fragment", [
    ("missing_dir", "no such result directory"),
    ("a_file", "not a directory"),
    ("no_summary", "summary.json: missing"),
    ("bad_json", "summary.json: not valid JSON"),
    ("json_list", "summary.json: expected the run's summary (a JSON object)"),
    ("bad_cell", "requests.csv:3: column 'prompt_tokens': expected a number"),
    ("no_column", "requests.csv: missing column(s) cached_tokens"),
    ("bad_yaml", "config.yaml:2: not valid YAML"),
    ("empty_csv", "rounds.csv: empty file"),
])
def test_load_run_errors_name_the_file_in_one_line(dirs, tmp_path, case, fragment):
    d = tmp_path / "run"
    shutil.copytree(dirs["l2"], d)
    if case == "missing_dir":
        d = tmp_path / "nope"
    elif case == "a_file":
        d = d / "summary.json"
    elif case == "no_summary":
        (d / "summary.json").unlink()
    elif case == "bad_json":
        (d / "summary.json").write_text("{\"requests\": 12,")
    elif case == "json_list":
        (d / "summary.json").write_text("[1, 2]")
    elif case == "bad_cell":
        lines = (d / "requests.csv").read_text().splitlines()
        cols = lines[2].split(",")
        cols[11] = "many"
        lines[2] = ",".join(cols)
        (d / "requests.csv").write_text("\n".join(lines) + "\n")
    elif case == "no_column":
        df = pd.read_csv(d / "requests.csv").drop(columns=["cached_tokens"])
        df.to_csv(d / "requests.csv", index=False)
    elif case == "bad_yaml":
        (d / "config.yaml").write_text("mode: [sim\n")
    elif case == "empty_csv":
        (d / "rounds.csv").write_text("")
    with pytest.raises(ValueError) as e:
        load_run(d)
    msg = str(e.value)
    assert fragment in msg and "\n" not in msg


@pytest.mark.parametrize("key", ["l2", "l1", "replay"])
def test_per_round_recomputed_from_requests_equals_rounds_csv(runs, key):
    r = runs[key]
    written = per_round(r)
    again = per_round(Run(name="x", label="x", config={}, summary={}, requests=r.requests))
    pd.testing.assert_frame_equal(again, written[again.columns].astype(float), check_exact=False, rtol=1e-13)
    assert list(written["hit_rate"]) == list(csv_col(r.path / "rounds.csv", "hit_rate"))


def test_metrics_agree_with_the_summary(runs):
    a = runs["l2"]
    s = a.summary
    keys = ("hit_rate", "hit_rate_device", "hit_rate_host", "hit_rate_storage")
    assert hit_rate_by_tier(a) == {k: s[k] for k in keys}
    assert s["hit_rate_host"] > 0
    bare = Run(name="x", label="x", config={}, summary={}, requests=a.requests)
    assert hit_rate_by_tier(bare)["hit_rate_host"] == pytest.approx(s["hit_rate_host"], rel=1e-15)
    assert effective_input_tps(a) == s["effective_input_tps"]
    assert effective_input_tps(bare) == pytest.approx(s["effective_input_tps"], rel=1e-12)
    assert effective_input_tps(runs["replay"]) is None
    lat = latency_percentiles(a)
    for col, key in (("mean", "ttft_mean_s"), ("p50", "ttft_p50_s"), ("p90", "ttft_p90_s"), ("p99", "ttft_p99_s")):
        assert lat.loc["ttft_s", col] == pytest.approx(s[key], rel=1e-12)
    assert lat.loc["tpot_s", "mean"] == pytest.approx(s["tpot_mean_s"], rel=1e-12)
    assert lat.loc["e2e_s", "p50"] == pytest.approx(s["e2e_p50_s"], rel=1e-12)
    assert link_bytes(a) == s["bytes_per_link"] and link_bytes(a)["L1->L2"] > 0
    util = link_utilisation(a)
    assert list(util.columns) == ["t_s", "L2->L1", "L1->L2"]  # no L3 configured: its links left out
    assert list(util["L1->L2"]) == list(a.timeline["util_L1_to_L2"])
    ev = evictions(a)
    assert {(r.component, r.tier): r.amount for r in ev.itertuples()} == \
        {(c, t): v for c, tiers in s["evictions"].items() for t, v in tiers.items()}
    tb = time_breakdown(a)
    assert len(tb) == 12
    assert np.allclose(tb["queue_s"] + tb["load_s"] + tb["compute_s"], tb["ttft_s"], rtol=1e-12)
    assert tb["queue_s"].mean() == pytest.approx(s["queue_mean_s"], rel=1e-12)
    assert time_breakdown(runs["replay"]).empty


# ---------------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------------
def test_rounds_figure_lines_are_the_rounds_csv_columns(dirs, runs, tmp_path):
    fig = figures.rounds_figure([runs["l2"], runs["l1"], runs["replay"]], tmp_path / "rounds")
    ttft_ax, hit_ax = fig.axes[:2]
    assert [ln.get_label() for ln in ttft_ax.lines] == ["quick-l2", "quick-l1"]  # replay: no TTFT line
    assert len({ln.get_color() for ln in hit_ax.lines}) == 3
    for ln, key in zip(ttft_ax.lines, ("l2", "l1")):
        assert list(ln.get_ydata()) == list(csv_col(dirs[key] / "rounds.csv", "ttft_mean_s"))
    for ln, key in zip(hit_ax.lines, ("l2", "l1", "replay")):
        assert list(ln.get_ydata()) == list(csv_col(dirs[key] / "rounds.csv", "hit_rate"))
        assert list(ln.get_xdata()) == [1, 2, 3]
    assert ttft_ax.get_ylabel() == "mean TTFT (s)" and hit_ax.get_xlabel() == "round"
    assert is_png(tmp_path / "rounds.png") and is_svg(tmp_path / "rounds.svg")


def test_plot_rounds_and_plot_run_keep_their_signatures(dirs, tmp_path):
    paths = plots.plot_rounds([dirs["l2"], dirs["l1"]], tmp_path, labels=["L1+L2", "L1"])
    assert [p.name for p in paths] == ["ttft_per_round.png", "hit_rate_per_round.png"]
    assert all(is_png(p) for p in paths)
    run_copy = tmp_path / "copy"
    shutil.copytree(dirs["l1"], run_copy)
    assert [p.name for p in plots.plot_run(run_copy)] == ["ttft_per_round.png", "hit_rate_per_round.png"]


def test_fig6_bars_and_ttft_change(runs, tmp_path):
    rs = load_runs([runs["l1"].path, runs["l2"].path], ["L1", "L1+L2"])
    fig = figures.fig6_figure(rs, tmp_path / "fig6")
    hit_ax, t_ax = fig.axes[:2]
    heights = [p.get_height() for p in hit_ax.patches]
    dev = [r.summary["hit_rate_device"] for r in rs]
    host = [r.summary["hit_rate_host"] for r in rs]
    assert heights == dev + host  # no storage: two stacks of two bars
    assert [p.get_y() for p in hit_ax.patches[2:]] == dev  # host on top of device
    assert hit_ax.patches[2].get_facecolor()[:3] == pytest.approx((0x9E / 255,) * 3)  # grey
    assert [p.get_height() for p in t_ax.patches] == [r.summary["ttft_mean_s"] for r in rs]
    base, other = (r.summary["ttft_mean_s"] for r in rs)
    expected = f"{100 * (other - base) / base:+.1f}%"
    assert [t.get_text() for t in t_ax.texts] == ["baseline", expected]
    # one colour per label across figures
    assert hit_ax.patches[1].get_facecolor()[:3] == pytest.approx(
        tuple(int(colour_of("L1+L2")[i:i + 2], 16) / 255 for i in (1, 3, 5)))
    rounds = figures.rounds_figure(rs)
    assert rounds.axes[0].lines[1].get_color() == colour_of("L1+L2")
    assert is_png(tmp_path / "fig6.png") and is_svg(tmp_path / "fig6.svg")


def test_fig6_groups_have_their_own_baseline(runs):
    rs = load_runs([runs["l1"].path, runs["l2"].path, runs["l2"].path, runs["l1"].path], ["a", "b", "c", "d"])
    t = [r.summary["ttft_mean_s"] for r in rs]
    fig = figures.fig6_figure(rs, group=2)
    texts = [x.get_text() for x in fig.axes[1].texts]
    assert texts == ["baseline", f"{100 * (t[1] - t[0]) / t[0]:+.1f}%", "baseline", f"{100 * (t[3] - t[2]) / t[2]:+.1f}%"]


def test_plot_fig6_prints_one_ttft_change_per_pair(runs, tmp_path, capsys):
    a, b = runs["l1"].path, runs["l2"].path
    t1, t2 = runs["l1"].summary["ttft_mean_s"], runs["l2"].summary["ttft_mean_s"]
    rc, out, err = run_cmd(capsys, ["plot", str(a), str(b), str(b), str(a), "--kind", "fig6", "--group", "2",
                                    "--labels", "a", "b", "c", "d", "--out", str(tmp_path)])
    change = (f"{100 * (t2 - t1) / t1:+.1f}%", f"{100 * (t1 - t2) / t2:+.1f}%")
    assert (rc, err) == (0, "")
    assert out.splitlines() == [
        f"fig6 b: TTFT {change[0]} vs a ({t2:.3f} s vs {t1:.3f} s)",
        f"fig6 d: TTFT {change[1]} vs c ({t1:.3f} s vs {t2:.3f} s)",
        str(tmp_path / "fig6.png"), str(tmp_path / "fig6.svg")]


def test_policy_figure_draws_opt_dashed(dirs, tmp_path):
    cmp = pd.read_csv(dirs["cmp"] / "comparison.csv")
    fig = figures.policy_figure(dirs["cmp"], tmp_path / "policy")
    ax = fig.axes[0]
    by = {ln.get_label(): ln for ln in ax.lines}
    assert set(by) == {"lru", OPT_LABEL}
    assert by[OPT_LABEL].get_linestyle() == "--" and by["lru"].get_linestyle() == "-"
    opt = cmp[cmp.policy == "belady-node"].sort_values("capacity_tokens")
    assert list(by[OPT_LABEL].get_ydata()) == list(opt["hit_rate"])
    assert list(by[OPT_LABEL].get_xdata()) == list(opt["capacity_tokens"].astype(float))
    # the same from the comparison's result directories
    again = figures.policy_figure([dirs["cmp"] / d for d in cmp["dir"]]).axes[0]
    assert {ln.get_label(): list(ln.get_ydata()) for ln in again.lines} == \
        {k: list(v.get_ydata()) for k, v in by.items()}
    assert is_png(tmp_path / "policy.png")


def test_capacity_line_and_heatmap(tmp_path):
    df = pd.DataFrame({"cache.l1_tokens": [4000, 1000, 2000, 1000, 2000, 4000],
                       "cache.policy": ["lru", "lru", "lru", "session", "session", "session"],
                       "hit_rate": [0.5, 0.1, 0.3, 0.2, 0.4, 0.6], "hit_rate_ci95": [0.01] * 6})
    df.to_csv(tmp_path / "sweep.csv", index=False)
    fig = figures.capacity_figure(tmp_path / "sweep.csv", "cache.l1_tokens", group="cache.policy")
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines if not ln.get_label().startswith("_")}
    assert list(lines["cache.policy=lru"].get_ydata()) == [0.1, 0.3, 0.5]
    assert list(lines["cache.policy=session"].get_xdata()) == [1000, 2000, 4000]
    heat = figures.capacity_figure(df, "cache.l1_tokens", y="cache.policy", out=tmp_path / "heat")
    assert heat.axes[0].images[0].get_array().tolist() == [[0.1, 0.3, 0.5], [0.2, 0.4, 0.6]]
    assert is_png(tmp_path / "heat.png")
    with pytest.raises(ValueError, match="x key 'cache.nope': not in the sweep"):
        figures.capacity_figure(df, "cache.nope")


def test_timeline_panels(runs, tmp_path):
    a = runs["l2"]
    fig = figures.timeline_figure(a, tmp_path / "timeline")
    req_ax, link_ax, occ_ax = fig.axes[:3]
    assert [ln.get_label() for ln in req_ax.lines] == ["running", "waiting"]
    assert list(req_ax.lines[1].get_ydata()) == list(a.timeline["waiting"])
    assert [ln.get_label() for ln in link_ax.lines] == ["L2->L1", "L1->L2"]
    assert [ln.get_label() for ln in occ_ax.lines] == ["L1", "L2"]  # no L3 configured: left out
    assert list(occ_ax.lines[1].get_ydata()) == list(a.timeline["l2_used_tokens"])
    assert occ_ax.get_xlabel() == "simulated time (s)"
    with pytest.raises(ValueError, match="no timeline.csv"):
        figures.timeline_figure(runs["replay"])


def test_simhw_scatter_and_exact_error_table(runs, tmp_path):
    def run(rids, ttfts, label):
        req = pd.DataFrame({"rid": rids, "ttft_s": ttfts, "rejected": 0, "prompt_tokens": 1, "cached_tokens": 0})
        return Run(name=label, label=label, config={}, summary={}, requests=req, mode="sim")

    hw = run([0, 1, 2, 3, 9], [1.0, 2.0, 4.0, 0.5, 7.0], "hw")
    sim = run([3, 2, 1, 0, 5], [0.5, 6.0, 1.5, 1.25, 3.0], "sim")
    fig, err = figures.simhw_figure(sim, hw, tmp_path / "simhw")
    assert err["n"] == 4 and err["mean_abs_error_s"] == 0.6875 and err["mean_rel_error"] == 0.25
    assert err["p90_rel_error"] == pytest.approx(0.425, abs=1e-15)  # sorted rel errors 0, .25, .25, .5
    ax = fig.axes[0]
    assert ax.collections[0].get_offsets().tolist() == [[1.0, 1.25], [2.0, 1.5], [4.0, 6.0], [0.5, 0.5]]
    assert [ln.get_label() for ln in ax.lines] == ["y = x"]
    assert list(ax.lines[0].get_xdata()) == list(ax.lines[0].get_ydata())
    assert error_table(match_ttft(sim, hw)) == err
    # per round, two real runs
    _, by_round = figures.simhw_figure(runs["l2"], runs["l1"], by="round")
    assert by_round["n"] == 3


# ---------------------------------------------------------------------------------------------
# SGLang bench_multiturn logs
# ---------------------------------------------------------------------------------------------
def _summary(rate, ttft, hit):
    return {"total_requests": 12, "request_rate": rate, "average_prompt_len": 4160.0, "average_output_len": 64.0,
            "p90_prompt_len": 6272, "p99_prompt_len": 6272, "p90_output_len": 64, "p99_output_len": 64,
            "average_ttft": ttft, "p90_ttft": 5.5, "p99_ttft": 8.0, "median_ttft": 1.875, "max_ttft": 8.0,
            "average_latency": 4.25, "p90_latency": 7.25, "p99_latency": 9.5, "median_latency": 3.5,
            "max_latency": 9.5, "input_token_throughput": 2600.0, "output_token_throughput": 40.0,
            "throughput": 0.625, "cache_hit_rate": hit}


BENCH_LINES = [  # what bench_multiturn.py appends: one line per request rate of the auto-run
    {"timestamp": "2026-11-02T10:00:00.000001", "tag": "hicache", "summary": _summary(16, 2.5, 0.125),
     "round": {"round_0": {"average_ttft": 0.875, "cache_hit_rate": 0.0, "request_count": 4},
               "round_1": {"average_ttft": 2.125, "cache_hit_rate": 0.25, "request_count": 4},
               "round_2": {"average_ttft": 4.5, "cache_hit_rate": 0.125, "request_count": 4},
               "round_3": {"average_ttft": 0, "cache_hit_rate": 0, "request_count": 0}}},
    {"timestamp": "2026-11-02T10:05:00.000001", "tag": "hicache", "summary": _summary(8, 2.0, 0.25)},
]


@pytest.fixture
def bench_log(tmp_path):
    p = tmp_path / "performance_metrics.jsonl"
    p.write_text("".join(json.dumps(rec) + "\n" for rec in BENCH_LINES))
    return p


def test_bench_multiturn_reader_parses_the_log_exactly(bench_log):
    assert len(read_log(bench_log)) == 2
    run = load_bench_multiturn(bench_log, index=0)
    assert run.mode == "sglang" and run.requests is None and run.label == "SGLang hicache"
    s = run.summary
    assert (s["requests"], s["hit_rate"], s["ttft_mean_s"], s["ttft_p50_s"], s["ttft_p90_s"], s["ttft_p99_s"],
            s["e2e_p50_s"], s["effective_input_tps"], s["duration_s"]) == \
        (12, 0.125, 2.5, 1.875, 5.5, 8.0, 3.5, 2600.0, 19.2)
    assert s["hit_rate_device"] is None and s["sglang"]["max_latency"] == 9.5
    r = run.rounds
    assert list(r["round"]) == [1, 2, 3, 4] and list(r["requests"]) == [4, 4, 4, 0]
    assert list(r["ttft_mean_s"][:3]) == [0.875, 2.125, 4.5] and np.isnan(r["ttft_mean_s"][3])
    assert list(r["hit_rate"][:3]) == [0.0, 0.25, 0.125] and np.isnan(r["hit_rate"][3])
    last = load_bench_multiturn(bench_log)  # default: the last record
    assert last.summary["hit_rate"] == 0.25 and last.rounds is None and last.config["request_rate"] == 8
    assert load_bench_multiturn(bench_log, tag="hicache", index=-2).summary["ttft_mean_s"] == 2.5


def test_bench_log_overlays_a_simulated_run(runs, bench_log, tmp_path):
    fig = figures.rounds_figure([runs["l2"], load_bench_multiturn(bench_log, index=0)])
    ext = fig.axes[0].lines[1]
    assert ext.get_linestyle() == "--" and list(ext.get_ydata())[:3] == [0.875, 2.125, 4.5]
    fig, err = figures.simhw_figure(runs["l2"], load_bench_multiturn(bench_log, index=0), by="round")
    sim_ttft = list(csv_col(runs["l2"].path / "rounds.csv", "ttft_mean_s"))
    assert fig.axes[0].collections[0].get_offsets().tolist() == [list(p) for p in zip([0.875, 2.125, 4.5], sim_ttft)]
    assert err["n"] == 3


def test_bench_log_of_the_older_upstream_format(tmp_path):
    """sgl-project/sglang 1d651e28 wrote no tag, no rounds and fewer summary keys."""
    old = {"timestamp": "2025-01-01T00:00:00", "summary": {
        "total_requests": 1280, "request_rate": 16, "average_ttft": 5.25, "p90_ttft": 7.25, "median_ttft": 5.875,
        "average_latency": 10.25, "p90_latency": 11.5, "median_latency": 10.375, "throughput": 2.5}}
    p = tmp_path / "old.jsonl"
    p.write_text(json.dumps(old) + "\n")
    run = load_bench_multiturn(p)
    s = run.summary
    assert (s["ttft_mean_s"], s["ttft_p50_s"], s["ttft_p90_s"], s["e2e_p50_s"], s["duration_s"]) == \
        (5.25, 5.875, 7.25, 10.375, 512.0)
    assert s["hit_rate"] is None and s["ttft_p99_s"] is None and run.rounds is None and run.label == "SGLang old"


@pytest.mark.parametrize("text, fragment", [
    ('{"summary": {}}\n{"summary": \n', ":2: not valid JSON"),
    ('{"timestamp": "x"}\n', ":1: expected an object with a 'summary' object"),
    ("\n\n", "empty; expected at least one bench_multiturn record"),
    ('{"summary": {"average_ttft": "fast"}}\n', "summary.average_ttft: expected a number"),
])
def test_bench_log_errors(tmp_path, text, fragment):
    p = tmp_path / "log.jsonl"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        load_bench_multiturn(p)
    assert fragment in str(e.value) and str(p) in str(e.value)


def test_bench_log_tag_not_found(bench_log):
    with pytest.raises(ValueError, match="no record with tag 'x'; tags present: hicache"):
        load_bench_multiturn(bench_log, tag="x")


# ---------------------------------------------------------------------------------------------
# tree snapshots and the tree picture
# ---------------------------------------------------------------------------------------------
def chars(s: str) -> np.ndarray:
    return np.array([ord(c) for c in s], dtype=np.int64)


def node(id, parent, tokens, end, head, *, l2=None, swa=None, mamba=None, lock=0, srefs=0, children=0, l1=True):
    return {"id": id, "parent": parent, "tokens": tokens, "end": end, "head": head, "on_l1": l1, "on_l2": l2,
            "swa": swa, "mamba": mamba, "lock_ref": lock, "srefs": srefs, "children": children}


def test_snapshot_full_only_bfs_and_truncation():
    c = RadixCache(CacheConfig(page_size=2, capacity_tokens=None))
    st = ReplayStepper(c)
    for p in ("abcdef", "abcdxy", "qrst"):
        st.step(chars(p))
    snap = snapshot(c)
    assert snap["nodes"] == [
        node(1, None, 0, 0, [], lock=1, children=2),
        node(3, 1, 4, 4, [97, 98, 99, 100], children=2),  # "abcd", split off "abcdef"
        node(5, 1, 4, 4, [113, 114, 115, 116]),  # "qrst"
        node(2, 3, 2, 6, [101, 102]),  # "ef"
        node(4, 3, 2, 6, [120, 121]),  # "xy"
    ]
    assert (snap["page_size"], snap["components"], snap["tiers"], snap["total_nodes"], snap["truncated"]) == \
        (2, ["full"], False, 5, 0)
    small = snapshot(c, max_nodes=3)
    assert [n["id"] for n in small["nodes"]] == [1, 3, 5] and small["truncated"] == 2
    assert json.loads(json.dumps(snap)) == snap


def test_snapshot_swa_and_mamba_states():
    c = RadixCache(CacheConfig(page_size=4, capacity_tokens=None, swa=SwaConfig(window_tokens=8, capacity_tokens=None),
                               mamba=MambaConfig(slots=None)))
    st = ReplayStepper(c)
    A = np.arange(16, dtype=np.int64)
    st.step(A, np.array([9999]))
    st.step(np.concatenate([A, np.arange(100, 108)]), np.array([9998]))
    st.step(np.concatenate([A[:8], np.arange(200, 212)]), np.array([9997]))
    assert snapshot(c)["nodes"] == [
        node(1, None, 0, 0, [], lock=1, children=1),
        node(4, 1, 8, 8, list(range(8)), swa="tombstone", children=2),
        node(2, 4, 8, 16, list(range(8, 16)), swa="present", mamba="present", children=1),
        node(5, 4, 12, 20, list(range(200, 208)), swa="partial", mamba="present"),
        node(3, 2, 8, 24, list(range(100, 108)), swa="present", mamba="present"),
    ]


def tiered_cache():
    tc = TierConfig(hicache_ratio=2, l3=False, min_prefetch_tokens=0)
    c = RadixCache(CacheConfig(page_size=4, capacity_tokens=48, policy="session", tiers=tc,
                               swa=SwaConfig(window_tokens=8, capacity_tokens=64), mamba=MambaConfig(slots=8)))
    st = ReplayStepper(c)
    A = np.arange(16, dtype=np.int64)
    D = np.arange(500, 520, dtype=np.int64)
    for prompt, sid in ((A, 1), (np.concatenate([A, np.arange(100, 108)]), 1),
                        (np.concatenate([A[:8], np.arange(200, 212)]), 2), (D, 3)):
        assert not st.step(prompt, np.array([9999]), session_id=sid).rejected
    c.lock(c.match(TokenSeq(D), 20))
    return c


def test_snapshot_tiers_locks_and_session_references():
    snap = snapshot(tiered_cache())
    assert snap["tiers"] is True and snap["components"] == ["full", "swa", "mamba"]
    assert snap["nodes"] == [
        node(1, None, 0, 0, [], l2=False, lock=1, children=2),
        node(4, 1, 8, 8, list(range(8)), l2=True, swa="tombstone", srefs=2, children=2),
        node(6, 1, 20, 20, list(range(500, 508)), l2=True, swa="partial", mamba="present", lock=1, srefs=1),
        node(2, 4, 8, 16, list(range(8, 16)), l1=False, l2=True, swa="tombstone", mamba="host", srefs=1, children=1),
        node(5, 4, 12, 20, list(range(200, 208)), l2=True, swa="partial", mamba="present", srefs=1),
        node(3, 2, 8, 24, list(range(100, 108)), l1=False, l2=True, swa="tombstone", mamba="host", srefs=1),
    ]


def test_tree_figure_from_a_run_directory(dirs, tmp_path):
    d = tmp_path / "with-tree"
    shutil.copytree(dirs["l1"], d)
    snap = write_snapshot(tiered_cache(), d / "tree.json")
    run = load_run(d)
    assert run.tree == snap
    fig = figures.tree_figure(run, tmp_path / "tree")
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    for want in ("FULL on device (L1)", "FULL on host only (L2)", "SWA partial", "SWA tombstone",
                 "MAMBA checkpoint on L1", "MAMBA checkpoint on L2 only", "locked (lock_ref > 0)",
                 "session-referenced"):
        assert want in legend
    drawn = sum(len(c.get_offsets()) for c in ax.collections[1:3])  # circles, then squares (locked)
    assert drawn == len(snap["nodes"])
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == sorted(str(n["tokens"]) for n in snap["nodes"][1:])
    assert is_png(tmp_path / "tree.png") and is_svg(tmp_path / "tree.svg")


# ---------------------------------------------------------------------------------------------
# reports
# ---------------------------------------------------------------------------------------------
def test_html_report_is_self_contained_with_the_numbers(dirs, runs, tmp_path):
    out = write_report([dirs["l2"], dirs["l1"], dirs["replay"], dirs["cmp"]], tmp_path / "r" / "report.html")
    text = out.read_text()
    for r in (runs["l2"], runs["l1"], runs["replay"]):
        assert f"<td>{fmt_rate(r.summary['hit_rate'])}</td>" in text
        assert f"<td>{fmt_rate(r.summary['hit_rate_device'])}</td>" in text
    a = runs["l2"].summary
    assert f"<td>{fmt_s(a['ttft_p90_s'])}</td>" in text and f"<td>{a['effective_input_tps']:,.0f}</td>" in text
    assert f"<td>{fmt_rate(a['hit_rate_host'])}</td>" in text and fmt_rate(a["hit_rate_host"]) != "0.0000"
    # rounds, fig6, two timelines, two tree pictures (the sim runs write tree.json), the policy comparison
    assert text.count("src='data:image/png;base64,") == 7
    assert "src='http" not in text and ".png'" not in text
    assert "<td>cache.hicache_ratio</td><td>2</td>" in text


def test_markdown_report_links_its_pngs(dirs, runs, tmp_path):
    out = write_report([dirs["l2"], dirs["l1"]], tmp_path / "report.md", labels=["L1+L2", "L1"])
    text = out.read_text()
    links = [part.split(")")[0] for part in text.split("](")[1:]]
    assert links and all(not ln.startswith("/") for ln in links)
    assert all(is_png(tmp_path / ln) for ln in links)
    assert f"| L1+L2 | sim | 12 | {fmt_rate(runs['l2'].summary['hit_rate'])} |" in text


def test_report_rejects_another_suffix(dirs, tmp_path):
    with pytest.raises(ValueError, match="expected a report path ending in .html or .md"):
        write_report([dirs["l1"]], tmp_path / "report.pdf")


# ---------------------------------------------------------------------------------------------
# the plot / report commands
# ---------------------------------------------------------------------------------------------
def run_cmd(capsys, argv):
    try:
        rc = report_cli.main(argv)
    except SystemExit as e:  # argparse errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_plot_and_report_commands(dirs, bench_log, tmp_path, capsys):
    out = tmp_path / "figs"
    rc, stdout, err = run_cmd(capsys, ["plot", str(dirs["l2"]), str(bench_log), "--labels", "sim,sglang",
                                       "--out", str(out)])
    assert rc == 0 and err == ""
    names = sorted(p.name for p in out.iterdir())
    assert names == ["fig6.png", "fig6.svg", "rounds.png", "rounds.svg", "simhw.png", "simhw.svg",
                     "timeline.png", "timeline.svg", "tree.png", "tree.svg"]
    rc, _, _ = run_cmd(capsys, ["plot", str(dirs["cmp"]), "--kind", "policy", "--out", str(out)])
    assert rc == 0 and is_png(out / "policy.png")
    rc, stdout, _ = run_cmd(capsys, ["report", str(dirs["l1"]), "--out", str(tmp_path / "rep.html")])
    assert rc == 0 and stdout.strip() == str(tmp_path / "rep.html")


@pytest.mark.parametrize("argv, fragment", [
    (["plot", "{tmp}/nope", "--out", "{tmp}/o"], "radixsim plot: {tmp}/nope: no such result directory"),
    (["plot", "{l1}", "--kind", "bogus", "--out", "{tmp}/o"], "argument --kind: invalid choice: 'bogus'"),
    (["plot", "{replay}", "--kind", "tree", "--out", "{tmp}/o"],
     "radixsim plot: --kind tree: {replay}/tree.json missing"),
    (["plot", "{l1}", "--kind", "capacity", "--out", "{tmp}/o"], "radixsim plot: --x: required with --kind capacity"),
    (["plot", "{replay}", "--kind", "timeline", "--out", "{tmp}/o"], "no input run has timeline.csv rows"),
    (["plot", "{l1}", "{l2}", "--labels", "a", "--out", "{tmp}/o"], "--labels: got 1 label(s) for 2 run(s)"),
    (["plot", "{l1}", "--kind", "simhw", "--out", "{tmp}/o"], "--kind simhw: expected exactly two runs"),
    (["report", "{l1}", "--out", "{tmp}/r.pdf"],
     "radixsim report: {tmp}/r.pdf: expected a report path ending in .html or .md"),
    (["report", "{tmp}/nope", "--out", "{tmp}/r.html"], "radixsim report: {tmp}/nope: no such result directory"),
])
def test_bad_input_exits_2_with_one_line(dirs, tmp_path, capsys, argv, fragment):
    fmt = {"tmp": tmp_path, "l1": dirs["l1"], "l2": dirs["l2"], "replay": dirs["replay"]}
    rc, stdout, err = run_cmd(capsys, [a.format(**fmt) for a in argv])
    assert rc == 2
    assert err.count("\n") == 1 and fragment.format(**fmt) in err and "Traceback" not in err


def test_plot_and_report_are_radixsim_commands():
    parser = cli.build_parser()  # radixsim.cli wires report_cli.add_parsers in
    args = parser.parse_args(["plot", "a", "b", "--kind", "fig6", "--out", "o"])
    assert (args.command, args.runs, args.kind, args.out) == ("plot", ["a", "b"], "fig6", "o")
    assert report_cli.dispatch(parser.parse_args(["scenarios"])) is None
