"""SWA: sliding-window KV (component.py: rules and hooks; payload.py: payload and voter;
tiers.py: its pages on L2/L3)."""
from .component import SwaComponent
from .payload import SwaPayload, SwaVoter

__all__ = ["SwaComponent", "SwaPayload", "SwaVoter"]
