"""`HybridSpec`: the geometry of the synthetic hybrid model (layer kinds, widths, window).

Pure Python (no torch), so the pools, the model and the future executor agree on one record.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

KINDS = ("full", "swa", "rec")


@dataclass(frozen=True)
class SidecarSpec:
    """A sidecar pool of the synthetic model (DeepSeek-V4-style compressed KV): no vote, no tree
    slot, indexed by the pages of ``follows`` ("full" or "swa", the core's index translation).
    It holds one compressed row (a K and a V of ``kv_width``) per ``group`` tokens: the row of
    the group ending at position p is computed from the layer's input at p (a causal model's
    summary of the group). A layer it is attached to attends over its own keys plus the rows of
    every complete group at or before the query (within the window when it follows "swa")."""

    name: str
    follows: str
    group: int

    @classmethod
    def from_config(cls, sc, page_size: int) -> "SidecarSpec":
        """From a `cache_core.config.SidecarConfig`: the group is the compression ratio its name
        starts with (``c4_...``: 4, ``c128_...``: 128; otherwise one row per page), reduced to a
        divisor of the page size (gcd), so a page holds whole groups."""
        m = re.match(r"^c(\d+)_", sc.name)
        ratio = int(m.group(1)) if m else page_size
        return cls(sc.name, sc.follows, math.gcd(ratio, page_size))


@dataclass(frozen=True)
class HybridSpec:
    """Layer kinds in order ("full" = causal attention over all positions, "swa" =
    sliding-window attention over the last ``window`` tokens, self included, "rec" = a gated
    linear recurrence with a ``state_dim`` state per request), and the widths.

    Attention layers have ``num_heads`` query heads and as many KV heads (no GQA), each of
    ``head_dim``; a KV row (one token, one layer, K or V) is ``num_heads * head_dim`` wide.
    ``page_size`` is the core's page size (tokens per KV page). ``mlp_mult`` sizes the gated
    MLP (intermediate = mlp_mult * hidden); ``rope_base`` the rotary position embedding."""

    kinds: tuple
    hidden: int
    num_heads: int
    head_dim: int
    window: int | None
    state_dim: int
    vocab: int
    page_size: int
    mlp_mult: int = 2
    rope_base: float = 10000.0
    sidecars: tuple = ()  # SidecarSpec, ...

    def __post_init__(self):
        kinds = tuple(self.kinds)
        object.__setattr__(self, "kinds", kinds)
        if not kinds:
            raise ValueError("HybridSpec: at least one layer is needed")
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise ValueError(f"HybridSpec: layer kinds must be among {KINDS}, got {bad}")
        for name in ("hidden", "num_heads", "head_dim", "state_dim", "vocab", "page_size", "mlp_mult"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"HybridSpec: {name} must be an integer >= 1, got {v!r}")
        if self.head_dim % 2:
            raise ValueError(f"HybridSpec: head_dim must be even (rotary embedding), got {self.head_dim}")
        if "swa" in kinds and (not isinstance(self.window, int) or self.window < 1):
            raise ValueError(f"HybridSpec: swa layers need window >= 1 tokens, got {self.window!r}")
        object.__setattr__(self, "sidecars", tuple(self.sidecars))
        for sc in self.sidecars:
            if sc.follows not in ("full", "swa") or self.page_size % sc.group:
                raise ValueError(f"HybridSpec: sidecar {sc.name!r} must follow full or swa with a group "
                                 f"dividing the page size {self.page_size}, got {sc.follows!r}, {sc.group}")
            if sc.follows == "swa" and not self.n_swa:
                raise ValueError(f"HybridSpec: sidecar {sc.name!r} follows swa but no layer is swa")
            if not self.n_full + self.n_swa:
                raise ValueError(f"HybridSpec: sidecar {sc.name!r} needs an attention layer")

    # -- derived -----------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.kinds)

    def count(self, kind: str) -> int:
        return sum(k == kind for k in self.kinds)

    @property
    def n_full(self) -> int:
        return self.count("full")

    @property
    def n_swa(self) -> int:
        return self.count("swa")

    @property
    def n_rec(self) -> int:
        return self.count("rec")

    @property
    def kv_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def group_index(self) -> tuple:
        """Per layer: its index among the layers of its kind (= its layer in that pool)."""
        seen = {k: 0 for k in KINDS}
        out = []
        for k in self.kinds:
            out.append(seen[k])
            seen[k] += 1
        return tuple(out)

    def sidecar_kinds(self, sc) -> tuple:
        """The layer kinds a sidecar is attached to: those of the kind it follows, or every
        attention layer when the model has none of that kind (DeepSeek-V4: FULL keeps no KV of
        its own, its compressed KV rides on the sliding-window layers)."""
        return (sc.follows,) if self.count(sc.follows) else tuple(k for k in ("full", "swa") if self.count(k))

    def sidecar_layers(self, sc) -> int:
        """Layers of the sidecar's pool (its attached layers)."""
        return sum(self.count(k) for k in self.sidecar_kinds(sc))

    def attached(self, layer: int) -> tuple:
        """((SidecarSpec, index of `layer` in that sidecar's pool), ...) for one layer."""
        kind = self.kinds[layer]
        out = []
        for sc in self.sidecars:
            kinds = self.sidecar_kinds(sc)
            if kind in kinds:
                out.append((sc, sum(k in kinds for k in self.kinds[:layer])))
        return tuple(out)

    def pools_of_layer(self, layer: int) -> tuple:
        """((pool name, index of `layer` in that pool), ...): the pools layer `layer` reads (its
        kind's: "full", "swa" or "state", then the sidecars attached to it), as a layer-wise load
        orders its copies (`staging.StagedCopier.copy_round`)."""
        kind = self.kinds[layer]
        own = ({"rec": "state"}.get(kind, kind), self.group_index[layer])
        return (own,) + tuple((sc.name, i) for sc, i in self.attached(layer))

    @property
    def window_pages(self) -> int:
        """Pages a window spans, as the core counts them (ceil(window / page_size))."""
        return -(-self.window // self.page_size) if self.window else 0

    # -- from a preset -----------------------------------------------------------------------
    @classmethod
    def from_preset(cls, preset, max_layers: int | None = None, *, hidden: int | None = None,
                    num_heads: int | None = None, head_dim: int | None = None,
                    state_dim: int | None = None, vocab: int | None = None,
                    window: int | None = None, page_size: int = 64, mlp_mult: int = 2,
                    sidecars=None) -> "HybridSpec":
        """A spec with the layer mix of a `scenarios.presets.ModelPreset`.

        Layer counts: ``full_layers``, ``swa_layers`` and ``recurrent_layers``. A preset whose
        state is kept by every layer without separate recurrent layers (Inkling's short conv:
        ``recurrent_layers == 0 < state_layers``) gets ONE extra "rec" layer, so the MAMBA
        component has a real state to carry. With ``max_layers`` below the total, the counts
        are scaled down keeping the proportions (largest remainder), every kind present keeps
        at least one layer (so ``max_layers`` must be >= the number of kinds present).

        Order: presets carry counts, not an order, so the kinds are interleaved evenly with
        the full layers closing each group, which is the real order of the families in the
        presets (Qwen3-Next / Kimi-Linear: 3 linear + 1 full; gpt-oss: swa, full alternate);
        swa and rec layers are interleaved the same way among the non-full positions.

        Widths default to the preset's: ``num_heads`` = its KV heads (the synthetic model has
        no GQA, so KV bytes per token match a GQA preset's for ``head_dim`` = its head dim;
        MLA / DeepSeek-V4 rows are not reproduced), ``hidden`` = hidden_size, ``vocab`` =
        vocab_size, ``window`` = swa_window_tokens. ``state_dim`` defaults to ``hidden``; pass
        the preset's ``ssm_state_elements_per_layer`` to match its state bytes. Pass small
        values for CPU tests. ``sidecars``: the `SidecarConfig`s the cache names (default: the
        preset's), each a `SidecarSpec`."""
        counts = scale_counts(preset_counts(preset), max_layers)
        kinds = interleave(counts["full"], counts["swa"], counts["rec"])
        return cls(kinds=kinds,
                   hidden=hidden or preset.hidden_size,
                   num_heads=num_heads or preset.num_kv_heads,
                   head_dim=head_dim or preset.head_dim,
                   window=(window or preset.swa_window_tokens) if counts["swa"] else window,
                   state_dim=state_dim or hidden or preset.hidden_size,
                   vocab=vocab or preset.vocab_size,
                   page_size=page_size, mlp_mult=mlp_mult,
                   sidecars=tuple(SidecarSpec.from_config(s, page_size)
                                  for s in (preset.sidecars if sidecars is None else sidecars)))


def preset_counts(preset) -> dict:
    """{kind: layers} of a preset as the synthetic model reproduces it (before any reduction)."""
    rec = preset.recurrent_layers or (1 if preset.state_layers else 0)
    return {"full": preset.full_layers, "swa": preset.swa_layers, "rec": rec}


def scale_counts(counts: dict, max_layers: int | None) -> dict:
    """Scale {kind: layers} down to at most `max_layers` in total (largest remainder, each
    present kind >= 1; ties go to the kind named first)."""
    total = sum(counts.values())
    if max_layers is None or total <= max_layers:
        return dict(counts)
    present = [k for k, c in counts.items() if c > 0]
    if max_layers < len(present):
        raise ValueError(f"max_layers={max_layers} cannot keep one layer of each kind present {present}")
    ideal = {k: counts[k] * max_layers / total for k in present}
    out = {k: 0 for k in counts}
    for k in present:
        out[k] = max(1, math.floor(ideal[k]))
    order = list(counts)
    while sum(out.values()) > max_layers:  # only when the "at least one" floor overshot
        k = max((k for k in present if out[k] > 1), key=lambda k: (out[k] - ideal[k], -order.index(k)))
        out[k] -= 1
    while sum(out.values()) < max_layers:
        k = max(present, key=lambda k: (ideal[k] - out[k], -order.index(k)))
        out[k] += 1
    return out


def _spread(n: int, m: int) -> list:
    """Which of n positions take one of m items, evenly, the last position of each group."""
    return [(i + 1) * m // n > i * m // n for i in range(n)] if n else []


def interleave(full: int, swa: int, rec: int) -> tuple:
    """Layer kinds with the full layers spread evenly (each closing its group), then the swa
    layers spread the same way among the remaining positions, rec layers elsewhere."""
    n = full + swa + rec
    is_full = _spread(n, full)
    is_swa = iter(_spread(n - full, swa))
    return tuple("full" if f else ("swa" if next(is_swa) else "rec") for f in is_full)


__all__ = ["HybridSpec", "SidecarSpec", "KINDS", "interleave", "preset_counts", "scale_counts"]
