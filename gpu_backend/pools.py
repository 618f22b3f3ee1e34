"""`KVPools`: the torch tensors behind the core's slot indices, per tier and component.

Per tier ("L1" = the model's device, "L2" = host memory: pinned when the L1 is on CUDA, sized
exactly: `host_tensor`, allocated plain and then registered with ``cudaHostRegister``, not
through the caching host allocator, which rounds each block up to a power of two; the host
memory is checked first: `HostMemoryError`) three pools:

- ``full``: KV of every full-attention layer, one page = ``page_size`` tokens;
- ``swa``: KV of every sliding-window layer, same page geometry;
- ``state``: the recurrent state of every rec layer, one slot = one request's state;
- one pool per sidecar (`spec.SidecarSpec`, named as the core names it), sized and indexed like
  the pool it follows: page i of sidecar ``c4_kv`` (following FULL) belongs to FULL page i, so
  the core's FULL -> sidecar index translation is the identity (``slots_of`` gives a sidecar
  its source's indices); a page holds ``page_size / group`` compressed rows per attached layer.

Index i of a pool is index i of the core's pool of the same component and tier (the core's
`PagePool` hands out 0, 1, 2, ...): FULL page ``slots_of(...)["full"][j]`` is
``tensor(tier, "full")`` page j, SWA likewise (-1 = tombstone: no page), a MAMBA slot is a
``state`` slot. The core names the state component "mamba"; both names are accepted.

Layouts (``layout=``), for a KV pool with ``Lc`` layers of that kind and ``D = heads*head_dim``:
- ``page_first``: ``[pages, Lc, 2 (k/v), page_size, D]`` -- a page is one contiguous block
  (cheap page transfers, SGLang HiCache's ``page_first``);
- ``layer_first``: ``[Lc, pages, 2, page_size, D]`` -- a layer is contiguous (SGLang's device
  layout, ``layer_first``).
The state pool is ``[slots, Lr, state_dim]`` or ``[Lr, slots, state_dim]`` accordingly, a
sidecar pool ``[pages, Ls, 2, page_size / group, D]`` or ``[Ls, pages, ...]``.
"""
from __future__ import annotations

import os
import weakref

import torch

from scenarios.torch_options import LAYOUTS as LAYOUT_NAMES

from .spec import HybridSpec
from .staging import StagedCopier, StagedHandle, as_index

TIERS = ("L1", "L2")
COMPONENTS = ("full", "swa", "state")
LAYOUTS = LAYOUT_NAMES  # torch.layout's values (scenarios/torch_options.py)
_ALIASES = {"mamba": "state", "full": "full", "swa": "swa", "state": "state"}


def component_name(component: str, sidecars=()) -> str:
    """The pool of a core component name ("mamba" is the state pool; a sidecar is its own)."""
    if component in _ALIASES:
        return _ALIASES[component]
    if component in sidecars:
        return component
    raise KeyError(f"no torch pool for component {component!r} (pools: full, swa, state/mamba; "
                   f"sidecars: {', '.join(sidecars) or 'none'})")


class HostMemoryError(ValueError):
    """The host (L2) pools need more memory than the machine has available."""


def host_memory_available() -> int:
    """Bytes of host memory available now (MemAvailable of /proc/meminfo; else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def _unregister(ptrs: list) -> None:
    rt = torch.cuda.cudart()
    for ptr in ptrs:
        rt.cudaHostUnregister(ptr)


def host_tensor(shape, dtype, pin: bool, registered: list | None = None) -> torch.Tensor:
    """A zeroed host tensor of exactly `shape`; with `pin`, page-locked in place
    (``cudaHostRegister``: no power-of-two rounding), its address appended to `registered` (to
    unregister when the pools go)."""
    t = torch.zeros(shape, dtype=dtype)
    if pin and t.numel():
        err = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
        if int(err) != 0:
            raise RuntimeError(f"cudaHostRegister of a {t.numel() * t.element_size()}-byte host pool failed: {err}")
        if registered is not None:
            registered.append(t.data_ptr())
    return t


class KVPools:
    """Pools sized by page/slot counts per tier: each of ``full_pages``, ``swa_pages``,
    ``state_slots`` is an int (every tier) or ``{"L1": n, "L2": m}`` (a missing tier: 0)."""

    def __init__(self, spec: HybridSpec, *, full_pages, swa_pages=0, state_slots=0,
                 layout: str = "page_first", device="cpu", dtype=torch.float32,
                 state_dtype=torch.float32):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.spec, self.layout = spec, layout
        self.device = torch.device(device)
        self.dtype, self.state_dtype = dtype, state_dtype
        self.pinned = torch.cuda.is_available()
        self.tier_device = {"L1": self.device, "L2": torch.device("cpu")}
        sizes = {"full": full_pages, "swa": swa_pages, "state": state_slots}
        P, D = spec.page_size, spec.kv_width
        geometry = {"full": (spec.n_full, (2, P, D)), "swa": (spec.n_swa, (2, P, D)),
                    "state": (spec.n_rec, (spec.state_dim,))}
        for sc in spec.sidecars:
            sizes[sc.name] = sizes[sc.follows]
            geometry[sc.name] = (spec.sidecar_layers(sc), (2, P // sc.group, D))
        self.sidecars = tuple(sc.name for sc in spec.sidecars)
        self._t: dict = {}
        plan = {}
        for comp, size in sizes.items():
            per_tier = size if isinstance(size, dict) else {t: size for t in TIERS}
            bad = set(per_tier) - set(TIERS)
            if bad:
                raise ValueError(f"{comp}: unknown tiers {sorted(bad)}")
            layers, inner = geometry[comp]
            dt = state_dtype if comp == "state" else dtype
            for tier in TIERS:
                n = int(per_tier.get(tier, 0))
                if n < 0:
                    raise ValueError(f"{comp} {tier}: size must be >= 0, got {n}")
                shape = (n, layers) if layout == "page_first" else (layers, n)
                plan[tier, comp] = (shape + inner, dt)
        self._check_host_memory(plan)
        pin = self.pinned and self.device.type == "cuda"
        registered: list = []
        for (tier, comp), (shape, dt) in plan.items():
            self._t[tier, comp] = host_tensor(shape, dt, pin, registered) if tier == "L2" else \
                torch.zeros(shape, dtype=dt, device=self.tier_device[tier])
        if registered:
            weakref.finalize(self, _unregister, registered)
        self.staged = StagedCopier(self)  # `copy_pages`'s copier: (CUDA) streams, bounded staging buffers

    @staticmethod
    def _check_host_memory(plan: dict) -> None:
        """`HostMemoryError` (one line) when the L2 pools need more than the host has available."""
        need = sum(torch.Size(shape).numel() * torch.empty(0, dtype=dt).element_size()
                   for (tier, _), (shape, dt) in plan.items() if tier == "L2")
        if need:
            have = host_memory_available()
            if need > have:
                raise HostMemoryError(f"the L2 host pools need {_size(need)}, but only {_size(have)} of host memory "
                                      "is available (lower cache.l2_tokens)")

    # -- views -------------------------------------------------------------------------------
    @property
    def page_dim(self) -> int:
        return 0 if self.layout == "page_first" else 1

    def tensor(self, tier: str, component: str) -> torch.Tensor:
        return self._t[tier, component_name(component, self.sidecars)]

    def size(self, tier: str, component: str) -> int:
        return self.tensor(tier, component).shape[self.page_dim]

    def layer_view(self, tier: str, component: str, layer: int) -> torch.Tensor:
        """One layer of a pool (a view): ``[pages, 2, P, D]`` for KV, ``[slots, state_dim]``
        for state, ``[pages, 2, P / group, D]`` for a sidecar. `layer` counts within the
        component's layers (spec.group_index; a sidecar's: spec.attached)."""
        t = self.tensor(tier, component)
        return t[:, layer] if self.layout == "page_first" else t[layer]

    def page_bytes(self, component: str) -> int:
        """Bytes of one page (one slot for state) across all its layers."""
        t = self.tensor("L1", component)
        per = t.element_size()
        for i, s in enumerate(t.shape):
            if i != self.page_dim:
                per *= s
        return per

    # -- copies ------------------------------------------------------------------------------
    def copy_pages(self, src_tier: str, dst_tier: str, component: str, src_idx, dst_idx) -> StagedHandle:
        """dst pool[dst_idx[i]] = src pool[src_idx[i]] for every i, all layers: `StagedCopier.copy`
        (the pools' own, `staged`). On CUDA the copy runs on its direction's stream
        (after the work already queued on the current stream) and the handle says when it is done;
        on CPU it is synchronous. Payload validity is the caller's business (the core acknowledges
        a transfer only when its handle is done)."""
        return self.staged.copy(src_tier, dst_tier, component, src_idx, dst_idx)

    def copy_state(self, tier: str, src, dst) -> None:
        """State slot(s) `src` -> `dst` on one tier (MAMBA `CopyState`: copy-on-reuse of a
        checkpoint, every-K snapshots). Ordered with the current stream's work."""
        t = self.tensor(tier, "state")
        si, di = as_index(src).to(t.device), as_index(dst).to(t.device)
        d = self.page_dim
        t.index_copy_(d, di, t.index_select(d, si))

    # -- whole pages for the L3 store -------------------------------------------------------
    def read_pages(self, tier: str, component: str, idx) -> list:
        """Per index one CPU tensor ``[layers, ...]`` (contiguous), e.g. to put into a store."""
        t = self.tensor(tier, component)
        g = t.index_select(self.page_dim, as_index(idx).to(t.device)).cpu()
        return [g.select(self.page_dim, i).contiguous() for i in range(g.shape[self.page_dim])]

    def write_pages(self, tier: str, component: str, idx, pages) -> None:
        """Inverse of `read_pages`: pool[idx[i]] = pages[i]."""
        t = self.tensor(tier, component)
        data = torch.stack([p.to(t.device, t.dtype) for p in pages], dim=self.page_dim)
        t.index_copy_(self.page_dim, as_index(idx).to(t.device), data)


__all__ = ["KVPools", "TIERS", "COMPONENTS", "LAYOUTS", "component_name", "host_tensor", "host_memory_available",
           "HostMemoryError"]
