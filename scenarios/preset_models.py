"""The model preset: layer mix, attention geometry, KV/state bytes, sidecars, parameters, each
number tied to its source (the values live in scenarios/data/presets/models/*.yaml, read by
scenarios/preset_data.py).

Every numeric field of a preset has an entry in its ``sources`` dict: either the line of
``MODELS.md`` / ``HARDWARE.md`` it comes from (``"MODELS.md <section>: ..."``, which in turn names the
SGLang / transformers / config.json line; copies in docs/sources/shared/), or of
the project's ``docs/sources/models.md`` / ``hardware.md`` (``"docs/sources/models.md <section>: ..."``),
or an explicit ``"assumption: ..."`` saying what was assumed and why. ``__post_init__`` checks that,
and recomputes every stated byte count from the geometry, so a preset cannot silently disagree
with itself.

Units (docs/sources/shared/DESIGN.md, "Names and units"): bytes, tokens, seconds; a field name ends in its
unit. All KV and state sizes are for the WHOLE model (all layers) before tensor-parallel sharding;
`scenarios.l1_sizing.l1_plan` does the per-GPU split.

Components (docs/sources/shared/SPEC.md, section 2):
- FULL: ``full_kv_bytes_per_token`` = KV row bytes x full-attention layers.
- SWA: ``swa_kv_bytes_per_token`` = KV row bytes x sliding-window layers (window
  ``swa_window_tokens``).
- MAMBA: ``state_bytes`` = one recurrent checkpoint (conv + SSM state of every layer that
  keeps one), SGLang's rule: (conv elements x 2 B + SSM elements x 4 B) x layers.
- sidecars: ``cache_core.config.SidecarConfig`` (name, follows "full"/"swa", bytes per token
  of the followed pool), ready to hand to ``CacheConfig``.

Assumptions (the full text is in each preset's ``sources``):
- MTP/draft layers are not counted (no speculative decoding is modelled).
- DeepSeek-V4: the compressor rings follow SWA, priced per 256-token SWA page as SGLang
  prices the C4 ring (320 B/token/layer); the C128 ring (2,048 B) is priced the same way.
  Unpadded row sizes (SGLang's page padding adds < 0.2%). Flash weights fp8 (the seed serves
  an "-FP8" checkpoint); Pro weights 4-bit experts + fp8 rest (fp8 would not fit 8x H200).
- Kimi-K3: 104B active (sources disagree); INT4 experts + bf16 rest; MLA latent counted as
  one KV head. gpt-oss-20b: MXFP4 experts. Others: bf16 weights.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from cache_core.config import SidecarConfig

GB = 10**9
GiB = 2**30

ATTENTION_KINDS = ("gqa", "mla", "dsv4")
SOURCE_PREFIXES = ("MODELS.md", "HARDWARE.md", "docs/sources/models.md", "docs/sources/hardware.md",
                    "sim/opdata/vidur_fit.json", "assumption:")


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def numeric_fields(obj) -> list[str]:
    """Names of the fields that hold a number (or a tuple of numbers), None excluded."""
    out = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if is_number(v) or (isinstance(v, tuple) and v and all(
                is_number(x) or (isinstance(x, tuple) and all(map(is_number, x))) for x in v)):
            out.append(f.name)
    return out


def check_sources(obj, extra_keys: list[str]) -> None:
    need = numeric_fields(obj) + extra_keys
    src = obj.sources
    if not isinstance(src, dict):
        raise ValueError(f"{obj.name}: sources must be a dict")
    missing = [k for k in need if k not in src]
    if missing:
        raise ValueError(f"{obj.name}: no source for {missing}")
    known = {f.name for f in dataclasses.fields(obj)} | set(extra_keys)
    unknown = sorted(set(src) - known)
    if unknown:
        raise ValueError(f"{obj.name}: sources name unknown fields {unknown}")
    bad = [k for k, v in src.items() if not (isinstance(v, str) and v.startswith(SOURCE_PREFIXES))]
    if bad:
        raise ValueError(f"{obj.name}: sources {bad} must cite MODELS.md/HARDWARE.md (or docs/sources/models.md, "
                         "docs/sources/hardware.md, sim/opdata/vidur_fit.json) or say 'assumption: ...'")


def nonneg_int(owner: str, name: str, v, lo: int = 0) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{owner}: {name} must be an integer >= {lo}, got {v!r}")


@dataclass(frozen=True, kw_only=True)
class ModelPreset:
    """One model: layer mix, attention geometry, KV/state bytes, sidecars, parameters.

    Layers: ``full_layers + swa_layers + recurrent_layers == num_layers`` (MTP/draft layers
    are not counted: no speculative decoding is modelled). ``state_layers`` = layers that
    keep a MAMBA-pool state (the recurrent layers, or every layer for Inkling's short conv).
    ``compressed_layers`` = ((ratio, layers), ...) for DeepSeek-V4's C4/C128 layers, which are
    also SWA layers.

    Attention geometry, by ``attention``:
    - ``"gqa"``: row = kv_heads x (head_dim + v_head_dim) x kv_dtype_bytes;
    - ``"mla"``: row = (kv_lora_rank + qk_rope_head_dim) x kv_dtype_bytes;
    - ``"dsv4"``: row = (head_dim - rope) x kv_dtype_bytes + rope x 2 (bf16) + kv_scale_bytes.
    """

    name: str
    family: str
    attention: str
    num_layers: int
    full_layers: int = 0
    swa_layers: int = 0
    swa_window_tokens: int | None = None
    recurrent_layers: int = 0
    recurrent_kind: str | None = None  # "kda", "gdn", "short-conv"
    state_layers: int = 0
    compressed_layers: tuple = ()
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int | None = None  # None = head_dim
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    kv_scale_bytes: int | None = None
    kv_dtype: str
    kv_dtype_bytes: int
    full_kv_bytes_per_token: int
    swa_kv_bytes_per_token: int = 0
    conv_state_elements_per_layer: int = 0
    ssm_state_elements_per_layer: int = 0
    conv_state_dtype_bytes: int = 2
    ssm_state_dtype_bytes: int = 4
    state_bytes: int = 0
    sidecars: tuple = ()
    swa_full_tokens_ratio: float | None = None
    total_params: int
    active_params: int
    weight_dtype: str
    weight_bytes: int
    hidden_size: int
    vocab_size: int
    max_context_tokens: int
    # multiplies the operator (kernel) time of a step: one documented number per model for
    # day-0 kernels (issue 15 item 3); 1.0 = the fitted kernels as they are
    kernel_factor: float = 1.0
    sources: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        n = self.name
        if not (isinstance(n, str) and n and isinstance(self.family, str) and self.family):
            raise ValueError(f"model name and family must be non-empty strings, got {n!r}, {self.family!r}")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"{n}: attention must be one of {ATTENTION_KINDS}, got {self.attention!r}")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("int", "int | None") and v is not None:
                nonneg_int(n, f.name, v)
        for name in ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "kv_dtype_bytes",
                     "total_params", "active_params", "weight_bytes", "hidden_size", "vocab_size",
                     "max_context_tokens"):
            nonneg_int(n, name, getattr(self, name), 1)
        if self.full_layers + self.swa_layers + self.recurrent_layers != self.num_layers:
            raise ValueError(f"{n}: full {self.full_layers} + swa {self.swa_layers} + recurrent "
                             f"{self.recurrent_layers} layers != {self.num_layers}")
        if (self.swa_layers > 0) != (self.swa_window_tokens is not None):
            raise ValueError(f"{n}: swa_window_tokens must be given exactly when there are SWA layers")
        if self.swa_window_tokens is not None:
            nonneg_int(n, "swa_window_tokens", self.swa_window_tokens, 1)
            r = self.swa_full_tokens_ratio
            if not (is_number(r) and r > 0):
                raise ValueError(f"{n}: a model with SWA needs swa_full_tokens_ratio > 0, got {r!r}")
        if not (self.recurrent_layers <= self.state_layers <= self.num_layers):
            raise ValueError(f"{n}: need recurrent_layers <= state_layers <= num_layers")
        if (self.recurrent_layers > 0 or self.state_layers > 0) != (self.recurrent_kind is not None):
            raise ValueError(f"{n}: recurrent_kind must be given exactly when layers keep a state")
        for pair in self.compressed_layers:
            if not (isinstance(pair, tuple) and len(pair) == 2 and pair[0] >= 2 and pair[1] >= 1):
                raise ValueError(f"{n}: compressed_layers entries are (ratio >= 2, layers >= 1), got {pair!r}")
        if sum(c for _, c in self.compressed_layers) > self.swa_layers + self.full_layers:
            raise ValueError(f"{n}: more compressed layers than attention layers")
        if self.attention == "mla" and (self.kv_lora_rank is None or self.qk_rope_head_dim is None):
            raise ValueError(f"{n}: MLA needs kv_lora_rank and qk_rope_head_dim")
        if self.attention == "dsv4" and (self.qk_rope_head_dim is None or self.kv_scale_bytes is None):
            raise ValueError(f"{n}: DeepSeek-V4 rows need qk_rope_head_dim and kv_scale_bytes")
        if self.active_params > self.total_params:
            raise ValueError(f"{n}: active_params > total_params")
        if not (is_number(self.kernel_factor) and 0 < self.kernel_factor < math.inf):
            raise ValueError(f"{n}: kernel_factor must be a finite number > 0, got {self.kernel_factor!r}")
        self._check_bytes()
        self._check_sidecars()
        check_sources(self, [f"sidecar:{s.name}" for s in self.sidecars])

    def _check_bytes(self) -> None:
        row, n = self.kv_row_bytes, self.name
        for comp, layers, stated in (("full", self.full_layers, self.full_kv_bytes_per_token),
                                     ("swa", self.swa_layers, self.swa_kv_bytes_per_token)):
            if stated != row * layers:
                raise ValueError(f"{n}: {comp}_kv_bytes_per_token {stated} != row {row} B x {layers} layers")
        per_layer = state_bytes_per_layer(vars(self))
        if self.state_bytes != per_layer * self.state_layers:
            raise ValueError(f"{n}: state_bytes {self.state_bytes} != {per_layer} B x {self.state_layers} layers")

    def _check_sidecars(self) -> None:
        if not isinstance(self.sidecars, tuple) or not all(isinstance(s, SidecarConfig) for s in self.sidecars):
            raise ValueError(f"{self.name}: sidecars must be a tuple of SidecarConfig")
        names = [s.name for s in self.sidecars]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: sidecar names must be unique, got {names}")
        for s in self.sidecars:
            if not (is_number(s.bytes_per_token) and s.bytes_per_token > 0):
                raise ValueError(f"{self.name}: sidecar {s.name} needs bytes_per_token > 0")
            if s.follows == "swa" and self.swa_layers == 0:
                raise ValueError(f"{self.name}: sidecar {s.name} follows 'swa' but the model has no SWA")

    @property
    def kv_row_bytes(self) -> int:
        """KV bytes of one token in one attention layer (SGLang's per-layer rule, `row_bytes`)."""
        return row_bytes(vars(self))

    @property
    def components(self) -> tuple:
        """The cache components this model needs: "full" always, then "swa", "mamba"."""
        return ("full",) + (("swa",) if self.swa_layers else ()) + (("mamba",) if self.state_bytes else ())

    @property
    def kv_bytes_per_token(self) -> dict:
        """{"full": ..., "swa": ...}: KV bytes per token of each component, sidecars excluded."""
        return {"full": self.full_kv_bytes_per_token, "swa": self.swa_kv_bytes_per_token}

    def sidecar_bytes_per_token(self, component: str) -> float:
        """Sum of the sidecars that follow `component` ("full" or "swa"), bytes per token."""
        return sum(s.bytes_per_token for s in self.sidecars if s.follows == component)


def row_bytes(f) -> int:
    """KV bytes of one token in one attention layer, SGLang's rule by ``f["attention"]`` (a
    preset's fields, defaults included): see `ModelPreset`."""
    dtype = f["kv_dtype_bytes"]
    if f["attention"] == "gqa":
        v = f["head_dim"] if f["v_head_dim"] is None else f["v_head_dim"]
        return f["num_kv_heads"] * (f["head_dim"] + v) * dtype
    if f["attention"] == "mla":
        return (f["kv_lora_rank"] + f["qk_rope_head_dim"]) * dtype
    rope = f["qk_rope_head_dim"]
    return (f["head_dim"] - rope) * dtype + rope * 2 + f["kv_scale_bytes"]


def state_bytes_per_layer(f) -> int:
    """One layer's MAMBA state, SGLang's rule: conv elements x conv dtype bytes + SSM elements x
    SSM dtype bytes (MODELS.md 'SGLang rules')."""
    return (f["conv_state_elements_per_layer"] * f["conv_state_dtype_bytes"]
            + f["ssm_state_elements_per_layer"] * f["ssm_state_dtype_bytes"])


def bytes_per_token(model: ModelPreset, component, *, sidecars: bool = True) -> float:
    """Bytes that one token of `component` ("full"/"swa", any case, or a component)
    occupies in the whole model: its KV plus, by default, the sidecars that follow it (they
    move with it across tiers). MAMBA holds a per-checkpoint state, not per-token bytes:
    use ``model.state_bytes``."""
    name = getattr(component, "name", component)
    key = str(name).lower()
    if key == "mamba":
        raise ValueError("MAMBA has no bytes per token; use model.state_bytes (bytes per checkpoint)")
    if key not in ("full", "swa"):
        raise ValueError(f"unknown component {component!r}: expected 'full' or 'swa'")
    kv = model.kv_bytes_per_token[key]
    return float(kv + (model.sidecar_bytes_per_token(key) if sidecars else 0.0))


def _fmt_bytes(b: float) -> str:
    return f"{b:,.2f}".rstrip("0").rstrip(".")


def describe(model: ModelPreset) -> str:
    """One-line summary: layers, KV/sidecar/state bytes, parameters, weights."""
    parts = [f"{model.full_layers} full"]
    if model.swa_layers:
        parts.append(f"{model.swa_layers} swa(W={model.swa_window_tokens})")
    if model.recurrent_layers:
        parts.append(f"{model.recurrent_layers} {model.recurrent_kind}")
    if model.compressed_layers:
        parts.append("+".join(f"C{r}x{c}" for r, c in model.compressed_layers))
    kv = f"FULL {_fmt_bytes(model.full_kv_bytes_per_token)}"
    if model.sidecar_bytes_per_token("full"):
        kv += f"+{_fmt_bytes(model.sidecar_bytes_per_token('full'))} sidecar"
    if model.swa_layers:
        kv += f", SWA {_fmt_bytes(model.swa_kv_bytes_per_token)}"
        if model.sidecar_bytes_per_token("swa"):
            kv += f"+{_fmt_bytes(model.sidecar_bytes_per_token('swa'))} sidecar"
    state = f", state {model.state_bytes:,} B/ckpt ({model.recurrent_kind})" if model.state_bytes else ""
    return (f"{model.name} [{model.family}]: {model.num_layers} layers ({', '.join(parts)}), "
            f"{model.kv_dtype} KV {kv} B/token{state}; {model.total_params / 1e9:g}B params "
            f"({model.active_params / 1e9:g}B active), weights {model.weight_bytes / GB:,.1f} GB "
            f"{model.weight_dtype}")


