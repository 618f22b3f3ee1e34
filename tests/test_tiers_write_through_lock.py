"""A node whose write-through backup (L1 -> L2) is in flight is locked until the ack, as
SGLang's write-through does (inc_lock_ref): its path counts as protected, not evictable, so
an engine's admission (free + evictable L1 tokens) never counts memory that eviction cannot
free. Found on the figure-6 Qwen3.5 run with longer contexts (docs/figure6.md): 0.2 ms
backups made host-hit loads fail at admission and recompute whole prompts."""
import numpy as np

from cache_core import CacheConfig, MambaConfig, RadixCache, ReplayStepper, invariants
from cache_core.tiers import TierConfig


def _cache(**kw):
    return RadixCache(CacheConfig(page_size=4, capacity_tokens=64, tiers=TierConfig(hicache_ratio=2), **kw),
                      auto_ack=False)


def _insert(c, tokens):
    ReplayStepper(c).step(np.asarray(tokens, dtype=np.int64), np.asarray([9999], dtype=np.int64))
    invariants.check(c)


def test_path_with_a_backup_in_flight_is_protected_not_evictable_until_the_ack():
    c = _cache()
    _insert(c, range(16))  # [0,16): one node, its backup in flight
    (tid,) = list(c.hier.pending)
    assert (c.full.evictable_tokens, c.full.protected_tokens) == (0, 16)
    assert c.evict(16) == 0  # what eviction can free now: nothing, and nothing is counted
    c.ack(tid)
    invariants.check(c)
    assert (c.full.evictable_tokens, c.full.protected_tokens) == (16, 0)
    assert c.evict(16) == 16 and c.hier.full.demoted_tokens == 16  # demoted: its L2 copy stays


def test_backup_lock_covers_the_path_above_and_is_released_on_failure():
    c = _cache(mamba=MambaConfig(slots=8))
    _insert(c, range(16))
    c.ack(next(iter(c.hier.pending)))
    while c.hier.pending:  # the checkpoint's backup
        c.ack(next(iter(c.hier.pending)))
    _insert(c, list(range(16)) + list(range(100, 108)))  # a child [16,24) below [0,16)
    assert [t.kind for t, _ in c.hier.pending.values()] == ["backup"]
    assert (c.full.evictable_tokens, c.full.protected_tokens) == (0, 24)  # the parent too
    c.ack(next(iter(c.hier.pending)), ok=False)
    invariants.check(c)
    assert (c.full.evictable_tokens, c.full.protected_tokens) == (24, 0)
