"""A small name -> class registry (eviction policies, waiting-queue policies, component kinds)."""
from __future__ import annotations


class Registry:
    """Classes registered by name; `make(name, **kw)` builds a fresh instance."""

    def __init__(self, what: str):
        self.what = what
        self._classes: dict[str, type] = {}

    def register(self, name: str):
        """Class decorator: make the class available by `name` (sets `cls.name`)."""

        def deco(cls):
            if name in self._classes:
                raise ValueError(f"{self.what} {name!r} is already registered")
            cls.name = name
            self._classes[name] = cls
            return cls

        return deco

    def unregister(self, name: str) -> None:
        """Drop `name` (a test's toy, once the test is done); KeyError if it is not registered."""
        del self._classes[name]

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
