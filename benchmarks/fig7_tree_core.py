"""Seed figure 7 reproduced (issue 31): the Python tree (engine.tree_core: sglang-python)
against the native core (sglang-rust) on the three tree-core-200 catalog scenarios.

For each scenario it runs the simulator four times (tree_core unset, sglang-python,
sglang-rust, radixsim), then writes

- ``docs/figures/figure7.png``: top row TTFT per round for both cores, bottom row their
  difference (Python - Rust) per round, one column per model (own y scales, as the seed's);
- ``docs/figures/figure7.json``: per scenario the TTFT reductions (1 - Rust/Python, mean TTFT
  over all rounds and over the last 25 rounds: 176-200 at 200 rounds), the tree CPU time per
  request at rounds 1, R/2 and R for each core (the CPU of the steps while the round ran, per
  request of it), and the simulator's wall time per run.

    python benchmarks/fig7_tree_core.py [--rounds 200] [--out docs/figures]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from radixsim.run import simulate  # noqa: E402
from scenarios.scenario import apply_sets, load, resolve, scenario_path  # noqa: E402

SCENARIOS = {"tree-core-200-qwen3-32b": ("Qwen3-32B TP2, full attention", (10, 18)),
             "tree-core-200-gpt-oss-20b": ("gpt-oss-20b TP2, SWA", (38, 42)),
             "tree-core-200-qwen3-next-80b": ("Qwen3-Next-80B-A3B TP4, hybrid SSM", (5, 7))}
CORES = ("sglang-python", "sglang-rust")
ALL_CORES = CORES + ("radixsim",)  # radixsim's own core: its tree CPU per request (not plotted)


def run(name: str, rounds: int, core: str | None, overlap: bool):
    sets = [f"workload.num_rounds={rounds}", f"engine.overlap_schedule={'true' if overlap else 'false'}"]
    if core is not None:
        sets.append(f"engine.tree_core={core}")
    sc = resolve(apply_sets(load(scenario_path(name)), sets), name)
    t0 = time.perf_counter()
    eng, env, cost, _ = simulate(sc, progress=False)
    wall = time.perf_counter() - t0
    reqs = [r for r in eng.finished if not r.rejected]
    ttft = np.zeros(rounds)
    per_round = {}
    for r in reqs:
        per_round.setdefault(r.round, []).append(r)
    for k, rs in per_round.items():
        ttft[k - 1] = np.mean([x.first_token_s - x.arrival_s for x in rs])
    cpu_per_req = np.zeros(rounds)
    tc = eng.executor.tree_cpu
    if tc is not None:  # the tree CPU of the steps while a round ran (the round barrier keeps them apart)
        log = np.array(tc.log)
        for k, rs in per_round.items():
            lo, hi = min(x.arrival_s for x in rs), max(x.finish_s for x in rs)
            sel = (log[:, 0] >= lo) & (log[:, 0] < hi)
            cpu_per_req[k - 1] = log[sel, 1].sum() / len(rs)
    all_ttft = np.mean([r.first_token_s - r.arrival_s for r in reqs])
    last = [r.first_token_s - r.arrival_s for r in reqs if r.round > rounds - 25]
    return {"ttft_round_s": ttft, "ttft_mean_s": float(all_ttft), "ttft_last25_s": float(np.mean(last)),
            "cpu_per_req_s": cpu_per_req, "wall_s": wall,
            "tree_cpu_s": tc.cpu_s if tc is not None else 0.0, "exposed_s": tc.exposed_s if tc is not None else 0.0}


_RUNS: dict = {}


def runs(rounds: int = 200, overlap: bool = True, cores=(None,) + ALL_CORES) -> dict:
    """{scenario: {core: run(...)}} (memoised: docs/figure7.md's regen entries share them)."""
    for name in SCENARIOS:
        for c in cores:
            key = (name, rounds, c, overlap)
            if key not in _RUNS:
                _RUNS[key] = run(name, rounds, c, overlap)
    return {name: {c: _RUNS[(name, rounds, c, overlap)] for c in cores} for name in SCENARIOS}


def reduction_table(rounds: int = 200) -> str:
    """docs/figure7.md's table: the seed's six TTFT reductions beside ours."""
    res = runs(rounds, cores=CORES)
    lines = ["| model | setup | seed all | ours all | seed 176-200 | ours 176-200 |", "|---|---|---|---|---|---|"]
    for name, (label, seed) in SCENARIOS.items():
        py, rs = res[name]["sglang-python"], res[name]["sglang-rust"]
        model, setup = label.split(" ", 1)
        lines.append(f"| {model} | {setup} | {seed[0]}% | {100 * (1 - rs['ttft_mean_s'] / py['ttft_mean_s']):.1f}% | "
                     f"{seed[1]}% | {100 * (1 - rs['ttft_last25_s'] / py['ttft_last25_s']):.1f}% |")
    return "\n".join(lines)


def cpu_table(rounds: int = 200) -> str:
    """docs/figure7.md's table: tree CPU time per request at rounds 1, R/2 and R, per core (ms)."""
    res = runs(rounds, cores=ALL_CORES)
    at = sorted({1, max(rounds // 2, 1), rounds})
    lines = ["| core | " + " | ".join(label.split(",")[0] for label, _ in SCENARIOS.values()) + " |",
             "|---|---|---|---|"]
    for c in ALL_CORES:
        cells = [" / ".join(f"{1e3 * res[name][c]['cpu_per_req_s'][k - 1]:.2f}" for k in at) for name in SCENARIOS]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--no-overlap", action="store_true", help="engine.overlap_schedule: false")
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    R = a.rounds
    res, doc = {}, {"rounds": R, "overlap_schedule": not a.no_overlap, "scenarios": {}}
    for name, (label, seed) in SCENARIOS.items():
        res[name] = runs(R, not a.no_overlap)[name]
        py, rs, base = res[name]["sglang-python"], res[name]["sglang-rust"], res[name][None]
        red_all = 100 * (1 - rs["ttft_mean_s"] / py["ttft_mean_s"])
        red_last = 100 * (1 - rs["ttft_last25_s"] / py["ttft_last25_s"])
        rounds_at = sorted({1, max(R // 2, 1), R})
        doc["scenarios"][name] = {
            "label": label, "seed_reduction_pct": {"all": seed[0], "last25": seed[1]},
            "reduction_pct": {"all": round(red_all, 2), "last25": round(red_last, 2)},
            "ttft_mean_ms": {c: round(1e3 * res[name][c]["ttft_mean_s"], 3) for c in CORES}
            | {"unset": round(1e3 * base["ttft_mean_s"], 3)},
            "ttft_last25_ms": {c: round(1e3 * res[name][c]["ttft_last25_s"], 3) for c in CORES},
            "ttft_mean_ms_radixsim_core": round(1e3 * res[name]["radixsim"]["ttft_mean_s"], 3),
            "tree_cpu_us_per_request": {c: {str(k): round(1e6 * res[name][c]["cpu_per_req_s"][k - 1], 1)
                                            for k in rounds_at} for c in ALL_CORES},
            "tree_cpu_s": {c: round(res[name][c]["tree_cpu_s"], 4) for c in ALL_CORES},
            "exposed_s": {c: round(res[name][c]["exposed_s"], 4) for c in ALL_CORES},
            "wall_s": {str(c or "unset"): round(res[name][c]["wall_s"], 2) for c in (None,) + ALL_CORES},
        }
        print(name, json.dumps(doc["scenarios"][name]), flush=True)
    (out / "figure7.json").write_text(json.dumps(doc, indent=1) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(13, 6.5), sharex=True)
    x = np.arange(1, R + 1)
    for j, (name, (label, seed)) in enumerate(SCENARIOS.items()):
        py, rs = res[name]["sglang-python"], res[name]["sglang-rust"]
        ax[0, j].plot(x, 1e3 * py["ttft_round_s"], label="Python tree (sglang-python)", color="tab:red")
        ax[0, j].plot(x, 1e3 * rs["ttft_round_s"], label="Rust core (sglang-rust)", color="tab:blue")
        ax[0, j].set_title(label, fontsize=10)
        ax[0, j].set_ylabel("mean TTFT (ms)")
        ax[1, j].plot(x, 1e3 * (py["ttft_round_s"] - rs["ttft_round_s"]), color="tab:purple")
        ax[1, j].set_ylabel("Python - Rust TTFT (ms)")
        ax[1, j].set_xlabel("round")
        r = doc["scenarios"][name]["reduction_pct"]
        ax[1, j].set_title(f"reduction {r['all']:.1f}% all, {r['last25']:.1f}% last 25 "
                           f"(seed {seed[0]}%, {seed[1]}%)", fontsize=9)
    ax[0, 0].legend(fontsize=8)
    fig.suptitle(f"Figure 7 (radixsim): tree CPU time, Python tree vs native core, {R} rounds, "
                 f"overlap scheduler {'on' if not a.no_overlap else 'off'}", fontsize=11)
    fig.tight_layout()
    fig.savefig(out / "figure7.png", dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
