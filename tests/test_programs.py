"""LM-program workloads (scenarios/programs.py), their SimPy client (sim/program_clients.py) and
`radixsim workload show` (radixsim/workload_cli.py): exact DAGs and prompt lengths, prompts
that extend their parents token for token, incremental page keys, determinism, ideal hit rates
worked out by hand, and engine runs that show each program's sharing."""
import ast
import math

import numpy as np
import pytest
import simpy

from cache_core import CacheConfig, RadixCache, ReplayStepper, TokenSeq, invariants
from cache_core.engine_types import EngineConfig
from cache_core.keys import page_keys
from radixsim.args import Parser
from radixsim.workload_cli import add_parsers, dispatch, main
from scenarios.presets import get_hardware
from scenarios.programs import (PROGRAMS, AgentConfig, FewShotConfig, MultiTurnChatConfig, ProgramWorkload,
                                SelfConsistencyConfig, TreeOfThoughtConfig, agent_with_subagents, few_shot,
                                multi_turn_chat, program_config, self_consistency, tree_of_thought)
from sim.cost import RooflineCostModel
from sim.program_clients import program_clients
from sim.simulator import build

from conftest import ROOT

COST = RooflineCostModel("qwen3-32b", "h200x1", 1)
HW = get_hardware("h200x1")

# small knobs whose numbers are worked out by hand below
FEW = FewShotConfig(num_examples=2, example_length=10, num_questions=3, question_length=5, output_length=4)
SC = SelfConsistencyConfig(question_length=20, num_samples=4, output_length=6)
CHAT = MultiTurnChatConfig(num_turns=4, turn_length=10, output_length=3)
TOT = TreeOfThoughtConfig(depth=2, branching=2, keep=1, problem_length=10, thought_length=5, output_length=3,
                          score_length=2)
AGENT = AgentConfig(num_steps=4, num_subagents=2, fork_every=2, step_length=10, subagent_steps=2, output_length=3)
SMALL = {"few_shot": FEW, "self_consistency": SC, "multi_turn_chat": CHAT, "tree_of_thought": TOT,
         "agent_with_subagents": AGENT}


def full(p, c):
    return np.concatenate([p.prompt(c), p.output(c)])


def data_edges(p):
    return sorted((u, v) for u, v, d in p.graph.edges(data="data") if d)


def control_edges(p):
    return sorted((u, v) for u, v, d in p.graph.edges(data="data") if not d)


# ---------------------------------------------------------------- exact structure
def test_few_shot_structure():
    p = few_shot(FEW)
    assert len(p) == FEW.num_calls == 3 and p.graph.number_of_edges() == 0
    assert [p.depth(c) for c in p.order] == [0, 0, 0]
    assert [len(p.prompt(c)) for c in p.order] == [2 * 10 + 5] * 3 and [len(p.output(c)) for c in p.order] == [4] * 3
    examples = p.prompt(0)[:20]
    for c in p.order:  # every question starts with the same examples, then its own text
        assert np.array_equal(p.prompt(c)[:20], examples)
    assert not np.array_equal(p.prompt(0)[20:], p.prompt(1)[20:])


def test_self_consistency_structure():
    p = self_consistency(SC)
    assert len(p) == 4 and p.graph.number_of_edges() == 0
    assert {p.graph.nodes[c]["kind"] for c in p.order} == {"sample"}
    for c in p.order:
        assert len(p.prompt(c)) == 20 and np.array_equal(p.prompt(c), p.prompt(0))  # same prompt
    outs = {tuple(p.output(c).tolist()) for c in p.order}
    assert len(outs) == 4  # different outputs


def test_multi_turn_chat_structure():
    p = multi_turn_chat(CHAT)
    assert data_edges(p) == [(0, 1), (1, 2), (2, 3)] and control_edges(p) == []
    assert [p.depth(c) for c in p.order] == [0, 1, 2, 3]
    assert [len(p.prompt(c)) for c in p.order] == [10, 23, 36, 49]  # t*L + (t-1)*O


def test_tree_of_thought_structure():
    p = tree_of_thought(TOT)
    g = p.graph
    kinds = [g.nodes[c]["kind"] for c in p.order]
    assert kinds == ["thought", "thought", "score", "score", "thought", "thought", "score", "score"]
    kept = [c for c in (0, 1) if g.nodes[c]["kept"]]
    assert len(kept) == 1
    k = kept[0]
    assert data_edges(p) == sorted([(0, 2), (1, 3), (k, 4), (k, 5), (4, 6), (5, 7)])
    assert control_edges(p) == [(2, 4), (2, 5), (3, 4), (3, 5)]  # expand only after every score
    assert [p.depth(c) for c in p.order] == [0, 0, 1, 1, 2, 2, 3, 3]
    # thought = problem + new; score = full(thought) + score text; child = full(kept) + new
    assert [len(p.prompt(c)) for c in p.order] == [15, 15, 20, 20, 23, 23, 28, 28]
    assert np.array_equal(p.prompt(0)[:10], p.prompt(1)[:10])  # the shared problem
    for child in (4, 5):
        assert np.array_equal(p.prompt(child)[:18], full(p, k))


def test_tree_of_thought_counts_for_default_knobs():
    c = TreeOfThoughtConfig()
    p = tree_of_thought(c)
    levels = [sum(1 for n in p.order if p.graph.nodes[n]["kind"] == "thought" and p.graph.nodes[n]["level"] == lv)
              for lv in (1, 2, 3)]
    assert levels == [3, 6, 6] and len(p) == 30 == c.num_calls
    assert sum(p.graph.nodes[n]["kept"] for n in p.order if p.graph.nodes[n]["kind"] == "thought") == 4


def test_agent_structure_fork_and_join():
    p = agent_with_subagents(AGENT)
    g = p.graph
    assert [g.nodes[c]["kind"] for c in p.order] == ["step", "step", "subagent", "subagent", "subagent",
                                                     "subagent", "join", "step"]
    assert data_edges(p) == [(0, 1), (1, 2), (1, 4), (1, 6), (2, 3), (3, 6), (4, 5), (5, 6), (6, 7)]
    assert g.nodes[6]["parents"] == (1, 3, 5)
    assert [p.depth(c) for c in p.order] == [0, 1, 2, 3, 2, 3, 4, 5]
    assert [len(p.prompt(c)) for c in p.order] == [10, 23, 36, 49, 36, 49, 42, 55]
    assert [p.session(c) for c in p.order] == [0, 0, 1, 1, 2, 2, 0, 0] and p.sessions_per_instance == 3
    # join = main history + the sub-agents' final outputs (in parents order) + its own text
    j = p.prompt(6)
    assert np.array_equal(j[:26], full(p, 1))
    assert np.array_equal(j[26:29], p.output(3)) and np.array_equal(j[29:32], p.output(5))
    # each sub-agent's first prompt = the main history at the fork + its own task
    for first in (2, 4):
        assert np.array_equal(p.prompt(first)[:26], full(p, 1))
    w = ProgramWorkload(AgentConfig(**{**vars(AGENT), "num_instances": 2}))
    assert [w.instance(1).session(c) for c in (0, 2, 4)] == [3, 4, 5]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_prompt_extends_its_first_parent_and_keys_match(name):
    cfg = PROGRAMS[name][0](seed=3)
    p = PROGRAMS[name][1](cfg)
    assert len(p) == cfg.num_calls and max(len(p.prompt(c)) for c in p.order) == cfg.max_prompt_tokens
    for c in p.order:
        ps = p.graph.nodes[c]["parents"]
        head = len(p.prompt(c)) - p.graph.nodes[c]["new_tokens"]
        if ps:
            f = full(p, ps[0])
            assert np.array_equal(p.prompt(c)[: len(f)], f)
            outs = np.concatenate([f] + [p.output(q) for q in ps[1:]])
            assert np.array_equal(p.prompt(c)[:head], outs)
        else:
            assert head == p.prefix_len and np.array_equal(p.prompt(c)[:head], p.prompt(p.order[0])[:head])
        call = p.call(c)
        assert np.array_equal(call.sequence, np.concatenate([call.prompt, call.output[:-1]]))
        assert call.depth == p.depth(c)
        for a in (call.prompt, call.output, call.sequence):
            assert a.dtype == np.int64 and not a.flags.writeable
        for P in (1, 3, 16):
            keys = call.sequence_keys(P)
            assert keys.dtype == np.uint64 and not keys.flags.writeable
            assert np.array_equal(keys, page_keys(call.sequence, P)[0])


def test_children_continue_the_parent_buffer_without_copy():
    p = multi_turn_chat(MultiTurnChatConfig(num_turns=5))
    assert all(np.shares_memory(p.prompt(0), p.prompt(c)) for c in p.order)
    a = agent_with_subagents(AGENT)
    assert np.shares_memory(a.prompt(1), a.prompt(6))  # the join continues the main agent's buffer
    assert not np.shares_memory(a.prompt(1), a.prompt(2))  # a sub-agent copies the history


def test_commit_prefix_sends_the_shared_text_first_with_no_output():
    cfg = FewShotConfig(**{**vars(FEW), "commit_prefix": True})
    p, plain = few_shot(cfg), few_shot(FEW)
    assert [p.graph.nodes[c]["kind"] for c in p.order] == ["commit", "question", "question", "question"]
    assert data_edges(p) == [(0, 1), (0, 2), (0, 3)] and [p.depth(c) for c in p.order] == [0, 1, 1, 1]
    assert len(p.prompt(0)) == 20 and len(p.output(0)) == 0 and np.array_equal(p.sequence(0), p.prompt(0))
    for c in plain.order:  # the same prompts and outputs, token for token
        assert np.array_equal(p.prompt(c + 1), plain.prompt(c)) and np.array_equal(p.output(c + 1), plain.output(c))
    assert p.ideal_cached(1) == [0, 20, 20, 20] and len(p) == cfg.num_calls
    chat = multi_turn_chat(MultiTurnChatConfig(**{**vars(CHAT), "commit_prefix": True}))
    assert len(chat) == 4  # no prefix: nothing to commit


# ---------------------------------------------------------------- determinism
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_same_seed_same_tokens_and_dag_other_instance_shares_nothing(name):
    cls, builder = PROGRAMS[name]
    cfg = cls(**{**vars(SMALL[name]), "num_instances": 3, "vocab_size": 3_000_000})
    a, b = builder(cfg, 1), builder(cfg, 1)
    assert sorted(a.graph.edges(data=True)) == sorted(b.graph.edges(data=True))
    for c in a.order:
        assert np.array_equal(a.prompt(c), b.prompt(c)) and np.array_equal(a.output(c), b.output(c))
    other = builder(cfg, 2)
    toks = lambda p: np.unique(np.concatenate([full(p, c) for c in p.order]))  # noqa: E731
    assert np.intersect1d(toks(a), toks(other)).size == 0
    assert toks(a).min() >= 1_000_000 and toks(a).max() < 2_000_000  # instance 1's block
    reseeded = builder(cls(**{**vars(cfg), "seed": cfg.seed + 1}), 1)
    assert not np.array_equal(reseeded.prompt(0), a.prompt(0))


def test_tree_of_thought_pruning_is_seeded():
    kept = lambda cfg, i: [n for n in tree_of_thought(cfg, i).order  # noqa: E731
                          if tree_of_thought(cfg, i).graph.nodes[n].get("kept")]
    cfg = TreeOfThoughtConfig(depth=3, branching=4, keep=2, num_instances=8)
    assert kept(cfg, 0) == kept(cfg, 0)
    assert len({tuple(kept(cfg, i)) for i in range(8)}) > 1  # instances prune differently


# ---------------------------------------------------------------- ideal hit rates, by hand
@pytest.mark.parametrize("name, P, per_call", [
    # few-shot: later questions reuse the examples (E = 20), page-aligned
    ("few_shot", 1, [0, 20, 20]), ("few_shot", 8, [0, 16, 16]),
    # self-consistency: the question minus the one token always computed: floor((q - 1) / P) * P
    ("self_consistency", 1, [0, 19, 19, 19]), ("self_consistency", 8, [0, 16, 16, 16]),
    # chat: turn t reuses the previous turn's sequence, (t-1)(L+O) - 1 tokens
    ("multi_turn_chat", 1, [0, 12, 25, 38]), ("multi_turn_chat", 4, [0, 12, 24, 36]),
    # ToT: t2 the problem; scores seq(thought) = 17; children full(kept) = 18; scores seq(child) = 25
    ("tree_of_thought", 1, [0, 10, 17, 17, 18, 18, 25, 25]),
    # agent: main chain; sub-agent 1 extends seq(m2) = 25, sub-agent 2 and the join full(m2) = 26
    ("agent_with_subagents", 1, [0, 12, 25, 38, 26, 38, 26, 44]),
])
def test_ideal_hit_rates_by_hand(name, P, per_call):
    p = PROGRAMS[name][1](SMALL[name])
    assert p.ideal_cached(P) == per_call
    s = p.summary(P)
    total = sum(len(p.prompt(c)) for c in p.order)
    assert s["ideal_cached_tokens"] == sum(per_call) and s["prompt_tokens"] == total
    assert s["ideal_hit_rate"] == pytest.approx(sum(per_call) / total)


def test_workload_summary_adds_instances():
    w = ProgramWorkload(FewShotConfig(**{**vars(FEW), "num_instances": 4}))
    s = w.summary(1)
    assert (s["instances"], s["calls"], s["prompt_tokens"], s["ideal_cached_tokens"]) == (4, 12, 300, 160)
    assert w.total_calls() == 12 and s["depth"] == 1 and s["calls_by_kind"] == {"question": 12}


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("cls, kw, needle", [
    (FewShotConfig, {"num_questions": 0}, "FewShotConfig.num_questions must be an integer >= 1"),
    (FewShotConfig, {"output_length": True}, "FewShotConfig.output_length"),
    (SelfConsistencyConfig, {"question_length": 2.5}, "SelfConsistencyConfig.question_length"),
    (MultiTurnChatConfig, {"seed": -1}, "MultiTurnChatConfig.seed must be an integer >= 0"),
    (TreeOfThoughtConfig, {"keep": 4, "branching": 3}, "TreeOfThoughtConfig.keep must be <= branching"),
    (AgentConfig, {"fork_every": 8, "num_steps": 8}, "AgentConfig.fork_every must be <= num_steps - 1"),
    (AgentConfig, {"num_steps": 1}, "AgentConfig.num_steps must be an integer >= 2"),
    (FewShotConfig, {"num_instances": 10, "vocab_size": 5}, "FewShotConfig.vocab_size"),
    (MultiTurnChatConfig, {"num_turns": 100_000, "turn_length": 10_000}, "the longest prompt"),
])
def test_bad_knobs_name_the_knob(cls, kw, needle):
    with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
        cls(**kw)


def test_program_config_and_instance_errors():
    with pytest.raises(ValueError, match="unknown program 'nope'"):
        program_config("nope")
    with pytest.raises(ValueError, match="unknown few_shot knob 'depth'"):
        program_config("few_shot", depth=2)
    assert program_config("few_shot", num_questions=2).num_questions == 2
    with pytest.raises(ValueError, match="instance 1 out of range"):
        few_shot(FEW, 1)
    with pytest.raises(TypeError):
        few_shot(SC)


def test_scenarios_layer_does_not_import_sim():
    tree = ast.parse((ROOT / "scenarios" / "programs.py").read_text())
    mods = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module] + \
           [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in mods if m.split(".")[0] in ("sim", "radixsim", "gpu_backend", "simpy")]


# ---------------------------------------------------------------- engine runs
def engine_run(cfg, P=16, max_parallel=1, request_rate=math.inf, capacity=1_000_000, **eng):
    env = simpy.Environment()
    cache = RadixCache(CacheConfig(page_size=P, capacity_tokens=capacity), record_actions="transfers")
    e = build(env, cache, EngineConfig(**{"max_running_requests": 16, "chunked_prefill_tokens": None, **eng}),
              COST, HW)
    got = {}
    wl = ProgramWorkload(cfg)
    env.process(program_clients(env, e, wl, max_parallel=max_parallel, request_rate=request_rate, page_size=P,
                                on_finish=lambda r, i, c: got.__setitem__((i, c), r)))
    env.process(e.loop())
    env.run()
    invariants.check(cache)
    assert e.input_closed and len(got) == wl.total_calls() and not any(r.rejected for r in got.values())
    return wl, got


def hit_rate(got):
    return sum(r.cached_tokens for r in got.values()) / sum(r.prompt_tokens for r in got.values())


MEDIUM = {
    "few_shot": FewShotConfig(num_examples=4, example_length=250, num_questions=6, question_length=40,
                              output_length=8),
    "self_consistency": SelfConsistencyConfig(question_length=300, num_samples=5, output_length=8),
    "multi_turn_chat": MultiTurnChatConfig(num_turns=5, turn_length=100, output_length=8),
    "tree_of_thought": TreeOfThoughtConfig(depth=3, branching=3, keep=2, problem_length=200, thought_length=30,
                                           output_length=8, score_length=10),
    "agent_with_subagents": AgentConfig(num_steps=5, num_subagents=2, fork_every=2, step_length=100,
                                        subagent_steps=2, output_length=8),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_serial_engine_run_equals_the_ideal_replay(name):
    cfg = MEDIUM[name]
    wl, got = engine_run(cfg)
    p = wl.instance(0)
    sent = sorted(p.order, key=lambda c: got[0, c].rid)  # serial: one call at a time, ready queue order
    assert [got[0, c].rid for c in sent] == list(range(len(p)))
    rs = ReplayStepper(RadixCache(CacheConfig(page_size=16)))
    replay = [rs.step(p.prompt(c), p.output(c), seq=TokenSeq(p.sequence(c))).cached_tokens for c in sent]
    assert [got[0, c].cached_tokens for c in sent] == replay
    if name != "agent_with_subagents":  # sent in id order; the agent's sub-agents interleave
        assert sent == list(p.order) and replay == p.ideal_cached(16)
    assert [got[0, c].round for c in p.order] == [p.depth(c) + 1 for c in p.order]
    assert [got[0, c].session_id for c in p.order] == [p.session(c) for c in p.order]
    assert hit_rate(got) == pytest.approx(p.summary(16)["ideal_hit_rate"])


def test_engine_shows_each_programs_sharing():
    P = 16
    wl, got = engine_run(MEDIUM["few_shot"])
    assert [got[0, c].cached_tokens for c in range(6)] == [0] + [1000 // P * P] * 5  # the whole examples prefix
    wl, got = engine_run(MEDIUM["self_consistency"])
    assert [got[0, c].cached_tokens for c in range(5)] == [0] + [299 // P * P] * 4  # the whole question
    wl, got = engine_run(MEDIUM["tree_of_thought"])
    p = wl.instance(0)
    for c in p.order:
        ps = p.graph.nodes[c]["parents"]
        if ps and p.graph.nodes[c]["kind"] == "thought":  # a child reuses its parent thought's full sequence
            assert got[0, c].cached_tokens >= p.full[ps[0]] // P * P  # (the score call inserted all of it)
    wl, got = engine_run(MEDIUM["agent_with_subagents"])
    p = wl.instance(0)
    for c in p.order:
        ps = p.graph.nodes[c]["parents"]
        if p.graph.nodes[c]["kind"] in ("subagent", "join") and p.graph.nodes[ps[0]]["session"] == 0:
            # the main history at the fork (the parent's last output token is not cached: its KV is never computed)
            assert got[0, c].cached_tokens >= (p.full[ps[0]] - 1) // P * P


def test_concurrent_forks_share_only_with_a_committed_prefix():
    P, E = 16, 1000
    cfg = MEDIUM["few_shot"]
    _, got = engine_run(cfg, max_parallel=16)  # every question in flight at once: none finds the prefix
    assert [got[0, c].cached_tokens for c in range(6)] == [0] * 6
    _, got = engine_run(type(cfg)(**{**vars(cfg), "commit_prefix": True}), max_parallel=16)
    assert [got[0, c].cached_tokens for c in range(7)] == [0] + [E // P * P] * 6
    assert got[0, 0].generated_tokens == 0


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_parallel_paced_run_respects_the_dag_and_max_parallel(name):
    cfg = type(MEDIUM[name])(**{**vars(MEDIUM[name]), "num_instances": 3})
    wl, got = engine_run(cfg, max_parallel=4, request_rate=200.0)
    for i in range(3):
        p = wl.instance(i)
        for u, v in p.graph.edges:
            assert got[i, v].arrival_s >= got[i, u].finish_s  # sent only after every predecessor finished
        assert {got[i, c].session_id for c in p.order} == {p.session(c) for c in p.order}
    events = sorted([(r.arrival_s, 1) for r in got.values()] + [(r.finish_s, -1) for r in got.values()])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 4
    rids = sorted(got.values(), key=lambda r: r.rid)
    assert [r.rid for r in rids] == list(range(len(got)))
    assert all(a.arrival_s < b.arrival_s for a, b in zip(rids, rids[1:]))  # Poisson gaps between sends
    assert hit_rate(got) > 0.2  # concurrent calls sharing a prefix not inserted yet compute it again


def test_program_clients_rejects_bad_arguments():
    env = simpy.Environment()
    e = build(env, RadixCache(CacheConfig(page_size=1, capacity_tokens=1000), record_actions="transfers"),
              EngineConfig(), COST, HW)
    for kw in ({"max_parallel": 0}, {"request_rate": 0.0}, {"request_rate": float("nan")}):
        with pytest.raises(ValueError):
            next(program_clients(env, e, ProgramWorkload(FEW), **kw))


# ---------------------------------------------------------------- CLI
def cli(argv):
    p = Parser(prog="radixsim")  # wired as radixsim/cli.py will wire it
    sub = p.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    add_parsers(sub)
    return dispatch(p.parse_args(argv))


def test_module_entry_point_runs_the_same_command(capsys):
    assert main(["workload", "show", "few_shot", "--set", "num_questions=3", "--set", "num_examples=2",
                 "--set", "example_length=10", "--set", "question_length=5", "--set", "output_length=4"]) == 0
    out = capsys.readouterr().out
    assert "few_shot: 1 instance(s), 3 calls (question 3), depth 1" in out
    assert "prompt tokens 75" in out and "(40 cached, page size 1" in out  # 2 x 20 examples reused
    with pytest.raises(SystemExit) as e:
        main(["workload", "show"])  # NAME missing: argparse's one line, exit 2
    assert e.value.code == 2


def test_workload_show_prints_the_summary_and_plots(tmp_path, capsys):
    out = tmp_path / "dag.png"
    assert cli(["workload", "show", "tree_of_thought", "--set", "depth=2", "--set", "workload.keep=1",
                "--set", "branching=2", "--plot", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tree_of_thought: 1 instance(s), 8 calls (thought 4, score 4), depth 4" in text
    assert "ideal hit rate" in text and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, needle", [
    (["workload", "show", "nope"], "unknown program 'nope'"),
    (["workload", "show", "few_shot", "--set", "num_questions"], "expected KEY=VALUE"),
    (["workload", "show", "few_shot", "--set", "num_questions=0"], "FewShotConfig.num_questions"),
    (["workload", "show", "few_shot", "--set", "bogus=1"], "unknown few_shot knob 'bogus'"),
])
def test_workload_show_bad_input_is_one_line_exit_2(argv, needle, capsys):
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_dispatch_ignores_other_commands():
    class Args:
        command = "run"
    assert dispatch(Args()) is None


def test_program_names_list_every_program_in_order():
    from scenarios.program_names import PROGRAM_NAMES
    from scenarios.programs import PROGRAMS

    assert PROGRAM_NAMES == tuple(PROGRAMS)
