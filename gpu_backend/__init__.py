"""torch adapter: real pools, real copies, a real model forward pass.

Modules:
- `gpu_backend.spec.HybridSpec`: the synthetic model's geometry, ``from_preset`` for a preset's
  layer mix and sidecars (no torch needed);
- `gpu_backend.pools.KVPools`: FULL / SWA KV pages, recurrent state slots and sidecar pages per
  tier (L1 device, L2 host), indexed exactly like the core's pools; batched page copies, state
  copies;
- `gpu_backend.model.SyntheticHybridModel`: full, sliding-window and recurrent layers (and
  compressed sidecar rows) with random seeded weights over paged KV; ``forward_batch`` runs
  many requests' prefill chunks and decodes as one batched forward (``forward``: one request);
- `gpu_backend.store`: the L3 `PageStore` interface and `LocalDirStore` (Mooncake Store in
  `store_mooncake`);
- `gpu_backend.dataplane` / `gpu_backend.executor`: the engine's data plane (Transfer and
  CopyState on these pools and the store) and step executor (a Step's prefill and decode
  entries through ``model.forward``); `gpu_backend.backend.build_plugins` wires them, on the
  clock `torch.clock` names (modelled, measured or realtime).

The submodules import torch; importing this package does not.
"""
