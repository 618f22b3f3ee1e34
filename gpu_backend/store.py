"""L3 page stores: where pages go past host memory, addressed by page key.

The core names L3 content by stable page keys (`cache_core.keys`: an unsigned 64-bit int
that names a page's whole prefix); `Transfer.keys` carries them for "store" (L2 -> L3) and
"prefetch" (L3 -> L2) transfers. A store keeps one tensor per key (one page of one
component, all layers, as `KVPools.read_pages` gives it). Several components share a page
key (FULL and SWA pages of the same prefix), so the data plane namespaces keys with
`page_key(component, key)`.

Contract of every store: a key reads back either the exact tensor put under it or None
(missing, corrupt, truncated, written by another format): never wrong data. A miss is
normal (the core treats a failed prefetch as a miss and recomputes).

Two stores implement it: `LocalDirStore` (files in a directory) and `MooncakeClientStore`
(`store_mooncake.py`: Mooncake Store's distributed client, chosen by `torch.store: mooncake`).
Both move the same encoded blob (header + blake2b checksum + payload, `encode_page` /
`decode_page`), so a corrupt or partial object is a miss in either. Mooncake evicts on its own,
so `contains` stays a hint and `get` the truth.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
from pathlib import Path

import torch

MAGIC = b"RXPG"
VERSION = 1
_DIGEST = 32  # blake2b digest bytes
_PREFIX = struct.Struct("<4sB3x32sI")  # magic, version, pad, digest, header length
_SAFE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def page_key(component: str, key) -> str:
    """The store key of `component`'s page named by core page key `key` (uint64)."""
    return f"{component}-{int(key) & 0xFFFFFFFFFFFFFFFF:016x}"


def _key_str(key) -> str:
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).hex()
    if isinstance(key, str):
        if not _SAFE.match(key) or key.startswith("."):
            raise ValueError(f"store key {key!r}: use 1-200 of [A-Za-z0-9._-], not starting with '.'")
        return key
    try:
        return f"{int(key) & 0xFFFFFFFFFFFFFFFF:016x}"  # ints, numpy ints
    except (TypeError, ValueError):
        raise TypeError(f"store key must be str, bytes or int, got {type(key).__name__}") from None


def encode_page(key: str, tensor: torch.Tensor) -> bytes:
    """One page as bytes: fixed prefix (magic, version, blake2b of the rest, header length),
    a JSON header (key, dtype, shape, payload bytes), the raw little-endian payload."""
    t = tensor.detach().to("cpu").contiguous()
    payload = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    header = json.dumps({"key": key, "dtype": str(t.dtype).removeprefix("torch."),
                         "shape": list(t.shape), "nbytes": len(payload)}).encode()
    body = struct.pack("<I", len(header)) + header + payload
    digest = hashlib.blake2b(body, digest_size=_DIGEST).digest()
    return _PREFIX.pack(MAGIC, VERSION, digest, len(header)) + header + payload


def decode_page(key: str, blob: bytes):
    """The tensor in `blob` if it is intact and was put under `key`, else None."""
    if len(blob) < _PREFIX.size:
        return None
    magic, version, digest, hlen = _PREFIX.unpack_from(blob)
    if magic != MAGIC or version != VERSION or _PREFIX.size + hlen > len(blob):
        return None
    body = struct.pack("<I", hlen) + blob[_PREFIX.size:]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        return None
    try:
        header = json.loads(blob[_PREFIX.size:_PREFIX.size + hlen])
        dtype = getattr(torch, header["dtype"])
        shape = [int(s) for s in header["shape"]]
        nbytes = int(header["nbytes"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    payload = blob[_PREFIX.size + hlen:]
    if header.get("key") != key or not isinstance(dtype, torch.dtype) or nbytes != len(payload):
        return None
    numel = 1
    for s in shape:
        numel *= s
    if numel * dtype.itemsize != nbytes:
        return None
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(payload), dtype=torch.uint8).view(dtype).reshape(shape)


class PageStore:
    """The L3 interface: batched by key; one tensor per key."""

    def put(self, keys, tensors) -> None:
        raise NotImplementedError

    def get(self, keys) -> list:
        """Per key the tensor put under it, or None (missing or unreadable): never wrong data."""
        raise NotImplementedError

    def contains(self, keys) -> list:
        """Per key whether an entry exists (a hint: `get` may still miss on a corrupt one)."""
        raise NotImplementedError

    def delete(self, keys) -> None:
        raise NotImplementedError


class LocalDirStore(PageStore):
    """One file per key under `path` (fanned out by the key's last two characters), written
    atomically: a temp file in the same folder, then ``os.replace``, so a reader sees the old
    file, the new one or none, never a partial one. ``fsync=True`` also flushes each file to
    disk before the rename (durable across a crash; slower)."""

    def __init__(self, path, fsync: bool = False):
        self.root = Path(path)
        self.root.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.stats = {"puts": 0, "hits": 0, "misses": 0, "corrupt": 0}

    def _path(self, key: str) -> Path:
        return self.root / key[-2:] / f"{key}.page"

    def put(self, keys, tensors) -> None:
        keys, tensors = list(keys), list(tensors)
        if len(keys) != len(tensors):
            raise ValueError(f"put: {len(keys)} keys and {len(tensors)} tensors")
        for key, t in zip(keys, tensors):
            k = _key_str(key)
            path = self._path(k)
            path.parent.mkdir(exist_ok=True)
            blob = encode_page(k, t)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".page")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                    if self.fsync:
                        f.flush()
                        os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise
            self.stats["puts"] += 1

    def get(self, keys) -> list:
        out = []
        for key in keys:
            k = _key_str(key)
            try:
                blob = self._path(k).read_bytes()
            except (FileNotFoundError, IsADirectoryError, PermissionError):
                self.stats["misses"] += 1
                out.append(None)
                continue
            t = decode_page(k, blob)
            self.stats["hits" if t is not None else "corrupt"] += 1
            out.append(t)
        return out

    def contains(self, keys) -> list:
        return [self._path(_key_str(k)).is_file() for k in keys]

    def delete(self, keys) -> None:
        for key in keys:
            try:
                os.unlink(self._path(_key_str(key)))
            except FileNotFoundError:
                pass


__all__ = ["PageStore", "LocalDirStore", "page_key", "encode_page", "decode_page"]
