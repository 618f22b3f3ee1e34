"""`radixsim validate` by hand (radixsim/validate.py, radixsim/validate_cases.py): the hit MAE
counts the cold round, rounds are those both series have, SGLang's default --hicache-ratio is
2.0 (sgl-project/sglang python/sglang/srt/server_args.py, ``hicache_ratio: float = 2.0``), a
stated ratio is read, and Mooncake's objects per page are SGLang's K and V per rank for MHA/GQA
(2 x tp) and one latent KV per rank for MLA (tp; SGLang's mooncake_store.py
``_get_mha_buffer_meta`` / ``_get_mla_buffer_meta``). benchmarks/mutants_validate.txt lists the
mutants these tests kill."""
import pytest

from radixsim.validate import compare
from radixsim.validate_cases import tiers_of
from scenarios import presets


def test_hit_mae_counts_the_cold_round_and_rounds_are_those_both_series_have():
    got = compare([0.1, 0.5, 0.75], [1.0, 2.0], [0.0, 0.5, 0.5], [1.0, 2.0, 3.0])
    assert got["rounds"] == 2  # 3 hit rates, 2 TTFTs
    assert got["hit_mae_pts"] == pytest.approx(100 * (0.1 + 0 + 0.25) / 3, rel=1e-12)  # the cold round's 0.1 counts
    assert (got["ttft_ratio_gmean"], got["ttft_ratio_min"], got["ttft_ratio_max"], got["shape_error"]) == (
        1.0, 1.0, 1.0, 0.0)


def case(flags: str, **extra) -> dict:
    return {"_file": "cases.yaml", "id": "t", "server_flags": flags, **extra}


def test_l2_is_sglangs_default_ratio_2_unless_a_ratio_is_stated():
    qwen = presets.get_model("qwen3-8b")
    assert tiers_of(case("--enable-hierarchical-cache"), qwen, 1) == ({"hicache_ratio": 2.0}, [])
    assert tiers_of(case("--enable-hierarchical-cache --hicache-ratio 3"), qwen, 1) == ({"hicache_ratio": 3.0}, [])


@pytest.mark.parametrize("model,tp,objects", [("qwen3-8b", 1, 2), ("qwen3-8b", 4, 8), ("deepseek-v3", 8, 8)])
def test_mooncake_objects_per_page_are_k_and_v_per_rank_and_one_latent_for_mla(model, tp, objects):
    flags = "--enable-hierarchical-cache --hicache-storage-backend mooncake"
    cache, notes = tiers_of(case(flags, cache={"l3_eviction_shards": 1024}, cache_source="Mooncake BatchEvict"),
                           presets.get_model(model), tp)
    assert cache["l3_objects_per_page"] == objects
    assert notes[-1] == f"L3 objects per page: {objects} (SGLang's K and V per rank)"
