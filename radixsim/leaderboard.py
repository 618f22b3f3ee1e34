"""`radixsim leaderboard`: every registered policy on every trace at several capacities.

One exact replay per (trace, capacity, policy), in a process pool. For each trace and capacity
the table gives each policy's hit rate, the fraction of the LRU -> bound gap it closes
((h - h_lru) / (h_bound - h_lru); empty where the gap is under 0.1 point) and its replay time.
The bound (row `bound`) is not a policy: it is `cache_core.belady.PageBound`, a page-level
relaxation that no policy of the tree can beat (the proof is in that module); `belady-node`
is an offline heuristic ranked like the others, but left out of the best online policy.
Capacities are fractions of each trace's working set (every page it ever caches, from the LRU
stack pass) unless given in tokens.

The default corpus is generated at run time (deterministic; nothing large is committed): the
shared Mooncake synthetic trace, a multi-turn workload with sessions and two agentic workloads
with tool pauses and session-close events (generic lengths, and SWE-bench agent lengths:
`CORPUS`), and the real Mooncake conversation trace
when it was fetched to `REAL_TRACE` (git ignores it).
"""
from __future__ import annotations

from pathlib import Path

from cache_core.eviction import policy_names
from scenarios.agentic import SWE_AGENT

import time

from cache_core.belady import PageBound

from .curve import lru_curve, replay_points
from .outputs import write
from .replay import ReplayOptions, request_stream

BOUND = "bound"  # the PageBound row (not a registered policy)
OFFLINE = ("belady-node", BOUND)  # need the future: never the best online policy
COLUMNS = ["trace", "capacity_tokens", "capacity_fraction", "policy", "hit_rate", "gap_closed", "replay_s"]
DEFAULT_FRACTIONS = (0.1, 0.25, 0.5)
SHARED_TRACE = Path(__file__).resolve().parent.parent / "scenarios" / "data" / "mooncake_synthetic_trace.jsonl"
# name -> ReplayOptions fields (sizes kept small so the whole corpus runs in minutes)
CORPUS = {
    "mooncake_synthetic": {"trace": str(SHARED_TRACE)},
    "multiturn": {"workload": "multiturn", "workload_set": (("num_clients", 16), ("num_rounds", 12),
                                                           ("request_length", 1024), ("output_length", 16))},
    "agentic": {"workload": "agentic", "workload_set": (("num_sessions", 8), ("concurrency", 4))},
    # the same with lengths from published SWE-bench agent statistics (scenarios/agentic.py: SWE_AGENT)
    "agentic_swe": {"workload": "agentic", "workload_set": (("num_sessions", 8), ("concurrency", 4),
                                                            *SWE_AGENT.items())},
}
# Variants that leak less of the future (issue 27), named BASE~VARIANT: the multi-turn clients in
# a new random order every round (strict round-robin: each returns exactly N requests later), and
# the agentic sessions' close events (1-6 lines after the last turn) 16 requests late or gone.
LATE_CLOSE = 16
VARIANTS = {
    "multiturn~random": ("multiturn", {"workload_set": (*CORPUS["multiturn"]["workload_set"],
                                                         ("ready_queue_policy", "random"))}),
    **{f"{base}~{name}": (base, {"close_delay": delay}) for base in ("agentic", "agentic_swe")
       for name, delay in ((f"late{LATE_CLOSE}", LATE_CLOSE), ("noclose", None))},
}


# the real Mooncake conversation trace, when fetched there (not shipped; docs/policy_lab.md)
REAL_TRACE = SHARED_TRACE.parent / "conversation_trace.jsonl"


def corpus(traces, page_size: int) -> dict:
    """name -> ReplayOptions: the given trace files (named by file stem), or the default corpus
    and its VARIANTS (plus the real conversation trace when REAL_TRACE exists)."""
    if traces:
        return {Path(t).stem: ReplayOptions(trace=str(t), page_size=page_size, progress=False) for t in traces}
    kws = dict(CORPUS, **{name: {**CORPUS[base], **kw} for name, (base, kw) in VARIANTS.items()},
               **({"mooncake_conversation": {"trace": str(REAL_TRACE)}} if REAL_TRACE.is_file() else {}))
    return {name: ReplayOptions(page_size=page_size, progress=False, **kw) for name, kw in kws.items()}


def run_leaderboard(sources: dict, policies=None, capacities=None, fractions=DEFAULT_FRACTIONS,
                    jobs: int = 1, out_dir=None, progress: bool = False) -> list[dict]:
    """Rows of the leaderboard (COLUMNS), trace by trace, capacity by capacity, policies sorted."""
    policies = sorted(set(policies or policy_names()) - {BOUND})
    if "lru" not in policies:
        raise ValueError("the leaderboard needs 'lru' among the policies")
    combos, bounds = [], {}
    for name, opts in sources.items():
        ws = lru_curve(opts).pages * opts.page_size
        caps = capacities or sorted({max(opts.page_size, int(ws * f) // opts.page_size * opts.page_size)
                                     for f in fractions})
        combos += [(name, c, c / ws if ws else None, p) for c in caps for p in [*policies, BOUND]]
        t0 = time.perf_counter()
        pb = PageBound(request_stream(opts), opts.page_size)
        per = (time.perf_counter() - t0) / len(caps)
        for c in caps:
            t0 = time.perf_counter()
            bounds[(name, c)] = (pb.hit_rate(c), per + time.perf_counter() - t0)
    replays = [(sources[n], p, c) for n, c, _, p in combos if p != BOUND]
    results = iter(replay_points(replays, jobs, "leaderboard", progress))
    rows = [{"trace": n, "capacity_tokens": c, "capacity_fraction": f, "policy": p,
             **dict(zip(("hit_rate", "replay_s"), bounds[(n, c)] if p == BOUND else next(results)))}
            for n, c, f, p in combos]
    _gaps(rows)
    if out_dir is not None:
        write_leaderboard(rows, out_dir)
    return rows


def _gaps(rows) -> None:
    """Fill gap_closed: (h - h_lru) / (h_bound - h_lru) per (trace, capacity)."""
    by = {(r["trace"], r["capacity_tokens"], r["policy"]): r["hit_rate"] for r in rows}
    for r in rows:
        lru, bound = by[(r["trace"], r["capacity_tokens"], "lru")], by[(r["trace"], r["capacity_tokens"], BOUND)]
        gap = bound - lru
        r["gap_closed"] = (r["hit_rate"] - lru) / gap if gap > 1e-3 else None


def format_table(rows, times: bool = True) -> str:
    head = f"{'trace':<20} {'capacity':>12} {'policy':<12} {'hit %':>7} {'gap %':>7}" + (
        f" {'s/replay':>9}" if times else "")
    lines = [head, "-" * len(head)]
    for r in rows:
        gap = "-" if r["gap_closed"] is None else f"{round(100 * r['gap_closed'], 1) + 0.0:7.1f}"  # no -0.0
        label = {BOUND: "bound*", "belady-node": "belady-node+"}.get(r["policy"], r["policy"])
        line = (f"{r['trace']:<20} {r['capacity_tokens']:>12,} {label:<12} {100 * r['hit_rate']:7.2f} "
                f"{gap:>7}")
        lines.append(line + (f" {r['replay_s']:9.2f}" if times else ""))
    lines.append("gap % = share of the LRU -> bound gap closed; * bound = page-level upper bound (no policy "
                 "can exceed it); + belady-node = offline heuristic, not a bound")
    return "\n".join(lines)


def variant_table(rows) -> str:
    """Each base trace beside its VARIANTS present in `rows`: one line per (capacity, policy), one
    column per variant, "hit % (gap %)" against each variant's own bound ("" without variants)."""
    by = {(r["trace"], r["capacity_tokens"], r["policy"]): r for r in rows}
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    out = []
    for base in traces:
        cols = [base] + [t for t in traces if t.startswith(base + "~")]
        if len(cols) == 1:
            continue
        head = f"{'capacity':>10} {'policy':<13}" + "".join(f" {c:>21}" for c in cols)
        out += [head, "-" * len(head)]
        for (t, c, p), r in by.items():
            if t != base:
                continue
            cells = []
            for v in cols:
                x = by.get((v, c, p))
                gap = "-" if x is None or x["gap_closed"] is None else f"{100 * x['gap_closed']:.1f}"
                cells.append("" if x is None else f"{100 * x['hit_rate']:.2f} ({gap})")
            out.append(f"{c:>10,} {p:<13}" + "".join(f" {x:>21}" for x in cells))
        out.append("")
    return "\n".join(out[:-1])


def best_online(rows) -> list[dict]:
    """Per (trace, capacity): the online policy (not lru, not offline) closing most of the gap."""
    best: dict = {}
    for r in rows:
        if r["policy"] in ("lru", *OFFLINE) or r["gap_closed"] is None:
            continue
        k = (r["trace"], r["capacity_tokens"])
        if k not in best or r["gap_closed"] > best[k]["gap_closed"]:
            best[k] = r
    return list(best.values())


def write_leaderboard(rows, out_dir) -> list[Path]:
    from analysis.leaderboard_plot import gap_figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "leaderboard.csv", rows, columns=COLUMNS)
    write(out / "leaderboard.json", {"rows": rows, "best_online": best_online(rows)})
    variants = variant_table(rows)
    (out / "leaderboard.txt").write_text(format_table(rows) + "\n" + (f"\n{variants}\n" if variants else ""))
    gap_figure(rows, out / "leaderboard")
    return [out / "leaderboard.csv", out / "leaderboard.json", out / "leaderboard.txt", out / "leaderboard.png"]

