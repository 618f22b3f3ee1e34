"""The serving front end's CPU costs (sim/serving_cpu.py, issue 29 item 2b): the tokenizer queue,
the fixed per-request cost and the first token's way out, hand-computed; an unset engine.frontend
changes nothing."""
from __future__ import annotations

import pytest
import simpy

from cache_core.engine_types import EngineConfig
from radixsim.run import simulate
from scenarios.scenario import ScenarioError, apply_sets, load, resolve, scenario_path
from sim.serving_cpu import FRONTENDS, QWEN2_BPE_S_PER_TOKEN, Frontend, FrontendPreset, tokenize_s_per_token

PRE = FrontendPreset(name="t", request_s=0.5, first_token_out_s=0.25, tokenize_s_per_token={"qwen2-bpe": 0.01})


class FakeLoader:
    on_done = None


class FakeEngine:
    """What Frontend.install touches: arrive, done_request, close_input and the loader's on_done."""

    def __init__(self, env):
        self.env = env
        self.loader = FakeLoader()
        self.arrivals = []  # (rid, engine time, arrival_s seen by the engine)
        self.done = []  # (rid, time)
        self.closed_at = None

    def arrive(self, r):
        self.arrivals.append((r.rid, self.env.now, r.arrival_s))

    def done_request(self, r):
        self.done.append((r.rid, self.env.now))

    def close_input(self):
        self.closed_at = self.env.now


class Req:
    def __init__(self, rid, tokens, sent):
        self.rid, self.prompt_tokens, self.arrival_s = rid, tokens, sent
        self.frontend_s = 0.0
        self.first_token_s = self.finish_s = None


def _front(env):
    eng = FakeEngine(env)
    return eng, Frontend(env, PRE, 0.01).install(eng)


def test_the_tokenizer_serves_one_request_at_a_time_in_arrival_order():
    env = simpy.Environment()
    eng, front = _front(env)
    a, b = Req(0, 100, 0.0), Req(1, 300, 0.0)
    eng.arrive(a)
    eng.arrive(b)
    env.run()
    # a: tokenized 0 .. 1.0 (100 x 0.01), + 0.5 fixed -> the engine sees it at 1.5;
    # b: waits for a, tokenized 1.0 .. 4.0 (300 x 0.01), + 0.5 -> 4.5
    assert eng.arrivals == [(0, 1.5, 1.5), (1, 4.5, 4.5)]
    assert (a.arrival_s, b.arrival_s) == (0.0, 0.0)  # TTFT still runs from the client's send
    assert (a.frontend_s, b.frontend_s) == (1.5, 4.5)
    assert (front.requests, front.tokenize_s, front.tokenizer_wait_s, front.fixed_s) == (2, 4.0, 1.0, 1.0)


def test_an_idle_tokenizer_starts_at_once_and_a_busy_one_when_free():
    env = simpy.Environment()
    eng, _ = _front(env)

    def client():
        eng.arrive(Req(0, 200, 0.0))  # tokenized 0 .. 2.0
        yield env.timeout(1.0)
        eng.arrive(Req(1, 100, 1.0))  # waits until 2.0, tokenized 2.0 .. 3.0
        yield env.timeout(9.0)
        eng.arrive(Req(2, 100, 10.0))  # idle again: 10.0 .. 11.0

    env.process(client())
    env.run()
    assert eng.arrivals == [(0, 2.5, 2.5), (1, 3.5, 3.5), (2, 11.5, 11.5)]


def test_the_first_token_goes_out_after_its_way_out_and_the_client_hears_of_it_then():
    env = simpy.Environment()
    eng, front = _front(env)
    r = Req(0, 10, 0.0)
    r.frontend_s = 0.6
    r.first_token_s, r.finish_s = 2.0, 3.0

    def finish():
        yield env.timeout(3.0)
        eng.loader.on_done(r)

    env.process(finish())
    env.run()
    assert (r.first_token_s, r.finish_s, r.frontend_s) == (2.25, 3.25, 0.85)
    assert eng.done == [(0, 3.25)]
    assert eng.done_request is eng.loader.on_done and front.fixed_s == 0.25
    rejected = Req(1, 10, 0.0)  # no first token (rejected): nothing added, done at once
    eng.done_request(rejected)
    assert eng.done[-1] == (1, 3.25) and rejected.frontend_s == 0.0


def test_the_input_closes_only_once_every_request_sent_has_reached_the_engine():
    env = simpy.Environment()
    eng, _ = _front(env)
    eng.arrive(Req(0, 100, 0.0))  # reaches the engine at 1.5
    eng.close_input()
    assert eng.closed_at is None
    env.run()
    assert eng.closed_at == 1.5
    env2 = simpy.Environment()
    eng2 = FakeEngine(env2)
    Frontend(env2, PRE, 0.01).install(eng2)
    eng2.close_input()  # nothing pending: closes at once
    assert eng2.closed_at == 0.0


def test_the_qwen_tokenizer_cost_and_its_family_mapping():
    pre = FRONTENDS["sglang-text"]
    assert tokenize_s_per_token(pre, "qwen3") == QWEN2_BPE_S_PER_TOKEN == 2.4e-6
    assert tokenize_s_per_token(pre, "qwen3-moe", host_cpu_speed=2.0) == 1.2e-6
    with pytest.raises(ValueError, match="no tokenizer cost for model family 'gpt-oss'"):
        tokenize_s_per_token(pre, "gpt-oss")
    assert set(pre.sources) == {"request_s", "first_token_out_s", "tokenize_s_per_token"}


def _run(sets):
    base = ["model=Qwen3-8B", "workload.num_clients=1", "workload.max_parallel=1", "workload.num_rounds=3",
            "workload.request_length=1000", "workload.output_length=1"]
    sc = resolve(apply_sets(load(scenario_path("quickstart")), base + sets), "x.yaml")
    eng, *_ = simulate(sc, progress=False)
    return sorted(eng.finished, key=lambda r: r.round), eng


def test_one_client_pays_the_tokenizer_per_prompt_token_plus_the_fixed_costs_every_round():
    base, _ = _run([])
    front, eng = _run(["engine.frontend=sglang-text"])
    pre = FRONTENDS["sglang-text"]
    prompts = [r.prompt_tokens for r in front]
    assert prompts == [r.prompt_tokens for r in base] and prompts[0] < prompts[1] < prompts[2]
    for b, f in zip(base, front):
        extra = f.prompt_tokens * 2.4e-6 + pre.request_s + pre.first_token_out_s
        # the same request, the same cache state (one client): only the front end's time is added
        assert f.cached_tokens == b.cached_tokens
        assert f.first_token_s - f.arrival_s == pytest.approx(b.first_token_s - b.arrival_s + extra, abs=1e-12)
        assert f.frontend_s == pytest.approx(extra, abs=1e-12)
    # the tokenizer term grows with the prompt: round 3's whole history costs more than round 1's
    t = [f.prompt_tokens * 2.4e-6 for f in front]
    assert t[2] - t[0] == pytest.approx((prompts[2] - prompts[0]) * 2.4e-6)
    assert eng.frontend.summary()["tokenize_s"] == pytest.approx(sum(prompts) * 2.4e-6)
    assert all(b.frontend_s == 0.0 for b in base)


def test_unset_the_engine_has_no_front_end_and_the_rows_no_column():
    from sim.recorder import request_rows, summarise  # noqa: F401

    base, _ = _run([])
    _, eng = _run([])
    assert getattr(eng, "frontend", None) is None
    assert all("frontend_s" not in row for row in request_rows(eng))
    _, eng_f = _run(["engine.frontend=sglang-text"])
    rows = request_rows(eng_f)
    for row in rows:
        assert row["queue_s"] + row["load_s"] + row["compute_s"] + row["frontend_s"] == pytest.approx(row["ttft_s"])


def test_frontend_names_are_checked():
    raw = apply_sets(load(scenario_path("quickstart")), ["engine.frontend=sglang"])
    with pytest.raises(ScenarioError, match="engine.frontend.*null or one of sglang-text"):
        resolve(raw, "x.yaml")
    with pytest.raises(ValueError, match="engine.frontend: not supported together with engine.tree_core"):
        EngineConfig(frontend="sglang-text", tree_core="sglang-python")


def test_the_ttft_split_names_the_front_end_part_and_still_adds_up():
    from sim.ttft_split import BETWEEN, FRONTEND, TtftRecorder

    base = ["model=Qwen3-8B", "workload.num_clients=1", "workload.max_parallel=1", "workload.num_rounds=2",
            "workload.request_length=1000", "workload.output_length=1", "engine.frontend=sglang-text"]
    sc = resolve(apply_sets(load(scenario_path("quickstart")), base), "x.yaml")
    rec = TtftRecorder()
    eng, *_ = simulate(sc, progress=False, setup=rec.attach)
    split = rec.split(eng)
    for r in eng.finished:
        parts = split[r.rid]
        assert parts["compute"][FRONTEND] == r.frontend_s == pytest.approx(
            r.prompt_tokens * 2.4e-6 + 6.3e-3 + 0.31e-3, abs=1e-12)
        total = parts["queue"] + sum(parts["load"].values()) + parts["load_unsplit"] + sum(parts["compute"].values())
        assert total == pytest.approx(parts["ttft"], abs=1e-12)
        assert parts["compute"][BETWEEN] == pytest.approx(0.0, abs=1e-9)  # one client: no step to wait for


def test_validate_explain_shows_the_front_end_column_before_between_steps():
    from radixsim.validate_explain import _columns

    rounds = [{"parts": {"queue": 0.1, ("compute", "gemm"): 0.2, ("compute", "frontend"): 0.03,
                         ("compute", "between steps"): 0.0}}]
    assert _columns(rounds) == ["queue", ("compute", "gemm"), ("compute", "frontend")]
    rounds[0]["parts"][("compute", "between steps")] = 0.01
    assert _columns(rounds)[-2:] == [("compute", "frontend"), ("compute", "between steps")]
