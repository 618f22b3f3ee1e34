"""Mooncake Store as the L3 page store (`PageStore`): a ``mooncake_master`` (with its HTTP
metadata server) and this process as a client in ``tcp`` protocol.

Pages travel as the same self-checking blobs as `LocalDirStore` (`encode_page`: header, blake2b
checksum, payload), so a corrupt, partial or foreign object reads as a miss, never as wrong
data. Calls are batched per transfer (``put_batch`` / ``get_batch`` / ``batch_is_exist``).
Mooncake evicts on its own: ``contains`` is a hint and ``get`` the truth.

Set-up (what `.ci/run` does)::

    pip install mooncake-transfer-engine-non-cuda==0.3.13.post1   # GPU machines: mooncake-transfer-engine
    # needs Debian's libibverbs1
    mooncake_master -rpc_port=50051 -rpc_address=127.0.0.1 -enable_http_metadata_server=true \\
        -http_metadata_server_host=127.0.0.1 -http_metadata_server_port=8080 &
    export MC_TCP_BIND_ADDRESS=127.0.0.1
"""
from __future__ import annotations

import os

from scenarios.torch_options import TorchOptions

from .store import PageStore, decode_page, encode_page

DEFAULT_MASTER = TorchOptions.mooncake_master  # torch.mooncake_master's default (scenarios/torch_options.py)
DEFAULT_METADATA = TorchOptions.mooncake_metadata


class MooncakeClientStore(PageStore):
    def __init__(self, master: str = DEFAULT_MASTER, metadata: str = DEFAULT_METADATA, *,
                 local_hostname: str = "127.0.0.1", segment_bytes: int = 256 << 20, buffer_bytes: int = 64 << 20,
                 protocol: str = "tcp"):
        try:
            from mooncake.store import MooncakeDistributedStore
        except ImportError as e:
            raise RuntimeError("Mooncake Store needs `pip install mooncake-transfer-engine-non-cuda==0.3.13.post1` "
                               f"(and Debian's libibverbs1): {e}") from None
        os.environ.setdefault("MC_TCP_BIND_ADDRESS", local_hostname)
        self._s = MooncakeDistributedStore()
        rc = self._s.setup(local_hostname, metadata, segment_bytes, buffer_bytes, protocol, "", master)
        if rc != 0:
            raise RuntimeError(f"Mooncake Store: setup against master {master} (metadata {metadata}) failed, rc={rc}")

    def put(self, keys, tensors) -> None:
        keys = [str(k) for k in keys]
        if not keys:
            return
        blobs = [encode_page(k, t) for k, t in zip(keys, tensors)]
        rc = self._s.put_batch(keys, blobs)
        if rc != 0:  # a failed put is a future miss, never wrong data
            for k, b in zip(keys, blobs):
                self._s.put(k, b)

    def get(self, keys) -> list:
        keys = [str(k) for k in keys]
        if not keys:
            return []
        blobs = self._s.get_batch(keys)
        return [decode_page(k, bytes(b)) if b else None for k, b in zip(keys, blobs)]

    def contains(self, keys) -> list:
        keys = [str(k) for k in keys]
        return [bool(x == 1) for x in self._s.batch_is_exist(keys)] if keys else []

    def delete(self, keys) -> None:
        """Best effort: Mooncake refuses to remove an object within its lease after a put."""
        for k in keys:
            self._s.remove(str(k))

    def close(self) -> None:
        self._s.close()


__all__ = ["MooncakeClientStore", "DEFAULT_MASTER", "DEFAULT_METADATA"]
