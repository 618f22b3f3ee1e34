"""MAMBA: recurrent-state checkpoints (component.py: rules and hooks; payload.py: payload and
voter; tiers.py: checkpoints on L2/L3)."""
from .component import MambaComponent
from .payload import MambaPayload, MambaVoter

__all__ = ["MambaComponent", "MambaPayload", "MambaVoter"]
