"""The reads of the ``prefix`` L3 index (store.StorageIndex) before its first eviction.

Until the index first evicts, its LRU order is not observable, and a prefetch reads its whole
storage run (a conversation's prefix, read again every round: pages read grow with the square
of the rounds). So a read is logged here, not applied page by page: its keys as an array, at
the next stamps (a put takes stamps too, written into the index). Now and then the log is
deduplicated in numpy (each key's last read); the first eviction orders the index once by
each key's latest put or read, and the index applies reads itself from then on.

Only a key's last read counts, so a logged read whose keys a later read reads again is
dropped at once: the latest read that starts with the same key is checked (a conversation's
next round reads its prefix again from the same first page, the run a page or more longer).
At 4x the Inkling figure-4 L3 rounds, 8,349 of 8,416 reads (11.8 M of 12.0 M keys) are
superseded this way, and the log holds about one run per conversation.
"""
from __future__ import annotations

from collections import OrderedDict
from itertools import compress, repeat
from operator import itemgetter

import numpy as np


class ReadLog:
    """Reads logged at increasing stamps; `order` applies them to an index of put stamps."""

    def __init__(self, kept: int = 2, slack: int = 1 << 16):
        self.kept, self.slack = kept, slack  # logged keys, at most kept x (present + distinct read) + slack
        self.next_stamp = 0
        self._reads: list = []  # (first stamp, keys array) per read since the last dedup; None: superseded
        self._latest: dict = {}  # first key -> index in `_reads` of the latest read starting with it
        self._logged = 0  # keys in `_reads`
        self._last = (np.empty(0, np.uint64), np.empty(0, np.int64))  # each key read, its last stamp

    @property
    def logged(self) -> int:
        """Keys held in the log (reads not yet deduplicated, superseded ones dropped)."""
        return self._logged

    def stamps(self, n: int) -> range:
        """The next `n` stamps (a put's)."""
        t = self.next_stamp
        self.next_stamp += n
        return range(t, t + n)

    def add(self, keys, present: int) -> None:
        """Log a read of page keys (an array), in their order; `present`: keys in the index."""
        if len(keys):
            arr = np.array(keys, dtype=np.uint64)
            first = int(arr[0])
            i = self._latest.get(first, -1)
            old = self._reads[i] if i >= 0 else None
            if old is not None and len(old[1]) <= len(arr) and np.array_equal(old[1], arr[: len(old[1])]):
                self._reads[i] = None  # every key of it is read again now, later
                self._logged -= len(old[1])
            self._latest[first] = len(self._reads)
            self._reads.append((self.stamps(len(arr)).start, arr))
            self._logged += len(arr)
        if self._logged > self.kept * (present + len(self._last[0])) + self.slack:
            self._dedup()

    def _dedup(self) -> None:
        """Fold the logged reads into `_last` (each key read: its last read's stamp)."""
        reads = [r for r in self._reads if r is not None]
        self._reads, self._latest, self._logged = [], {}, 0
        if not reads:
            return
        keys = np.concatenate([self._last[0]] + [a for _, a in reads])
        stamps = np.concatenate([self._last[1]] + [np.arange(t, t + len(a), dtype=np.int64) for t, a in reads])
        perm = np.argsort(keys.view(np.int64))  # any order groups equal keys; int64 sorts about 2x faster
        keys, stamps = keys[perm], stamps[perm]
        first = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))  # each key's group
        self._last = (keys[first], np.maximum.reduceat(stamps, first))

    def order(self, index: dict) -> OrderedDict:
        """`index` (key -> its latest put's stamp) least recently put or read first, as an
        OrderedDict. A read counts for a key present at it (put before it); -1: never put."""
        self._dedup()
        u, last = self._last
        ul = u.tolist()
        put = np.fromiter(map(index.get, ul, repeat(-1)), dtype=np.int64, count=len(ul))
        newer = (put >= 0) & (last > put)
        index.update(zip(compress(ul, newer), last[newer].tolist()))
        return OrderedDict(sorted(index.items(), key=itemgetter(1)))  # stamps are distinct


__all__ = ["ReadLog"]
