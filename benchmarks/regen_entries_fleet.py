"""regen_docs entries of docs/fleet.md, docs/figure4.md and docs/figure6.md (registered on
import, in this order; benchmarks/regen_docs.py runs them; benchmarks/router_comparison.py reads
`SCORER_TABLE`)."""
from __future__ import annotations

from typing import Callable

from regen_core import entry, run_key, table


# docs/fleet.md ------------------------------------------------------------------------------
ROUTERS = ["round_robin", "least_load", "session_affinity", "cache_aware", "kv_overlap", "cache_aware_exact"]
SWEEP_CMD = "radixsim sweep {} --grid fleet.router=" + ",".join(ROUTERS) + " --out DIR"


def _router_runs(scenario: str) -> list:
    return [run_key(scenario, f"fleet.router={r}") for r in ROUTERS]


def _fleet(ctx, scenario: str, *sets: str) -> dict:
    return ctx.runs(scenario, *sets)["fleet"]


FLEET_COLUMNS = {  # a fleet table's column: (its figure in the run's "fleet" result, the format)
    "hit": (lambda f: f["hit_rate"], ".3f"), "device": (lambda f: f["hit_rate_device"], ".3f"),
    "storage": (lambda f: f["hit_rate_storage"], ".3f"),
    "TTFT p50 s": (lambda f: f["ttft_p50_s"], ".3f"), "TTFT p90 s": (lambda f: f["ttft_p90_s"], ".3f"),
    "TPOT p50 s": (lambda f: f["tpot_p50_s"], ".4f"), "TPOT p90 s": (lambda f: f["tpot_p90_s"], ".4f"),
    "SLO att.": (lambda f: f["slo_attainment"], ".3f"), "goodput req/s": (lambda f: f["goodput_rps"], ".2f"),
    "max/mean req": (lambda f: f["load_balance"]["requests"]["max_over_mean"], ".2f"),
}


def _fleet_table(first: str, runs: list, columns: list) -> str:
    """One row a run: [(its label, its "fleet" result)], the columns named in FLEET_COLUMNS."""
    return table([first, *columns], [[label, *(format(FLEET_COLUMNS[c][0](f), FLEET_COLUMNS[c][1]) for c in columns)]
                                     for label, f in runs])


def _router_table(ctx, scenario: str, columns: list) -> str:
    return _fleet_table("router", [(r, _fleet(ctx, scenario, f"fleet.router={r}")) for r in ROUTERS], columns)


@entry("fleet-multiturn-table", "docs/fleet.md", cheap=False, seconds=600, runs=_router_runs("fleet16-multiturn"),
       command=SWEEP_CMD.format("fleet16-multiturn"))
def _fleet_multiturn(ctx) -> str:
    return _router_table(ctx, "fleet16-multiturn", ["hit", "TTFT p50 s", "TTFT p90 s", "TPOT p90 s", "SLO att.",
                                                    "goodput req/s", "max/mean req"])


@entry("fleet-agentic-table", "docs/fleet.md", cheap=False, seconds=600, runs=_router_runs("fleet16-agentic"),
       command=SWEEP_CMD.format("fleet16-agentic"))
def _fleet_agentic(ctx) -> str:
    return _router_table(ctx, "fleet16-agentic", ["hit", "device", "storage", "TTFT p50 s", "TTFT p90 s",
                                                  "TPOT p90 s", "SLO att.", "goodput req/s", "max/mean req"])


def _inline_fleet(name: str, scenario: str, router: str, fmt: Callable) -> None:
    """An inline figure of one router's run (the prose beside the tables)."""
    entry(name, "docs/fleet.md", cheap=False, seconds=120, block=False,
          runs=[run_key(scenario, f"fleet.router={router}")],
          command=f"radixsim run {scenario} --set fleet.router={router}")(
        lambda ctx: fmt(_fleet(ctx, scenario, f"fleet.router={router}")))


_inline_fleet("fleet-multiturn-cache-aware-hit", "fleet16-multiturn", "cache_aware", lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-agentic-cache-aware-hit4", "fleet16-agentic", "cache_aware", lambda f: f"{f['hit_rate']:.4f}")
_inline_fleet("fleet-agentic-exact-hit4", "fleet16-agentic", "cache_aware_exact", lambda f: f"{f['hit_rate']:.4f}")
_inline_fleet("fleet-agentic-cache-aware-storage", "fleet16-agentic", "cache_aware",
              lambda f: f"{f['hit_rate_storage']:.3f}")
_inline_fleet("fleet-agentic-session-affinity-hit", "fleet16-agentic", "session_affinity",
              lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-multiturn-session-affinity-hit", "fleet16-multiturn", "session_affinity",
              lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-multiturn-kv-overlap-hit", "fleet16-multiturn", "kv_overlap", lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-agentic-kv-overlap-hit", "fleet16-agentic", "kv_overlap", lambda f: f"{f['hit_rate']:.3f}")
_inline_fleet("fleet-agentic-cache-aware-imbalance", "fleet16-agentic", "cache_aware",
              lambda f: f"{f['load_balance']['requests']['max_over_mean']:.2f}")

PD_RUNS = [run_key("fleet-agentic-pd-4p4d"), run_key("fleet-agentic-colocated-8")]


@entry("fleet-pd-table", "docs/fleet.md", cheap=False, seconds=300, runs=PD_RUNS,
       command="radixsim run fleet-agentic-pd-4p4d; radixsim run fleet-agentic-colocated-8")
def _fleet_pd(ctx) -> str:
    return _fleet_table("fleet", [(label, _fleet(ctx, sc, *sets)) for label, (sc, sets) in
                                  zip(["4P + 4D", "8 colocated"], PD_RUNS)],
                        ["hit", "TTFT p50 s", "TTFT p90 s", "TPOT p50 s", "TPOT p90 s", "SLO att.", "goodput req/s"])


DP_RUNS = [("DP1 (one tree)", run_key("fleet-dsv4-flash-dp1")),
           ("DP8, round-robin dispatcher", run_key("fleet-dsv4-flash-dp8")),
           ("DP8, session-affinity dispatcher",
            run_key("fleet-dsv4-flash-dp8", "fleet.dp_router.kind=session_affinity"))]


@entry("fleet-dp-table", "docs/fleet.md", cheap=False, seconds=300, runs=[k for _, k in DP_RUNS],
       command="radixsim run fleet-dsv4-flash-dp1; radixsim run fleet-dsv4-flash-dp8 "
               "[--set fleet.dp_router.kind=session_affinity]")
def _fleet_dp(ctx) -> str:
    rows = []
    for label, (sc, sets) in DP_RUNS:
        s = ctx.runs(sc, *sets)
        f = s["fleet"]
        rows.append([label, f"{f['hit_rate']:.3f}", f"{f['hit_rate_device']:.3f}", f"{f['hit_rate_host']:.3f}",
                     f"{f['ttft_p50_s']:.3f}", f"{f['ttft_p90_s']:.3f}", f"{s['duration_s']:.1f}"])
    return table(["attention", "hit", "device", "host", "TTFT p50 s", "TTFT p90 s", "simulated s"], rows)


for _i, (_label, (_sc, _sets)) in enumerate(DP_RUNS):
    entry(f"fleet-dp-hit-{_i + 1}", "docs/fleet.md", cheap=False, seconds=120, block=False, runs=[(_sc, _sets)],
          command=f"radixsim run {_sc}" + "".join(f" --set {s}" for s in _sets))(
        lambda ctx, _sc=_sc, _sets=_sets: f"{_fleet(ctx, _sc, *_sets)['hit_rate']:.3f}")


SCORER_PROFILES = {  # llm_d's scheduler profiles in the router comparison (docs/fleet.md)
    "llm_d precise": "{kind: llm_d, scorers: [{type: precise-prefix-cache-scorer, weight: 3}, "
                     "{type: kv-cache-utilization-scorer, weight: 2}, {type: queue-scorer, weight: 2}]}",
    "llm_d approximate": "llm_d",
    "llm_d load": "{kind: llm_d, scorers: [{type: kv-cache-utilization-scorer, weight: 2}, "
                  "{type: queue-scorer, weight: 2}]}",
    "llm_d random": "{kind: llm_d, picker: random-picker}",
}
SCORER_TABLE = [*SCORER_PROFILES.items(), *((r, r) for r in ROUTERS)]  # (label, fleet.router)
SCORER_SCENARIO = "fleet4-shared-prefix"


@entry("fleet-router-comparison", "docs/fleet.md", cheap=False, seconds=60,
       runs=[run_key(SCORER_SCENARIO, f"fleet.router={r}") for _, r in SCORER_TABLE],
       command=f"radixsim run {SCORER_SCENARIO} --set fleet.router=R (R: each row's router; llm_d's profiles "
               "as listed above the table)")
def _fleet_router_comparison(ctx) -> str:
    rows, rates = [], None
    for label, r in SCORER_TABLE:
        s = ctx.runs(SCORER_SCENARIO, f"fleet.router={r}")
        rates = [st["rate"] for st in s["stages"]]
        f = s["fleet"]
        rows.append([label, f"{f['hit_rate']:.3f}", f"{s['ttft_mean_s']:.3f}", f"{f['ttft_p90_s']:.3f}",
                     *(f"{st['ttft_p90_s']:.3f}" for st in s["stages"]),
                     f"{f['load_balance']['requests']['max_over_mean']:.2f}"])
    return table(["router", "hit", "TTFT mean s", "TTFT p90 s", *(f"p90 @ {r:g}/s" for r in rates), "max/mean req"],
                 rows)


VLLM_SCENARIO = "fleet4-shared-prefix-vllm"  # the same fleet on engine.kind vllm (issue 32)
VLLM_ROUTERS = [("llm_d precise", SCORER_PROFILES["llm_d precise"]), ("round_robin", "round_robin")]


@entry("fleet-vllm-router-comparison", "docs/fleet.md", cheap=True, seconds=8, block=False,
       runs=[run_key(VLLM_SCENARIO, f"fleet.router={r}") for _, r in VLLM_ROUTERS],
       command=f"radixsim run {VLLM_SCENARIO} --set fleet.router=R (R: llm_d precise's profile, round_robin)")
def _fleet_vllm_router_comparison(ctx) -> str:
    return " against ".join(
        "{label} hit {hit_rate:.3f}, TTFT p90 {ttft_p90_s:.3f} s".format(
            label=label, **ctx.runs(VLLM_SCENARIO, f"fleet.router={r}")["fleet"]) for label, r in VLLM_ROUTERS)


# docs/figure4.md ----------------------------------------------------------------------------
def _resolved(name: str, doc: str, scenario: str, key: str) -> None:
    """An inline figure of a scenario's resolved cache (config.yaml's `cache.KEY`, e.g. `l1_tokens: auto`)."""
    def render(ctx):
        from scenarios.scenario import load, resolve

        return f"{resolve(load(scenario), scenario).doc['cache'][key]:,}"
    entry(name, doc, cheap=True, seconds=1, block=False,
          command=f"radixsim run {scenario} (config.yaml: cache.{key})")(render)


for _name, _sc, _key in (("figure4-dsv4-l1", "fig4-dsv4-flash-l3", "l1_tokens"),
                         ("figure4-inkling-l1", "fig4-inkling-small-l3", "l1_tokens"),
                         ("figure4-dsv4-swa", "fig4-dsv4-flash-l3", "swa_tokens"),
                         ("figure4-inkling-swa", "fig4-inkling-small-l3", "swa_tokens"),
                         ("figure4-inkling-mamba", "fig4-inkling-small-l3", "mamba_slots"),
                         ("figure4-dsv4-l2", "fig4-dsv4-flash-l3", "l2_tokens"),
                         ("figure4-inkling-l2", "fig4-inkling-small-l3", "l2_tokens")):
    _resolved(_name, "docs/figure4.md", _sc, _key)
for _name, _sc, _key in (("figure6-dsv4-pro-l1", "fig6-dsv4-pro-b128-lru", "l1_tokens"),
                         ("figure6-dsv4-pro-l2", "fig6-dsv4-pro-b128-lru", "l2_tokens"),
                         ("figure6-qwen-l1", "fig6-qwen3.5-397b-b32-lru", "l1_tokens"),
                         ("figure6-qwen-l2", "fig6-qwen3.5-397b-b32-lru", "l2_tokens"),
                         ("figure6-qwen-mamba", "fig6-qwen3.5-397b-b32-lru", "mamba_slots")):
    _resolved(_name, "docs/figure6.md", _sc, _key)


FIG4 = [("DSV4 L1", "fig4-dsv4-flash-l1", 9400, "9.4K"), ("DSV4 L1+L2", "fig4-dsv4-flash-l2", 14300, "14.3K"),
        ("DSV4 L1+L2+L3", "fig4-dsv4-flash-l3", 145500, "145.5K, hit ~98%, TTFT < 9 s"),
        ("Inkling L1", "fig4-inkling-small-l1", 15500, "15.5K"),
        ("Inkling L1+L2", "fig4-inkling-small-l2", 21100, "21.1K"),
        ("Inkling L1+L2+L3", "fig4-inkling-small-l3", 67100, "67.1K, hit 96.8%, TTFT 1.23 s")]
# the seed's figure 4 (its effective input throughput per run), as docs/figure4.md quotes it


def _fig4_sets(name: str, kind: str) -> tuple:
    if kind == "operators":
        return ()
    if kind == "roofline":
        return ("cost.kind=roofline",)
    return ("cost.kind=roofline", f"cost.efficiency.mfu_prefill={0.04 if 'dsv4' in name else 0.06}")


FIG4_RUNS = [run_key(sc, *_fig4_sets(sc, k)) for _, sc, _, _ in FIG4 for k in ("operators", "cal", "roofline")]


def _secs(v: float) -> str:
    """A mean TTFT to three significant digits: 12.5, 0.590, 0.164."""
    return f"{v:.3g}" if v >= 1 else f"{v:.3f}"


@entry("figure4-table", "docs/figure4.md", cheap=False, seconds=240, runs=FIG4_RUNS,
       command="radixsim run fig4-* (the six catalog files); 'was cal.' with --set cost.kind=roofline --set "
               "cost.efficiency.mfu_prefill=0.04 (DSV4) / 0.06 (Inkling), 'was roofline' with --set cost.kind=roofline")
def _figure4(ctx) -> str:
    rows = []
    for label, sc, seed_tps, seed_text in FIG4:
        s = ctx.runs(sc)
        tier = sc.rsplit("-", 1)[1]
        split = [f"{s['hit_rate_device']:.3f}", f"{s['hit_rate_host']:.3f}" if tier != "l1" else "-",
                 f"{s['hit_rate_storage']:.3f}" if tier == "l3" else "-"]
        cal, roof = (ctx.runs(sc, *_fig4_sets(sc, k))["effective_input_tps"] for k in ("cal", "roofline"))
        rows.append([label, f"{s['hit_rate']:.3f} / {s['hit_rate_last10']:.3f}", " / ".join(split),
                     f"{_secs(s['ttft_mean_s'])} s", f"{s['effective_input_tps']:,.0f}", f"{cal:,.0f}", f"{roof:,.0f}",
                     seed_text, f"{s['effective_input_tps'] / seed_tps:.1f}x"])
    return table(["run", "hit rate (all / last 10 rounds)", "device / host / storage", "mean TTFT",
                  "eff. input tok/s", "was cal.", "was roofline", "seed", "ours / seed"], rows)


# docs/figure6.md ----------------------------------------------------------------------------
FIG6 = [("DSV4-Pro, batch 128", "fig6-dsv4-pro-b128", "device 42% -> 51%, TTFT -11.0%"),
        ("DSV4-Pro, batch 256", "fig6-dsv4-pro-b256", "TTFT -2.9%"),
        ("Qwen3.5-397B, batch 32", "fig6-qwen3.5-397b-b32", "device 5% -> 34%, TTFT -13.5%"),
        ("Qwen3.5-397B, batch 64", "fig6-qwen3.5-397b-b64", "device+host 58% -> 67%, TTFT -16.6%")]
# the seed's figure 6 as docs/figure6.md quotes it


def _arrow(a: float, b: float) -> str:
    """'0.417 -> **0.430**': the session value bold where it gains half a point or more."""
    bb = f"{b:.3f}"
    return f"{a:.3f} -> " + (f"**{bb}**" if b - a >= 0.005 else bb)


def _ttft_arrow(a: float, b: float) -> str:
    fmt = (lambda v: f"{v:.1f}") if max(a, b) >= 10 else (lambda v: f"{v:.3f}")
    pct = 100 * (b - a) / a
    p = "0%" if abs(pct) < 0.05 else f"{pct:+.1f}%"
    return f"{fmt(a)} -> {fmt(b)} s ({f'**{p}**' if pct <= -10 else p})"


@entry("figure6-table", "docs/figure6.md", cheap=False, seconds=600,
       runs=[run_key(f"{sc}-{p}") for _, sc, _ in FIG6 for p in ("lru", "session")],
       command="for f in $(radixsim scenarios | awk '/^fig6/ {print $1}'); do radixsim run $f; done")
def _figure6(ctx) -> str:
    rows = []
    for label, sc, seed in FIG6:
        a, b = ctx.runs(f"{sc}-lru"), ctx.runs(f"{sc}-session")
        dh = [x["hit_rate_device"] + x["hit_rate_host"] for x in (a, b)]
        rows.append([label, _arrow(a["hit_rate_device"], b["hit_rate_device"]), _arrow(*dh),
                     _ttft_arrow(a["ttft_mean_s"], b["ttft_mean_s"]), seed])
    return table(["configuration", "device hit LRU -> session", "device + host", "mean TTFT LRU -> session", "seed"],
                 rows)
