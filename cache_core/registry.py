"""A small name -> class registry (eviction policies, waiting-queue policies, L3 store models,
cost models, component kinds). Each entry owns a config dataclass (cache_core/options.py; `NoOptions` when it
names none): its fields are the entry's scenario keys."""
from __future__ import annotations

from .options import NoOptions

_generation = [0]  # bumped by every (un)registration: the scenario schema rebuilds its sections on a change


def generation() -> int:
    """How many registrations and unregistrations every registry has seen (a change counter)."""
    return _generation[0]


def changed() -> None:
    """Count a change of a registry kept elsewhere (scenarios/cost_kinds.py)."""
    _generation[0] += 1


class Registry:
    """Classes registered by name; `make(name, **kw)` builds a fresh instance."""

    def __init__(self, what: str):
        self.what = what
        self._classes: dict[str, type] = {}
        self._configs: dict[str, type] = {}

    def register(self, name: str, config: type | None = None):
        """Class decorator: make the class available by `name` (sets `cls.name`); `config`: its
        config dataclass (its scenario keys; default: the class's `Config`, else `NoOptions`)."""

        def deco(cls):
            if name in self._classes:
                raise ValueError(f"{self.what} {name!r} is already registered")
            cls.name = name
            self._classes[name] = cls
            self._configs[name] = config or getattr(cls, "Config", NoOptions)
            changed()
            return cls

        return deco

    def unregister(self, name: str) -> None:
        """Drop `name` (a test's toy, once the test is done); KeyError if it is not registered."""
        del self._classes[name]
        del self._configs[name]
        changed()

    def get(self, name: str) -> type:
        """The class registered as `name`; ValueError naming the known ones."""
        try:
            return self._classes[name]
        except KeyError:
            raise ValueError(f"unknown {self.what} {name!r}; known: {', '.join(self.names())}") from None

    def make(self, name: str, **kwargs):
        return self.get(name)(**kwargs)

    def names(self) -> list[str]:
        return sorted(self._classes)

    def config_of(self, name: str) -> type:
        """The config dataclass `name` registered with (KeyError if it is not registered)."""
        return self._configs[name]

    def configs(self) -> list[type]:
        """Every entry's config dataclass, by entry name, each class once."""
        out = []
        for n in self.names():
            if self._configs[n] not in out:
                out.append(self._configs[n])
        return out
