"""`radixsim validate`: today's simulator against published hardware runs (validation/*.json).

Each full case is mapped to a scenario with no per-case tuning (`radixsim.validate_cases`),
simulated from a fixed seed, and compared round by round with its published series (round i
of the simulation against the i-th published point; the first is the cold round; rounds past
the shorter series are not compared). Per case:

- hit MAE: mean |sim - published| hit rate over the compared rounds, in points (x100);
- TTFT ratio: sim / published mean TTFT per round: geometric mean, min and max;
- shape error: each TTFT series divided by its own mean over the compared rounds, then the mean
  absolute difference of the two (0 = the same shape whatever the scale; 0.1 = 10% of the mean).

Partial cases (no model/GPU, not a per-round run) are listed as skipped with the reason.
Writes DIR/validation.csv (one row per case), DIR/validation.json (the rows plus per-round
series and notes) and DIR/validation.html (sim-over-published overlays per case).
"""
from __future__ import annotations

import base64
import html
import math
import sys
from pathlib import Path

from .args import EXIT_BAD_INPUT
from .validate_cases import CaseError, case_files, scenario_of, skip_reason

COLUMNS = ["case", "file", "status", "model", "hardware", "rounds", "hit_mae_pts", "ttft_ratio_gmean",
           "ttft_ratio_min", "ttft_ratio_max", "shape_error", "reason"]
SHAPE_HELP = ("shape error = mean |a_i/mean(a) - b_i/mean(b)| of the per-round TTFT series a (sim) and "
              "b (published): 0 when the curves have the same shape whatever their scale")


def compare(sim_hit, sim_ttft, pub_hit, pub_ttft) -> dict:
    """The per-case figures over the rounds both series have (see the module docs)."""
    n_hit, n_ttft = min(len(sim_hit), len(pub_hit)), min(len(sim_ttft), len(pub_ttft))
    out = {"rounds": min(n_hit, n_ttft)}
    out["hit_mae_pts"] = 100 * sum(abs(sim_hit[i] - pub_hit[i]) for i in range(n_hit)) / n_hit
    pairs = [(s, p) for s, p in zip(sim_ttft[:n_ttft], pub_ttft[:n_ttft]) if s > 0 and p > 0]
    ratios = [s / p for s, p in pairs]
    out["ttft_ratio_gmean"] = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    out["ttft_ratio_min"] = min(ratios, default=None)
    out["ttft_ratio_max"] = max(ratios, default=None)
    if pairs:
        ms, mp = (sum(x) / len(pairs) for x in zip(*pairs))
        out["shape_error"] = sum(abs(s / ms - p / mp) for s, p in pairs) / len(pairs)
    else:
        out["shape_error"] = None
    return out


def run_case(case: dict, *, smoke: bool = False, seed: int = 0, progress: bool = False) -> dict:
    """Simulate one full case; its row (COLUMNS), per-round series and notes."""
    from scenarios.scenario import ScenarioError, resolve
    from scenarios.scenario import smoke as smoke_raw

    from . import results
    from .run import request_rows, simulate

    raw, notes = scenario_of(case, seed)
    if smoke:
        raw = smoke_raw(raw)
        notes.append(f"smoke: {raw['workload']['num_clients']} clients x {raw['workload']['num_rounds']} rounds")
    try:
        sc = resolve(raw, f"{case['_file']}: {case['id']}")
    except ScenarioError as e:
        raise CaseError(str(e)) from None
    notes.append(_resolved(sc.doc["cache"]))
    eng, _env, _cost, _wall = simulate(sc, progress=progress)
    rounds = results.round_table(request_rows(eng))
    sim_hit = [r["hit_rate"] or 0.0 for r in rounds]
    sim_ttft = [r["ttft_mean_s"] or 0.0 for r in rounds]
    pub = case["published"]
    row = {"case": case["id"], "file": Path(case["_file"]).name, "status": "ok", "model": sc.model.name,
           "hardware": sc.hardware.name, "reason": ""}
    row.update(compare(sim_hit, sim_ttft, pub["hit_rate_per_round"], pub["ttft_mean_s_per_round"]))
    series = {"sim_hit_rate": sim_hit, "sim_ttft_mean_s": sim_ttft, "published_hit_rate": pub["hit_rate_per_round"],
              "published_ttft_mean_s": pub["ttft_mean_s_per_round"]}
    return {"row": row, "series": series, "notes": notes, "source": case["_source"], "scenario": sc.doc}


def _resolved(cache: dict) -> str:
    parts = [f"L1 {cache['l1_tokens']:,}"]
    for tier in ("l2", "l3"):
        v = cache.get(f"{tier}_tokens")
        if v is not None:
            parts.append(f"{tier.upper()} {v:,}" if isinstance(v, int) else f"{tier.upper()} {v}")
    return "tokens per tier: " + ", ".join(parts)


def skipped(case: dict, reason: str) -> dict:
    row = {c: None for c in COLUMNS}
    row.update(case=case["id"], file=Path(case["_file"]).name, status="skipped", reason=reason)
    return {"row": row, "series": None, "notes": [], "source": case["_source"], "scenario": None}


def validate(names=(), *, smoke: bool = False, seed: int = 0, progress: bool = False) -> list:
    """Every named case (default: all in validation/): a result per case, in file order."""
    out = []
    for _path, case in case_files(names):
        reason = skip_reason(case)
        out.append(skipped(case, reason) if reason else run_case(case, smoke=smoke, seed=seed, progress=progress))
    return out


# -- output -----------------------------------------------------------------------------------
def table(results_: list) -> str:
    """The printed table: one line per case, then its notes (or its skip reason)."""
    from .outputs import fmt_or_dash as _fmt, ruled

    head = f"{'case':<44} {'rounds':>6} {'hit MAE':>8} {'TTFT sim/pub gmean [min-max]':>30} {'shape':>6}"
    lines = ruled(head)
    for res in results_:
        r = res["row"]
        if r["status"] == "skipped":
            lines.append(f"{r['case']:<44} skipped: {r['reason']}")
            continue
        ratio = (f"{_fmt(r['ttft_ratio_gmean'], '.2f')} [{_fmt(r['ttft_ratio_min'], '.2f')}-"
                 f"{_fmt(r['ttft_ratio_max'], '.2f')}]")
        lines.append(f"{r['case']:<44} {r['rounds']:>6} {_fmt(r['hit_mae_pts'], '.1f'):>8} {ratio:>30} "
                     f"{_fmt(r['shape_error'], '.3f'):>6}")
        lines += [f"    - {n}" for n in res["notes"]]
    return "\n".join(lines)


def _figure(res: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = res["series"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, key, label in ((axes[0], "ttft_mean_s", "mean TTFT (s)"), (axes[1], "hit_rate", "hit rate")):
        ax.plot(range(1, len(s[f"published_{key}"]) + 1), s[f"published_{key}"], "o-", label="published")
        ax.plot(range(1, len(s[f"sim_{key}"]) + 1), s[f"sim_{key}"], "s--", label="radixsim")
        ax.set_xlabel("round")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[1].legend()
    fig.suptitle(res["row"]["case"])
    fig.tight_layout()
    return fig


def write_html(path: Path, results_: list, title: str) -> None:
    """validation.html: the table, then per case its overlays (base64 PNG), notes and source."""
    import matplotlib.pyplot as plt

    from analysis.style import png_bytes

    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
             f"<body><h1>{html.escape(title)}</h1><pre>{html.escape(table(results_))}</pre>"
             f"<p>{html.escape(SHAPE_HELP)}</p>"]
    for res in results_:
        r = res["row"]
        parts.append(f"<h2 id='{html.escape(r['case'])}'>{html.escape(r['case'])} ({r['status']})</h2>")
        if res["series"] is not None:
            fig = _figure(res)
            data = base64.b64encode(png_bytes(fig)).decode("ascii")
            plt.close(fig)
            parts.append(f"<img alt='{html.escape(r['case'])}' src='data:image/png;base64,{data}'>")
        items = res["notes"] or [f"skipped: {r['reason']}"]
        parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in items) + "</ul>")
        parts.append(f"<p><small>source: {html.escape(res['source'])}</small></p>")
    parts.append("</body></html>\n")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(parts), encoding="utf-8")
    tmp.replace(path)


def write_outputs(out_dir, results_: list, *, smoke: bool, seed: int) -> Path:
    from .outputs import write
    from .results import provenance

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "validation.csv", [r["row"] for r in results_], columns=COLUMNS)
    doc = {"provenance": provenance(seed=seed), "smoke": smoke, "shape_error": SHAPE_HELP, "cases": results_}
    write(out / "validation.json", doc)
    write_html(out / "validation.html", results_, "radixsim validate" + (" (smoke)" if smoke else ""))
    return out


# -- command line -----------------------------------------------------------------------------
def add_parser(subparsers) -> None:
    v = subparsers.add_parser(
        "validate", help="measure the simulator against published hardware runs (validation/)",
        description=(__doc__.split("\n\n")[1].replace("\n", " ") + " " + SHAPE_HELP + "."))
    v.add_argument("cases", nargs="*", metavar="CASE", help="case files or case ids (default: all of validation/)")
    v.add_argument("--out", default=None,
                   help="output directory (default validation-out; with --smoke validation-smoke, with named "
                        "cases validation-selected: a smoke or partial table never replaces the full one)")
    v.add_argument("--smoke", action="store_true", help="each case at a tiny size (clients / 8, at most 3 rounds)")
    v.add_argument("--seed", type=int, default=0, help="workload seed (default 0, the same for every case)")
    v.add_argument("--no-progress", action="store_true", help="no progress bar (default: one on a terminal)")
    v.add_argument("--backend", choices=["published", "torch"], default="published",
                   help="published (default): the cases of validation/; torch: the positional arguments are "
                        "scenarios, each run on the torch backend (measured clock) and on the simulator "
                        "(radixsim/validate_torch.py)")
    v.add_argument("--table", default=None, help="--backend torch: also simulate priced by this cost table")
    v.add_argument("--device", default=None, help="--backend torch: cpu or cuda")
    v.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="--backend torch: override a scenario key (repeatable)")
    v.add_argument("--explain", action="store_true",
                   help="print each case's simulated TTFT split per round (queue, load by link, compute by operator) "
                        "beside the published TTFT, and the residual fit a + b new + c cached; writes nothing "
                        "(radixsim/validate_explain.py)")


def default_out(args) -> str:
    """--out when not given: the full table (every case, full size) in validation-out; a smoke or
    a partial run elsewhere, so that README's two commands, run in order, keep both tables."""
    if args.backend == "published" and args.smoke:
        return "validation-smoke"
    if args.backend == "published" and args.cases:
        return "validation-selected"
    return "validation-out"


def dispatch(args) -> int | None:
    """Run `radixsim validate`; None when `args` belong to another command."""
    if getattr(args, "command", None) != "validate":
        return None
    if args.out is None:
        args.out = default_out(args)
    if args.explain:
        from . import validate_explain

        return _case_errors(lambda: validate_explain.run(args))
    if args.backend == "torch":
        from . import validate_torch

        return validate_torch.run(args)
    if args.sets:  # a published case runs as validate_cases maps it: an override would go unseen
        sys.stderr.write(f"radixsim validate: error: --set {args.sets[0]}: only with --backend torch; expected no "
                         "--set for the published cases\n")
        return EXIT_BAD_INPUT

    def run_published() -> int:
        res = validate(args.cases, smoke=args.smoke, seed=args.seed,
                       progress=sys.stderr.isatty() and not args.no_progress)
        print(table(res))
        print(f"wrote {write_outputs(args.out, res, smoke=args.smoke, seed=args.seed)}/validation.csv, "
              "validation.json, validation.html")
        return 0

    return _case_errors(run_published)


def _case_errors(body) -> int:
    """body()'s exit status; a CaseError or OSError from it -> one line on stderr, exit 2."""
    try:
        return body()
    except BrokenPipeError:  # stdout closed (`| head`): cli.main's quiet exit
        raise
    except (CaseError, OSError) as e:
        sys.stderr.write(f"radixsim validate: error: {e}\n")
        return EXIT_BAD_INPUT


__all__ = ["validate", "compare", "table", "write_outputs", "add_parser", "dispatch", "COLUMNS", "SHAPE_HELP"]
