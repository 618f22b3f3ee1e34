"""Worker processes for sweeps, plans and replay comparisons, stoppable by Ctrl-C and SIGTERM.

Workers ignore SIGINT; the parent owns the interrupt: on Ctrl-C, SIGTERM (`cli.main` turns it
into an exception) or a failed item, leaving `process_map` terminates the pool (SIGTERM to each
worker, which ends it at once), so running items stop and pending ones never start. The temporary
result directories the killed workers were writing are removed by the parent once the pool is
gone (`outputs.clean_stale`, called by the sweep's executor). A worker must not turn SIGTERM into
an exception: one raised while the pool's queue lock is contended leaves the pool's terminate
waiting on that worker for ever (seen: an interrupted comparison replay that never ended).
"""
from __future__ import annotations

import contextlib
import multiprocessing
import signal

_HELD = {signal.SIGINT, signal.SIGTERM}


def process_map(fn, items, jobs: int, ordered: bool = True):
    """fn(item) for every item in up to `jobs` worker processes; the results in item order, or
    as they finish (`ordered=False`). A generator: the pool lives while it is iterated."""
    with _signals_held():  # a Ctrl-C or SIGTERM while the pool starts arrives once it can be terminated
        pool = multiprocessing.Pool(max(1, min(jobs, len(items))), initializer=_worker_signals)
    with pool:  # leaving it (done, an error, an interrupt) terminates the workers
        yield from (pool.imap if ordered else pool.imap_unordered)(fn, items)


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM back (delivered at the end) where the platform can."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _worker_signals() -> None:
    """A worker (forked with both signals held, and the parent's SIGTERM handler): ignore SIGINT;
    SIGTERM back to its default (the process ends at once), then let it through."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


__all__ = ["process_map"]
