"""cache_core: the pure cache core (standard library + numpy only; no simpy, torch or plotting).

Public surface: `RadixCache` with `CacheConfig`, the `MatchResult`/`InsertResult` records,
`TokenSeq`, page keys (`keys`), eviction policies (`eviction`), `invariants.check` and the
`ReplayStepper` that drives one request at a time.
"""
from .cache import InsertResult, MatchResult, RadixCache, TokenSeq
from .config import CacheConfig, MambaConfig, SidecarConfig, SwaConfig
from .eviction import Policy, make_policy, policy_names, register_policy
from .replay import ReplayStepper, StepResult
from . import belady as _belady  # noqa: F401  (registers the "belady-node" policy)
from . import policies as _policies  # noqa: F401  (registers the literature policies)

__all__ = [
    "CacheConfig", "SwaConfig", "MambaConfig", "SidecarConfig", "InsertResult", "MatchResult", "RadixCache", "TokenSeq",
    "Policy", "make_policy", "policy_names", "register_policy",
    "ReplayStepper", "StepResult",
]
