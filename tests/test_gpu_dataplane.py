"""The torch data plane's staged copies: both pool layouts move the exact bytes, the staging
buffers are allocated once and reused, and the bandwidth report compares with a plain copy."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_backend.pools import KVPools  # noqa: E402
from gpu_backend.spec import HybridSpec  # noqa: E402
from gpu_backend.staging import StagedCopier  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pools(layout, device="cpu"):
    spec = HybridSpec(kinds=("full", "swa", "rec", "full"), hidden=16, num_heads=2, head_dim=8, window=32,
                      state_dim=5, vocab=31, page_size=4)
    p = KVPools(spec, full_pages={"L1": 10, "L2": 12}, swa_pages={"L1": 6, "L2": 6}, state_slots={"L1": 4, "L2": 5},
                layout=layout, device=device)
    gen = torch.Generator().manual_seed(3)
    for tier in ("L1", "L2"):
        for comp in ("full", "swa", "state"):
            n = p.size(tier, comp)  # page by page: the same logical content in either layout
            shape = p.read_pages(tier, comp, [0])[0].shape
            p.write_pages(tier, comp, range(n), list(torch.randn((n,) + tuple(shape), generator=gen)))
    return p


def page_bytes(p, tier, comp, idx):
    return [x.numpy().tobytes() for x in p.read_pages(tier, comp, idx)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_staged_round_trip_moves_exact_bytes_in_both_layouts(layout, device):
    p = pools(layout, device)
    cp = StagedCopier(p)
    moves = {"full": ([7, 0, 3, 4], [11, 2, 5, 6], [1, 8, 9, 2]), "swa": ([5, 1], [0, 4], [2, 3]),
             "state": ([2], [4], [0])}
    before = {c: page_bytes(p, "L1", c, m[0]) for c, m in moves.items()}
    untouched = page_bytes(p, "L2", "full", [0, 1, 3])
    for comp, (a, h, b) in moves.items():
        cp.copy("L1", "L2", comp, a, h).synchronize()
        assert page_bytes(p, "L2", comp, h) == before[comp]
        cp.copy("L2", "L1", comp, h, b).synchronize()
        assert page_bytes(p, "L1", comp, b) == before[comp]
    assert page_bytes(p, "L2", "full", [0, 1, 3]) == untouched
    if device == "cuda":  # pinned L2: DMA straight from/to the pool, one device buffer per component, reused
        h = cp.copy("L2", "L1", "full", [11, 2], [0, 1])
        assert len(h.events) == (1 if layout == "page_first" else 2)  # one unit, or one per full layer
        for layer in range(2):
            h.wait_layer(layer)
        h.synchronize()
        assert cp.allocations == 3


def test_both_layouts_hold_the_same_page_bytes_after_the_same_copies():
    got = []
    for layout in ("page_first", "layer_first"):
        p = pools(layout)
        cp = StagedCopier(p)
        cp.copy("L1", "L2", "full", [9, 2], [0, 7]).synchronize()
        cp.copy("L2", "L1", "full", [0, 7, 5], [3, 4, 5]).synchronize()
        got.append(page_bytes(p, "L1", "full", range(10)))
    assert got[0] == got[1]


def test_staging_buffers_are_allocated_once_and_reused():
    p = pools("page_first")
    cp = StagedCopier(p)
    cp.staged = True
    cp.copy("L1", "L2", "full", [0, 1, 2, 3], [0, 1, 2, 3]).synchronize()
    ptr = cp.buffer("host", "full", 4).data_ptr()
    for a, b in (([5], [9]), ([1, 2, 3], [4, 5, 6]), ([6, 7], [10, 11]), (list(range(6)), list(range(6)))):
        cp.copy("L2", "L1", "full", b, a).synchronize()
        cp.copy("L1", "L2", "full", a, b).synchronize()
        assert cp.buffer("host", "full", len(a)).data_ptr() == ptr
    assert cp.allocations == 1


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_a_load_larger_than_the_staging_chunk_moves_chunk_by_chunk_through_a_bounded_buffer(layout):
    """Chunks of 2 pages (bytes of 2.5 pages): a 7-page load and backup move the exact bytes
    through one buffer per component of 2 pages, allocated once."""
    p = pools(layout)
    cp = StagedCopier(p, chunk_bytes=p.page_bytes("full") * 5 // 2)
    cp.staged = True
    assert cp.chunk_pages("full") == 2
    src, hold, back = [9, 0, 3, 4, 5, 1, 7], [11, 2, 5, 6, 0, 8, 9], [2, 3, 4, 5, 6, 7, 8]
    want = page_bytes(p, "L1", "full", src)
    cp.copy("L1", "L2", "full", src, hold).synchronize()
    cp.copy("L2", "L1", "full", hold, back).synchronize()
    assert page_bytes(p, "L2", "full", hold) == want and page_bytes(p, "L1", "full", back) == want
    assert cp.allocations == 1 and cp._buf["host", "full"].shape[p.page_dim] == 2
    with pytest.raises(ValueError, match="staging buffer of full: 3 pages asked, a chunk holds 2"):
        cp.buffer("host", "full", 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
@pytest.mark.parametrize("src_tier,dst_tier", [("L1", "L2"), ("L2", "L1")])
@pytest.mark.parametrize("staged", [False, True])
def test_batched_page_copies_equal_per_page_copies(device, layout, src_tier, dst_tier, staged):
    """One copy of scattered pages with consecutive runs (batched: one copy per run, or staged)
    leaves both tiers byte-identical to the same pages copied one by one."""
    batched, single = pools(layout, device), pools(layout, device)
    moves = {"full": ([0, 1, 2, 7, 4, 5], [3, 4, 5, 9, 0, 1]),  # runs 0-2 -> 3-5, 7 -> 9, 4-5 -> 0-1
             "swa": ([0, 1, 5, 2], [3, 4, 0, 1]), "state": ([0, 1, 3], [2, 3, 0])}
    cp = StagedCopier(batched)
    cp.staged = staged
    for comp, (src, dst) in moves.items():
        cp.copy(src_tier, dst_tier, comp, src, dst).synchronize()
        for a, b in zip(src, dst):
            StagedCopier(single).copy(src_tier, dst_tier, comp, [a], [b]).synchronize()
    for tier in ("L1", "L2"):
        for comp in ("full", "swa", "state"):
            idx = range(batched.size(tier, comp))
            assert page_bytes(batched, tier, comp, idx) == page_bytes(single, tier, comp, idx), (tier, comp)
    assert cp.allocations == (1 if staged else 0) * 3


def test_pair_runs_split_where_either_side_breaks():
    from gpu_backend.staging import pair_runs

    t = lambda x: torch.tensor(x)  # noqa: E731
    assert pair_runs(t([0, 1, 2, 7, 4, 5]), t([3, 4, 5, 9, 0, 1])) == [(0, 3, 3), (7, 9, 1), (4, 0, 2)]
    assert pair_runs(t([0, 1, 2]), t([5, 6, 8])) == [(0, 5, 2), (2, 8, 1)]
    assert pair_runs(t([]), t([])) == []


def test_a_staged_copy_with_mismatched_indices_is_one_line():
    cp = StagedCopier(pools("page_first"))
    with pytest.raises(ValueError, match="2 source and 1 destination"):
        cp.copy("L1", "L2", "full", [1, 2], [1])


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
@pytest.mark.parametrize("src_tier, dst_tier, src, dst, message", [
    ("L1", "L2", [3, 10], [0, 1], "copy full L1 -> L2: source index 10 out of range [0, 10) of pool L1 full"),
    ("L1", "L2", [3, 4], [11, 12], "copy full L1 -> L2: destination index 12 out of range [0, 12) of pool L2 full"),
    ("L2", "L1", [-1, 0], [0, 1], "copy full L2 -> L1: source index -1 out of range [0, 12) of pool L2 full"),
    ("L2", "L1", [0, 1], [2, -1], "copy full L2 -> L1: destination index -1 out of range [0, 10) of pool L1 full"),
])
def test_a_staged_copy_out_of_range_is_an_index_error_naming_the_pool(layout, src_tier, dst_tier, src, dst, message):
    """Checked before anything moves (on CUDA an out-of-range index is a device-side assert): an
    IndexError (and a ValueError: bad input)."""
    p = pools(layout)
    before = {t: page_bytes(p, t, "full", range(p.size(t, "full"))) for t in ("L1", "L2")}
    with pytest.raises(IndexError) as err:
        StagedCopier(p).copy(src_tier, dst_tier, "full", src, dst)
    assert str(err.value) == message
    assert {t: page_bytes(p, t, "full", range(p.size(t, "full"))) for t in ("L1", "L2")} == before


def test_bandwidth_report_names_staged_and_plain_copies():
    from gpu_backend.calibrate import copy_bandwidth

    r = copy_bandwidth(pools("page_first"), "full", pages=8, repeats=2)
    assert r["pages"] == 8 and r["bytes"] == 8 * r["page_bytes"]
    for d in ("d2h", "h2d"):
        assert r[f"{d}_GBps"] > 0 and r[f"baseline_{d}_GBps"] > 0
        assert r[f"{d}_pct_of_baseline"] == pytest.approx(100 * r[f"{d}_GBps"] / r[f"baseline_{d}_GBps"])


def test_host_pools_are_pinned_in_place_at_exactly_their_size(monkeypatch):
    """`host_tensor(pin=True)` registers the tensor's own bytes (cudaHostRegister), exactly
    its size: no caching host allocator, no power-of-two rounding (a fake cudart records it)."""
    from gpu_backend import pools as pools_mod

    calls = []

    class FakeCudart:
        def cudaHostRegister(self, ptr, size, flags):
            calls.append((ptr, size, flags))
            return 0

    monkeypatch.setattr(torch.cuda, "cudart", lambda: FakeCudart())
    reg: list = []
    t = pools_mod.host_tensor((3, 5, 2, 7), torch.bfloat16, pin=True, registered=reg)
    assert calls == [(t.data_ptr(), 3 * 5 * 2 * 7 * 2, 0)] and reg == [t.data_ptr()]
    assert t.untyped_storage().nbytes() == 420 and not t.any()
    assert pools_mod.host_tensor((0, 4), torch.float32, pin=True).numel() == 0 and len(calls) == 1


def test_host_pools_larger_than_host_memory_are_refused_in_one_line(monkeypatch):
    from gpu_backend import pools as pools_mod

    spec = HybridSpec(kinds=("full",) * 2, hidden=16, num_heads=2, head_dim=8, window=None, state_dim=4, vocab=31,
                      page_size=4)  # a page: 2 layers x 2 x 4 x 16 x 4 bytes = 1 KiB
    monkeypatch.setattr(pools_mod, "host_memory_available", lambda: 2**30)
    KVPools(spec, full_pages={"L1": 1, "L2": 2**20})  # exactly 1 GiB: fits
    with pytest.raises(pools_mod.HostMemoryError) as err:
        KVPools(spec, full_pages={"L1": 1, "L2": 2**20 + 1})
    assert str(err.value) == ("the L2 host pools need 1.00 GiB, but only 1.00 GiB of host memory is available "
                              "(lower cache.l2_tokens)")
    assert isinstance(err.value, ValueError)


def test_a_pool_larger_than_this_machine_s_memory_is_refused_before_allocating():
    from gpu_backend.pools import HostMemoryError, host_memory_available

    spec = HybridSpec(kinds=("full",), hidden=16, num_heads=2, head_dim=8, window=None, state_dim=4, vocab=31,
                      page_size=4)
    with pytest.raises(HostMemoryError, match=r"^the L2 host pools need \d+\.\d\d [GM]iB, but only"):
        KVPools(spec, full_pages={"L1": 1, "L2": host_memory_available() // 256 + 1})  # 256-byte pages


def test_radixsim_run_with_l2_pools_over_host_memory_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    import yaml

    from gpu_backend import pools as pools_mod
    from radixsim.cli import main

    monkeypatch.setattr(pools_mod, "host_memory_available", lambda: 2**18)  # the pools: 256 pages of 4 KiB
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"model": "qwen3-32b", "cache": {"page_size": 16, "l1_tokens": 2048, "l2_tokens": 4096},
                                 "workload": {"num_clients": 1, "num_rounds": 1, "request_length": 32,
                                              "output_length": 2},
                                 "torch": {"layers": 2, "hidden": 32, "num_heads": 2, "head_dim": 8, "vocab": 97}}))
    assert main(["run", str(p), "--backend", "torch", "--out", str(tmp_path / "o"), "--no-plots", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (f"radixsim run: {p}: the L2 host pools need 1.00 MiB, but only 0.25 MiB of host memory is "
                   "available (lower cache.l2_tokens)\n")
