"""The scenario resolver in steps (issue 30 item 3): each step returns what it resolved and
none writes into the validated document; config.yaml's `doc` is assembled at the end."""
from __future__ import annotations

import types

import pytest

from scenarios import cache_pools as pools
from scenarios import scenario
from scenarios.presets import get_hardware, get_model
from scenarios.schema import SCHEMA, ScenarioError, validate_document

BASE = {"model": "qwen3-32b", "hardware": "h200x2", "tp": 2,
        "workload": {"num_rounds": 2, "request_length": 256, "output_length": 8}}


def frozen(doc: dict) -> dict:
    """`doc` with the sections the resolver once wrote into (cache, cost) read-only."""
    return {**doc, "cache": types.MappingProxyType(doc["cache"]), "cost": types.MappingProxyType(doc["cost"])}


@pytest.mark.parametrize("name", ["quickstart", "fig4-dsv4-flash-l3", "fleet-agentic-colocated-8"])
def test_resolve_writes_nothing_into_the_validated_sections(monkeypatch, name):
    raw = scenario.smoke(scenario.load(name))
    want = scenario.resolve(raw, name).doc
    monkeypatch.setattr(scenario, "validate_document", lambda r, s, w: frozen(validate_document(r, s, w)))
    got = scenario.resolve(raw, name).doc
    assert got == want and list(got) == list(want) and list(got["cache"]) == list(want["cache"])
    assert list(got["cache"])[-1] == "l1_plan" and "fleet" not in list(got)[:-1]


def cache(**kw) -> dict:
    return validate_document({**BASE, "cache": kw}, SCHEMA, "s.yaml")["cache"]


def test_l1_pool_reads_a_size_in_bytes_and_floors_it_to_pages():
    m = get_model("qwen3-32b")  # 262,144 KV bytes per token: 1 GiB = 4,096 tokens
    l1 = pools.l1_pool(cache(l1_tokens="1GiB", page_size=64), m, get_hardware("h200x2"), 2, "s.yaml")
    assert (l1.l1_tokens, l1.plan, l1.swa_ratio, l1.mamba_ratio) == (4096, None, None, 0.9)
    l1 = pools.l1_pool(cache(l1_tokens=100_000, max_total_tokens=50_000, page_size=64), m, get_hardware("h200x2"), 2,
                       "s.yaml")
    assert l1.l1_tokens == 49_984  # min(100,000, 50,000) floored to 64-token pages: 781 x 64


def test_swa_and_mamba_pools_from_the_ratios():
    oss, nxt = get_model("gpt-oss-20b"), get_model("qwen3-next-80b")
    c = cache(l1_tokens=100_000, page_size=64, components=None)
    l1 = pools.L1Pool(99_968, None, 0.8, 0.9)
    swa = pools.swa_pool(c, oss, l1, "s.yaml")
    assert (swa.capacity_tokens, swa.window_tokens) == (79_936, 128)  # int(99,968 x 0.8) = 79,974 -> 1,249 pages
    mamba = pools.mamba_pool(c, nxt, l1, "s.yaml")
    # 0.9 x 99,968 tokens x 24,576 B (12 full layers x 2 KV heads x 256 x 2 x 2 B) // 77,266,944 B of state = 28
    assert (mamba.slots, mamba.every_tokens) == (28, None)
    assert pools.mamba_pool(c, nxt, pools.L1Pool(64, None, 0.8, 0.9), "s.yaml").slots == 1  # at least one slot


def test_tiers_record_what_config_yaml_keeps_and_refuse_an_ssd_without_mooncake():
    m = get_model("qwen3-32b")
    t = pools.tiers(cache(l1_tokens=40_960, hicache_ratio=2, l3_tokens="unbounded"), m, 2, 40_960, None, None, "s")
    assert t.doc == {"l2_tokens": 81_920, "l3_tokens": "unbounded", "l3_ssd_tokens": None}
    assert t.config.l3 and t.config.l3_tokens is None and t.warnings == ()
    assert pools.tiers(cache(l1_tokens=40_960), m, 2, 40_960, None, None, "s") == pools.Tiers(None, {}, ())
    with pytest.raises(ScenarioError, match=r"^s: cache.l3_ssd_tokens: an SSD tier needs an L3 with cache.l3_model"):
        pools.tiers(cache(l1_tokens=40_960, hicache_ratio=2, l3_ssd_tokens=1000), m, 2, 40_960, None, None, "s")
