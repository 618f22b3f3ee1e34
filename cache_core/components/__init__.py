"""Components: one module per kind of cacheable value on the radix topology."""
from .base import Component, ComponentKind
from .full import FullComponent

__all__ = ["Component", "ComponentKind", "FullComponent"]
