"""Small public records: a prepared token sequence, the opaque lock handle, match and insert
results. Callers never hold tree nodes; a handle carries one privately."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .keys import as_tokens, page_keys


class TokenSeq:
    """A token sequence prepared once for repeated matching (int64 bytes + length), with its
    page keys computed on first need (or handed in by a workload that builds them
    incrementally: `keys` for at least the full pages that will be looked up)."""

    __slots__ = ("data", "length", "_keys", "_keys_page")
    data: bytes
    length: int
    _keys: np.ndarray | None
    _keys_page: int | None

    def __init__(self, tokens, keys: np.ndarray | None = None, page_size: int | None = None):
        if isinstance(tokens, TokenSeq):
            self.data, self.length = tokens.data, tokens.length
            self._keys, self._keys_page = tokens._keys, tokens._keys_page
            return
        arr = as_tokens(tokens)
        self.data = arr.tobytes()
        self.length = len(arr)
        self._keys, self._keys_page = keys, page_size

    def __len__(self) -> int:
        return self.length

    @classmethod
    def join(cls, *parts) -> "TokenSeq":
        """The concatenation of int64 token arrays, copied once (no intermediate array)."""
        arrs = [as_tokens(p) for p in parts]
        seq = cls.__new__(cls)
        seq.data = b"".join(a.data for a in arrs if len(a))  # a.data: memoryview(a)
        seq.length = sum(len(a) for a in arrs)
        seq._keys = seq._keys_page = None
        return seq

    def page_keys(self, page_size: int) -> np.ndarray:
        """Stable keys of every full page (cache_core.keys), computed once."""
        if self._keys is None or self._keys_page != page_size:
            toks = np.frombuffer(self.data, dtype=np.int64)
            self._keys, self._keys_page = page_keys(toks, page_size)[0], page_size
        return self._keys


class LockHandle:
    """Opaque reference to a matched prefix; only the cache looks inside."""

    __slots__ = ("_node",)

    def __init__(self, node):
        self._node = node

    @property
    def node(self):
        """The node the match ends at (for cache_core's own modules)."""
        return self._node


@dataclass(frozen=True, slots=True)
class MatchResult:
    cached_tokens: int  # reusable prefix length (page-aligned): every component accepts it
    handle: LockHandle
    traversed_tokens: int = -1  # how far the FULL path matched (>= cached_tokens)
    lost: tuple = ()  # ((component, tokens short of the traversal, reason), ...)
    device_tokens: int = -1  # with tiers: the part on L1 (-1: all of cached_tokens)
    host_tokens: int = 0  # with tiers: the part on L2 only
    storage_tokens: int = 0  # with tiers: the part found in L3 (beyond the tree)
    # with tiers, SWA/MAMBA and L3: a deeper boundary on the tree path (a token position >
    # cached_tokens, 0: none) whose FULL pages are in the tree but some component payloads
    # (SWA window pages, the MAMBA checkpoint) are only in L3; not counted in cached_tokens:
    # `RadixCache.prefetch` / `load` fetch them L3 -> L2, after which a match reuses it
    l3_boundary: int = 0

    @property
    def device(self) -> int:
        return self.cached_tokens if self.device_tokens < 0 else self.device_tokens

    @property
    def traversed(self) -> int:
        return self.cached_tokens if self.traversed_tokens < 0 else self.traversed_tokens


@dataclass(frozen=True, slots=True)
class InsertResult:
    prefix_tokens: int  # tokens of the key that were already in the tree
    freed_pages: int  # pages handed back: duplicates of tree content and the partial tail
    handle: LockHandle | None = None  # the node that ends the inserted sequence
