"""gpu_backend: the L3 page store (a corrupt or missing page is a miss, never wrong data)
and the pools' page copies that feed it."""
from __future__ import annotations

import os
import threading

import pytest

torch = pytest.importorskip("torch")

from gpu_backend.pools import KVPools  # noqa: E402
from gpu_backend.spec import HybridSpec  # noqa: E402
from gpu_backend.store import LocalDirStore, decode_page, encode_page, page_key  # noqa: E402

SPEC = HybridSpec(kinds=("swa", "rec", "full", "full"), hidden=32, num_heads=2, head_dim=8,
                  window=8, state_dim=16, vocab=31, page_size=4)


def page(seed, shape=(2, 2, 4, 16), dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def files(store):
    return sorted(p for p in store.root.rglob("*.page") if not p.name.startswith(".tmp-"))


def test_round_trip_dtypes_shapes_and_key_kinds(tmp_path):
    store = LocalDirStore(tmp_path / "l3")
    keys = [page_key("full", 2**64 - 1), page_key("swa", 5), 12345, b"\x01\x02", "state-x"]
    vals = [page(1), page(2, dtype=torch.bfloat16), page(3, (7,)), torch.zeros(0, 3),
            torch.arange(6, dtype=torch.int64).reshape(2, 3)]
    store.put(keys, vals)
    got = store.get(keys)
    for g, v in zip(got, vals):
        assert g is not None and g.dtype == v.dtype and g.shape == v.shape and torch.equal(g, v)
    assert store.contains(keys + ["nope"]) == [True] * 5 + [False]
    store.put([12345], [page(9, (7,))])  # overwrite
    assert torch.equal(store.get([12345])[0], page(9, (7,)))
    assert page_key("full", -1) == page_key("full", 2**64 - 1) == "full-ffffffffffffffff"
    with pytest.raises(ValueError):
        store.put(["../escape"], [page(1)])
    with pytest.raises(ValueError):
        store.put([1, 2], [page(1)])


def test_missing_and_deleted_pages_are_misses(tmp_path):
    store = LocalDirStore(tmp_path)
    store.put(["a", "b"], [page(1), page(2)])
    store.delete(["a", "never-there"])
    got = store.get(["a", "b", "c"])
    assert got[0] is None and torch.equal(got[1], page(2)) and got[2] is None
    assert store.stats["misses"] == 2 and store.stats["hits"] == 1


@pytest.mark.parametrize("where", ["payload", "header", "digest", "magic"])
def test_corrupt_page_reads_as_miss(tmp_path, where):
    store = LocalDirStore(tmp_path)
    store.put(["k", "other"], [page(1), page(2)])
    (path,) = [p for p in files(store) if p.name == "k.page"]
    blob = bytearray(path.read_bytes())
    at = {"payload": len(blob) - 5, "header": 50, "digest": 10, "magic": 0}[where]
    blob[at] ^= 0x40
    path.write_bytes(bytes(blob))
    assert store.get(["k"]) == [None]
    assert store.stats["corrupt"] == 1
    assert torch.equal(store.get(["other"])[0], page(2))


@pytest.mark.parametrize("keep", [0, 10, 44, -1])
def test_truncated_page_reads_as_miss(tmp_path, keep):
    store = LocalDirStore(tmp_path)
    store.put(["k"], [page(1)])
    (path,) = files(store)
    blob = path.read_bytes()
    path.write_bytes(blob[:keep] if keep >= 0 else blob[:-1])
    assert store.get(["k"]) == [None]


def test_page_under_another_key_is_a_miss(tmp_path):
    """A file renamed (or a blob served) under the wrong key is not that key's page."""
    blob = encode_page("a", page(1))
    assert decode_page("b", blob) is None
    assert torch.equal(decode_page("a", blob), page(1))
    store = LocalDirStore(tmp_path)
    store.put(["aa"], [page(1)])
    (path,) = files(store)
    target = store._path("ba")
    target.parent.mkdir(exist_ok=True)
    os.replace(path, target)
    assert store.get(["ba"]) == [None]


def test_concurrent_writers_and_readers_see_whole_pages(tmp_path):
    """Writers replace one key over and over with different pages while readers read it: a
    read is always one of the pages written (never a mix, never a partial file); no temp
    file is left behind."""
    store = LocalDirStore(tmp_path)
    versions = [page(s, (64, 64)) for s in range(4)]
    store.put(["hot"], [versions[0]])
    errors, stop = [], threading.Event()

    def writer(i):
        for r in range(25):
            store.put(["hot"], [versions[(i + r) % 4]])

    def reader():
        while not stop.is_set():
            (got,) = LocalDirStore(tmp_path).get(["hot"])
            if got is None or not any(torch.equal(got, v) for v in versions):
                errors.append(got)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert errors == []
    assert [p.name for p in tmp_path.rglob("*")if p.is_file()] == ["hot.page"]


# -- pools ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_pool_shapes_copies_and_store_round_trip(tmp_path, layout):
    pools = KVPools(SPEC, full_pages={"L1": 6, "L2": 5}, swa_pages=4, state_slots={"L1": 3},
                    layout=layout)
    full = pools.tensor("L1", "full")
    if layout == "page_first":
        assert full.shape == (6, 2, 2, 4, 16) and pools.tensor("L1", "state").shape == (3, 1, 16)
    else:
        assert full.shape == (2, 6, 2, 4, 16) and pools.tensor("L1", "state").shape == (1, 3, 16)
    assert pools.size("L2", "full") == 5 and pools.size("L2", "mamba") == 0
    assert pools.page_bytes("full") == 2 * 2 * 4 * 16 * 4 and pools.page_bytes("state") == 16 * 4
    full.copy_(torch.randn(full.shape, generator=torch.Generator().manual_seed(0)))
    pools.copy_pages("L1", "L2", "full", [4, 0, 2], [1, 3, 0]).synchronize()
    l1, l2 = pools.read_pages("L1", "full", [4, 0, 2]), pools.read_pages("L2", "full", [1, 3, 0])
    assert all(torch.equal(a, b) for a, b in zip(l1, l2)) and l1[0].shape == (2, 2, 4, 16)
    store = LocalDirStore(tmp_path)
    keys = [page_key("full", k) for k in (11, 12, 13)]
    store.put(keys, l2)
    pools.write_pages("L1", "full", [5, 1, 3], store.get(keys))
    assert all(torch.equal(a, b) for a, b in zip(pools.read_pages("L1", "full", [5, 1, 3]), l1))
    with pytest.raises(ValueError, match=r"^copy full L1 -> L2: destination index 5 out of range \[0, 5\) "
                                         r"of pool L2 full$"):
        pools.copy_pages("L1", "L2", "full", [5], [5])
    with pytest.raises(ValueError):
        pools.copy_pages("L1", "L2", "full", [1, 2], [1])
    with pytest.raises(KeyError, match="sidecar"):
        pools.tensor("L1", "c4_kv")
