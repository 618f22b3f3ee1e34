"""Calibrate sim/tree_cpu.py's cost tables on this machine (issue 31 item 2).

Synthetic conversation traces (sessions that resend their whole history plus a random number
of new tokens each round and get a random number of output tokens; one trace with an
unbounded pool, one with a pool small enough to evict) are replayed

- through SGLang 0.5.23's own caches by the reference harness (``shared/tools/sglang_ref``,
  read-only, run in its venv): ``--impl unified`` (UnifiedRadixCache on the Python
  UnifiedTreeCore: ``sglang-python``) and ``--impl unified-rust`` (the bundled Rust TreeCore:
  ``sglang-rust``); it reports per request the microseconds of match, alloc (lock + evict +
  allocator) and insert (insert, the prompt-boundary insert, frees, unlock);
- through radixsim's own core (`ReplayStepper`, the same calls in the same order), timing its
  match, lock/unlock, insert and evict calls (``radixsim``).

The operation counts of each request come from radixsim's replay with a `TreeOpCounter`
attached (the two trees have the same shape: tests/test_sglang_ref.py). Per-unit costs are fitted
to them with numpy least squares (a feature whose coefficient comes out negative is dropped
and the fit redone), per timed group:

    match_us  ~ match.calls + match.key_pages + match.nodes + match.pages + match.copy_pages
    alloc_us  ~ lock.calls (lock + the allocator call) + lock.nodes + evict.calls + evict.tree_nodes + evict.popped
    insert_us ~ insert.calls + insert.nodes + insert.pages + insert.copy_pages + insert.new_pages
                + insert.splits (the unlock's walk, priced at the alloc fit's lock.nodes, taken out first)

SWA and MAMBA (``--hybrid``, after the FULL fit: it keeps the FULL features and refits vote.*):
benchmarks/sglang_hybrid_ref.py serves each request with SGLang's FULL-only, SWA and MAMBA caches
one after the other (the same machine load); per request the hybrid time over the FULL time,
less the FULL table's price of the difference of their FULL counts, is fitted to the votes and
tombstones (SWA and MAMBA apart). Without --hybrid vote.* are set to lock.nodes' cost of the same
core (a placeholder until --hybrid runs). tier.ops is not measured: one lock call, the Python
core's for both SGLang tables (the Rust core is L1 only); docs/figure7.md says so.

    python benchmarks/fit_tree_cpu.py [--sessions 4] [--rounds 100] [--harness DIR] [--harness-python PY]
        [-o sim/opdata/tree_cpu.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cache_core import CacheConfig, MambaConfig, RadixCache, ReplayStepper, SwaConfig  # noqa: E402
from sim.tree_cpu import KEYS, TABLE, TreeOpCounter  # noqa: E402

GROUPS = {
    "match": ("match.calls", "match.key_pages", "match.nodes", "match.pages", "match.copy_pages"),
    "alloc": ("lock.calls", "lock.nodes", "evict.calls", "evict.tree_nodes", "evict.popped"),
    "insert": ("insert.calls", "insert.nodes", "insert.pages", "insert.copy_pages", "insert.new_pages",
               "insert.splits"),
}


def conversation(sessions: int, rounds: int, seed: int):
    """[(rid, prompt, output)]: round-major, each session's prompt = its history + new tokens
    (20..400), output 20..200 tokens; token ids unique per position of each session."""
    rng = np.random.default_rng(seed)
    hist = [[] for _ in range(sessions)]
    nxt, out = 1, []
    for r in range(rounds):
        for s in range(sessions):
            n_new, n_out = int(rng.integers(20, 401)), int(rng.integers(20, 201))
            hist[s] += range(nxt, nxt + n_new)
            nxt += n_new
            o = list(range(nxt, nxt + n_out))
            nxt += n_out
            out.append((f"s{s}r{r}", list(hist[s]), o))
            hist[s] += o
    return out


def radixsim_replay(reqs, capacity, config: CacheConfig | None = None):
    """Per request: the operation counts and the microseconds of radixsim's match, alloc (lock
    + evict) and insert (insert + unlock) calls. `config` (SWA / MAMBA) replaces the FULL-only
    cache of `capacity` tokens."""
    cache = RadixCache(config or CacheConfig(page_size=1, capacity_tokens=capacity))
    counter = TreeOpCounter().attach(cache)
    spent = {"match": 0.0, "alloc": 0.0, "insert": 0.0}

    def timed(name, group):
        f = getattr(cache, name)

        def g(*a, **kw):
            t0 = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                spent[group] += time.perf_counter() - t0
        setattr(cache, name, g)

    for name, group in (("match", "match"), ("lock", "alloc"), ("evict", "alloc"), ("insert", "insert"),
                        ("unlock", "insert")):
        timed(name, group)
    step = ReplayStepper(cache)
    counts, times = [], []
    for _, prompt, output in reqs:
        for k in spent:
            spent[k] = 0.0
        step.step(np.array(prompt, dtype=np.int64), np.array(output, dtype=np.int64))
        counts.append(counter.take())
        times.append({k: v * 1e6 for k, v in spent.items()})
    return counts, times


def sglang_replay(reqs, capacity, impl, harness: Path, python: str):
    with tempfile.TemporaryDirectory() as d:
        trace, out = Path(d) / "trace.jsonl", Path(d) / "out.jsonl"
        with trace.open("w") as fh:
            for rid, prompt, output in reqs:
                fh.write(json.dumps({"rid": rid, "tokens": prompt, "output_tokens": output}) + "\n")
        cmd = [python, str(harness / "run_sglang_radix.py"), str(trace), "--page-size", "1", "--impl", impl,
               "--capacity", str(capacity or 0), "-o", str(out)]
        subprocess.run(cmd, check=True, cwd=harness, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows = [r for r in rows if not r.get("summary")]
    if len(rows) != len(reqs):
        raise RuntimeError(f"{impl}: {len(rows)} rows for {len(reqs)} requests")
    return [{"match": r["match_us"], "alloc": r["alloc_us"], "insert": r["insert_us"]} for r in rows], rows


def fit(counts, times, group, known=None):
    """Non-negative per-unit costs of `group`'s features (drop a negative one, refit).
    `known` (insert): the lock.nodes cost from the alloc group; the unlock's walk in the insert
    group (half the request's lock.nodes) is priced at it and taken out first."""
    feats = list(GROUPS[group])
    X = np.array([[c.get(k, 0) for k in feats] for c in counts], dtype=float)
    y = np.array([t[group] for t in times], dtype=float)
    if known is not None:
        y = y - known * np.array([c.get("lock.nodes", 0) / 2 for c in counts], dtype=float)
    return nonneg_fit(X, y, feats)


def nonneg_fit(X, y, feats):
    """(feature -> non-negative coefficient, R^2, sum of y) of y ~ X: least squares over the
    features present, dropping the most negative coefficient and refitting until none is."""
    active = [i for i in range(len(feats)) if X[:, i].any()]
    coef: list = []
    while active:
        coef, *_ = np.linalg.lstsq(X[:, active], y, rcond=None)
        neg = [a for a, v in zip(active, coef) if v < 0]
        if not neg:
            break
        active.remove(min(neg, key=lambda a: coef[active.index(a)]))
    out = dict.fromkeys(feats, 0.0)
    for a, v in zip(active, coef if active else []):
        out[feats[a]] = float(v)
    pred = X @ np.array([out[f] for f in feats])
    r2 = 1 - ((y - pred) ** 2).sum() / max(((y - y.mean()) ** 2).sum(), 1e-12)
    return out, float(r2), float(y.sum())


def table_of(counts, times):
    coef, quality = {}, {}
    for g in ("match", "alloc", "insert"):
        c, r2, total = fit(counts, times, g, coef["lock.nodes"] if g == "insert" else None)
        coef.update(c)
        quality[g] = {"r2": round(r2, 4), "measured_us": round(total, 1)}
    coef["vote.votes"] = coef["lock.nodes"]  # not measured: one per-node payload visit, as a lock's per-node step
    coef["vote.tombstones"] = coef["lock.nodes"]
    coef["vote.mamba_votes"] = coef["vote.mamba_tombstones"] = coef["lock.nodes"]  # until --hybrid measures them
    coef["tier.ops"] = coef["lock.calls"]  # not measured: one bookkeeping call
    return {k: round(coef.get(k, 0.0), 6) for k in KEYS}, quality


# -- SWA / MAMBA votes and tombstones (benchmarks/sglang_hybrid_ref.py) ---------------------
WINDOW = 128  # gpt-oss-20b's sliding window (shared/MODELS.md); the calibration trace's SWA window
VOTE_FEATS = ("vote.votes", "vote.tombstones", "vote.mamba_votes", "vote.mamba_tombstones")


def hybrid_traces(reqs, sessions):
    """{name: (radixsim CacheConfigs {full, swa, mamba}, harness options)}: unbounded, and with
    pools small enough to evict (SWA windows and MAMBA states from internal nodes: tombstones)."""
    longest = max(len(p) + len(o) for _, p, o in reqs[-sessions:])
    cap, swa_cap, slots = 4 * longest, 3 * 600, 3 * sessions  # 600: the most tokens one request computes
    return {
        "unbounded": ({"full": CacheConfig(page_size=1), "swa": CacheConfig(page_size=1, swa=SwaConfig(window_tokens=WINDOW)),
                       "mamba": CacheConfig(page_size=1, mamba=MambaConfig())}, []),
        "evicting": ({"full": CacheConfig(page_size=1, capacity_tokens=cap),
                      "swa": CacheConfig(page_size=1, capacity_tokens=cap,
                                         swa=SwaConfig(window_tokens=WINDOW, capacity_tokens=swa_cap)),
                      "mamba": CacheConfig(page_size=1, capacity_tokens=cap, mamba=MambaConfig(slots=slots))},
                     ["--capacity", str(cap), "--swa-capacity", str(swa_cap), "--mamba-slots", str(slots)]),
    }


def hybrid_replay(reqs, impl, opts, python: str, harness: Path):
    """{full, swa, mamba: [us per request]}: one harness process serves each request with the three
    caches one after the other (the same machine load for the three)."""
    with tempfile.TemporaryDirectory() as d:
        trace, out = Path(d) / "trace.jsonl", Path(d) / "out.jsonl"
        with trace.open("w") as fh:
            for rid, prompt, output in reqs:
                fh.write(json.dumps({"rid": rid, "tokens": prompt, "output_tokens": output}) + "\n")
        cmd = [python, str(ROOT / "benchmarks" / "sglang_hybrid_ref.py"), str(trace), "--component", "full",
               "--paired", "swa,mamba", "--impl", impl, "--window", str(WINDOW), "--harness", str(harness),
               "-o", str(out), *opts]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows = [r for r in rows if not r.get("summary")]
    if len(rows) != len(reqs) or any(r.get("oom") or r["swa"].get("oom") or r["mamba"].get("oom") for r in rows):
        raise RuntimeError(f"{impl}: {len(rows)} rows for {len(reqs)} requests or an OOM request")
    total = ("match_us", "alloc_us", "insert_us")
    return {"full": [sum(r[g] for g in total) for r in rows],
            **{k: [sum(r[k][g] for g in total) for r in rows] for k in ("swa", "mamba")}}


def fit_votes(counts, extra_us):
    """Non-negative us per vote and per tombstone: the hybrid cache's time over the FULL-only
    cache's on the same request (`extra_us`), fitted to the request's vote counts."""
    X = np.array([[c.get(k, 0) for k in VOTE_FEATS] for c in counts], dtype=float)
    y = np.array(extra_us, dtype=float)
    return nonneg_fit(X, y, list(VOTE_FEATS))


def hybrid_measure(reqs, cfgs, opts, a, harness: Path):
    """({kind: radixsim's counts per request}, {(core, kind): the least us per request of --repeat
    runs}) of one trace: radixsim's caches and SGLang's (Python and Rust cores)."""
    best: dict = {}
    cnt = {}
    for _ in range(a.repeat):
        got = {}
        for kind, cfg in cfgs.items():
            c, t = radixsim_replay(reqs, None, cfg)
            cnt[kind] = c
            got[("radixsim", kind)] = [sum(x.values()) for x in t]
        for core, impl in (("sglang-python", "python"), ("sglang-rust", "rust")):
            for kind, t in hybrid_replay(reqs, impl, opts, a.harness_python, harness).items():
                got[(core, kind)] = t
        for key, t in got.items():
            best[key] = t if key not in best else [min(x, y) for x, y in zip(best[key], t)]
    return cnt, best


def hybrid_main(a, harness: Path) -> int:
    """--hybrid: measure SWA and MAMBA through SGLang's hybrid caches and radixsim's, and refit
    only vote.* of the table in -o (the FULL features stay as the FULL calibration fitted them).
    Per request: the hybrid cache's time minus the FULL-only cache's on the same request (served
    right after each other, the least of --repeat runs each), less what the FULL table prices the
    difference of their FULL operation counts at, is fitted to the hybrid request's vote and
    tombstone counts."""
    reqs = conversation(a.sessions, a.rounds, a.seed)
    keep = [i for i in range(len(reqs)) if i >= a.sessions]  # the first round runs cold
    doc = json.loads(Path(a.out).read_text())
    full_coef = {core: {k: v for k, v in doc["cores"][core]["us_per_unit"].items() if not k.startswith("vote.")}
                 for core in doc["cores"]}
    counts, extra = [], {core: [] for core in doc["cores"]}
    quality = {core: {} for core in doc["cores"]}
    totals = {}
    for name, (cfgs, opts) in hybrid_traces(reqs, a.sessions).items():
        cnt, best = hybrid_measure(reqs, cfgs, opts, a, harness)
        for kind in ("swa", "mamba"):
            c = [cnt[kind][i] for i in keep]
            counts += c
            for k, v in (x for cc in c for x in cc.items()):
                totals[k] = totals.get(k, 0) + v
            for core in doc["cores"]:
                coef = full_coef[core]
                e = []
                for i in keep:
                    d_full = sum(coef.get(k, 0.0) * (cnt[kind][i].get(k, 0) - cnt["full"][i].get(k, 0))
                                 for k in set(cnt[kind][i]) | set(cnt["full"][i]) if not k.startswith("vote."))
                    e.append(best[(core, kind)][i] - best[(core, "full")][i] - d_full)
                extra[core] += e
                v, r2, tot = fit_votes(c, e)
                quality[core][f"{kind}-{name}"] = {
                    "us_per_unit": {k: round(x, 6) for k, x in v.items()}, "r2": round(r2, 4),
                    "extra_us": round(tot, 1), "median_extra_us": round(float(np.median(e)), 1),
                    **{k: sum(x.get(k, 0) for x in c) for k in VOTE_FEATS}}
        print(f"{name}: {len(reqs)} requests", file=sys.stderr)
    for core in doc["cores"]:
        v, r2, tot = fit_votes(counts, extra[core])
        doc["cores"][core]["us_per_unit"].update({k: round(x, 6) for k, x in v.items()})
        doc["cores"][core]["fit"]["vote"] = {"r2": round(r2, 4), "extra_us": round(tot, 1),
                                             "per_trace": quality[core]}
        print(core, json.dumps(v), f"r2 {r2:.3f}", json.dumps({k: q["median_extra_us"] for k, q in quality[core].items()}))
    doc["what"] = ("us per unit of each tree operation feature (sim/tree_cpu.py FEATURES), fitted by "
                   "benchmarks/fit_tree_cpu.py (vote.* by its --hybrid pass; tier.ops is not measured)")
    doc["calibration"]["hybrid"] = {"sessions": a.sessions, "rounds": a.rounds, "seed": a.seed, "repeat": a.repeat,
                                    "window": WINDOW, "machine_cpu": cpu_model(),
                                    "date": datetime.date.today().isoformat(),
                                    "traces": {k: v[1] for k, v in hybrid_traces(reqs, a.sessions).items()},
                                    "requests_fitted": len(counts), "op_totals": totals}
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--raw", help="also write the per-request counts and times here (JSON)")
    ap.add_argument("--from-raw", help="refit a --raw file instead of measuring")
    ap.add_argument("--harness", default=os.environ.get("SGLANG_REF",
                                                        str(ROOT.parent / "shared" / "tools" / "sglang_ref")),
                    help="the sglang_ref directory (default: $SGLANG_REF, else ../shared/tools/sglang_ref)")
    ap.add_argument("--harness-python", default=str(Path("~/.cache/sglang-ref/bin/python").expanduser()))
    ap.add_argument("-o", "--out", default=str(TABLE))
    ap.add_argument("--hybrid", action="store_true",
                    help="refit only vote.* (SWA/MAMBA) of the table in -o through benchmarks/sglang_hybrid_ref.py")
    a = ap.parse_args(argv)
    harness = Path(a.harness)
    if not a.from_raw and not (harness / "run_sglang_radix.py").is_file():
        print(f"fit_tree_cpu: --harness: {harness}: no run_sglang_radix.py; expected the sglang_ref directory",
              file=sys.stderr)
        return 2
    if a.hybrid:
        return hybrid_main(a, harness)
    if a.from_raw:  # refit saved measurements (--raw) without measuring again
        raw = json.loads(Path(a.from_raw).read_text())
        reqs = conversation(a.sessions, a.rounds, a.seed)  # the counts again (deterministic), the times as saved
        counts = [c for cap in raw["traces"].values() for c in radixsim_replay(reqs, cap)[0]]
        write(a, counts, raw["times"], raw["traces"])
        return 0
    reqs = conversation(a.sessions, a.rounds, a.seed)
    unique = sum(len(p) + len(o) for _, p, o in reqs[-a.sessions:])  # the last round holds every history
    traces = {"unbounded": None, "evicting": unique // 2}
    counts, measured = [], {"sglang-python": [], "sglang-rust": [], "radixsim": []}
    for name, cap in traces.items():
        runs = {core: [] for core in measured}
        for _ in range(a.repeat):  # the least of `repeat` runs per request and group: the machine is shared
            c, t = radixsim_replay(reqs, cap)
            runs["radixsim"].append(t)
            for core, impl in (("sglang-python", "unified"), ("sglang-rust", "unified-rust")):
                runs[core].append(sglang_replay(reqs, cap, impl, harness, a.harness_python)[0])
        counts += c
        for core, rs in runs.items():
            measured[core] += [{g: min(r[i][g] for r in rs) for g in GROUPS} for i in range(len(reqs))]
        print(f"{name}: {len(reqs)} requests, capacity {cap}", file=sys.stderr)
    if a.raw:
        Path(a.raw).write_text(json.dumps({"counts": counts, "times": measured, "traces": traces}))
    write(a, counts, measured, traces)
    return 0


def write(a, counts, measured, traces) -> None:
    # each trace's first round is left out of the fit: the harness process's first requests run
    # cold (1 ms and more for an empty match) and would set the per-call costs
    n = len(counts) // len(traces)
    keep = [i for i in range(len(counts)) if i % n >= a.sessions]
    counts = [counts[i] for i in keep]
    measured = {core: [t[i] for i in keep] for core, t in measured.items()}
    cores, quality = {}, {}
    for core, times in measured.items():
        cores[core] = {"us_per_unit": None}
        cores[core]["us_per_unit"], quality[core] = table_of(counts, times)
        cores[core]["fit"] = quality[core]
    # the Rust core is L1 only: tier bookkeeping stays in Python (SGLang's HiCache)
    cores["sglang-rust"]["us_per_unit"]["tier.ops"] = cores["sglang-python"]["us_per_unit"]["tier.ops"]
    totals = {k: 0 for k in KEYS}
    for c in counts:
        for k, v in c.items():
            totals[k] += v
    doc = {
        "what": "us per unit of each tree operation feature (sim/tree_cpu.py FEATURES), fitted by "
                "benchmarks/fit_tree_cpu.py; vote.* and tier.ops are not measured (see its docstring)",
        "machine": {"cpu": cpu_model(), "processor": platform.processor(), "python": platform.python_version(),
                    "date": datetime.date.today().isoformat()},
        "calibration": {"sessions": a.sessions, "rounds": a.rounds, "seed": a.seed, "repeat": a.repeat, "page_size": 1,
                        "traces": {k: {"capacity_tokens": v} for k, v in traces.items()},
                        "requests_fitted": len(counts), "first_round_left_out": True, "op_totals": totals},
        "cores": cores,
    }
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    for core, t in cores.items():
        print(core, json.dumps(t["us_per_unit"]), json.dumps(t["fit"]))


if __name__ == "__main__":
    sys.exit(main())
