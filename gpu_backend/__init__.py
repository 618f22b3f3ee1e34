"""torch adapter: real pools, real copies, a real model forward pass (not built yet)."""
