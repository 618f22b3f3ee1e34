"""Admission's FULL allocation (cache_core/lifecycle.py) and the step price's CUDA-graph rule
(sim/operators.py) by hand. benchmarks/mutants_engine_operators.txt lists the mutants these
tests kill."""
import pytest

from cache_core import CacheConfig, RadixCache, TokenSeq
from cache_core.lifecycle import AdmitParams, admit
from helpers import toks
from scenarios.presets import get_model
from sim.operators import OperatorCostModel
from test_eviction_order import put


def test_full_allocation_evicts_its_demand_plus_one_page_at_page_size_2():
    cache = RadixCache(CacheConfig(page_size=2, capacity_tokens=16, policy="lru"))
    for s in ("aa", "bb", "cc", "dd", "ee", "ff"):  # six 2-token leaves, LRU in this order
        put(cache, s)
    assert cache.free_tokens == 4
    a = admit(cache, AdmitParams(seq=TokenSeq(toks("xxxxx")), prompt_len=5))
    # n = 5 new tokens, ceil(5 / 2) = 3 pages; SGLang's demand n + P = 7 > 4 free: evict 3,
    # whole leaves in LRU order: aa, bb (4 tokens)
    assert (a.rejected, a.cached_tokens, len(a.pages), a.evicted_tokens) == (False, 0, 3, 4)
    assert sorted(c for c in ("aa", "bb", "cc", "dd", "ee", "ff") if cache.match(TokenSeq(toks(c))).cached_tokens) \
        == ["cc", "dd", "ee", "ff"]
    assert cache.free_tokens == 2  # 8 free, 6 taken


def test_admission_keeps_the_prompts_last_token_to_compute():
    cache = RadixCache(CacheConfig(page_size=2, capacity_tokens=16, policy="lru"))
    put(cache, "abcd")
    a = admit(cache, AdmitParams(seq=TokenSeq(toks("abcd")), prompt_len=4))
    # the match stops at (4 - 1) // 2 x 2 = 2 tokens: "cd" (one page) is computed again
    assert (a.cached_tokens, len(a.pages)) == (2, 1)


@pytest.fixture(scope="module")
def qwen():
    return get_model("qwen3-8b")


def test_a_decode_batch_of_exactly_cuda_graph_max_bs_replays_the_graph(qwen):
    ctx = [5000, 7000]
    at = OperatorCostModel("qwen3-8b", "a100-40gbx1", 1, cuda_graph_max_bs=2).cost(decode_contexts=ctx)
    above = OperatorCostModel("qwen3-8b", "a100-40gbx1", 1, cuda_graph_max_bs=1).cost(decode_contexts=ctx)
    # Efficiency defaults: 3 ms per step, 10 us per layer launch gap (36 layers) without the graph
    assert at.overhead_s == pytest.approx(3e-3, rel=1e-12)
    assert above.overhead_s == pytest.approx(3e-3 + qwen.num_layers * 10e-6, rel=1e-12)
    assert qwen.num_layers == 36
    mixed = OperatorCostModel("qwen3-8b", "a100-40gbx1", 1, cuda_graph_max_bs=2).cost([(8, 0)], [5000])
    assert mixed.overhead_s == pytest.approx(3e-3 + 36 * 10e-6, rel=1e-12)  # a prefill: no graph


def test_linear_flops_count_every_token_of_the_step(qwen):
    om = OperatorCostModel("qwen3-8b", "a100-40gbx1", 1)
    assert om.cost(decode_contexts=[5000, 7000]).linear_flops == 2.0 * qwen.active_params * 2
    assert om.cost([(512, 0)], [2000]).linear_flops == 2.0 * qwen.active_params * 513
