"""radixsim: one radix-tree KV-cache core, run as exact replay, under a SimPy clock, or on torch.

This thin package holds the command line and the orchestration that ties the layers
together (see docs/ARCHITECTURE.md)."""
__version__ = "0.1.0"
