"""regen_docs entries of docs/policy_lab.md, docs/sources/attention_backends.md and
docs/figure7.md (registered on import, in this order; benchmarks/regen_docs.py runs them)."""
from __future__ import annotations

import sys
from pathlib import Path

from regen_core import ROOT, Skipped, entry, table
from regen_entries_docs import clock_renderers


# docs/policy_lab.md -------------------------------------------------------------------------

# the real Mooncake conversation trace: fetched by hand, git ignores it (docs/policy_lab.md, Corpus)
CONVERSATION = "scenarios/data/conversation_trace.jsonl"
_LEADERBOARDS: dict = {}


def _conversation() -> Path:
    path = ROOT / CONVERSATION
    if not path.is_file():
        raise Skipped(f"{CONVERSATION} not present (fetch it: docs/policy_lab.md, Corpus)")
    return path


def _leaderboard(ctx, which: str) -> list:
    """The leaderboard rows, one run per process: "corpus" (the built-in corpus and its variants,
    without the conversation trace even when it is there) or "conversation" (that trace at 2M)."""
    if which not in _LEADERBOARDS:
        from radixsim.leaderboard import corpus, run_leaderboard

        if which == "corpus":
            sources = {n: o for n, o in corpus(None, 16).items() if n != "mooncake_conversation"}
            caps, cmd = None, "radixsim leaderboard"
        else:
            sources, caps = corpus([_conversation()], 16), [2_000_000]
            cmd = f"radixsim leaderboard {CONVERSATION} --capacities 2000000"
        if ctx.runs.verbose:
            print(f"running: {cmd} --jobs {ctx.runs.jobs}", file=sys.stderr)
        _LEADERBOARDS[which] = run_leaderboard(sources, capacities=caps, jobs=ctx.runs.jobs)
    return _LEADERBOARDS[which]


def _pct1(g) -> str:
    return "-" if g is None else f"{round(100 * g, 1) + 0.0:.1f}"  # no -0.0


def _best_online(by: dict, trace: str, cap: int) -> list:
    """The online policies (not lru, not belady-node or the bound) with the highest hit rate, ties all."""
    from radixsim.leaderboard import OFFLINE

    cands = {p: r for (t, c, p), r in by.items() if (t, c) == (trace, cap) and p not in ("lru", *OFFLINE)}
    top = max(r["hit_rate"] for r in cands.values())
    return sorted(p for p, r in cands.items() if r["hit_rate"] == top)


LB_CMD = "radixsim leaderboard --jobs 2 --out DIR (the built-in corpus and its variants)"


@entry("policy-lab-leaderboard", "docs/policy_lab.md", cheap=False, seconds=900, command=LB_CMD)
def _policy_lab_leaderboard(ctx) -> str:
    from radixsim.leaderboard import BOUND

    lb = _leaderboard(ctx, "corpus")
    by = {(r["trace"], r["capacity_tokens"], r["policy"]): r for r in lb}
    out = []
    for trace, cap in dict.fromkeys((r["trace"], r["capacity_tokens"]) for r in lb):
        h = {p: r["hit_rate"] for (t, c, p), r in by.items() if (t, c) == (trace, cap)}
        lru, old, new = h["lru"], h["belady-node"], h[BOUND]

        def gaps(p):
            o = (h[p] - lru) / (old - lru) if old - lru > 1e-3 else None
            return f"{_pct1(o)} -> {_pct1(by[(trace, cap, p)]['gap_closed'])}"

        best = _best_online(by, trace, cap)
        out.append([trace, f"{cap:,}", f"{100 * lru:.2f}", f"{100 * old:.2f}", f"{100 * new:.2f}",
                    f"{' / '.join(best)} {100 * h[best[0]]:.2f}", gaps(best[0]), gaps("session-next")])
    return table(["trace", "capacity", "LRU %", "old bound (belady-node) %", "true bound %", "best online",
                  "gap closed old -> new", "session-next old -> new"], out)


VARIANT_POLICIES = ("arc", "belady-node", "filo", "lru", "mru", "s3fifo", "session", "session-next", "slru",
                    "tlru", "bound")


@entry("policy-lab-variants", "docs/policy_lab.md", cheap=False, seconds=900,
       command=LB_CMD + "; its variant tables (leaderboard.txt), these policies, the two smallest capacities")
def _policy_lab_variants(ctx) -> str:
    from radixsim.leaderboard import variant_table

    lb = _leaderboard(ctx, "corpus")
    caps: dict = {}
    for r in lb:
        caps.setdefault(r["trace"], sorted({x["capacity_tokens"] for x in lb if x["trace"] == r["trace"]})[:2])
    rows = [r for r in lb if r["policy"] in VARIANT_POLICIES and r["capacity_tokens"] in caps[r["trace"]]]
    return "```\n" + variant_table(rows) + "\n```"


@entry("policy-lab-conversation", "docs/policy_lab.md", cheap=False, seconds=600,
       command=f"radixsim leaderboard {CONVERSATION} --capacities 2000000 --jobs 2 (needs the trace)")
def _policy_lab_conversation(ctx) -> str:
    from radixsim.leaderboard import format_table

    return "```\n" + format_table(_leaderboard(ctx, "conversation"), times=False) + "\n```"


@entry("policy-lab-conversation-best", "docs/policy_lab.md", cheap=False, seconds=600, block=False,
       command=f"radixsim leaderboard {CONVERSATION} --capacities 2000000 (best online policies; needs the trace)")
def _policy_lab_conversation_best(ctx) -> str:
    from radixsim.leaderboard import BOUND, OFFLINE

    lb = _leaderboard(ctx, "conversation")
    h = {r["policy"]: r for r in lb}
    online = sorted((r for r in lb if r["policy"] not in ("lru", *OFFLINE)), key=lambda r: -r["hit_rate"])
    a, b = online[:2]
    return (f"{a['policy']} {100 * a['hit_rate']:.2f} % ({_pct1(a['gap_closed'])} % of the "
            f"{100 * h['lru']['hit_rate']:.2f} -> {100 * h[BOUND]['hit_rate']:.2f} gap; {b['policy']} "
            f"{100 * b['hit_rate']:.2f} %, {_pct1(b['gap_closed'])} %); belady-node "
            f"{100 * h['belady-node']['hit_rate']:.2f} % ({_pct1(h['belady-node']['gap_closed'])} %)")


def _short(n: float) -> str:
    """Tokens to three significant digits: 219k, 1.58M, 21.9M."""
    for div, unit in ((1e6, "M"), (1e3, "k"), (1, "")):
        if n >= div:
            v = n / div
            return f"{v:.{max(0, 2 - len(str(int(v))) + 1)}f}{unit}"
    return str(n)


def _curve_check(opts, points: int, k: int, capacities=None, jobs: int = 1) -> dict:
    from radixsim.curve import run_curve

    return run_curve(opts, ["lru"], capacities, points, None, jobs, k)["check"]


def _curve_cells(chk: dict) -> str:
    """'8 (219k .. 21.9M tokens) | 0.36 points (curve 19.91 vs replay 19.55 % at 1.58M)'."""
    pts = chk["points"]
    w = max(pts, key=lambda p: abs(p["curve"] - p["replay"]))
    d = chk["max_diff_points"]
    diff = f"{d:.2f}" if d >= 0.01 else f"{d:.3f}"
    return (f"{len(pts)} ({_short(pts[0]['capacity_tokens'])} .. {_short(pts[-1]['capacity_tokens'])} tokens) | "
            f"{diff} points (curve {100 * w['curve']:.2f} vs replay {100 * w['replay']:.2f} % at "
            f"{_short(w['capacity_tokens'])})")


def _curve_entry(name, command, seconds, cheap, make):
    entry(name, "docs/policy_lab.md", cheap=cheap, seconds=seconds, block=False, command=command)(
        lambda ctx: _curve_cells(make(ctx)))


def _opts(**kw):
    from radixsim.replay import ReplayOptions

    return ReplayOptions(page_size=16, progress=False, **kw)


_curve_entry("policy-lab-curve-synthetic", "radixsim curve scenarios/data/mooncake_synthetic_trace.jsonl "
             "--page-size 16 --points 50 --check 8", 60, False,
             lambda ctx: _curve_check(_opts(trace=str(ROOT / "scenarios/data/mooncake_synthetic_trace.jsonl")),
                                      50, 8, jobs=ctx.runs.jobs))
_curve_entry("policy-lab-curve-conversation", f"radixsim curve {CONVERSATION} --page-size 16 --points 20 --check 6 "
             "(needs the trace)", 120, False,
             lambda ctx: _curve_check(_opts(trace=str(_conversation())), 20, 6, jobs=ctx.runs.jobs))
_curve_entry("policy-lab-curve-multiturn", "radixsim curve --workload multiturn --page-size 16 --points 10 --check 5",
             150, False, lambda ctx: _curve_check(_opts(workload="multiturn"), 10, 5, jobs=ctx.runs.jobs))

AGENTIC8 = (("num_sessions", 8), ("concurrency", 4))


@entry("policy-lab-curve-agentic", "docs/policy_lab.md", cheap=True, seconds=10, block=False,
       command="radixsim curve --workload agentic --set workload.num_sessions=8 --set workload.concurrency=4 "
               "--page-size 16 --capacities C1,C2,C3 --check 3 (C: the leaderboard's 10/25/50 % of the working set)")
def _policy_lab_curve_agentic(ctx) -> str:
    from radixsim.curve import lru_curve
    from radixsim.leaderboard import DEFAULT_FRACTIONS

    opts = _opts(workload="agentic", workload_set=AGENTIC8)
    ws = lru_curve(opts).pages * 16
    caps = sorted({max(16, int(ws * f) // 16 * 16) for f in DEFAULT_FRACTIONS})
    chk = _curve_check(opts, 0, 3, caps, ctx.runs.jobs)
    return (" / ".join(_short(p["capacity_tokens"]) for p in chk["points"]) + " | " +
            " / ".join(f"{100 * abs(p['curve'] - p['replay']):.1f}" for p in chk["points"]) + " points")


# docs/sources/attention_backends.md (renderers: benchmarks/regen_clock.py)
@entry("attention-backend-curve", "docs/sources/attention_backends.md", cheap=True, seconds=1,
       command="sim/opdata/attention_backends.json (flashinfer, a100) against OperatorCostModel('Qwen3-8B', "
               "'a100-40gbx1', 1).breakdown(((n, c),)) per layer")
def _attention_backend_curve(ctx) -> str:
    return clock_renderers().attention_backend_curve(ctx, table)


@entry("attention-backend-effect", "docs/sources/attention_backends.md", cheap=False, seconds=150,
       command="radixsim validate A1..A4 as mapped (engine.attention_backend triton, the runs' flag) and with "
               "the key removed (the model's own curve), seed 0")
def _attention_backend_effect(ctx) -> str:
    return clock_renderers().attention_backend_effect(ctx, table)


# docs/figure7.md ----------------------------------------------------------------------------
def _fig7():
    import fig7_tree_core

    return fig7_tree_core


@entry("figure7-reductions", "docs/figure7.md", cheap=False, seconds=300,
       command="python benchmarks/fig7_tree_core.py (figure7.json reduction_pct)")
def _figure7_reductions(ctx) -> str:
    return _fig7().reduction_table()


@entry("figure7-tree-cpu", "docs/figure7.md", cheap=False, seconds=300,
       command="python benchmarks/fig7_tree_core.py (figure7.json tree_cpu_us_per_request)")
def _figure7_tree_cpu(ctx) -> str:
    return _fig7().cpu_table()
