"""torch adapter: real pools, real copies, a real model forward pass.

Built so far (the groundwork; the engine plug-ins come next):
- `gpu_backend.spec.HybridSpec`: the synthetic model's geometry, ``from_preset`` for a preset's
  layer mix (no torch needed);
- `gpu_backend.pools.KVPools`: FULL / SWA KV pages and recurrent state slots per tier (L1
  device, L2 host), indexed exactly like the core's pools; batched page copies, state copies;
- `gpu_backend.model.SyntheticHybridModel`: full, sliding-window and recurrent layers with
  random seeded weights over paged KV; one ``forward`` for prefill chunks and decode;
- `gpu_backend.store`: the L3 `PageStore` interface and `LocalDirStore`.

Not built: the data plane (Transfer / CopyState on these pools), the step executor (a Step's
prefill and decode entries through ``model.forward``) and the wall clock.

The submodules import torch; importing this package does not.
"""
