"""`radixsim validate`: a case's smoke table pinned from the fixed seed, the figures by hand,
one-line errors for a case file lacking a field, partial cases skipped with their reason, the
mapping of a case's setup (presets, tiers, sizes) and the HTML naming every case."""
import csv
import json
import math

import pytest

from radixsim.cli import main
from radixsim.validate import compare, validate
from radixsim.validate_cases import CASE_DIR, CaseError, case_files, scenario_of, sglang_memory_defaults
from scenarios import presets

A3 = "A3-ssdbench-mooncake80g"


def test_smoke_case_reproduces_its_table_from_the_fixed_seed():
    (res,) = validate([A3], smoke=True)
    row, s = res["row"], res["series"]
    # 3 clients x 3 rounds of 4096 new tokens + 1 output token, page 64: round r reuses the
    # whole pages of the previous prompt + output, 4096 (r - 1) of 4096 r + (r - 1) tokens
    assert s["sim_hit_rate"] == [0.0, 4096 / 8193, 8192 / 12290]
    # the run's --attention-backend triton: prefill attention on the backend's measured curve (engine TTFT
    # 0.6512, 0.9999, 1.1223 s); bench_multiturn.py sends text (engine.frontend sglang-text): each request pays
    # its whole prompt's tokenization (2.4 us per token) and 6.3 + 0.31 ms on top; one tokenizer, but requests
    # reach it spaced by the pacing, so no wait shows
    front = [p * 2.4e-6 + 6.3e-3 + 0.31e-3 for p in (4096, 8193, 12290)]
    sim = [0.6511546847884473 + front[0], 0.999923429972417 + front[1], 1.122289126159923 + front[2]]
    assert s["sim_ttft_mean_s"] == pytest.approx(sim, rel=1e-9)
    assert (row["status"], row["model"], row["hardware"], row["rounds"]) == ("ok", "Qwen3-8B", "a100-40gbx1", 3)
    hit_mae = 100 * (abs(4096 / 8193 - 0.5) + abs(8192 / 12290 - 0.667)) / 3
    assert row["hit_mae_pts"] == pytest.approx(hit_mae, rel=1e-12) and round(hit_mae, 4) == 0.0168
    assert row["ttft_ratio_gmean"] == pytest.approx(math.prod(a / b for a, b in zip(sim, (1.12, 2.2, 3.1))) ** (1 / 3),
                                                    rel=1e-9)
    assert round(row["ttft_ratio_gmean"], 6) == 0.47011
    assert row["ttft_ratio_min"] == pytest.approx(sim[2] / 3.1, rel=1e-9)
    assert row["ttft_ratio_max"] == pytest.approx(sim[0] / 1.12, rel=1e-9)
    pub = (1.12, 2.2, 3.1)
    shape = sum(abs(a / (sum(sim) / 3) - b / (sum(pub) / 3)) for a, b in zip(sim, pub)) / 3
    assert row["shape_error"] == pytest.approx(shape, rel=1e-9) and round(shape, 6) == 0.153447
    assert res["notes"] == [
        "Qwen3-8B on a100-40gbx1 tp=1; not stated, scenario defaults: engine.max_running_requests",
        "L3 pool 80GB read as 80 GiB (Mooncake's parser)",
        "L3 as Mooncake Store (cache.l3_model mooncake, Mooncake's default watermark 0.90 and eviction ratio 0.05)",
        "case cache: l3_eviction_shards 1024",
        "L3 objects per page: 2 (SGLang's K and V per rank)",
        "--hicache-mem-layout page_first_direct: io backend direct (SGLang switches kernel to direct for this "
        "layout)",
        "hardware pcie_io_backend direct, nic_bytes_per_s 50000000000.0, l3_rdma_bytes_per_s 23750000000.0",
        "--mem-fraction-static not stated: SGLang's default for the card, 0.833 (cuda_graph_max_bs 32)",
        "--chunked-prefill-size not stated: SGLang's default for the card, 4096",
        "client bench_multiturn.py sends text: engine.frontend sglang-text (tokenization of the whole prompt, the "
        "per-request cost, the first token's way out; sim/serving_cpu.py)",
        "L3 reads as SGLang's prefetch I/O thread: one prefetch at a time, one store get per 128 pages "
        "(engine.l3_get_batch_pages; sim/l3_reads.py)",
        "--attention-backend triton: engine.attention_backend triton (sim/opdata/attention_backends.json)",
        "smoke: 3 clients x 3 rounds",
        # l1 auto by hand in tests/test_presets_new.py; L2 = --hicache-ratio 2 x L1; 80 GiB / 147,456 B
        "tokens per tier: L1 131,520, L2 263,040, L3 582,528"]  # whole pages of 64


def test_compare_by_hand():
    got = compare([0.0, 0.5, 0.6], [1.0, 2.0, 6.0], [0.0, 0.4, 0.9, 0.9], [2.0, 2.0, 4.0, 9.0])
    ratios = [0.5, 1.0, 1.5]
    assert got["rounds"] == 3
    assert got["hit_mae_pts"] == pytest.approx(100 * (0 + 0.1 + 0.3) / 3)
    assert got["ttft_ratio_gmean"] == pytest.approx(math.prod(ratios) ** (1 / 3))
    assert (got["ttft_ratio_min"], got["ttft_ratio_max"]) == (0.5, 1.5)
    # sim / its mean 3: 1/3, 2/3, 2; published / its mean 8/3: 0.75, 0.75, 1.5
    assert got["shape_error"] == pytest.approx((abs(1 / 3 - 0.75) + abs(2 / 3 - 0.75) + abs(2 - 1.5)) / 3)


def test_mapping_uses_the_case_setup_and_presets_only():
    cases = {c["id"]: c for _, c in case_files()}
    raw, notes = scenario_of(cases["H2-h800-qwen235b-l2-30g"])
    assert (raw["model"], raw["hardware"], raw["tp"]) == ("Qwen3-235B-A22B", "h800x8", 8)
    # --hicache-size 30 (GB per rank): 4 KV heads over 8 ranks -> 192,512 / 4 B per token per rank
    assert raw["cache"] == {"l2_tokens": 30 * 10**9 // 48_128, "write_policy": "write_through",
                            "mem_fraction_static": 0.818, "page_size": 64, "l1_tokens": "auto"}
    # bench_multiturn.py sends text: the front end's costs; no storage backend: no L3 read path
    assert raw["engine"] == {"chunked_prefill_tokens": 8192, "frontend": "sglang-text"}
    assert any(n.startswith("client bench_multiturn.py sends text: engine.frontend sglang-text") for n in notes)
    assert raw["workload"] == {"num_clients": 80, "num_rounds": 10, "request_length": 2048, "output_length": 1,
                               "max_parallel": 4, "request_rate": 16, "round_barrier": True,
                               "ready_queue_policy": "random", "kind": "multiturn"}
    raw, notes = scenario_of(cases["H3-h800-qwen235b-mooncake-760g"])
    # every rank stores its own shard: pool / (48,128 B x 8 ranks)
    assert raw["cache"]["l3_tokens"] == 816_043_786_240 // (48_128 * 8)
    assert (raw["cache"]["hicache_ratio"], raw["cache"]["prefetch_policy"]) == (2.0, "timeout")
    # a storage backend: SGLang's prefetch I/O thread, one get per 128 pages (STORAGE_BATCH_SIZE)
    assert raw["engine"] == {"chunked_prefill_tokens": 8192, "frontend": "sglang-text", "l3_get_batch_pages": 128}
    assert raw["cache"]["l3_model"] == "mooncake"
    raw, notes = scenario_of(cases["A4-ssdbench-mooncake-ssd"])
    assert raw["cache"]["l3_tokens"] == 80 * 2**30 // 147_456
    # the Mooncake pool with its SSD tier: the RAID0's ~14 TB (the case's ssd_bytes) per 147,456 B
    assert (raw["cache"]["l3_model"], raw["cache"]["l3_ssd_tokens"]) == ("mooncake", int(14e12 // 147_456))
    assert notes[-10:] == ["SSD tier 14,000,000,000,000 B below the pool (cache.l3_ssd_tokens)",
                          "case cache: l3_eviction_shards 1024", "L3 objects per page: 2 (SGLang's K and V per rank)",
                          "--hicache-mem-layout page_first_direct: io backend direct (SGLang switches kernel "
                          "to direct for this layout)", "hardware pcie_io_backend direct, nic_bytes_per_s "
                          "50000000000.0, l3_rdma_bytes_per_s 23750000000.0",
                          "--mem-fraction-static not stated: SGLang's default for the card, 0.833 "
                          "(cuda_graph_max_bs 32)", "--chunked-prefill-size not stated: SGLang's default for the card, 4096",
                          "client bench_multiturn.py sends text: engine.frontend sglang-text (tokenization of the "
                          "whole prompt, the per-request cost, the first token's way out; sim/serving_cpu.py)",
                          "L3 reads as SGLang's prefetch I/O thread: one prefetch at a time, one store get per 128 "
                          "pages (engine.l3_get_batch_pages; sim/l3_reads.py)",
                          "--attention-backend triton: engine.attention_backend triton (sim/opdata/attention_backends.json)"]
    # the run states its backend (the case's server flags); the H-series states none: the model's own curve
    assert raw["engine"] == {"chunked_prefill_tokens": 4096, "frontend": "sglang-text", "l3_get_batch_pages": 128,
                             "attention_backend": "triton"}
    # SGLang's page_first_direct layout runs the direct io backend; the A100 has no published
    # copy-engine rate, so its direct rate is the measured pinned copy rate (the kernel's)
    # the run's stated NICs (two 200 Gb/s HDR, the case's hardware_source): 50 GB/s line rate, and
    # the preset's 47.5% of line rate for Mooncake RDMA: 23.75 GB/s (the preset's eight NICs: 95 GB/s)
    assert raw["hardware"] == {"base": "a100-40gbx1", "pcie_io_backend": "direct", "nic_bytes_per_s": 50e9,
                               "l3_rdma_bytes_per_s": 0.475 * 2 * 200e9 / 8}
    assert scenario_of(cases["A2-ssdbench-l2"])[0]["hardware"] == "a100-40gbx1"
    # the run predates Mooncake #2286 (case cache): per-shard eviction of SGLang's K and V objects
    assert (raw["cache"]["l3_eviction_shards"], raw["cache"]["l3_objects_per_page"]) == (1024, 2)
    assert "l3_objects_per_page" not in scenario_of(cases["H3-h800-qwen235b-mooncake-760g"])[0]["cache"]
    assert scenario_of(cases["H3-h800-qwen235b-mooncake-760g"])[0]["hardware"] == {"base": "h800x8",
                                                                                    "l3_protocol": "rdma"}


def test_sglang_memory_defaults_by_hand():
    """SGLang's server_args._handle_gpu_memory_settings for a server without --mem-fraction-static."""
    # A100-SXM4-40GB (40,960 MiB), tp 1: chunk 4096, graphs 32; 512 + 4096 x 1.5 + 32 x 2 + 1/8 x 1024
    a100 = sglang_memory_defaults(presets.get_hardware("a100-40gbx1"), 1)
    assert a100 == {"chunked_prefill_tokens": 4096, "cuda_graph_max_bs": 32,
                    "mem_fraction_static": round((40_960 - 6_848) / 40_960, 3)} and a100["mem_fraction_static"] == 0.833
    # H800 (81,559 MiB), tp 8: chunk 8192, graphs 512; 512 + 12,288 + 1,024 + 1,024 = 14,848 (> the 10 GiB floor)
    h800 = sglang_memory_defaults(presets.get_hardware("h800x8"), 8)
    assert h800 == {"chunked_prefill_tokens": 8192, "cuda_graph_max_bs": 512, "mem_fraction_static": 0.818}
    # a stated chunk size enters the reserve; the 10 GiB floor on a card above 60 GiB: 512 + 3,072 + 512 + 128
    assert sglang_memory_defaults(presets.get_hardware("h800x8"), 1, 2048)["mem_fraction_static"] == round(
        (81_559 - 10_240) / 81_559, 3)


def test_a3_cliff_with_mooncakes_per_shard_eviction():
    """A3 (80 GiB Mooncake pool, published 83% 81% 36% 21% in rounds 6-9): evicting shard by
    shard, a page's K or V goes with the oldest leases of its shard, cutting whole histories."""
    (res,) = validate([A3])
    assert [round(100 * h, 2) for h in res["series"]["sim_hit_rate"]] == [
        0.0, 49.99, 66.66, 74.99, 79.98, 83.32, 64.05, 33.95, 18.12, 10.76]
    assert round(res["row"]["hit_mae_pts"], 2) == 2.52


def test_partial_and_non_round_cases_are_skipped_with_their_reason():
    res = validate(["P1-pr27010-L1", "E1-h20-dsv4flash-eic-loadback"])
    assert [(r["row"]["status"], r["row"]["reason"]) for r in res] == [
        ("skipped", "setup incomplete: model, GPU or bench knobs not recovered from the source"),
        ("skipped", "not a per-round multi-turn run (L3 load-back vs recompute)")]
    assert all(r["series"] is None and r["row"]["hit_mae_pts"] is None for r in res)


def _case_file(tmp_path, drop: str):
    doc = json.loads((CASE_DIR / "mooncake_ssd_offload_a100.json").read_text())
    doc["cases"] = doc["cases"][:1]
    section, _, key = drop.rpartition(".")
    del (doc["cases"][0][section] if section else doc["cases"][0])[key]
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("drop,field", [("page_size", "page_size"), ("workload.num_clients", "workload.num_clients"),
                                        ("published.hit_rate_per_round", "published.hit_rate_per_round"),
                                        ("id", "cases[0].id")])
def test_missing_field_is_one_line_naming_file_and_field(tmp_path, capsys, drop, field):
    path = _case_file(tmp_path, drop)
    assert main(["validate", str(path), "--smoke", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and f"{field}: missing; expected a value" in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(CaseError):
        validate([str(path)])


def test_workload_not_a_mapping_is_one_line(tmp_path, capsys):
    doc = json.loads((CASE_DIR / "mooncake_ssd_offload_a100.json").read_text())
    doc["cases"] = [dict(doc["cases"][0], workload="bench_multiturn")]
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err == (f"radixsim validate: error: {path}: A1-ssdbench-gpu-only: workload: "
                                       "expected a mapping, got str\n")


def test_case_hardware_not_a_mapping_is_one_line(tmp_path, capsys):
    doc = json.loads((CASE_DIR / "mooncake_ssd_offload_a100.json").read_text())
    doc["cases"] = [dict(doc["cases"][0], hardware="two 200 Gb/s NICs")]
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    assert main(["validate", str(path), "--smoke", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"radixsim validate: error: {path}: A1-ssdbench-gpu-only: hardware: "
                                       "expected a mapping of hardware fields\n")


@pytest.mark.parametrize("key,keys", [("cache", "l3_eviction_shards"), ("hardware", "nic_bytes_per_s, l3_rdma_bytes_per_s")])
def test_case_knob_without_its_source_is_one_line(tmp_path, capsys, key, keys):
    """A case's cache or hardware mapping names its source (issue 29 item 3: no knob chosen by
    its own error); A3's cache_source is Mooncake's commits at the run's date."""
    doc = json.loads((CASE_DIR / "mooncake_ssd_offload_a100.json").read_text())
    a3 = next(c for c in doc["cases"] if c["id"] == "A3-ssdbench-mooncake80g")
    assert "455e11a1d" in a3["cache_source"] and "738b375" in a3["cache_source"]
    doc["cases"] = [{k: v for k, v in a3.items() if k != f"{key}_source"}]
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    assert main(["validate", str(path), "--smoke", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"radixsim validate: error: {path}: A3-ssdbench-mooncake80g: {key}_source: "
                                       f"missing; expected the source (the run's text, or code at its date) of "
                                       f"{key} {keys}\n")
    assert not (tmp_path / "out").exists()


def test_unknown_case_and_bad_json_are_one_line(tmp_path, capsys):
    assert main(["validate", "no-such-case", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("radixsim validate: error: no-such-case: no such case file or case id")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["validate", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert f"{bad}: cannot read as JSON" in capsys.readouterr().err


def test_outputs_csv_json_and_html_name_every_case(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["validate", "--smoke", "--out", str(out)]) == 0
    ids = [c["id"] for _, c in case_files()]
    assert len(ids) == 14
    with open(out / "validation.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["case"] for r in rows] == ids
    assert sum(r["status"] == "ok" for r in rows) == 8 and sum(r["status"] == "skipped" for r in rows) == 6
    doc = json.loads((out / "validation.json").read_text())
    assert doc["smoke"] is True and [c["row"]["case"] for c in doc["cases"]] == ids
    page = (out / "validation.html").read_text()
    for cid in ids:
        assert f"<h2 id='{cid}'>" in page
    assert page.count("data:image/png;base64,") == 8
    printed = capsys.readouterr().out
    assert all(cid in printed for cid in ids)


def test_no_progress_turns_the_bar_off_on_a_terminal(tmp_path, monkeypatch):
    import sys

    import radixsim.validate as v

    seen = []
    monkeypatch.setattr(v, "validate", lambda cases, **kw: seen.append(kw["progress"]) or [])
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["validate", "--out", str(tmp_path / "a")]) == 0
    assert main(["validate", "--no-progress", "--out", str(tmp_path / "b")]) == 0
    assert seen == [True, False]
