"""Each serving term's effect on the validation cases (issue 29 items 2b, 2c).

Every full case of `validation/` is simulated as `radixsim validate` maps it (seed 0), with the
terms it turns on switched off and on one at a time: ``engine.frontend`` (sim/serving_cpu.py:
tokenization of the whole prompt, the fixed per-request cost, the first token's way out) and
``engine.l3_get_batch_pages`` (sim/l3_reads.py: SGLang's serial prefetch thread, one get per 128
pages). Printed per case: the per-round TTFT geometric-mean ratio sim / published and the hit MAE
with none, each alone, and both (what `validate` runs); and, with both, the mean per request of
the front end's parts (tokenizer work, waiting for the tokenizer, the fixed costs) and the L3
reads (gets, time prefetches waited for the I/O thread).

    python benchmarks/serving_terms.py            # ~1-2 min on a 2-core machine
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = (("none", {"frontend": None, "l3_get_batch_pages": None}),
            ("frontend", {"l3_get_batch_pages": None}),
            ("l3 reads", {"frontend": None}),
            ("both", {}))


def run(case, engine: dict) -> tuple:
    from radixsim import results
    from radixsim.run import request_rows, simulate
    from radixsim.validate import compare
    from radixsim.validate_cases import scenario_of
    from scenarios.scenario import resolve

    raw, _notes = scenario_of(case, 0)
    raw["engine"].update(engine)
    raw["engine"] = {k: v for k, v in raw["engine"].items() if v is not None}
    eng, *_ = simulate(resolve(raw, case["id"]), progress=False)
    rows = request_rows(eng)
    rounds = results.round_table(rows)
    pub = case["published"]
    cmp = compare([r["hit_rate"] or 0.0 for r in rounds], [r["ttft_mean_s"] or 0.0 for r in rounds],
                  pub["hit_rate_per_round"], pub["ttft_mean_s_per_round"])
    return cmp, eng, len(rows)


def main(argv=None) -> int:
    from radixsim.validate_cases import case_files, skip_reason

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args(argv)
    print("| case | TTFT ratio: none | frontend | l3 reads | both | hit MAE none / both (pts) | per request (both): "
          "tokenize ms | tokenizer wait ms | fixed ms | L3 gets | prefetch wait ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for _path, case in case_files(a.cases):
        if skip_reason(case):
            continue
        out = {name: run(case, engine) for name, engine in VARIANTS}
        _, eng, n = out["both"]
        f = eng.frontend.summary() if getattr(eng, "frontend", None) else None
        r = eng.l3_reads.summary() if getattr(eng, "l3_reads", None) else None
        ms = lambda x: f"{1e3 * x / n:.1f}"  # noqa: E731
        cells = [f"{out[v][0]['ttft_ratio_gmean']:.4f}" for v, _ in VARIANTS]
        cells.append(f"{out['none'][0]['hit_mae_pts']:.1f} / {out['both'][0]['hit_mae_pts']:.1f}")
        cells += [ms(f["tokenize_s"]), ms(f["tokenizer_wait_s"]), ms(f["fixed_s"])] if f else ["-"] * 3
        cells += [f"{r['gets'] / n:.2f}", ms(r["wait_s"])] if r else ["-", "-"]
        print(f"| {case['id']} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
