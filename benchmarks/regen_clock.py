"""benchmarks/regen_docs.py's renderers for the clock's sources (issue 29):
docs/sources/attention_backends.md (the measured curve against the model's own attention, and the
backend's effect on the validation cases) and docs/sources/clock_terms.md (the residual after the
terms). Registered in regen_entries_docs.py and regen_entries_lab.py (`clock_renderers()`)."""
from __future__ import annotations

ATTN_POINTS = ((64, 0), (64, 4096), (608, 0), (608, 6080), (608, 15200), (2560, 0), (2560, 12800), (4096, 0),
               (4096, 4096), (4096, 8192), (4096, 12288), (8192, 0), (8192, 8192), (12288, 0))


def attention_backend_curve(ctx, table) -> str:
    import json

    import numpy as np

    from sim.attention_backends import BACKENDS_FILE, curve_for
    from sim.operators import OperatorCostModel

    data = json.loads(BACKENDS_FILE.read_text())["backends"]["flashinfer"]["curves"][0]["points_ms"]
    curve = curve_for("flashinfer", "a100", 32, 8, 128)
    own = OperatorCostModel("Qwen3-8B", "a100-40gbx1", 1)
    rows = []
    for n, c in ATTN_POINTS:
        ms = dict(map(tuple, data[str(n)]))[c]
        b = own.breakdown(((n, c),))
        mine = (b["attn_new"] + b["attn_prefix"]) / own.model.full_layers * 1e3
        e = float(curve.efficiency(np.array([n]), np.array([c]))[0])
        rows.append([f"{n:,}", f"{c:,}", f"{ms:.3f}", f"{e:.3f}", f"{mine:.3f}", f"{ms / mine:.2f}"])
    return table(["new tokens (chunk)", "prefix", "FlashInfer ms/layer", "efficiency", "model's own ms/layer",
                  "measured / own"], rows)


def attention_backend_effect(ctx, table) -> str:
    from radixsim.validate import compare

    rows = []
    for res in ctx.validate():
        case = res["row"]["case"]
        if res["series"] is None or res["scenario"]["engine"].get("attention_backend") is None:
            continue
        pub = res["series"]
        off = _case_series(case, drop_backend=True)
        was = compare(off[0], off[1], pub["published_hit_rate"], pub["published_ttft_mean_s"])
        now = res["row"]
        rows.append([case, res["scenario"]["engine"]["attention_backend"],
                     f"{was['ttft_ratio_gmean']:.3f}", f"**{now['ttft_ratio_gmean']:.3f}**",
                     f"{was['ttft_ratio_min']:.2f}-{was['ttft_ratio_max']:.2f}",
                     f"{now['ttft_ratio_min']:.2f}-{now['ttft_ratio_max']:.2f}",
                     f"{was['hit_mae_pts']:.1f}", f"{now['hit_mae_pts']:.1f}",
                     f"{was['shape_error']:.3f}", f"{now['shape_error']:.3f}"])
    return table(["case", "backend", "TTFT gmean, own curve", "with backend", "min-max, own", "with backend",
                  "hit MAE, own", "with backend", "shape, own", "with backend"], rows)


def _case_series(case_id: str, *, drop_backend: bool) -> tuple:
    """(hit rate, mean TTFT) per round of one validation case as mapped, optionally without its
    engine.attention_backend."""
    from radixsim import results
    from radixsim.run import request_rows, simulate
    from radixsim.validate_cases import case_files, scenario_of
    from scenarios.scenario import resolve

    (_path, case), = case_files([case_id])
    raw, _notes = scenario_of(case, 0)
    if drop_backend:
        raw["engine"].pop("attention_backend", None)
    eng, *_ = simulate(resolve(raw, case_id), progress=False)
    rounds = results.round_table(request_rows(eng))
    return [r["hit_rate"] or 0.0 for r in rounds], [r["ttft_mean_s"] or 0.0 for r in rounds]




def clock_residual_after(ctx) -> str:
    from radixsim.validate_explain import explain

    def coefs(c) -> str:
        return f"{1e3 * c[0]:.1f}, {1e6 * c[1]:.2f}, {1e6 * c[2]:.2f}"

    out = ["| case | direct nnls a (ms/req), b, c (us/token) | rms left | queue-scaled nnls a, b, c | rms left | rank |",
           "|---|---|---|---|---|---|"]
    for res in explain():
        if "skipped" in res:
            continue
        f, q = res["fit"], res["fit_queued"]
        out.append(f"| {res['case'].split('-')[0]} | {coefs(f['nnls'])} | {1e3 * f['rms_nnls']:.1f} ms | "
                   f"{coefs(q['nnls'])} | {1e3 * q['rms_nnls']:.1f} ms | {f['rank']} |")
    return "\n".join(out)
