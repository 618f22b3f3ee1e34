"""Trace readers: JSONL requests and events (DESIGN.md, "Trace format").

One line = one request or one event, in time order.

request  ``rid``? (default: 0-based position among requests), ``session_id``?,
         ``timestamp``? (ms), ``priority``?; the prompt as ``tokens`` (alias ``input_ids``)
         or as ``hash_ids`` with ``block_size``? (default 512) and ``input_length``?
         (hash id h stands for tokens h*B .. h*B+B-1; the prompt is cut to input_length);
         the output as ``output_tokens`` (alias ``output_ids``) or ``output_length``
         (alias ``output_len``: that many fresh tokens that match nothing); ``tool_ms``? (ms
         the session's tool call runs after this request, before its next one: read by
         `session-next`).
event    ``{"event": "close_session", "session_id": ..., "timestamp"?}``.

Alibaba's Qwen serving traces (github.com/alibaba-edu/qwen-bailian-usagetraces-anon, the
KVCache-in-the-wild traces of Wang et al., USENIX ATC 2025) are read as they are: a line with
``chat_id`` is one of theirs: ``chat_id`` (int), ``parent_chat_id`` (int, -1 for the first
turn), ``timestamp`` (SECONDS since the trace start), ``input_length``, ``output_length``,
``turn`` (int >= 1), ``type`` (text/search/image/file; not used) and ``hash_ids`` of 16-token
blocks. It becomes a request with rid = chat_id, timestamp in ms, block size 16 and
session_id = the chat_id of the first turn of its conversation (the root of the
parent_chat_id chain; a parent not in the trace, e.g. before its start, is taken as the root),
so sessions are known without generating them.

``rid`` and ``session_id`` are strings or integers; a rid (given or default) appears once.
Any malformed line raises `TraceError` naming the file, the line number and the problem.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

try:  # 2x faster on long token lists; the standard parser stays the reference (and the fallback)
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover
    _fast_loads = None

DEFAULT_BLOCK_SIZE = 512
BAILIAN_BLOCK_SIZE = 16  # tokens per hash id in Alibaba's Qwen traces
MAX_PROMPT_TOKENS = 1 << 28  # 268M tokens (2 GiB of int64): far beyond any context window
_MAX_ID = 2**62


class TraceError(ValueError):
    """A problem with a trace file: str() is one line 'FILE:LINE: problem'."""

    def __init__(self, path, line: int | None = None, msg: str | None = None):
        if msg is None and line is None:  # rebuilt from str(e) (SimPy re-raises errors this way)
            super().__init__(str(path))
            self.path, self.line, self.msg = None, None, str(path)
            return
        self.path, self.line, self.msg = str(path), line, msg
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {msg}")


@dataclass(frozen=True, slots=True)
class TraceRequest:
    rid: object
    prompt: np.ndarray  # int64 tokens
    output_tokens: np.ndarray | None  # explicit output ids, or None
    output_length: int  # len(output_tokens) when given
    session_id: object = None
    timestamp_ms: float | None = None
    priority: int | None = None
    tool_ms: float | None = None  # the session's tool call after this request (ms), when known


@dataclass(frozen=True, slots=True)
class TraceEvent:
    kind: str  # "close_session"
    session_id: object
    timestamp_ms: float | None = None


def _int_array(value, field: str) -> np.ndarray:
    if not isinstance(value, list):
        raise ValueError(f"'{field}' must be a list of non-negative integers, got {type(value).__name__}")
    if not value:
        return np.empty(0, dtype=np.int64)
    try:
        arr = np.array(value)
    except (ValueError, OverflowError):
        raise ValueError(f"'{field}' must be a flat list of non-negative integers") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"'{field}' must be a flat list of non-negative integers")
    if arr.min() < 0 or arr.max() >= _MAX_ID:
        raise ValueError(f"'{field}' values must be in [0, 2**62)")
    return arr.astype(np.int64, copy=False)


def _int_field(obj: dict, field: str, lo: int = 0):
    v = obj[field]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"'{field}' must be an integer, got {json.dumps(v)[:40]}")
    if v < lo:
        raise ValueError(f"'{field}' must be >= {lo}, got {v}")
    return v


def _pick(obj: dict, *names: str):
    found = [n for n in names if n in obj]
    if len(found) > 1:
        raise ValueError(f"give only one of {', '.join(repr(n) for n in found)}")
    return found[0] if found else None


class JsonlTrace:
    """Iterate a JSONL trace as `TraceRequest` and `TraceEvent` records.

    `block_size` is the default for hash_ids lines (a line may carry its own, but a trace
    uses one block size throughout)."""

    def __init__(self, path, block_size: int | None = None, time_order: bool = False):
        self.path = os.fspath(path)
        self.time_order = time_order  # refuse a timestamp below an earlier line's (what a timed run needs)
        if block_size is not None and (isinstance(block_size, bool) or block_size < 1):
            raise TraceError(self.path, None, f"block size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.block_size_used = block_size  # after iteration: the block size hash_ids lines used
        if not os.path.exists(self.path):
            raise TraceError(self.path, None, "no such file")
        if os.path.isdir(self.path):
            raise TraceError(self.path, None, "is a directory, expected a JSONL trace file")

    def count_lines(self) -> int:
        n = 0
        with open(self.path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                n += chunk.count(b"\n")
        return n

    def __iter__(self) -> Iterator[TraceRequest | TraceEvent]:
        block = self.block_size
        arange_cache: dict[int, np.ndarray] = {}
        n_req = 0
        rid_lines: dict[str, int] = {}  # rid as requests.csv writes it -> its line
        roots: dict[int, int] = {}  # Qwen traces: chat_id -> the chat_id of its conversation's first turn
        last = None  # (timestamp ms, line) of the latest timestamped line, with time_order
        with open(self.path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    obj = _loads(raw)
                except RecursionError:
                    raise TraceError(self.path, lineno, "invalid JSON (nested too deeply)") from None
                except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, huge integer literals
                    raise TraceError(self.path, lineno, f"invalid JSON ({getattr(e, 'msg', None) or e})") from None
                if not isinstance(obj, dict):
                    raise TraceError(self.path, lineno, f"expected a JSON object, got {type(obj).__name__}")
                try:
                    if "event" in obj:
                        ev = self._event(obj)
                        last = self._in_order(ev.timestamp_ms, lineno, last)
                        yield ev
                        continue
                    if "chat_id" in obj:
                        obj = _bailian(obj, roots)
                    req, block = self._request(obj, n_req, block, arange_cache)
                    last = self._in_order(req.timestamp_ms, lineno, last)
                except TraceError:
                    raise
                except (ValueError, TypeError) as e:
                    raise TraceError(self.path, lineno, str(e)) from None
                first = rid_lines.setdefault(str(req.rid), lineno)
                if first != lineno:
                    raise TraceError(self.path, lineno, f"duplicate rid {json.dumps(req.rid)} (also on line {first}); "
                                     "expected a unique rid per request")
                n_req += 1
                self.block_size_used = block
                yield req

    def _in_order(self, ts, lineno: int, last):
        """With time_order: (ts, lineno) as the latest timestamp, or ValueError when it goes back."""
        if not self.time_order or ts is None:
            return last
        if last is not None and ts < last[0]:
            raise ValueError(f"'timestamp' {ts:g} ms goes back in time (line {last[1]} has {last[0]:g}); "
                             "expected file order = time order")
        return ts, lineno

    @staticmethod
    def _event(obj: dict) -> TraceEvent:
        kind = obj["event"]
        if kind != "close_session":
            raise ValueError(f"unknown event {kind!r}; expected 'close_session'")
        if "session_id" not in obj:
            raise ValueError("close_session event needs 'session_id'")
        return TraceEvent(kind, _scalar_id(obj, "session_id"), _timestamp(obj))

    def _request(self, obj: dict, index: int, block, arange_cache):
        tok_f = _pick(obj, "tokens", "input_ids", "hash_ids")
        if tok_f is None:
            raise ValueError("request needs 'tokens' (or 'input_ids') or 'hash_ids'")
        if tok_f == "hash_ids":
            if "block_size" in obj:
                b = _int_field(obj, "block_size", 1)
                if block is not None and b != block:
                    raise ValueError(f"'block_size' {b} differs from the trace's block size {block}")
                block = b
            elif block is None:
                block = DEFAULT_BLOCK_SIZE
            ids = _int_array(obj["hash_ids"], "hash_ids")
            if len(ids) and ids.max() >= _MAX_ID // block:
                raise ValueError("'hash_ids' too large for the block size")
            full = len(ids) * block
            length = full
            if "input_length" in obj:
                length = _int_field(obj, "input_length", 1)
                if length > full:
                    raise ValueError(
                        f"'input_length' {length} exceeds {len(ids)} hash_ids x block size {block} = {full}")
            if length > MAX_PROMPT_TOKENS:
                raise ValueError(f"prompt of {length:,} tokens exceeds the limit of {MAX_PROMPT_TOKENS:,}")
            if length <= block:  # one (partial) block: never build a range longer than the prompt
                prompt = ids[0] * block + np.arange(length, dtype=np.int64) if length else ids[:0]
            else:
                ar = arange_cache.get(block)
                if ar is None:
                    ar = arange_cache[block] = np.arange(block, dtype=np.int64)
                prompt = (ids[: -(-length // block), None] * block + ar).reshape(-1)[:length]
        else:
            prompt = _int_array(obj[tok_f], tok_f)
        if len(prompt) == 0:
            raise ValueError("empty prompt: a request needs at least one token")
        out_f = _pick(obj, "output_tokens", "output_ids", "output_length", "output_len")
        out_tokens = None
        if out_f in ("output_tokens", "output_ids"):
            out_tokens = _int_array(obj[out_f], out_f)
            out_len = len(out_tokens)
        elif out_f is not None:
            out_len = _int_field(obj, out_f, 0)
        else:
            out_len = 0
        prio = obj.get("priority")
        if prio is not None and (isinstance(prio, bool) or not isinstance(prio, int)):
            raise ValueError(f"'priority' must be an integer, got {json.dumps(prio)[:40]}")
        rid = _scalar_id(obj, "rid")
        rid = index if rid is None else rid
        return TraceRequest(rid, prompt, out_tokens, out_len, _scalar_id(obj, "session_id"), _timestamp(obj),
                            prio, _milliseconds(obj, "tool_ms")), block


def _bailian(obj: dict, roots: dict) -> dict:
    """A Qwen (Bailian) trace line as a request line of this format (module docstring)."""
    chat = _int_field(obj, "chat_id")
    parent = _int_field(obj, "parent_chat_id", -1)
    _int_field(obj, "turn", 1)
    for field in ("rid", "session_id", "tokens", "input_ids"):
        if field in obj:
            raise ValueError(f"'{field}' is not a field of a Qwen trace line (it has 'chat_id')")
    if "hash_ids" not in obj:
        raise ValueError("Qwen trace line needs 'hash_ids'")
    ts = _time(obj.get("timestamp"), "timestamp", "seconds")  # required here
    root = chat if parent == -1 else roots.get(parent, parent)
    roots[chat] = root
    line = {k: obj[k] for k in ("hash_ids", "input_length", "output_length") if k in obj}
    return {**line, "rid": chat, "session_id": root, "timestamp": ts * 1000.0,
            "block_size": obj.get("block_size", BAILIAN_BLOCK_SIZE)}


def _scalar_id(obj: dict, field: str):
    """An identifier field (rid, session_id): a string or an integer; null = absent."""
    v = obj.get(field)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (str, int))):
        raise ValueError(f"'{field}' must be a string or an integer, got {json.dumps(v)[:40]}")
    return v


def _loads(raw: bytes):
    """orjson when it accepts the line, else the standard parser (its error messages, and
    its reading of NaN/Infinity, which the field checks then reject by name)."""
    if _fast_loads is not None:
        try:
            return _fast_loads(raw)
        except ValueError:
            pass
    return json.loads(raw)


def _timestamp(obj: dict):
    return _milliseconds(obj, "timestamp")


def _milliseconds(obj: dict, field: str):
    ts = obj.get(field)
    return None if ts is None else _time(ts, field, "milliseconds")


def _time(v, field: str, unit: str):
    """A time field's value: a finite number >= 0 (in `unit`, for the message)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"'{field}' must be a non-negative number of {unit}, got {json.dumps(v)[:40]}")
    return v
