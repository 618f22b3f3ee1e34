"""Static cache configuration: frozen, keyword-only dataclasses validated on construction.

Sizes are in tokens (or state slots for MAMBA); None = unbounded. Which components exist is
configuration, not code: FULL always (`FullSpec`); then one *component spec* per voting
component, in order: SWA and/or MAMBA when their config is given, then `extra_components`
(`CacheConfig.component_specs`). A spec is a record with a `name` and `build(link) ->
Component` (a `components.ports.TreeLink` in); the cache builds every component through it.
Spec classes are registered by kind (`register_component`: SWA and MAMBA here; the RING toy
from tests/test_component_hooks.py), so a scenario can name any registered kind with its
fields (`component_spec_class`; scenarios/cache_pools.py). Sidecars follow FULL or SWA indices.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .components.full import FullComponent
from .components.full_tiered import TieredFull
from .components.mamba import MambaComponent
from .components.swa import SwaComponent
from .eviction import make_policy
from .registry import Registry

if TYPE_CHECKING:
    from .tiers.config import TierConfig


_COMPONENTS = Registry("component kind")


def register_component(kind: str):
    """Class decorator: a component spec class (fields = its config; `build(link)`) that
    scenarios can name by `kind` (`component_spec_class`) (sets `cls.name = kind`)."""
    return _COMPONENTS.register(kind)


def unregister_component(kind: str) -> None:
    _COMPONENTS.unregister(kind)


def component_kinds() -> list[str]:
    return _COMPONENTS.names()


def component_spec_class(kind: str) -> type:
    """The spec class registered as `kind` (ValueError naming the known kinds)."""
    return _COMPONENTS.get(kind)


class FullSpec:
    """FULL, the anchor (slot 0): its pool is the cache's L1 (`link.full_tokens`); with L2 or
    L3 the tiered FULL (the hierarchy hands it its port)."""

    name = "full"

    def build(self, link) -> FullComponent:
        t = link.tier_config
        cls = TieredFull if t is not None and (t.has_l2 or t.l3) else FullComponent
        return cls(link.tree, link.full_tokens, link.policy, link.useless_leaf)


def _int_or_none(name: str, v, lo: int = 0) -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
        raise ValueError(f"{name} must be an integer >= {lo} or None, got {v!r}")


@register_component("swa")
@dataclass(frozen=True, kw_only=True)
class SwaConfig:
    """Sliding-window KV: window W tokens; pool = capacity_tokens, or full_tokens_ratio x
    the FULL pool (SGLang's --swa-full-tokens-ratio, default 0.1)."""

    window_tokens: int
    capacity_tokens: int | None = None
    full_tokens_ratio: float = 0.1

    def __post_init__(self):
        _int_or_none("swa window_tokens", self.window_tokens, 1)
        if self.window_tokens is None:
            raise ValueError("swa window_tokens is required")
        _int_or_none("swa capacity_tokens", self.capacity_tokens)
        if not (0 < self.full_tokens_ratio):
            raise ValueError(f"swa full_tokens_ratio must be > 0, got {self.full_tokens_ratio}")

    def pool_tokens(self, full_tokens: int | None) -> int | None:
        """The SWA pool in tokens: explicit, else ratio x the FULL pool (None: both unbounded)."""
        if self.capacity_tokens is not None:
            return self.capacity_tokens
        return None if full_tokens is None else int(full_tokens * self.full_tokens_ratio)

    def build(self, link) -> SwaComponent:
        t = link.tier_config
        return SwaComponent(link, self.window_tokens, self.pool_tokens(link.full_tokens),
                            t.swa_bytes_per_token if t is not None else 0)


@register_component("mamba")
@dataclass(frozen=True, kw_only=True)
class MambaConfig:
    """Recurrent-state checkpoints: `slots` state slots (None = unbounded, allowed only with
    an unbounded FULL pool); checkpoints at the end of each request's cached sequence and,
    with every_tokens=K, at every multiple of K."""

    slots: int | None = None
    every_tokens: int | None = None

    def __post_init__(self):
        _int_or_none("mamba slots", self.slots)
        _int_or_none("mamba every_tokens", self.every_tokens, 1)

    def build(self, link) -> MambaComponent:
        t = link.tier_config
        return MambaComponent(link, self.slots, self.every_tokens, t.state_bytes if t is not None else 0)


@dataclass(frozen=True, kw_only=True)
class SidecarConfig:
    """A pool with no vote and no tree slot that reuses the exact indices of `follows`."""

    name: str
    follows: str = "full"  # "full" or "swa"
    bytes_per_token: float = 0.0

    def __post_init__(self):
        if self.follows not in ("full", "swa"):
            raise ValueError(f"sidecar {self.name!r} must follow 'full' or 'swa', got {self.follows!r}")


@dataclass(frozen=True, kw_only=True)
class CacheConfig:
    """Static configuration of one cache. Sizes in tokens; None = unbounded."""

    page_size: int = 1
    capacity_tokens: int | None = None
    policy: str = "lru"
    policy_options: object = None  # the eviction policy's options dataclass (None: its defaults)
    swa: SwaConfig | None = None
    mamba: MambaConfig | None = None
    sidecars: tuple = ()
    tiers: TierConfig | None = None  # L2/L3, or None (L1 only)
    # more voting components: specs with `name` and `build(link) -> Component` (a
    # components.ports.TreeLink in; tests/test_fourth_component.py shows one)
    extra_components: tuple = ()

    def __post_init__(self):
        if isinstance(self.page_size, bool) or not isinstance(self.page_size, int) or self.page_size < 1:
            raise ValueError(f"page_size must be an integer >= 1, got {self.page_size!r}")
        _int_or_none("capacity_tokens", self.capacity_tokens)
        make_policy(self.policy)  # raises ValueError for an unknown name
        if self.mamba is not None:
            if self.mamba.slots is None and self.capacity_tokens is not None:
                raise ValueError("mamba needs an explicit slot count when the FULL pool is bounded "
                                 "(or a model preset that sizes it)")
            if self.mamba.every_tokens is not None and self.mamba.every_tokens % self.page_size:
                raise ValueError(f"mamba every_tokens {self.mamba.every_tokens} must be a multiple of "
                                 f"the page size {self.page_size}")
        names = [s.name for s in self.sidecars]
        if len(set(names)) != len(names):
            raise ValueError(f"sidecar names must be unique, got {names}")
        if any(s.follows == "swa" for s in self.sidecars) and self.swa is None:
            raise ValueError("a sidecar follows 'swa' but the cache has no SWA component")
        comps = ["full"] + [c.name for c in self.component_specs]
        if len(set(comps)) != len(comps):
            raise ValueError(f"component names must be unique, got {comps}")

    @property
    def component_specs(self) -> tuple:
        """The voting components' specs in build order (slots 1, 2, ...): SWA, MAMBA, then the extras."""
        return tuple(c for c in (self.swa, self.mamba) if c is not None) + tuple(self.extra_components)

    @property
    def tiered(self) -> bool:
        t = self.tiers
        return t is not None and (t.has_l2 or t.l3)

    @property
    def usable_tokens(self) -> int | None:
        """floor(capacity / page_size) * page_size."""
        if self.capacity_tokens is None:
            return None
        return self.capacity_tokens // self.page_size * self.page_size

    @property
    def swa_tokens(self) -> int | None:
        """The SWA pool in tokens: explicit, else ratio x FULL (None when both unbounded)."""
        return None if self.swa is None else self.swa.pool_tokens(self.usable_tokens)

    @property
    def components(self) -> tuple:
        names = ["full"]
        if self.swa is not None:
            names.append(f"swa:{self.swa.window_tokens}")
        if self.mamba is not None:
            names.append("mamba" + (f":every={self.mamba.every_tokens}" if self.mamba.every_tokens else ""))
        names += [c.name for c in self.extra_components]
        names += [f"sidecar:{s.name}@{s.follows}" for s in self.sidecars]
        return tuple(names)
