"""Tier configuration (`TierConfig`): L2 size, L3, write/prefetch policies, bytes per token.
The mechanics live in hierarchy.py."""
from __future__ import annotations

from dataclasses import dataclass

from .store import l3_model_names
from .store_options import MOONCAKE

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
L3_WRITES = ("on_insert", "on_l2_evict")


@dataclass(frozen=True, kw_only=True)
class TierConfig:
    """L2 = l2_tokens, or hicache_ratio x L1 (SGLang's --hicache-ratio); no L2 when both are
    None. L3 exists when l3 is True: l3_tokens pages' worth of tokens, None = unbounded."""

    l2_tokens: int | None = None
    hicache_ratio: float | None = None
    l3: bool = False
    l3_tokens: int | None = None
    write_policy: str = "write_through"
    write_through_threshold: int = 2  # hits before write_through_selective backs a node up
    l3_write: str = "on_insert"
    l3_model: str = "prefix"  # cache_core.tiers.store: "prefix" LRU index or "mooncake" store model
    # mooncake (defaults: its options, store_options.MooncakeOptions, the scenario's cache.l3_* keys):
    l3_high_watermark: float = MOONCAKE.l3_eviction_high_watermark  # Mooncake's eviction_high_watermark_ratio
    l3_eviction_ratio: float = MOONCAKE.l3_eviction_ratio  # Mooncake's eviction_ratio
    l3_replicas: int = MOONCAKE.l3_replicas  # copies of each object in the pool
    l3_ssd_tokens: int | None = None  # mooncake: SSD offload tier below the pool (None: none)
    l3_lease_ttl_s: float = MOONCAKE.l3_lease_ttl_s  # read lease TTL (default_kv_lease_ttl), on the store's clock
    l3_eviction_shards: int = MOONCAKE.l3_eviction_shards  # 1 = one pool-wide pass; 1024 = per metadata shard
    l3_objects_per_page: int = MOONCAKE.l3_objects_per_page  # objects per page (SGLang: K and V per TP rank)
    l3_options: object = None  # the L3 model's options dataclass (None: its defaults; store.l3_options)
    prefetch_policy: str = "wait_complete"
    prefetch_timeout_base_s: float = 1.0
    prefetch_timeout_per_1k_s: float = 0.25
    min_prefetch_tokens: int = 256
    kv_bytes_per_token: int = 0  # FULL bytes per token, for transfers' bytes (model preset)
    swa_bytes_per_token: int = 0  # SWA bytes per token
    state_bytes: int = 0  # bytes of one MAMBA checkpoint

    def __post_init__(self):
        for name in ("l2_tokens", "l3_tokens", "l3_ssd_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"{name} must be an integer >= 0 or None, got {v!r}")
        if self.hicache_ratio is not None and not self.hicache_ratio > 0:
            raise ValueError(f"hicache_ratio must be > 0, got {self.hicache_ratio}")
        if self.write_policy not in WRITE_POLICIES:
            raise ValueError(f"write_policy {self.write_policy!r}: expected one of {', '.join(WRITE_POLICIES)}")
        if self.prefetch_policy not in PREFETCH_POLICIES:
            raise ValueError(f"prefetch_policy {self.prefetch_policy!r}: expected one of "
                             f"{', '.join(PREFETCH_POLICIES)}")
        if self.l3_write not in L3_WRITES:
            raise ValueError(f"l3_write {self.l3_write!r}: expected one of {', '.join(L3_WRITES)}")
        if self.l3_model not in l3_model_names():
            raise ValueError(f"l3_model {self.l3_model!r}: expected one of {', '.join(l3_model_names())}")
        if not (0.0 <= self.l3_high_watermark <= 1.0 and 0.0 <= self.l3_eviction_ratio <= 1.0):
            raise ValueError("l3_high_watermark and l3_eviction_ratio must be in [0, 1]")
        if not (isinstance(self.l3_lease_ttl_s, (int, float)) and 0.0 <= self.l3_lease_ttl_s < float("inf")):
            raise ValueError(f"l3_lease_ttl_s must be a finite number >= 0, got {self.l3_lease_ttl_s!r}")
        for name in ("l3_replicas", "l3_eviction_shards", "l3_objects_per_page"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.l3_ssd_tokens and self.l3_model != "mooncake":
            raise ValueError("l3_ssd_tokens needs l3_model 'mooncake'")
        if self.write_through_threshold < 1 or self.min_prefetch_tokens < 0:
            raise ValueError("write_through_threshold must be >= 1 and min_prefetch_tokens >= 0")

    @property
    def has_l2(self) -> bool:
        return self.l2_tokens is not None or self.hicache_ratio is not None

    def l2_size(self, l1_tokens: int | None) -> int | None:
        if self.l2_tokens is not None:
            return self.l2_tokens
        if self.hicache_ratio is None:
            return 0
        return None if l1_tokens is None else int(l1_tokens * self.hicache_ratio)

    def prefetch_budget_s(self, tokens: int) -> float:
        """How long `timeout` waits for a prefetch of `tokens` (SGLang's default formula)."""
        return self.prefetch_timeout_base_s + self.prefetch_timeout_per_1k_s * tokens / 1024
