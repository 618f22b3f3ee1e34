"""The tiers (L1 device, L2 host, L3 store) as one package; docs/ARCHITECTURE.md's table says
what each module holds:

- `config`: `TierConfig` and the write, L3-write and prefetch policy names;
- `hierarchy`: `Hierarchy`, the L2 pool and queue, the L3 store, write policies, loads,
  prefetch (`make_hierarchy`); it hands FULL a `FullTierLink` and the other components a
  `TierLink` (components/ports.py);
- `ledger`: `TransferLedger`, the transfers from emission to acknowledgement (emit, pending,
  spans, ack, failures counted), owned by the hierarchy;
- `failures`: failed transfers and failed L3 reads;
- `match`, `votes`, `access`: the tiered match (device, host, then L3 runs), what the voting
  components say about tier boundaries, and `TieredAccess` (load, prefetch) the cache holds;
- `store`, `store_shards`, `read_log`: the L3 store models (`make_store`: prefix LRU index or
  Mooncake Store, its sharded eviction, the read log of the prefix index).
"""
from .config import L3_WRITES, PREFETCH_POLICIES, WRITE_POLICIES, TierConfig
from .hierarchy import Hierarchy, TieredFull, make_hierarchy
from .store import MooncakeStore, StorageIndex, l3_model_names, make_store, register_l3_model

__all__ = ["Hierarchy", "TierConfig", "TieredFull", "WRITE_POLICIES", "PREFETCH_POLICIES", "L3_WRITES",
           "make_hierarchy", "MooncakeStore", "StorageIndex", "make_store", "register_l3_model", "l3_model_names"]
