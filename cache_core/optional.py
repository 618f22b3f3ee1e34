"""`present(x, what)`: a value typed Optional that an invariant of the caller guarantees is set
(a cache built with SWA has its SWA component; transfers exist only with tiers), narrowed for
the type checker (mypy) and checked at run time."""
from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(x: T | None, what: str) -> T:
    assert x is not None, what
    return x
