"""`radixsim plan`: the smallest (or largest) value of one scenario key that meets a target on a
summary figure, found by bracketing on a monotone metric, with the evidence.

Search (k-section, k = the executor's parallelism): evaluate both ends of the range; if the
target holds at the high end only, the answer is the smallest value that meets it (the bracket
[fails, meets] shrinks); at the low end only, the largest value that meets it; at both, the low
end (or the high end with ``largest``); at neither, no answer in the range. Each round runs k
evenly spaced interior points at once (rounded to whole pages for token keys) until the
bracket is narrower than the tolerance (default: 1% of the range, at least one page). Every
point is a normal result directory under ``OUT/points/KEY=VALUE-HASH`` (HASH: that of the
point's fully resolved scenario) and is reused when the command is run again. ``OUT/plan.yaml``
ties OUT to one plan (the scenario after --set, the key, the target, smallest or largest and
the costs): another plan there is refused,
and ``OUT/.lock`` is held while a plan runs (a second one on OUT refuses).

Monotonicity is checked at the visited points: for "smallest meeting", once a point meets the
target every larger one should; violations are listed (the answer is then the smallest
meeting point of the bracket found, not a proof).

Costs (optional): a configuration costs ``gpus x gpu_hour x duration_h + l2_GiB x host_gib +
l3_GiB x l3_gib`` (tier sizes in the model's FULL bytes per token); the cheapest evaluated
point that meets the target is reported beside the threshold.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from pathlib import Path

from scenarios.scenario import ScenarioError, apply_sets, resolve, set_key
from scenarios.schema import is_size_key
from scenarios.units import parse_size

from .outputs import owned_dir, scenario_key, write
from .results import SUMMARY_KEYS
from .sweep import LocalExecutor, done_summary, progress_bar

OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
METRICS = [k for k in SUMMARY_KEYS if k != "requests"] + ["queue_mean_s", "load_mean_s", "compute_mean_s"]


def parse_target(text: str) -> tuple[str, str, float]:
    """'hit_rate_last10 >= 0.95' -> ('hit_rate_last10', '>=', 0.95)."""
    parts = text.replace(">=", " >= ").replace("<=", " <= ").split()
    if len(parts) == 3 and parts[1] in ("<", ">") or len(parts) != 3:
        for op in (">", "<"):
            if len(parts) == 1 and op in text:
                a, b = text.split(op, 1)
                parts = [a.strip(), op, b.strip()]
    if len(parts) != 3 or parts[1] not in OPS:
        raise ScenarioError(f"--target {text!r}: expected \"METRIC OP VALUE\" with OP one of >=, <=, >, <")
    metric, op, value = parts
    if metric not in METRICS:
        raise ScenarioError(f"--target {text!r}: unknown metric {metric!r}; expected a summary.json field: "
                            + ", ".join(METRICS))
    try:
        v = float(value)
    except ValueError:
        raise ScenarioError(f"--target {text!r}: {value!r} is not a number") from None
    if not math.isfinite(v):
        raise ScenarioError(f"--target {text!r}: {value!r} is not a finite number; expected a value a summary "
                            "figure can be compared with")
    return metric, op, v


@dataclass
class PlanResult:
    key: str
    target: tuple
    answer: int | None
    direction: str  # "smallest" / "largest"
    evidence: list = field(default_factory=list)  # [(value, metric, meets, cost)]
    monotone: bool = True
    violations: list = field(default_factory=list)
    cheapest: tuple | None = None  # (value, cost)
    message: str = ""


def _bpt(raw: dict, where: str) -> float:
    from scenarios import presets

    sc = resolve(raw, where)
    return presets.bytes_per_token(sc.model, "full"), sc


def _range(text: str | None, bpt: float, key: str) -> tuple[int, int]:
    if text is None:
        raise ScenarioError(f"--range: required for {key}; expected LO:HI (tokens or sizes like 10GiB:2TiB)")
    lo_s, sep, hi_s = text.partition(":")
    if not sep:
        raise ScenarioError(f"--range {text!r}: expected LO:HI (tokens or sizes like 10GiB:2TiB)")
    if not is_size_key(key):  # a count (workload.num_clients): a byte unit would become tokens
        bpt = 0
    hint = (f"{key} is not a size; expected plain numbers" if not is_size_key(key)
            else "give the KV bytes per token to convert it to tokens")
    try:
        lo = parse_size(lo_s, "--range", bpt, hint=hint)
        hi = parse_size(hi_s, "--range", bpt, hint=hint)
    except ValueError as e:
        raise ScenarioError(str(e)) from None
    if lo is None or hi is None or not lo < hi:
        raise ScenarioError(f"--range {text!r}: expected LO < HI")
    return lo, hi


def _cost(sc, summary: dict, costs: dict) -> float | None:
    if not costs:
        return None
    from scenarios import presets

    gib = presets.bytes_per_token(sc.model, "full") / 2**30
    c = sc.doc["cache"]
    l2 = c.get("l2_tokens") or 0
    l3 = c.get("l3_tokens") or 0
    l3 = 0 if l3 == "unbounded" else l3
    dur_h = (summary.get("duration_s") or 0.0) / 3600
    return (costs.get("gpu_hour", 0.0) * sc.tp * dur_h + costs.get("host_gib", 0.0) * l2 * gib
            + costs.get("l3_gib", 0.0) * l3 * gib)


def plan(raw: dict, key: str, target_text: str, out_dir, *, range_text: str | None = None, largest: bool = False,
         tol: int | None = None, executor=None, costs: dict | None = None, where: str = "<scenario>",
         max_rounds: int = 30, progress: bool = False) -> PlanResult:
    """Find the threshold value of `key` (module docstring). Writes points under out_dir,
    which belongs to this plan (`outputs.owned_dir`: locked, and refused if it holds another
    plan's points)."""
    target = parse_target(target_text)
    bpt, sc0 = _bpt(raw, where)
    lo, hi = _range(range_text, bpt, key)
    page = sc0.cache.page_size if key.endswith("_tokens") else 1
    tol = max(page, (hi - lo) // 100) if tol is None else max(1, tol)
    executor = executor or LocalExecutor()
    k = max(1, getattr(executor, "jobs", None) or 2)
    res = PlanResult(key, target, None, "largest" if largest else "smallest")
    identity = {"scenario": raw, "vary": key, "target": list(target), "direction": res.direction,
                "costs": dict(sorted((costs or {}).items()))}  # what plan.json answers: a rerun must ask the same
    with owned_dir(out_dir, identity, "plan") as out:
        (out / "points").mkdir(exist_ok=True)
        ev = _Evaluator(raw, key, target, out, where, executor, costs or {}, progress)
        try:
            _search(ev, res, lo, hi, tol, page, k, max_rounds)
        finally:
            ev.close()
    res.evidence = [(x, *ev.seen[x]) for x in sorted(ev.seen)]
    res.monotone, res.violations = _check_monotone(res.evidence, res.direction)
    ok = [(c, x) for x, _, good, c in res.evidence if good and c is not None]
    if ok:
        c, x = min(ok)
        res.cheapest = (x, c)
    return res


class _Evaluator:
    """Runs (or reuses) plan points: `seen` maps value -> (metric, meets, cost). A point is
    `OUT/points/KEY=VALUE-HASH`, HASH that of its fully resolved scenario."""

    def __init__(self, raw, key, target, out: Path, where, executor, costs, progress: bool):
        self.raw, self.key, self.target, self.out, self.where = raw, key, target, out, where
        self.executor, self.costs = executor, costs
        self.seen: dict[int, tuple] = {}
        self.scs: dict = {}  # value -> resolved scenario
        self.bar = progress_bar(progress, None, 0, f"plan {key}")

    def __call__(self, xs) -> None:
        tasks = []
        for x in sorted(set(xs) - set(self.seen)):
            pt = apply_sets(self.raw, [], self.where)
            set_key(pt, self.key, x, f"plan {self.key}")
            label = f"{self.where} [{self.key}={x}]"
            sc = self.scs[x] = resolve(pt, label)  # one-line error before anything runs
            d = self.out / "points" / f"{self.key}={x}-{scenario_key(sc.doc)}"
            s = done_summary(d, scenario_key(sc.doc))
            if s is not None:
                self.record(x, s)
            else:
                tasks.append((x, pt, label, str(d)))
        if tasks:
            self.executor.map(tasks, self.record)

    def record(self, x, s: dict) -> None:
        metric, op, value = self.target
        m = s.get(metric)
        if m is None:
            raise ScenarioError(f"--target: {metric} is null for {self.key}={x} (e.g. no rounds); expected a number")
        self.seen[x] = (m, OPS[op](m, value), _cost(self.scs[x], s, self.costs))
        if self.bar is not None:
            self.bar.update()
            self.bar.set_postfix_str(f"{self.key}={x:,}: {metric} {m:.4g}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _search(evaluate, res: PlanResult, lo: int, hi: int, tol: int, page: int, k: int, max_rounds: int) -> None:
    """Bracket the threshold (module docstring); sets res.answer, direction, message."""
    metric, op, value = res.target
    evaluate([lo, hi])
    seen = evaluate.seen
    meets_lo, meets_hi = seen[lo][1], seen[hi][1]
    if meets_lo and meets_hi:
        res.answer = hi if res.direction == "largest" else lo
        res.message = f"the target holds at both ends of the range; answer: the {res.direction} value"
        return
    if not meets_lo and not meets_hi:
        res.message = "the target is met at neither end of the range: no answer in it (widen --range)"
        return
    increasing = meets_hi  # meets at hi only: smallest meeting value
    res.direction = "smallest" if increasing else "largest"
    a, b = lo, hi  # invariant: increasing -> a fails, b meets; else a meets, b fails
    for _ in range(max_rounds):
        if b - a <= tol:
            break
        step = (b - a) / (k + 1)
        xs = sorted({min(b - page, max(a + page, int(round((a + step * i) / page)) * page))
                     for i in range(1, k + 1)})
        xs = [x for x in xs if a < x < b]
        if not xs:
            break
        evaluate(xs)
        for x in xs:
            if seen[x][1] == increasing:  # meets (increasing) / fails (decreasing): new b
                b = min(b, x)
        a = max([x for x in seen if x < b and seen[x][1] != increasing] + [a])
    res.answer = b if increasing else a
    res.message = (f"{res.direction} {res.key} meeting {metric} {op} {value:g}: {res.answer:,} "
                   f"(bracket [{a:,}, {b:,}], tolerance {tol:,})")


def _check_monotone(evidence, direction: str):
    """For 'smallest': once a visited point meets the target, every larger one should."""
    flags = [(x, good) for x, _, good, _ in evidence]
    if direction == "largest":
        flags = [(x, not g) for x, g in flags]
    bad = []
    seen_meet = None
    for x, good in flags:
        if good and seen_meet is None:
            seen_meet = x
        elif not good and seen_meet is not None:
            bad.append((seen_meet, x))
    return not bad, bad


def format_result(res: PlanResult) -> str:
    metric, op, value = res.target
    lines = [f"{'value':>16} {metric:>18} {'meets':>6}" + (f" {'cost':>12}" if any(e[3] is not None
                                                                                for e in res.evidence) else "")]
    for x, m, good, c in res.evidence:
        lines.append(f"{x:>16,} {m:>18.6g} {'yes' if good else 'no':>6}" + (f" {c:>12.4g}" if c is not None else ""))
    lines.append(res.message)
    if not res.monotone:
        lines.append("not monotone at the visited points: " + "; ".join(
            f"meets at {a:,} but not at {b:,}" for a, b in res.violations))
    else:
        lines.append(f"monotone at the {len(res.evidence)} visited points")
    if res.cheapest is not None:
        lines.append(f"cheapest evaluated configuration meeting the target: {res.key}={res.cheapest[0]:,} "
                     f"(cost {res.cheapest[1]:.4g})")
    return "\n".join(lines)


def write_outputs(res: PlanResult, out_dir) -> None:
    """plan.json, plan.csv and the capacity curve plot (plan.png)."""
    out = Path(out_dir)
    metric, op, value = res.target
    doc = {"key": res.key, "target": f"{metric} {op} {value:g}", "answer": res.answer, "direction": res.direction,
           "monotone": res.monotone, "violations": res.violations, "cheapest": res.cheapest,
           "message": res.message,
           "evidence": [{"value": x, metric: m, "meets": g, "cost": c} for x, m, g, c in res.evidence]}
    write(out / "plan.json", doc)
    write(out / "plan.csv", ([x, m, int(g), c] for x, m, g, c in res.evidence),
          columns=[res.key, metric, "meets", "cost"])
    from analysis.plan_plot import plot_capacity_curve

    plot_capacity_curve([x for x, *_ in res.evidence], [m for _, m, *_ in res.evidence], res.key, metric,
                        out / "plan.png", target=value, answer=res.answer)


__all__ = ["plan", "parse_target", "format_result", "write_outputs", "PlanResult", "METRICS"]
