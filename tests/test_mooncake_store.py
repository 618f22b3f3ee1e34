"""Mooncake Store as the L3 page store. Runs against the master `.ci/run` starts
(RADIXSIM_MOONCAKE_MASTER=HOST:PORT and RADIXSIM_MOONCAKE_METADATA=URL); without them, against
one this fixture starts when the `mooncake_master` binary and the client are installed; skipped
only when Mooncake is not installed."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mooncake.store")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int, timeout: float = 20.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"mooncake_master did not open port {port}")


@pytest.fixture(scope="module")
def master():
    os.environ.setdefault("MC_TCP_BIND_ADDRESS", "127.0.0.1")
    if os.environ.get("RADIXSIM_MOONCAKE_MASTER"):
        yield os.environ["RADIXSIM_MOONCAKE_MASTER"], os.environ["RADIXSIM_MOONCAKE_METADATA"]
        return
    binary = shutil.which("mooncake_master")
    if binary is None:
        pytest.skip("mooncake_master is not installed")
    rpc, http, metrics = _free_port(), _free_port(), _free_port()
    proc = subprocess.Popen([binary, f"-rpc_port={rpc}", "-rpc_address=127.0.0.1", "-enable_http_metadata_server=true",
                             "-http_metadata_server_host=127.0.0.1", f"-http_metadata_server_port={http}",
                             f"-metrics_port={metrics}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(rpc)
        _wait(http)
        yield f"127.0.0.1:{rpc}", f"http://127.0.0.1:{http}/metadata"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def store(master):
    from gpu_backend.store_mooncake import MooncakeClientStore

    s = MooncakeClientStore(*master)
    yield s
    s.close()


def test_batch_round_trip_and_misses(store):
    from gpu_backend.store import page_key

    keys = [page_key("full", 11), page_key("swa", 11), page_key("full", 12)]
    pages = [torch.randn(3, 2, 4, 8), torch.randn(2, 2, 4, 8), torch.arange(6.0)]
    store.put(keys, pages)
    got = store.get(keys + [page_key("full", 999)])
    assert all(torch.equal(a, b) for a, b in zip(got[:3], pages)) and got[3] is None
    assert store.contains(keys + [page_key("mamba", 11)]) == [True, True, True, False]
    store.delete(keys[:1])  # best effort: Mooncake keeps a freshly put object for its lease time


def test_a_corrupt_object_is_a_miss_never_wrong_data(store):
    from gpu_backend.store import encode_page, page_key

    k = page_key("full", 21)
    blob = bytearray(encode_page(k, torch.ones(4, 4)))
    blob[-3] ^= 0xFF  # one flipped payload byte
    store._s.put(k, bytes(blob))
    assert store.get([k]) == [None]
    store._s.put(page_key("full", 22), encode_page(page_key("full", 23), torch.ones(2)))  # another key's page
    assert store.get([page_key("full", 22)]) == [None]


def test_engine_serves_l3_hits_from_mooncake_with_exact_logits(master):
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from test_torch_backend import check_logits, scenario

    from radixsim.run import simulate

    sc = scenario("gpt-oss-20b", l1=1024, l2=1536, l3="unbounded", clients=4, rounds=5,
                  sets=["cache.min_prefetch_tokens=16", "torch.store=mooncake", f"torch.mooncake_master={master[0]}",
                        f"torch.mooncake_metadata={master[1]}"])
    eng, *_ = simulate(sc, backend="torch", record_logits=True)
    assert sum(r.cached_storage for r in eng.finished) > 0 and eng.dataplane.failed == 0
    check_logits(eng)
