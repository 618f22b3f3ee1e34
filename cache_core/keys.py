"""Tokens and page keys.

Tokens are int64 numpy arrays. The radix tree compares token runs directly (exact, no
collisions); page keys exist for identity that must leave the process (the L3 store, logs,
cross-engine sharing), so they are defined here once, exactly, and are stable across
processes, machines and Python/numpy versions.

Page key definition (version 1)
-------------------------------
For a token sequence t_0 .. t_{n-1} (int64, read as uint64 two's complement):

1. each token is mixed with SplitMix64::

       z = t + 0x9E3779B97F4A7C15 (mod 2**64)
       z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
       z = (z ^ (z >> 27)) * 0x94D049BB133111EB
       z =  z ^ (z >> 31)

2. for each modulus p_k in (P1, P2) = (2**31 - 1, 2**31 - 19) with base B_k in
   (B1, B2) = (1_000_003, 998_244_353 mod P2), the digit is d_k = (z mod (p_k - 1)) + 1 and
   the prefix hash after token j is the polynomial

       H_k(j) = (sum_{i<=j} d_k(t_i) * B_k ** (j - i)) mod p_k

3. the key of the page that ends after token j (j + 1 a multiple of the page size) is
   SplitMix64((H_1(j) << 32) | H_2(j)), an unsigned 64-bit integer.

So a key names its whole prefix, not just its page: equal keys mean equal prefixes (up to a
~2**-62 collision chance), and a key does not depend on the page size used to cut the
prefix. The polynomial form lets numpy compute every prefix hash of a chunk in a few
vectorised passes (no Python loop per token), and lets a caller extend a sequence
incrementally: `KeyState` carries (H_1, H_2) so a new round hashes only its new tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOKEN_DTYPE = np.dtype("<i8")
P1, P2 = 2**31 - 1, 2**31 - 19
B1, B2 = 1_000_003, 998_244_353 % (2**31 - 19)
_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)


def as_tokens(tokens) -> np.ndarray:
    """Return `tokens` as a contiguous little-endian int64 array (no copy when it already is)."""
    return np.ascontiguousarray(tokens, dtype=TOKEN_DTYPE)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser over a uint64 array (wrapping arithmetic)."""
    z = x.astype(_U64, copy=True)
    with np.errstate(over="ignore"):
        z += _U64(0x9E3779B97F4A7C15)
        z ^= z >> _U64(30)
        z *= _U64(0xBF58476D1CE4E5B9)
        z ^= z >> _U64(27)
        z *= _U64(0x94D049BB133111EB)
        z ^= z >> _U64(31)
    return z


class _PowerTable:
    """Powers B**k and B**-k modulo p for k < len, grown by doubling (vectorised)."""

    def __init__(self, base: int, mod: int):
        self.base, self.mod = base, mod
        self.inv = pow(base, mod - 2, mod)
        self.pow = np.ones(1, dtype=_U64)
        self.ipow = np.ones(1, dtype=_U64)

    def ensure(self, n: int) -> None:
        while len(self.pow) < n:
            k = len(self.pow)
            p = _U64(self.mod)
            self.pow = np.concatenate([self.pow, self.pow * _U64(pow(self.base, k, self.mod)) % p])
            self.ipow = np.concatenate([self.ipow, self.ipow * _U64(pow(self.inv, k, self.mod)) % p])


_TABLES = (_PowerTable(B1, P1), _PowerTable(B2, P2))


@dataclass(frozen=True, slots=True)
class KeyState:
    """Hash state after a prefix: extend it with `page_keys(..., state=...)`. O(1) size."""

    h1: int = 0
    h2: int = 0
    length: int = 0


ROOT_STATE = KeyState()


def _prefix_hashes(tokens: np.ndarray, state: KeyState):
    """H_1 and H_2 after every token of `tokens`, continuing from `state`."""
    n = len(tokens)
    z = splitmix64(tokens.view(_U64))
    out = []
    for table, h0 in zip(_TABLES, (state.h1, state.h2)):
        table.ensure(n + 1)
        p = _U64(table.mod)
        d = z % _U64(table.mod - 1) + _U64(1)
        # H(j) = B**(j+1) * (h0 + sum_{i<=j} d_i * B**-(i+1)) mod p
        acc = np.cumsum(d * table.ipow[1 : n + 1] % p, dtype=_U64) % p
        acc = (acc + _U64(h0)) % p
        out.append(acc * table.pow[1 : n + 1] % p)
    return out[0], out[1]


def page_keys(tokens, page_size: int, state: KeyState = ROOT_STATE) -> tuple[np.ndarray, KeyState]:
    """Keys of every full page of `tokens` (a continuation of the prefix that `state` names).

    Returns (keys, state_after_full_pages). `state.length` must be a multiple of page_size;
    the partial tail page gets no key and is not absorbed into the returned state, so the
    next call must resend those tokens. Cost: O(len(tokens)) in numpy, no Python loop.
    """
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    if state.length % page_size:
        raise ValueError("state must end on a page boundary")
    t = as_tokens(tokens)
    n_full = len(t) // page_size * page_size
    if n_full == 0:
        return np.empty(0, dtype=_U64), state
    h1, h2 = _prefix_hashes(t[:n_full], state)
    ends = slice(page_size - 1, n_full, page_size)
    keys = splitmix64((h1[ends] << _U64(32)) | h2[ends])
    new = KeyState(int(h1[-1]), int(h2[-1]), state.length + n_full)
    return keys, new


def page_align(n_tokens: int, page_size: int) -> int:
    """Largest multiple of page_size that is <= n_tokens."""
    return n_tokens // page_size * page_size
