"""Worker processes for sweeps, plans and replay comparisons, stoppable by Ctrl-C.

Workers ignore SIGINT; the parent owns the interrupt: on Ctrl-C (or a failed item) leaving
`process_map` terminates the pool, so running items stop and pending ones never start.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import signal


def process_map(fn, items, jobs: int, ordered: bool = True):
    """fn(item) for every item in up to `jobs` worker processes; the results in item order, or
    as they finish (`ordered=False`). A generator: the pool lives while it is iterated."""
    with _sigint_held():  # a Ctrl-C while the pool starts arrives once it can be terminated
        pool = multiprocessing.Pool(max(1, min(jobs, len(items))), initializer=_ignore_sigint)
    with pool:  # leaving it (done, an error, an interrupt) terminates the workers
        yield from (pool.imap if ordered else pool.imap_unordered)(fn, items)


@contextlib.contextmanager
def _sigint_held():
    """Hold SIGINT back (delivered at the end) where the platform can."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


__all__ = ["process_map"]
