"""Open-loop request sources for the simulator: (arrival seconds, EngineRequest) items, or
(arrival seconds, ("close_session", id)), in time order, generated lazily (a long trace never
sits in memory). `sim.simulator.timed_arrivals` sends them at their times (/ speedup).

- JSONL traces (`scenarios.traces`: Mooncake hash_ids or token lists, any block size):
  ``timestamp`` (ms) honoured; lines without one arrive with the previous line (or at 0).
  Outputs given as tokens are used; ``output_length`` gives fresh tokens matching nothing.
- the agentic generator (`scenarios.agentic`): its request timestamps (ms), its closes.
- Azure LLM-inference CSVs (`scenarios.azure`): unique prompts, no reuse.
"""
from __future__ import annotations

import numpy as np

from cache_core.engine_types import EngineRequest
from cache_core.records import TokenSeq


class FreshTokens:
    """Token ids nothing else uses: negative for outputs, a high band for unique prompts."""

    def __init__(self):
        self.out = -1
        self.prompt = 1 << 60

    def output(self, n: int) -> np.ndarray:
        a = np.arange(self.out, self.out - n, -1, dtype=np.int64)
        self.out -= n
        return a

    def prompt_tokens(self, n: int) -> np.ndarray:
        a = np.arange(self.prompt, self.prompt + n, dtype=np.int64)
        self.prompt += n
        return a


def engine_request(rid, session, rnd, prompt, output, priority=0) -> EngineRequest:
    if len(output) > 1:
        seq = TokenSeq.join(prompt, output[:-1])
    else:
        seq = TokenSeq(prompt)
    # the prompt as a view of the sequence's bytes: a queued request holds its tokens once
    prompt = np.frombuffer(seq.data, dtype=np.int64, count=len(prompt))
    return EngineRequest(rid=rid, session_id=session, prompt=prompt, output_length=len(output), arrival_s=0.0,
                         seq=seq, round=rnd, priority=priority or 0)


def trace_items(path, block_size=None, max_requests=None):
    """(t_s, request | close) from a JSONL trace."""
    from scenarios.traces import JsonlTrace, TraceEvent

    fresh = FreshTokens()
    t = 0.0
    n = 0
    for rec in JsonlTrace(path, block_size, time_order=True):  # a timestamp going back is refused
        if rec.timestamp_ms is not None:
            t = rec.timestamp_ms / 1000.0
        if isinstance(rec, TraceEvent):
            yield t, ("close_session", rec.session_id)
            continue
        if max_requests is not None and n >= max_requests:
            return
        out = rec.output_tokens if rec.output_tokens is not None else fresh.output(rec.output_length)
        yield t, engine_request(n, rec.session_id, None, rec.prompt, np.asarray(out, dtype=np.int64), rec.priority)
        n += 1


def agentic_items(config):
    """(t_s, request | close) from the agentic generator; round = the session's turn."""
    from scenarios.agentic import AgenticClose, AgenticWorkload

    for rec in AgenticWorkload(config):
        if isinstance(rec, AgenticClose):
            yield rec.timestamp_ms / 1000.0, ("close_session", rec.session_id)
            continue
        yield rec.timestamp_ms / 1000.0, engine_request(rec.rid, rec.session_id, rec.turn, rec.prompt, rec.output)


def azure_items(path, max_requests=None):
    """(t_s, request) from an Azure CSV: unique prompts and outputs."""
    from scenarios.azure import read_azure

    fresh = FreshTokens()
    for rec in read_azure(path, max_requests):
        yield rec.arrival_s, engine_request(rec.rid, None, None, fresh.prompt_tokens(rec.prompt_tokens),
                                      fresh.output(rec.output_tokens))


__all__ = ["trace_items", "agentic_items", "azure_items"]
