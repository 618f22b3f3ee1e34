"""Sizes: tokens are canonical; a size may also be given in bytes with a unit ("500GiB"),
converted through a bytes-per-token figure (DESIGN.md, Names and units)."""
from __future__ import annotations

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
UNBOUNDED = ("unbounded", "inf", "none")
MAX_TOKENS = 2**40  # ~1.1e12 tokens: a petabyte L3 holds at most 2.6e11 (dsv4-flash, 3,850 B a token)
MAX_POOL_PAGES = 2**30  # pages of a pool held page by page (L1, L2, SWA; MAMBA slots): the invariant
# check keeps an int64 index per page, so 2**30 pages already need ~24 GiB of bookkeeping


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
    if not unit:  # a token count in e-notation (1e6): whole tokens only
        return "e" in num and 0 <= v < float("inf") and v.is_integer()
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
        return _representable(value, value, what)
    t = str(value).strip().lower().replace("_", "")
    if allow_unbounded and t in UNBOUNDED:
        return None
    if t.isdigit():
        return _representable(int(t), value, what)
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num):]
    try:
        v = float(num)
    except ValueError:
        v = -1.0
    if not unit and "e" in num and 0 <= v < float("inf") and v.is_integer():  # tokens in e-notation (1e6)
        return _representable(int(v), value, what)
    if unit not in UNITS or not 0 <= v < float("inf"):
        raise ValueError(f"{what} {value!r}: expected a token count or a size like 500GiB"
                         + (" or 'unbounded'" if allow_unbounded else ""))
    if not bytes_per_token or bytes_per_token <= 0:
        raise ValueError(f"{what} {value!r} is in bytes: {hint}")
    return _representable(int(v * UNITS[unit] // bytes_per_token), value, what)


def _representable(tokens: int, value, what: str) -> int:
    if tokens > MAX_TOKENS:
        raise ValueError(f"{what} {value!r}: {tokens:.3g} tokens exceeds the limit of {MAX_TOKENS:,} (2**40); "
                         "expected a smaller size")
    return tokens


def check_pool(tokens: int | None, page_size: int | None, what: str, at_least_one_page: bool = True) -> None:
    """A capacity held page by page (None: unbounded), or a slot count (page_size None): at
    least one page where required, at most MAX_POOL_PAGES pages or slots. ValueError names `what`."""
    if tokens is None:
        return
    if at_least_one_page and tokens < (page_size or 1):
        raise ValueError(f"{what}: {tokens} tokens is less than one page ({page_size}); expected more")
    count = tokens if page_size is None else tokens // page_size
    if count > MAX_POOL_PAGES:
        held = f"{tokens:,} slots are" if page_size is None else \
            f"{tokens:,} tokens are {count:,} pages of {page_size},"
        raise ValueError(f"{what}: {held} more than the {MAX_POOL_PAGES:,} (2**30) a pool can index; "
                         "expected a smaller size")


def floor_pages(tokens: int | None, page_size: int) -> int | None:
    """Whole pages only (what every pool uses): floor(tokens / page) * page; None stays None."""
    return None if tokens is None else tokens // page_size * page_size


def tier_warnings(l1: int | None, l2: int | None, l3: int | None, l3_given: bool) -> list[str]:
    """Legal but odd tier sizes (SGLang accepts them), each as one line to warn about once."""
    out = []
    if l2 == 0:
        out.append("L2 is 0 tokens: the host tier holds nothing, so nothing is backed up or staged through it")
    elif l2 is not None and l1 is not None and l2 < l1:
        out.append(f"L2 ({l2:,} tokens) is smaller than L1 ({l1:,}): only part of L1 can be backed up")
    if l3_given and l3 is not None and l2 is not None and l3 < l2:
        out.append(f"L3 ({l3:,} tokens) is smaller than L2 ({l2:,})")
    return out
