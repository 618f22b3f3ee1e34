"""Azure LLM-inference trace CSVs (Microsoft's public AzureLLMInferenceTrace_{code,conv}*.csv):
``TIMESTAMP, ContextTokens, GeneratedTokens`` per line. They carry no prompt content, so every
prompt is unique (no prefix sharing): load without reuse, for queueing and capacity studies.

TIMESTAMP is a date-time (``2023-11-16 18:15:46.6805900``; any number of fractional digits)
or a number of seconds; arrival times are relative to the first line. Bad input raises
``TraceError("FILE:LINE: problem")``.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Iterator

from .traces import TraceError

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True, slots=True)
class AzureRequest:
    rid: int
    arrival_s: float  # since the first line
    prompt_tokens: int
    output_tokens: int


def _seconds(text: str) -> float:
    t = text.strip()
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        if not math.isfinite(v):  # inf would end the run at infinity, nan compares false (read as 0)
            raise ValueError(t)
        return v
    main, dot, frac = t.partition(".")
    stamp = datetime.fromisoformat(main.replace("T", " "))
    return stamp.timestamp() + (float("0." + frac) if dot and frac.isdigit() else 0.0)


def read_azure(path, max_requests: int | None = None) -> Iterator[AzureRequest]:
    """The requests of an Azure trace CSV, in file order (times must not decrease)."""
    try:
        f = open(path, newline="")
    except OSError as e:
        raise TraceError(path, None, f"cannot read: {e.strerror}") from None
    with f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != list(COLUMNS):
            raise TraceError(path, 1, f"expected the header {','.join(COLUMNS)}, got {header!r}")
        t0 = prev = None
        for i, row in enumerate(reader):
            line = i + 2
            if max_requests is not None and i >= max_requests:
                return
            if len(row) < 3:
                raise TraceError(path, line, f"expected 3 fields ({','.join(COLUMNS)}), got {len(row)}")
            try:
                t = _seconds(row[0])
            except ValueError:
                raise TraceError(path, line, f"TIMESTAMP {row[0]!r}: expected a date-time or a finite number of "
                                 "seconds") from None
            try:
                n_in, n_out = int(row[1]), int(row[2])
            except ValueError:
                raise TraceError(path, line, f"ContextTokens/GeneratedTokens must be integers, got {row[1:3]}") from None
            if n_in < 1 or n_out < 0:
                raise TraceError(path, line, f"expected ContextTokens >= 1 and GeneratedTokens >= 0, got {n_in}, {n_out}")
            if t0 is None:
                t0 = prev = t
            if t < prev:
                raise TraceError(path, line, f"TIMESTAMP goes back in time ({row[0]!r}); expected file order = time order")
            prev = t
            yield AzureRequest(i, t - t0, n_in, n_out)


__all__ = ["AzureRequest", "read_azure", "COLUMNS"]
