"""Components: one module per kind of cacheable value on the radix topology."""
from .base import Component, ComponentKind
from .full import FullComponent
from .mamba import MambaComponent
from .swa import SwaComponent

__all__ = ["Component", "ComponentKind", "FullComponent", "MambaComponent", "SwaComponent"]
