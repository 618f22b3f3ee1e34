"""Sizes: tokens are canonical; a size may also be given in bytes with a unit ("500GiB"),
converted through a bytes-per-token figure (DESIGN.md, Names and units)."""
from __future__ import annotations

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
UNBOUNDED = ("unbounded", "inf", "none")


def is_size_text(text: str, allow_unbounded: bool = True) -> bool:
    """Syntax check only: a token count, a byte size with a unit, or 'unbounded'."""
    t = str(text).strip().lower().replace("_", "")
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num):]
    if allow_unbounded and t in UNBOUNDED:
        return True
    if t.isdigit():
        return True
    try:
        v = float(num)
    except ValueError:
        return False
    return unit in UNITS and 0 <= v < float("inf")


def parse_size(value, what: str, bytes_per_token: float, allow_unbounded: bool = False,
               hint: str = "give the KV bytes per token to convert it to tokens"):
    """Tokens (2000000, '2_000_000'), or bytes with a unit ('500GiB') converted through
    `bytes_per_token` (rounded down); 'unbounded' -> None where allowed. ValueError names
    `what` and what was expected."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} {value!r}: expected a token count or a size like 500GiB")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what} {value}: expected a token count >= 0")
        return value
    t = str(value).strip().lower().replace("_", "")
    if allow_unbounded and t in UNBOUNDED:
        return None
    if t.isdigit():
        return int(t)
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num):]
    try:
        v = float(num)
    except ValueError:
        v = -1.0
    if unit not in UNITS or not 0 <= v < float("inf"):
        raise ValueError(f"{what} {value!r}: expected a token count or a size like 500GiB"
                         + (" or 'unbounded'" if allow_unbounded else ""))
    if not bytes_per_token or bytes_per_token <= 0:
        raise ValueError(f"{what} {value!r} is in bytes: {hint}")
    return int(v * UNITS[unit] // bytes_per_token)
