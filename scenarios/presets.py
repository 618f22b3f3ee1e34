"""Model and hardware presets, each number tied to its source.

Every numeric field of a preset has an entry in its ``sources`` dict: either the line of
``../shared/MODELS.md`` / ``HARDWARE.md`` it comes from (``"MODELS.md <section>: ..."``, which
in turn names the SGLang / transformers / config.json line), or of the project's
``docs/sources/models.md`` / ``hardware.md`` (``"docs/sources/models.md <section>: ..."``), or an explicit
``"assumption: ..."`` saying what was assumed and why. ``__post_init__`` checks that, and
recomputes every stated byte count from the geometry, so a preset cannot silently disagree
with itself.

Units (DESIGN.md, "Names and units"): bytes, tokens, seconds; a field name ends in its unit.
All KV and state sizes are for the WHOLE model (all layers) before tensor-parallel sharding;
`l1_plan` does the per-GPU split.

Components (SPEC.md section 2):
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
- H200: 140 GiB usable HBM per GPU; 10 us per PCIe transfer; 100 us per L3 transfer.
- A100-40GB/80GB, H100, H800, B200, H20 (docs/sources/hardware.md): the same per-transfer costs; host
  link at the SM-kernel copy rate (SGLang's default ``--hicache-io-backend kernel``); L3 at the
  H200 node's 190 GB/s scaled to the node's NICs; device copy and measured matmul rates scaled
  from the H200's measured/peak ratios; node fields (DRAM, NICs) of the 8-GPU node.
- `l1_plan`: per-GPU sizing, see its docstring (SWA/sidecar shares charged per FULL token,
  MAMBA share 0.9 by default, activations in the 1 - mem_fraction_static remainder, MLA and
  DeepSeek-V4 KV replicated on every TP rank).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from cache_core.config import SidecarConfig

GB = 10**9
GiB = 2**30

# ------------------------------------------------------------------------------------------
# Model presets
# ------------------------------------------------------------------------------------------

ATTENTION_KINDS = ("gqa", "mla", "dsv4")
_SOURCE_PREFIXES = ("MODELS.md", "HARDWARE.md", "docs/sources/models.md", "docs/sources/hardware.md",
                    "sim/opdata/vidur_fit.json", "assumption:")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _numeric_fields(obj) -> list[str]:
    """Names of the fields that hold a number (or a tuple of numbers), None excluded."""
    out = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if _is_number(v) or (isinstance(v, tuple) and v and all(
                _is_number(x) or (isinstance(x, tuple) and all(map(_is_number, x))) for x in v)):
            out.append(f.name)
    return out


def _check_sources(obj, extra_keys: list[str]) -> None:
    need = _numeric_fields(obj) + extra_keys
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
    bad = [k for k, v in src.items() if not (isinstance(v, str) and v.startswith(_SOURCE_PREFIXES))]
    if bad:
        raise ValueError(f"{obj.name}: sources {bad} must cite MODELS.md/HARDWARE.md (or docs/sources/models.md, "
                         "docs/sources/hardware.md, sim/opdata/vidur_fit.json) or say 'assumption: ...'")


def _nonneg_int(owner: str, name: str, v, lo: int = 0) -> None:
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
                _nonneg_int(n, f.name, v)
        for name in ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "kv_dtype_bytes",
                     "total_params", "active_params", "weight_bytes", "hidden_size", "vocab_size",
                     "max_context_tokens"):
            _nonneg_int(n, name, getattr(self, name), 1)
        if self.full_layers + self.swa_layers + self.recurrent_layers != self.num_layers:
            raise ValueError(f"{n}: full {self.full_layers} + swa {self.swa_layers} + recurrent "
                             f"{self.recurrent_layers} layers != {self.num_layers}")
        if (self.swa_layers > 0) != (self.swa_window_tokens is not None):
            raise ValueError(f"{n}: swa_window_tokens must be given exactly when there are SWA layers")
        if self.swa_window_tokens is not None:
            _nonneg_int(n, "swa_window_tokens", self.swa_window_tokens, 1)
            r = self.swa_full_tokens_ratio
            if not (_is_number(r) and r > 0):
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
        if not (_is_number(self.kernel_factor) and 0 < self.kernel_factor < math.inf):
            raise ValueError(f"{n}: kernel_factor must be a finite number > 0, got {self.kernel_factor!r}")
        self._check_bytes()
        self._check_sidecars()
        _check_sources(self, [f"sidecar:{s.name}" for s in self.sidecars])

    def _check_bytes(self) -> None:
        row, n = self.kv_row_bytes, self.name
        for comp, layers, stated in (("full", self.full_layers, self.full_kv_bytes_per_token),
                                     ("swa", self.swa_layers, self.swa_kv_bytes_per_token)):
            if stated != row * layers:
                raise ValueError(f"{n}: {comp}_kv_bytes_per_token {stated} != row {row} B x {layers} layers")
        per_layer = (self.conv_state_elements_per_layer * self.conv_state_dtype_bytes
                     + self.ssm_state_elements_per_layer * self.ssm_state_dtype_bytes)
        if self.state_bytes != per_layer * self.state_layers:
            raise ValueError(f"{n}: state_bytes {self.state_bytes} != {per_layer} B x {self.state_layers} layers")

    def _check_sidecars(self) -> None:
        if not isinstance(self.sidecars, tuple) or not all(isinstance(s, SidecarConfig) for s in self.sidecars):
            raise ValueError(f"{self.name}: sidecars must be a tuple of SidecarConfig")
        names = [s.name for s in self.sidecars]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: sidecar names must be unique, got {names}")
        for s in self.sidecars:
            if not (_is_number(s.bytes_per_token) and s.bytes_per_token > 0):
                raise ValueError(f"{self.name}: sidecar {s.name} needs bytes_per_token > 0")
            if s.follows == "swa" and self.swa_layers == 0:
                raise ValueError(f"{self.name}: sidecar {s.name} follows 'swa' but the model has no SWA")

    @property
    def kv_row_bytes(self) -> int:
        """KV bytes of one token in one attention layer (SGLang's per-layer rule)."""
        if self.attention == "gqa":
            v = self.head_dim if self.v_head_dim is None else self.v_head_dim
            return self.num_kv_heads * (self.head_dim + v) * self.kv_dtype_bytes
        if self.attention == "mla":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        rope = self.qk_rope_head_dim
        return (self.head_dim - rope) * self.kv_dtype_bytes + rope * 2 + self.kv_scale_bytes

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


def bytes_per_token(model: ModelPreset, component, *, sidecars: bool = True) -> float:
    """Bytes that one token of `component` ("full"/"swa", any case, or a ComponentKind)
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


# --- building presets --------------------------------------------------------------------

_R = "MODELS.md SGLang rules used in every derived line: "
_RULES = {
    "kv_bf16": _R + "KV dtype `auto` = model dtype, bf16 (S:arg_groups/fields/model.py:197-205)",
    "conv_state_dtype_bytes": _R + "conv state is bf16 (S:environ.py:1628)",
    "ssm_state_dtype_bytes": _R + "SSM state is fp32 unless mamba_ssm_dtype says otherwise "
                             "(S:configs/mamba_utils.py:71)",
    "swa_ratio_default": _R + "swa_full_tokens_ratio defaults to 0.8 (S:arg_groups/fields/schedule.py:160)",
}
_BF16_WEIGHTS = ("assumption: bf16 weights (2 B/param x total_params); MODELS.md says the model "
                 "dtype is bf16 for every checkpoint (S:arg_groups/fields/model.py:197-205); "
                 "quantisation scales and buffers ignored")


def _model(section: str, src: dict, **kw) -> ModelPreset:
    """Build a preset; sources not given explicitly: the shared SGLang rules, and for a
    field that is 0 (a part the model lacks) the model's MODELS.md section."""
    sources = dict(src)
    sources.setdefault("conv_state_dtype_bytes", _RULES["conv_state_dtype_bytes"])
    sources.setdefault("ssm_state_dtype_bytes", _RULES["ssm_state_dtype_bytes"])
    sources.setdefault("kernel_factor", "assumption: 1.0, no day-0 kernel factor (no published measurement "
                                        "gives one for this model; docs/figure4.md)")
    if kw.get("kv_dtype") == "bf16":
        sources.setdefault("kv_dtype_bytes", _RULES["kv_bf16"])
    probe = {f.name: f.default for f in dataclasses.fields(ModelPreset)
             if f.default is not dataclasses.MISSING}
    probe.update(kw)
    for k, v in probe.items():
        if _is_number(v) and v == 0:
            sources.setdefault(k, f"{section}: the model has none (0; see its Layers row and Derived line)")
    return ModelPreset(sources=sources, **kw)


# DeepSeek-V4 shared facts (MODELS.md, DeepSeek-V4-Flash)
_V4 = "MODELS.md DeepSeek-V4-Flash"
_V4_ROW = 584          # 448 fp8 + 64 bf16 + 8 B scales
_V4_INDEXER_ROW = 132  # 128 fp8 + 4 B scale
_V4_C4_RING = 8 * (4 * 512 + 4 * 128) * 4   # 81,920 B per request per C4 layer (fp32)
_V4_C128_RING = 128 * 4096                   # 524,288 B per request per C128 layer
_V4_RING_PAGE = 256    # SGLang prices a ring per 256-token SWA page: 81,920 / 256 = 320 B


def _dsv4_sidecars(c4: int, c128: int, section: str) -> tuple[tuple, dict]:
    """The five DeepSeek-V4 sidecars: C4 KV, C4 indexer, C128 KV follow FULL (one
    compressed row per 4 / 128 tokens); the C4 and C128 compressor rings follow SWA."""
    sc = (
        SidecarConfig(name="c4_kv", follows="full", bytes_per_token=_V4_ROW / 4 * c4),
        SidecarConfig(name="c4_indexer", follows="full", bytes_per_token=_V4_INDEXER_ROW / 4 * c4),
        SidecarConfig(name="c128_kv", follows="full", bytes_per_token=_V4_ROW / 128 * c128),
        SidecarConfig(name="c4_compressor", follows="swa", bytes_per_token=_V4_C4_RING / _V4_RING_PAGE * c4),
        SidecarConfig(name="c128_compressor", follows="swa",
                      bytes_per_token=_V4_C128_RING / _V4_RING_PAGE * c128),
    )
    src = {
        "sidecar:c4_kv": f"{section} Derived: C4 compressed KV, one 584 B row per 4 tokens = 146 B x {c4} "
                         "C4 layers (K:ops/attention/dsv4/kv_layout.py:52-63)",
        "sidecar:c4_indexer": f"{section} Derived: C4 indexer row 132 B (128 fp8 + 4 B scale, "
                              f"S:mem_cache/deepseek_v4_memory_pool.py:57) / 4 = 33 B x {c4} C4 layers",
        "sidecar:c128_kv": f"{section} Derived: C128 compressed KV 584/128 = 4.5625 B x {c128} C128 layers",
        "sidecar:c4_compressor": f"{_V4} Derived note: SGLang prices the C4 compressor ring as 320 B per SWA "
                                 f"token per layer (S:model_executor/pool_configurator.py:1380-1383; = the "
                                 f"81,920 B ring / 256-token page) x {c4} C4 layers; without speculative "
                                 "decoding (8-row ring, not 16)",
        "sidecar:c128_compressor": "assumption: the C128 ring (128 rows x 4,096 B = 524,288 B per request "
                                   "per layer, MODELS.md) is priced like the C4 ring, per 256-token SWA "
                                   f"page: 524,288 / 256 = 2,048 B per SWA token x {c128} C128 layers "
                                   "(MODELS.md cites the formula, S:model_executor/pool_configurator.py:"
                                   "1516-1526, but not its number)",
    }
    return sc, src


def _dsv4_common(section: str) -> dict:
    return {
        "swa_window_tokens": f"{section}: every layer keeps a 128-token SWA window",
        "swa_full_tokens_ratio": _R + "swa_full_tokens_ratio is 0.1 for DeepSeek-V4 "
                                 "(S:arg_groups/model_overrides/deepseek_v4.py:48)",
        "num_kv_heads": f"{section}: 1 KV head",
        "head_dim": f"{_V4}: head_dim 512 (448 nope + 64 rope)",
        "qk_rope_head_dim": f"{_V4}: 64 rope dims, stored bf16 (K:ops/attention/dsv4/kv_layout.py:52-63)",
        "kv_scale_bytes": f"{_V4}: KV format, each row 448 fp8 + 64 bf16 + 8 B of scales = 584 B "
                          "(K:ops/attention/dsv4/kv_layout.py:52-63)",
        "kv_dtype_bytes": _R + "DeepSeek-V4 `auto` KV dtype becomes fp8_e4m3 (S:arg_groups/overrides.py:902-903)",
        "full_layers": f"{section}: every layer is an SWA layer (C4, C128 or SWA-only); none keeps "
                       "uncompressed full-attention KV",
        "full_kv_bytes_per_token": f"{section} Derived: FULL=0 (FULL has no per-token KV of its own; "
                                   "its compressed KV is in the sidecars)",
        "state_bytes": f"{section}: no MAMBA component; the compressor rings (MODELS.md 'recurrent "
                       "state per request') are priced as SWA sidecars",
        "vocab_size": f"{section}: vocab 129,280",
        "max_context_tokens": f"{section}: context 1,048,576",
    }


def _dsv4_flash() -> ModelPreset:
    s = _V4
    sc, src = _dsv4_sidecars(21, 20, s)
    src.update(_dsv4_common(s))
    src.update({
        "num_layers": f"{s}: Layers, 43 in total (+1 MTP layer, not counted: no speculative decoding)",
        "swa_layers": f"{s}: every one of the 43 layers keeps a 128-token SWA window",
        "compressed_layers": f"{s}: 21 C4 layers (even indices 2-42), 20 C128 (odd 3-41), 2 SWA-only "
                             "(HF compress_ratios; S:configs/model_config.py:1422-1429)",
        "num_q_heads": f"{s}: 64 query heads",
        "swa_kv_bytes_per_token": f"{s} Derived: SWA=584x43 = 25,112 B",
        "total_params": f"{s}: Parameters 284B total (model card)",
        "active_params": f"{s}: Parameters 13B active (model card)",
        "weight_bytes": "assumption: fp8 weights, 1 B/param x 284B = 284 GB (the seed serves "
                        "/path/to/DeepSeek-V4-Flash-FP8, seed 000 line 36); scales and any bf16 "
                        "tensors ignored",
        "hidden_size": f"{s}: hidden 4096",
    })
    return _model(s, src, name="DeepSeek-V4-Flash", family="deepseek-v4", attention="dsv4",
                  num_layers=43, full_layers=0, swa_layers=43, swa_window_tokens=128,
                  compressed_layers=((4, 21), (128, 20)), num_q_heads=64, num_kv_heads=1,
                  head_dim=512, qk_rope_head_dim=64, kv_scale_bytes=8, kv_dtype="fp8_e4m3",
                  kv_dtype_bytes=1, full_kv_bytes_per_token=0, swa_kv_bytes_per_token=25_112,
                  sidecars=sc, swa_full_tokens_ratio=0.1, total_params=284 * 10**9,
                  active_params=13 * 10**9, weight_dtype="fp8", weight_bytes=284 * GB,
                  hidden_size=4096, vocab_size=129_280, max_context_tokens=1_048_576)


# DeepSeek-V4-Pro routed-expert parameters: 384 experts x 3 matrices x 7168 x 3072 x 61 layers
_PRO_EXPERT_PARAMS = 384 * 3 * 7168 * 3072 * 61
_PRO_TOTAL = 1600 * 10**9


def _dsv4_pro() -> ModelPreset:
    s = "MODELS.md DeepSeek-V4-Pro"
    sc, src = _dsv4_sidecars(30, 31, s)
    src.update(_dsv4_common(s))
    src.update({
        "num_layers": f"{s}: Layers, 61 in total (+1 MTP layer, not counted)",
        "swa_layers": f"{s}: 61 layers, each with a 128-token SWA window; no SWA-only layers",
        "compressed_layers": f"{s}: 30 C4 and 31 C128 layers (layers 0-1 are C128; HF compress_ratios)",
        "head_dim": f"{s}: head_dim 512 (448 + 64)",
        "num_q_heads": f"{s}: 128 query heads",
        "swa_kv_bytes_per_token": f"{s} Derived: SWA=584x61 = 35,624 B",
        "total_params": f"{s}: Parameters 1.6T total (recipes.vllm.ai)",
        "active_params": f"{s}: Parameters 49B active (recipes.vllm.ai)",
        "weight_bytes": "assumption: 4-bit routed experts (0.5 B/param) and fp8 for the rest: experts "
                        "384 x 3 x 7168 x 3072 x 61 = 1,547.4B params (MODELS.md MoE row) -> 773.7 GB, "
                        "rest 52.6B x 1 B -> 52.6 GB; fp8 throughout (1.6 TB) would not fit the 8x141 GB "
                        "node the seed ran it on (TP8); scales ignored",
        "hidden_size": f"{s}: hidden 7168",
    })
    weights = _PRO_EXPERT_PARAMS // 2 + (_PRO_TOTAL - _PRO_EXPERT_PARAMS)
    return _model(s, src, name="DeepSeek-V4-Pro", family="deepseek-v4", attention="dsv4",
                  num_layers=61, full_layers=0, swa_layers=61, swa_window_tokens=128,
                  compressed_layers=((4, 30), (128, 31)), num_q_heads=128, num_kv_heads=1,
                  head_dim=512, qk_rope_head_dim=64, kv_scale_bytes=8, kv_dtype="fp8_e4m3",
                  kv_dtype_bytes=1, full_kv_bytes_per_token=0, swa_kv_bytes_per_token=35_624,
                  sidecars=sc, swa_full_tokens_ratio=0.1, total_params=_PRO_TOTAL,
                  active_params=49 * 10**9, weight_dtype="fp4-experts+fp8", weight_bytes=weights,
                  hidden_size=7168, vocab_size=129_280, max_context_tokens=1_048_576)


# Kimi-K3 routed-expert parameters: 896 experts x 3 x 3584 (latent width) x 3072 x 92 MoE layers
_K3_EXPERT_PARAMS = 896 * 3 * 3584 * 3072 * 92
_K3_TOTAL = 2800 * 10**9


def _kimi_k3() -> ModelPreset:
    s = "MODELS.md Kimi-K3"
    src = {
        "num_layers": f"{s}: Layers, 93 in total: 69 KDA and 24 MLA",
        "full_layers": f"{s}: 24 MLA layers (1-indexed 4, 8, ..., 92 and 93)",
        "recurrent_layers": f"{s}: 69 KDA layers",
        "state_layers": f"{s}: every KDA layer keeps a recurrent state (69)",
        "num_q_heads": f"{s}: MLA 96 heads",
        "num_kv_heads": "assumption: MLA caches one shared latent per token, counted as 1 KV head "
                        "(it is replicated, not split, across tensor-parallel ranks)",
        "head_dim": f"{s}: MLA nope 128 + rope 64 = 192 (query/key head dim)",
        "v_head_dim": f"{s}: MLA v 128",
        "kv_lora_rank": f"{s}: MLA kv_lora 512",
        "qk_rope_head_dim": f"{s}: MLA rope 64 (stored although mla_use_nope is true, as the Derived line does)",
        "full_kv_bytes_per_token": f"{s} Derived: FULL=(512+64)x2x24 = 27,648 B",
        "conv_state_elements_per_layer": _R + "KDA conv = 3*H*d x 3 (S:configs/mamba_utils.py:344-354); "
                                         f"{s}: KDA 96 heads x 128 dims -> 3 x 12,288 x 3 = 110,592",
        "ssm_state_elements_per_layer": _R + "KDA SSM = (H, d, d) = 96 x 128 x 128 = 1,572,864",
        "state_bytes": f"{s} Derived: KDA 3x36,864x2 + 96*128*128x4 = 6,512,640 B x 69 = 449,372,160 B "
                       "(fp32 SSM; 232,316,928 B with a bf16 SSM)",
        "total_params": f"{s}: Parameters 2.8T total (github.com/moonshotai)",
        "active_params": "assumption: 104B active, the higher of the two third-party figures MODELS.md "
                         "reports (104B vs ~50B); a rough count from the config (18 experts x 3 x 3584 x "
                         "3072 on 92 MoE layers ~59B, KDA q/k/v/o/gate ~30B, MLA ~3.5B, dense layer 0.7B, "
                         "embeddings 2.3B) gives ~96B, nearer 104B",
        "weight_bytes": "assumption: INT4 routed experts (0.5 B/param, as Kimi-K2's native INT4 release) "
                        "and bf16 for the rest: experts 896 x 3 x 3584 x 3072 x 92 = 2,722.7B params "
                        "-> 1,361.4 GB, rest 77.3B x 2 B -> 154.5 GB; ~1.5 TB, more than one 8x H200 node",
        "hidden_size": f"{s}: hidden 7168",
        "vocab_size": f"{s}: vocab 163,840",
        "max_context_tokens": f"{s}: context 1,048,576",
    }
    weights = _K3_EXPERT_PARAMS // 2 + (_K3_TOTAL - _K3_EXPERT_PARAMS) * 2
    return _model(s, src, name="Kimi-K3", family="kimi-linear", attention="mla", num_layers=93,
                  full_layers=24, recurrent_layers=69, recurrent_kind="kda", state_layers=69,
                  num_q_heads=96, num_kv_heads=1, head_dim=192, v_head_dim=128, kv_lora_rank=512,
                  qk_rope_head_dim=64, kv_dtype="bf16", kv_dtype_bytes=2,
                  full_kv_bytes_per_token=27_648, conv_state_elements_per_layer=3 * 96 * 128 * 3,
                  ssm_state_elements_per_layer=96 * 128 * 128, state_bytes=449_372_160,
                  total_params=_K3_TOTAL, active_params=104 * 10**9,
                  weight_dtype="int4-experts+bf16", weight_bytes=weights, hidden_size=7168,
                  vocab_size=163_840, max_context_tokens=1_048_576)


def _inkling_small() -> ModelPreset:
    s = "MODELS.md Inkling-Small (Thinking Machines)"
    src = {
        "num_layers": f"{s}: Layers, 42 in total (+8 MTP layers, not counted)",
        "full_layers": f"{s}: 7 FULL layers (5, 11, ..., 41)",
        "swa_layers": f"{s}: 35 SWA layers",
        "swa_window_tokens": f"{s}: SWA W=512 (SGLang passes 511; S:models/inkling_common/attn.py:408)",
        "state_layers": f"{s}: the short-conv state is kept for all 42 layers (Derived: x42)",
        "num_q_heads": f"{s}: 32 query heads",
        "num_kv_heads": f"{s}: 8 KV heads, the same for FULL and SWA",
        "head_dim": f"{s}: head_dim 128",
        "full_kv_bytes_per_token": f"{s} Derived: FULL=8x256x2 = 4,096 B x7 = 28,672 B",
        "swa_kv_bytes_per_token": f"{s} Derived: SWA=4,096x35 = 143,360 B",
        "conv_state_elements_per_layer": f"{s} Derived: 6 convs (4 x 1024 + 2 x 4096 channels) x 3 = "
                                         "36,864 elements (kernel 4; S:configs/inkling.py:217-256)",
        "ssm_state_elements_per_layer": f"{s}: short-conv state only, no SSM state (0)",
        "state_bytes": f"{s} Derived: 73,728 B x42 = 3,096,576 B (transformers keeps 4 convs/layer: "
                       "2,580,480 B minimum; SGLang's count is used)",
        "swa_full_tokens_ratio": _R + "swa_full_tokens_ratio is 0.1 for Inkling "
                                 "(S:arg_groups/model_overrides/inkling.py:42)",
        "total_params": f"{s}: Parameters 276B total (unsloth.ai/docs)",
        "active_params": f"{s}: Parameters 12B active (unsloth.ai/docs)",
        "weight_bytes": _BF16_WEIGHTS + ": 276B x 2 = 552 GB",
        "hidden_size": f"{s}: hidden 4096",
        "vocab_size": f"{s}: vocab 201,024 (padded)",
        "max_context_tokens": f"{s}: context 1,048,576",
    }
    return _model(s, src, name="Inkling-Small", family="inkling", attention="gqa", num_layers=42,
                  full_layers=7, swa_layers=35, swa_window_tokens=512, recurrent_kind="short-conv",
                  state_layers=42, num_q_heads=32, num_kv_heads=8, head_dim=128, kv_dtype="bf16",
                  kv_dtype_bytes=2, full_kv_bytes_per_token=28_672, swa_kv_bytes_per_token=143_360,
                  conv_state_elements_per_layer=3 * (4 * 1024 + 2 * 4096), state_bytes=3_096_576,
                  swa_full_tokens_ratio=0.1, total_params=276 * 10**9, active_params=12 * 10**9,
                  weight_dtype="bf16", weight_bytes=552 * GB, hidden_size=4096, vocab_size=201_024,
                  max_context_tokens=1_048_576)


def _gdn(s: str, *, name: str, layers: int, full: int, q: int, kv: int, k_heads: int,
         v_heads: int, full_bytes: int, state: int, total_b: int, active_b: int, hidden: int,
         vocab: int, src: dict) -> ModelPreset:
    """A Qwen 3:1 gated-delta-net (linear attention) : full-attention hybrid."""
    lin = layers - full
    conv = (v_heads * 128 + 2 * k_heads * 128) * 3
    src = dict(src)
    src.update({
        "num_layers": f"{s}: Layers, {layers} in total",
        "full_layers": f"{s}: {full} full attention layers (every 4th)",
        "recurrent_layers": f"{s}: {lin} GDN layers",
        "state_layers": f"{s}: every GDN layer keeps a recurrent state ({lin})",
        "num_q_heads": f"{s}: {q} query heads",
        "num_kv_heads": f"{s}: {kv} KV heads",
        "head_dim": f"{s}: head_dim 256",
        "full_kv_bytes_per_token": f"{s} Derived: FULL=2x512x2x{full} = {full_bytes:,} B",
        "conv_state_elements_per_layer": _R + "GDN conv = (V*d + 2*K*d) x 3 (S:configs/mamba_utils.py:"
                                         f"222-230); {s}: {k_heads} K and {v_heads} V heads x 128 -> {conv:,}",
        "ssm_state_elements_per_layer": _R + f"GDN SSM = (V, 128, 128) = {v_heads} x 128 x 128",
        "state_bytes": f"{s} Derived: GDN x{lin} = {state:,} B",
        "weight_bytes": _BF16_WEIGHTS + f": {total_b}B x 2",
        "hidden_size": f"{s}: hidden {hidden}",
        "vocab_size": f"{s}: vocab {vocab:,}",
        "max_context_tokens": f"{s}: context 262,144",
    })
    return _model(s, src, name=name, family="qwen-gdn-hybrid", attention="gqa", num_layers=layers,
                  full_layers=full, recurrent_layers=lin, recurrent_kind="gdn", state_layers=lin,
                  num_q_heads=q, num_kv_heads=kv, head_dim=256, kv_dtype="bf16", kv_dtype_bytes=2,
                  full_kv_bytes_per_token=full_bytes, conv_state_elements_per_layer=conv,
                  ssm_state_elements_per_layer=v_heads * 128 * 128, state_bytes=state,
                  total_params=total_b * 10**9, active_params=active_b * 10**9, weight_dtype="bf16",
                  weight_bytes=total_b * 2 * GB, hidden_size=hidden, vocab_size=vocab,
                  max_context_tokens=262_144)


def _qwen3_next() -> ModelPreset:
    s = "MODELS.md Qwen3-Next-80B-A3B"
    src = {"total_params": f"{s}: Parameters 80B total (huggingface.co/docs/transformers qwen3_next)",
           "active_params": f"{s}: Parameters 3B active"}
    return _gdn(s, name="Qwen3-Next-80B-A3B", layers=48, full=12, q=16, kv=2,
                k_heads=16, v_heads=32, full_bytes=24_576, state=77_266_944, total_b=80, active_b=3,
                hidden=2048, vocab=151_936, src=src)


def _qwen35() -> ModelPreset:
    s = "MODELS.md Qwen3.5-397B-A17B"
    src = {"total_params": f"{s}: Parameters 397B total (model name)",
           "active_params": f"{s}: Parameters 17B active (model name)"}
    return _gdn(s, name="Qwen3.5-397B-A17B", layers=60, full=15, q=32, kv=2,
                k_heads=16, v_heads=64, full_bytes=30_720, state=192_061_440, total_b=397,
                active_b=17, hidden=4096, vocab=248_320, src=src)


# gpt-oss-20b routed-expert parameters: 32 experts x 3 x 2880 x 2880 x 24 layers
_OSS_EXPERT_PARAMS = 32 * 3 * 2880 * 2880 * 24
_OSS_TOTAL = 21 * 10**9


def _gpt_oss_20b() -> ModelPreset:
    s = "MODELS.md gpt-oss-20b"
    src = {
        "num_layers": f"{s}: Layers, 24, alternating SWA and full (SWA first)",
        "full_layers": f"{s}: 12 full layers",
        "swa_layers": f"{s}: 12 SWA layers",
        "swa_window_tokens": f"{s}: W=128 (T:gpt_oss/configuration_gpt_oss.py:59, 84-86)",
        "num_q_heads": f"{s}: 64 query heads",
        "num_kv_heads": f"{s}: 8 KV heads",
        "head_dim": f"{s}: head_dim 64 (T:gpt_oss/configuration_gpt_oss.py:56-58)",
        "full_kv_bytes_per_token": f"{s} Derived: FULL=8x128x2x12 = 24,576 B",
        "swa_kv_bytes_per_token": f"{s} Derived: SWA=24,576 B",
        "swa_full_tokens_ratio": _RULES["swa_ratio_default"],
        "total_params": f"{s}: Parameters 21B total (docs.nvidia.com NeMo GPT-OSS page)",
        "active_params": f"{s}: Parameters 3.6B active",
        "weight_bytes": "assumption: MXFP4 routed experts (4.25 bits/param with scales, as OpenAI "
                        "released them) and bf16 for the rest: experts 32 x 3 x 2880 x 2880 x 24 = "
                        "19.11B params -> 10.15 GB, rest 1.89B x 2 B -> 3.78 GB",
        "hidden_size": f"{s}: hidden 2880",
        "vocab_size": f"{s}: vocab 201,088",
        "max_context_tokens": f"{s}: context 131,072",
    }
    weights = _OSS_EXPERT_PARAMS * 17 // 32 + (_OSS_TOTAL - _OSS_EXPERT_PARAMS) * 2
    return _model(s, src, name="gpt-oss-20b", family="gpt-oss", attention="gqa", num_layers=24,
                  full_layers=12, swa_layers=12, swa_window_tokens=128, num_q_heads=64,
                  num_kv_heads=8, head_dim=64, kv_dtype="bf16", kv_dtype_bytes=2,
                  full_kv_bytes_per_token=24_576, swa_kv_bytes_per_token=24_576,
                  swa_full_tokens_ratio=0.8, total_params=_OSS_TOTAL, active_params=3_600_000_000,
                  weight_dtype="mxfp4-experts+bf16", weight_bytes=weights, hidden_size=2880,
                  vocab_size=201_088, max_context_tokens=131_072)


def _dense(s: str, *, name: str, family: str, layers: int, q: int, kv: int, full_bytes: int,
           params: int, params_src: str, hidden: int, vocab: int, ctx: int, src: dict) -> ModelPreset:
    """A dense all-full-attention GQA model with head_dim 128 and bf16 weights and KV."""
    src = dict(src)
    src.update({
        "num_layers": f"{s}: {layers} layers, all full attention",
        "full_layers": f"{s}: all {layers} layers are full attention",
        "num_q_heads": f"{s}: {q} query heads",
        "num_kv_heads": f"{s}: {kv} KV heads",
        "head_dim": f"{s}: head_dim 128",
        "full_kv_bytes_per_token": f"{s} Derived: FULL=8x256x2x{layers} = {full_bytes:,} B",
        "total_params": f"{s}: {params_src}",
        "active_params": f"{s}: dense, all {params_src} active",
        "weight_bytes": _BF16_WEIGHTS + f": {params:,} x 2",
        "hidden_size": f"{s}: hidden {hidden}",
        "vocab_size": f"{s}: vocab {vocab:,}",
        "max_context_tokens": f"{s}: context {ctx:,}",
    })
    return _model(s, src, name=name, family=family, attention="gqa", num_layers=layers,
                  full_layers=layers, num_q_heads=q, num_kv_heads=kv, head_dim=128, kv_dtype="bf16",
                  kv_dtype_bytes=2, full_kv_bytes_per_token=full_bytes, total_params=params,
                  active_params=params, weight_dtype="bf16", weight_bytes=2 * params,
                  hidden_size=hidden, vocab_size=vocab, max_context_tokens=ctx)


def _qwen3_32b() -> ModelPreset:
    return _dense("MODELS.md Qwen3-32B", name="Qwen3-32B", family="qwen3", layers=64, q=64, kv=8,
                  full_bytes=262_144, params=32_800_000_000, params_src="about 32.8B (computed)",
                  hidden=5120, vocab=151_936, ctx=40_960, src={})


_LLAMA = "MODELS.md Llama-3.1-8B and Llama-3.1-70B"


def _llama_8b() -> ModelPreset:
    return _dense(_LLAMA, name="Llama-3.1-8B", family="llama-3.1", layers=32, q=32, kv=8,
                  full_bytes=131_072, params=8_030_000_000, params_src="8.03B (computed)",
                  hidden=4096, vocab=128_256, ctx=131_072, src={})


def _llama_70b() -> ModelPreset:
    return _dense(_LLAMA, name="Llama-3.1-70B", family="llama-3.1", layers=80, q=64, kv=8,
                  full_bytes=327_680, params=70_550_000_000, params_src="70.55B (computed)",
                  hidden=8192, vocab=128_256, ctx=131_072, src={})


_MS = "docs/sources/models.md"


def _qwen3_8b() -> ModelPreset:
    return _dense(f"{_MS} Qwen3-8B", name="Qwen3-8B", family="qwen3", layers=36, q=32, kv=8,
                  full_bytes=147_456, params=8_190_427_136,
                  params_src="8.19B computed: embedding + untied head 2 x 151,936 x 4,096, 36 x (attention "
                             "41,943,040 + MLP 3 x 4,096 x 12,288); norms excluded",
                  hidden=4096, vocab=151_936, ctx=40_960, src={})


# Qwen3-235B-A22B: 94 MoE layers of 128 experts (top-8) x 3 x 4096 x 1536, router 4096 x 128
_Q235_LAYER = 71_303_168 + 128 * 3 * 4096 * 1536 + 4096 * 128
_Q235_ACTIVE_LAYER = 71_303_168 + 8 * 3 * 4096 * 1536 + 4096 * 128
_Q235_EMBED = 2 * 151_936 * 4096  # embedding + untied LM head


def _qwen3_235b() -> ModelPreset:
    s = f"{_MS} Qwen3-235B-A22B"
    total, active = 94 * _Q235_LAYER + _Q235_EMBED, 94 * _Q235_ACTIVE_LAYER + _Q235_EMBED
    src = {
        "num_layers": f"{s}: 94 layers, all full attention (MoE MLPs)",
        "full_layers": f"{s}: all 94 layers are full attention",
        "num_q_heads": f"{s}: 64 query heads",
        "num_kv_heads": f"{s}: 4 KV heads (num_query_groups 4)",
        "head_dim": f"{s}: head_dim 128 (kv_channels)",
        "full_kv_bytes_per_token": f"{s}: 4 kv heads x 128 x 2 (K,V) x 2 B = 2,048 B/layer x 94 = 192,512 B",
        "total_params": f"{s}: 235.09B computed (attention 71,303,168 + 128 experts x 3 x 4,096 x 1,536 + "
                        "router per layer x 94, + embedding and untied head); 235B published",
        "active_params": f"{s}: 22.19B computed (8 of 128 experts); 22B published",
        "weight_bytes": _BF16_WEIGHTS + ": 235,092,836,352 x 2",
        "hidden_size": f"{s}: hidden 4096",
        "vocab_size": f"{s}: vocab 151,936",
        "max_context_tokens": f"{s}: ctx 40,960",
    }
    return _model(s, src, name="Qwen3-235B-A22B", family="qwen3-moe", attention="gqa", num_layers=94,
                  full_layers=94, num_q_heads=64, num_kv_heads=4, head_dim=128, kv_dtype="bf16",
                  kv_dtype_bytes=2, full_kv_bytes_per_token=192_512, total_params=total, active_params=active,
                  weight_dtype="bf16", weight_bytes=2 * total, hidden_size=4096, vocab_size=151_936,
                  max_context_tokens=40_960)


def _deepseek_v3() -> ModelPreset:
    s = f"{_MS} DeepSeek-V3"
    src = {
        "num_layers": f"{s}: 61 layers (3 dense + 58 MoE), all MLA (+1 MTP layer, not counted)",
        "full_layers": f"{s}: every layer is MLA full attention (61)",
        "num_q_heads": f"{s}: 128 heads",
        "num_kv_heads": "assumption: MLA caches one shared latent per token, counted as 1 KV head "
                        "(replicated, not split, across tensor-parallel ranks)",
        "head_dim": f"{s}: qk_nope_head_dim 128 + qk_rope_head_dim 64 = 192",
        "v_head_dim": f"{s}: v_head_dim 128",
        "kv_lora_rank": f"{s}: kv_lora_rank 512",
        "qk_rope_head_dim": f"{s}: qk_rope_head_dim 64",
        "full_kv_bytes_per_token": f"{s}: MLA (512+64) x 2 B = 1,152 B/layer x 61 = 70,272 B",
        "total_params": f"{s}: 671.03B computed; 671B published",
        "active_params": f"{s}: 37.55B computed (8 of 256 routed + 1 shared); 37B published",
        "weight_bytes": "assumption: fp8 weights as DeepSeek released them, 1 B/param x 671.03B; block "
                        "scales and the bf16 embeddings/norms ignored",
        "hidden_size": f"{s}: hidden 7168",
        "vocab_size": f"{s}: vocab 129,280",
        "max_context_tokens": f"{s}: ctx 163,840",
    }
    return _model(s, src, name="DeepSeek-V3", family="deepseek-v3", attention="mla", num_layers=61,
                  full_layers=61, num_q_heads=128, num_kv_heads=1, head_dim=192, v_head_dim=128,
                  kv_lora_rank=512, qk_rope_head_dim=64, kv_dtype="bf16", kv_dtype_bytes=2,
                  full_kv_bytes_per_token=70_272, total_params=671_030_000_000,
                  active_params=37_550_000_000, weight_dtype="fp8", weight_bytes=671_030_000_000,
                  hidden_size=7168, vocab_size=129_280, max_context_tokens=163_840)


def _glm45_air() -> ModelPreset:
    s = f"{_MS} GLM-4.5-Air"
    src = {
        "num_layers": f"{s}: 46 layers (1 dense + 45 MoE), all full attention (+1 MTP layer, not counted)",
        "full_layers": f"{s}: all 46 layers are full attention",
        "num_q_heads": f"{s}: 96 heads",
        "num_kv_heads": f"{s}: 8 KV heads",
        "head_dim": f"{s}: head_dim 128",
        "full_kv_bytes_per_token": f"{s}: 8 kv heads x 128 x 2 (K,V) x 2 B = 4,096 B/layer x 46 = 188,416 B",
        "total_params": f"{s}: 106.85B computed; 106B published",
        "active_params": f"{s}: 13.42B computed; 12B published",
        "weight_bytes": _BF16_WEIGHTS + ": 106.85B x 2",
        "hidden_size": f"{s}: hidden 4096",
        "vocab_size": f"{s}: vocab 151,552",
        "max_context_tokens": f"{s}: ctx 131,072",
    }
    return _model(s, src, name="GLM-4.5-Air", family="glm-4.5", attention="gqa", num_layers=46,
                  full_layers=46, num_q_heads=96, num_kv_heads=8, head_dim=128, kv_dtype="bf16",
                  kv_dtype_bytes=2, full_kv_bytes_per_token=188_416, total_params=106_850_000_000,
                  active_params=13_420_000_000, weight_dtype="bf16", weight_bytes=2 * 106_850_000_000,
                  hidden_size=4096, vocab_size=151_552, max_context_tokens=131_072)


# gpt-oss-120b routed-expert parameters: 128 experts x 3 x 2880 x 2880 x 36 layers
_OSS120_EXPERT_PARAMS = 128 * 3 * 2880 * 2880 * 36
_OSS120_TOTAL = 116_790_000_000


def _gpt_oss_120b() -> ModelPreset:
    s = f"{_MS} gpt-oss-120b"
    src = {
        "num_layers": f"{s}: 36 layers, alternating SWA and full (SWA first)",
        "full_layers": f"{s}: 18 full layers",
        "swa_layers": f"{s}: 18 SWA layers",
        "swa_window_tokens": f"{s}: sliding_window 128",
        "num_q_heads": f"{s}: 64 heads",
        "num_kv_heads": f"{s}: 8 KV heads",
        "head_dim": f"{s}: head_dim 64",
        "full_kv_bytes_per_token": f"{s}: 8 x 64 x 2 (K,V) x 2 B = 2,048 B/layer x 18 = 36,864 B",
        "swa_kv_bytes_per_token": f"{s}: SWA 2,048 x 18 = 36,864 B/token",
        "swa_full_tokens_ratio": _RULES["swa_ratio_default"],
        "total_params": f"{s}: 116.79B computed; 117B published",
        "active_params": f"{s}: 5.71B computed (with embeddings); 5.1B published",
        "weight_bytes": "assumption: MXFP4 routed experts (4.25 bits/param with scales) and bf16 for the "
                        "rest, as gpt-oss-20b: experts 128 x 3 x 2880 x 2880 x 36 = 114.66B params -> "
                        "60.91 GB, rest 2.13B x 2 B -> 4.26 GB",
        "hidden_size": f"{s}: hidden 2880",
        "vocab_size": f"{s}: vocab 201,088",
        "max_context_tokens": f"{s}: ctx 131,072",
    }
    weights = _OSS120_EXPERT_PARAMS * 17 // 32 + (_OSS120_TOTAL - _OSS120_EXPERT_PARAMS) * 2
    return _model(s, src, name="gpt-oss-120b", family="gpt-oss", attention="gqa", num_layers=36,
                  full_layers=18, swa_layers=18, swa_window_tokens=128, num_q_heads=64, num_kv_heads=8,
                  head_dim=64, kv_dtype="bf16", kv_dtype_bytes=2, full_kv_bytes_per_token=36_864,
                  swa_kv_bytes_per_token=36_864, swa_full_tokens_ratio=0.8, total_params=_OSS120_TOTAL,
                  active_params=5_710_000_000, weight_dtype="mxfp4-experts+bf16", weight_bytes=weights,
                  hidden_size=2880, vocab_size=201_088, max_context_tokens=131_072)


MODELS: dict[str, ModelPreset] = {
    "dsv4-flash": _dsv4_flash(),
    "dsv4-pro": _dsv4_pro(),
    "kimi-k3": _kimi_k3(),
    "inkling-small": _inkling_small(),
    "qwen3-32b": _qwen3_32b(),
    "gpt-oss-20b": _gpt_oss_20b(),
    "qwen3-next-80b": _qwen3_next(),
    "qwen3.5-397b": _qwen35(),
    "llama-3.1-8b": _llama_8b(),
    "llama-3.1-70b": _llama_70b(),
    "qwen3-8b": _qwen3_8b(),
    "qwen3-235b-a22b": _qwen3_235b(),
    "deepseek-v3": _deepseek_v3(),
    "glm-4.5-air": _glm45_air(),
    "gpt-oss-120b": _gpt_oss_120b(),
}


def _lookup(table: dict, name, what: str):
    if isinstance(name, str):
        if name in table:
            return table[name]
        low = name.strip().lower()
        for key, preset in table.items():
            if low in (key.lower(), preset.name.lower()):
                return preset
    raise ValueError(f"unknown {what} preset {name!r}; known: {', '.join(table)}")


def get_model(name: str) -> ModelPreset:
    """The model preset `name` (a registry key, or a preset's name in any case)."""
    return _lookup(MODELS, name, "model")


# ------------------------------------------------------------------------------------------
# Hardware presets
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class HardwarePreset:
    """One serving node with `num_gpus` GPUs in use. Per-GPU fields say so; the host DRAM,
    NICs and L3 link belong to the node. Bandwidths are per direction unless noted;
    FLOP/s are dense (no sparsity). Calibration overrides any of them.

    The host link's rate in use, ``pcie_bytes_per_s``, is that of SGLang's io backend
    ``pcie_io_backend`` (``--hicache-io-backend``: ``kernel``, SM copy kernels, or ``direct``,
    copy-engine ``cudaMemcpyAsync``); the L3 link's, ``l3_bytes_per_s``, that of the transfer
    protocol ``l3_protocol`` (Mooncake's ``rdma`` or ``tcp``). Both names are also scenario keys:
    they set the selected backend's (protocol's) field."""

    name: str
    gpu_name: str
    num_gpus: int
    hbm_bytes_per_gpu: int
    hbm_bytes_per_s: float
    bf16_flops: float
    fp8_flops: float
    bf16_matmul_measured_flops: float
    d2d_copy_bytes_per_s: float
    nvlink_bytes_per_s: float
    pcie_kernel_bytes_per_s: float
    pcie_direct_bytes_per_s: float
    pcie_io_backend: str = "kernel"
    pcie_peak_bytes_per_s: float
    pcie_latency_s: float
    host_dram_bytes: int
    host_dram_bytes_per_s: float
    nic_bytes_per_s: float
    l3_rdma_bytes_per_s: float
    l3_tcp_bytes_per_s: float
    l3_protocol: str = "rdma"
    l3_latency_s: float
    l3_block_overhead_s: float
    ssd_bytes_per_s: float
    ssd_latency_s: float
    host_cpu_speed: float = 1.0  # the scheduler CPU's single-thread speed / sim/opdata/tree_cpu.json's machine's
    operator_fit: str | None = None  # the GEMM fit of sim/opdata/vidur_fit.json the operator cost model uses
    sources: dict = field(default_factory=dict, compare=False)

    RATES_IN_USE = ("pcie_bytes_per_s", "l3_bytes_per_s")  # properties, also scenario keys

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name and isinstance(self.gpu_name, str) and self.gpu_name):
            raise ValueError("hardware name and gpu_name must be non-empty strings")
        _nonneg_int(self.name, "num_gpus", self.num_gpus, 1)
        _nonneg_int(self.name, "hbm_bytes_per_gpu", self.hbm_bytes_per_gpu, 1)
        _nonneg_int(self.name, "host_dram_bytes", self.host_dram_bytes, 1)
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type == "float" and not (_is_number(v) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{self.name}: {f.name} must be a finite number > 0, got {v!r}")
        for key, choices in CHOICES.items():
            if getattr(self, key) not in choices:
                raise ValueError(f"{self.name}: {key} must be one of {', '.join(choices)}, got {getattr(self, key)!r}")
        if max(self.pcie_kernel_bytes_per_s, self.pcie_direct_bytes_per_s) > self.pcie_peak_bytes_per_s:
            raise ValueError(f"{self.name}: realistic PCIe bandwidth exceeds the peak")
        if self.operator_fit is not None and not (isinstance(self.operator_fit, str) and self.operator_fit):
            raise ValueError(f"{self.name}: operator_fit must be a fit's name or None, got {self.operator_fit!r}")
        _check_sources(self, [] if self.operator_fit is None else ["operator_fit"])

    @property
    def pcie_bytes_per_s(self) -> float:
        """One GPU's host link rate with the io backend in use (per direction)."""
        return getattr(self, rate_field("pcie_bytes_per_s", self.pcie_io_backend))

    @property
    def l3_bytes_per_s(self) -> float:
        """The node's L3 link rate with the transfer protocol in use."""
        return getattr(self, rate_field("l3_bytes_per_s", self.l3_protocol))

    @property
    def hbm_bytes(self) -> int:
        """HBM of all GPUs in use."""
        return self.hbm_bytes_per_gpu * self.num_gpus


SSD_BYTES_PER_S = 27e9  # an SSD tier below a Mooncake pool (cache.l3_ssd_tokens): _LINK_SOURCES
SSD_LATENCY_S = 100e-6
CHOICES = {"pcie_io_backend": ("kernel", "direct"), "l3_protocol": ("rdma", "tcp")}
_SELECTOR = {"pcie_bytes_per_s": "pcie_io_backend", "l3_bytes_per_s": "l3_protocol"}


def rate_field(rate: str, choice: str) -> str:
    """The field behind a rate in use: ("pcie_bytes_per_s", "kernel") -> "pcie_kernel_bytes_per_s"."""
    head, tail = rate.split("_", 1)
    return f"{head}_{choice}_{tail}"


_HW = "HARDWARE.md"
_HS = "docs/sources/hardware.md"
_MC = "docs/sources/hardware.md 'Store links'"
_HOPPER_SM_COPY = (f"{_HS} Host <-> device copy rates: SM-driven copy kernel (SGLang's default "
                   "--hicache-io-backend kernel), pinned, H100: 35.2 GB/s H2D (NVIDIA/nvbandwidth #24)")
_NO_DIRECT = (f"{_HS} SGLang HiCache io backends: no published GB/s for --hicache-io-backend direct (per-page "
              "cudaMemcpyAsync) on an NVIDIA PCIe node (PR #21631: it 'lags behind' kernel, no figure); "
              "assumption: the measured pinned copy rate, as the kernel's (the copy engine's 55.6 GB/s is a large "
              "contiguous buffer's, not reached page by page)")
_LINK_SOURCES = {
    "pcie_io_backend": "assumption: SGLang's default --hicache-io-backend kernel (server_args.py); "
                       "--hicache-mem-layout page_first_direct switches it to direct",
    "l3_protocol": "assumption: RDMA, as Mooncake Store is deployed on RDMA NICs in the sources",
    "ssd_bytes_per_s": f"{_MC}: Mooncake's SSD offload benchmark node, 5 NVMe in RAID0, ~27 GB/s aggregate "
                       "theoretical sequential read (ssd-offload-benchmark-results.md); assumption: this node's",
    "ssd_latency_s": "assumption: 100 us per batch read (one NVMe read through io_uring plus the client's "
                     "RPC); no published figure",
}
_H200_SOURCES = {
    "num_gpus": "assumption: an HGX H200 node (8 GPUs, HARDWARE.md 'NVSwitch all-to-all in HGX "
                "8-GPU') with this many GPUs in use; node-level fields (DRAM, NICs, L3) stay whole",
    "hbm_bytes_per_gpu": "assumption: HARDWARE.md 'HBM per GPU 141 GB HBM3e' is NVIDIA's binary-ish "
                         "GB: an H200 exposes about 140.4 GiB (143,771 MiB as nvidia-smi commonly "
                         "reports; not measured in this project), less the CUDA context, so 140 GiB "
                         "(150.3e9 B); 141e9 B would undercount by ~6%. Calibrate with "
                         "torch.cuda.mem_get_info",
    "hbm_bytes_per_s": f"{_HW} HBM bandwidth: 4.8 TB/s per GPU, peak (paged-KV reads are far below it)",
    "bf16_flops": f"{_HW} dense compute: bf16 ~989 TFLOP/s (NVIDIA spec)",
    "fp8_flops": f"{_HW} dense compute: fp8 ~1,979 TFLOP/s (NVIDIA spec)",
    "bf16_matmul_measured_flops": f"{_HW} dense compute: ~790 TFLOP/s measured on an 8192^3 bf16 "
                                  "matmul on a lent H200",
    "d2d_copy_bytes_per_s": f"{_HW} device copy: ~4.3 TB/s device-to-device with read + write "
                            "counted, i.e. 2.15e12 bytes copied per second",
    "nvlink_bytes_per_s": f"{_HW} NVLink: 900 GB/s bidirectional per GPU, 450 GB/s each way",
    "pcie_kernel_bytes_per_s": _HOPPER_SM_COPY + "; HARDWARE.md PCIe host link: 'SM-driven copies on H100 "
                               "measured 35.2 GB/s H2D' (same Gen5 x16 link as the H200)",
    "pcie_direct_bytes_per_s": _NO_DIRECT,
    "pcie_peak_bytes_per_s": f"{_HW} PCIe host link: Gen5 x16, 64 GB/s per direction theoretical",
    "pcie_latency_s": "assumption: 10 us per transfer (one kernel launch or cudaMemcpyAsync plus DMA "
                      "setup); HARDWARE.md only says to charge a per-transfer overhead",
    "host_dram_bytes": f"{_HW} host: 2 TB DDR5 (32x64 GB) per node; assumption: DIMM GB are GiB, "
                       "so 32 x 64 GiB = 2 TiB",
    "host_dram_bytes_per_s": f"{_HW} host: DDR5 theoretical 614 GB/s per node (Mooncake's RDMA "
                             "saturates ~205-214 GB/s, DRAM-bound)",
    "nic_bytes_per_s": f"{_HW} NICs: typically 8x ConnectX-7 400 Gb/s per HGX H200 node (~400 GB/s)",
    "l3_rdma_bytes_per_s": f"{_HW} Mooncake transfer engine: 190 GB/s on 8x400 Gbps (FAST'25 5.4.1), "
                           "the NIC setup of an HGX H200 node; modelling hint 'L2<->L3 ~140-190 GB/s per node'",
    "l3_tcp_bytes_per_s": f"{_MC}: Mooncake README, 190 GB/s on 8x400 Gbps RoCE 'about 4.6x faster than the TCP "
                          "protocol': 190 / 4.6 = 41.3 GB/s",
    "l3_latency_s": "assumption: 100 us per Mooncake Store transfer (a metadata RPC to the master "
                    "plus RDMA setup; HARDWARE.md gives no number); calibrate",
    "l3_block_overhead_s": f"{_HW} Mooncake: 64 KB blocks -> 97 GB/s, 1 MB blocks -> 353 GB/s; "
                           "fitting t = c + size/B to both gives c ~0.52 us per block (B ~428 GB/s)",
    **_LINK_SOURCES,
    "host_cpu_speed": f"assumption: 1.0. {_HS} dgx-h200: 2x Xeon Platinum 8480C (Sapphire Rapids); the "
                      "calibration machine of sim/opdata/tree_cpu.json reports an unnamed 'Intel(R) Xeon(R) "
                      "Processor', CPU family 6 model 207 (Emerald Rapids, the next generation of the same core "
                      "design); no published single-thread score relates the two, so none is applied",
    "operator_fit": "assumption: the h100 fit (sim/opdata/vidur_fit.json); Vidur profiled A100 and H100, not "
                    "H200: Hopper-class kernels, timed at the H200's own peaks",
}


def _h200(num_gpus: int) -> HardwarePreset:
    return HardwarePreset(
        name=f"h200x{num_gpus}", gpu_name="NVIDIA H200 SXM 141GB", num_gpus=num_gpus,
        hbm_bytes_per_gpu=140 * GiB, hbm_bytes_per_s=4.8e12, bf16_flops=989e12, fp8_flops=1979e12,
        bf16_matmul_measured_flops=790e12, d2d_copy_bytes_per_s=4.3e12 / 2,
        nvlink_bytes_per_s=450e9, pcie_kernel_bytes_per_s=35.2e9, pcie_direct_bytes_per_s=35.2e9,
        pcie_peak_bytes_per_s=64e9, pcie_latency_s=10e-6, host_dram_bytes=32 * 64 * GiB,
        host_dram_bytes_per_s=614e9, nic_bytes_per_s=400e9, l3_rdma_bytes_per_s=190e9,
        l3_tcp_bytes_per_s=190e9 / 4.6, l3_latency_s=100e-6, l3_block_overhead_s=0.52e-6,
        ssd_bytes_per_s=SSD_BYTES_PER_S, ssd_latency_s=SSD_LATENCY_S, operator_fit="h100",
        sources=dict(_H200_SOURCES))


HARDWARE: dict[str, HardwarePreset] = {f"h200x{n}": _h200(n) for n in (1, 2, 4, 8)}

# --- A100, H100, H800, B200 (docs/sources/hardware.md; the same node slicing as the H200) ----
_DERIVED_FROM_H200 = {
    "bf16_matmul_measured_flops": "assumption: not measured on this GPU; its dense bf16 peak x the H200's "
                                  "measured/peak ratio 790/989 (HARDWARE.md dense compute)",
    "d2d_copy_bytes_per_s": "assumption: not measured on this GPU; half its HBM bandwidth x the H200's "
                            "measured/peak copy ratio 4.3/4.8 (HARDWARE.md device copy)",
    "pcie_latency_s": _H200_SOURCES["pcie_latency_s"],
    "l3_latency_s": _H200_SOURCES["l3_latency_s"],
    "l3_block_overhead_s": _H200_SOURCES["l3_block_overhead_s"],
    "l3_rdma_bytes_per_s": "assumption: Mooncake's 190 GB/s on 8x 400 Gb/s NICs (HARDWARE.md, FAST'25 5.4.1; "
                           "47.5% of line rate) scaled to this node's NICs",
    "l3_tcp_bytes_per_s": _H200_SOURCES["l3_tcp_bytes_per_s"],
    **_LINK_SOURCES,
    "host_cpu_speed": "assumption: 1.0; no published single-thread score relates this node's host CPU "
                      "(docs/sources/hardware.md 'Node shapes') to the calibration machine of sim/opdata/tree_cpu.json",
    "num_gpus": "assumption: a slice of the 8-GPU node (docs/sources/hardware.md 'Node shapes': 1/2/4-GPU "
                "shapes are slices) with this many GPUs in use; node-level fields (DRAM, NICs, L3) stay whole",
}
_A100_NO_CE = (f"{_HS} SGLang HiCache io backends: no published GB/s for --hicache-io-backend direct (nor an A100 "
               "copy-engine H2D figure); assumption: the measured pinned copy rate, pcie_h2d_sm_measured 25.13 GB/s "
               "(nvbandwidth #42), as the kernel's")
_A100 = {
    "operator_fit": ("a100", "sim/opdata/vidur_fit.json: the a100 fit, Vidur's A100 profiles (an A100-40GB uses the "
                             "A100-80GB efficiencies at its own bandwidth, sim/operators.py)"),
    "bf16_flops": (312e12, f"{_HS} A100: bf16_dense_flops 312 T"),
    "fp8_flops": (312e12, "assumption: A100 has no FP8 tensor cores (docs/sources/hardware.md); fp8 "
                          "weights would run as bf16 matmuls, so the bf16 rate"),
    "nvlink_bytes_per_s": (300e9, f"{_HS} A100: NVLink 3, 600 GB/s bidirectional, 300 each way"),
    "pcie_kernel_bytes_per_s": (25.13e9, f"{_HS} A100-SXM4-40GB: pcie_h2d_sm_measured 25.13 GB/s (SM copy "
                                         "kernel, SGLang's default --hicache-io-backend kernel; nvbandwidth #42)"),
    "pcie_direct_bytes_per_s": (25.13e9, _A100_NO_CE),
    "pcie_peak_bytes_per_s": (32e9, f"{_HS} A100: PCIe Gen4 x16, 32 GB/s per direction theoretical"),
    "host_dram_bytes": (2**40, f"{_HS} Node shapes dgx-a100 / hgx-a100-80gb: 1 TB host DRAM; assumption: "
                               "DIMM GB are GiB (1 TiB)"),
    "host_dram_bytes_per_s": (409.6e9, "assumption: not in the sources; 2x AMD EPYC (docs/sources/hardware.md "
                                       "dgx-a100) x 8 DDR4-3200 channels x 25.6 GB/s"),
    "nic_bytes_per_s": (200e9, f"{_HS} Node shapes dgx-a100: 8x ConnectX-6 200 Gb/s HDR InfiniBand = 200 GB/s"),
    "l3_rdma_bytes_per_s": (95e9, None),
    "l3_tcp_bytes_per_s": (87e9 / 2.4, f"{_MC}: Mooncake README, 87 GB/s on 4x200 Gbps RoCE 'about 2.4x faster "
                                       "than the TCP protocol': 36.25 GB/s; assumption: TCP is host-bound, so the "
                                       "nearest measured NIC setup (4x200 Gb/s) stands for 8x200 Gb/s"),
}
_HOPPER_NODE = {
    "operator_fit": ("h100", "sim/opdata/vidur_fit.json: the h100 fit, Vidur's H100 profiles (H800: the same die)"),
    "host_dram_bytes": (2 * 2**40, f"{_HS} Node shapes dgx-h100 / hgx-h100: 2 TB DDR5; assumption: DIMM GB "
                                   "are GiB (2 TiB), as the H200 preset"),
    "host_dram_bytes_per_s": (614e9, "assumption: not in the sources; the H200 node's DDR5 figure (HARDWARE.md "
                                     "614 GB/s), same 2x Xeon 8480C platform (docs/sources/hardware.md)"),
    "nic_bytes_per_s": (400e9, f"{_HS} Node shapes dgx-h100: 8x single-port ConnectX-7 400 Gb/s = 400 GB/s"),
    "l3_rdma_bytes_per_s": (190e9, None),
    "l3_tcp_bytes_per_s": (190e9 / 4.6, None),
    "pcie_kernel_bytes_per_s": (35.2e9, _HOPPER_SM_COPY),
    "pcie_direct_bytes_per_s": (35.2e9, _NO_DIRECT),
    "pcie_peak_bytes_per_s": (64e9, f"{_HS} H100: PCIe Gen5 x16, 64 GB/s per direction theoretical"),
    "bf16_flops": (989.4e12, f"{_HS} H100: bf16_dense_flops 989.4 T"),
    "fp8_flops": (1978.9e12, f"{_HS} H100: fp8_dense_flops 1978.9 T"),
}
_GPUS = {
    "a100-40gb": dict(_A100, gpu_name=("NVIDIA A100-SXM4-40GB", None), hbm_bytes_per_gpu=(
        40 * GiB, f"{_HS} A100-SXM4-40GB: hbm_bytes 40 G; assumption: NVIDIA's GB are GiB here (the "
                  "board exposes 40,960 MiB), CUDA context ignored"),
        hbm_bytes_per_s=(1.555e12, f"{_HS} A100-SXM4-40GB: hbm_bandwidth 1.555 TB/s")),
    "a100-80gb": dict(_A100, gpu_name=("NVIDIA A100-SXM4-80GB", None), hbm_bytes_per_gpu=(
        80 * GiB, f"{_HS} A100-SXM4-80GB: hbm_bytes 80 G; assumption: NVIDIA's GB are GiB here (81,920 "
                  "MiB), CUDA context ignored"),
        hbm_bytes_per_s=(2.039e12, f"{_HS} A100-SXM4-80GB: hbm_bandwidth 2.039 TB/s"),
        pcie_kernel_bytes_per_s=(25.13e9, f"{_HS} A100-SXM4-80GB: pcie_h2d_sm_measured 25.13 GB/s (as the 40GB, "
                                          "same Gen4 link; SGLang's default kernel io backend)")),
    "h100": dict(_HOPPER_NODE, gpu_name=("NVIDIA H100 SXM 80GB", None), hbm_bytes_per_gpu=(
        81_559 * 2**20, f"{_HS} H100-SXM: hbm_bytes 80 G; assumption: as nvidia-smi commonly reports "
                        "81,559 MiB for an H100 80GB (not measured in this project), CUDA context ignored"),
        hbm_bytes_per_s=(3.35e12, f"{_HS} H100-SXM: hbm_bandwidth 3.35 TB/s"),
        nvlink_bytes_per_s=(450e9, f"{_HS} H100-SXM: NVLink 4, 900 GB/s bidirectional, 450 each way")),
    "h800": dict(_HOPPER_NODE, gpu_name=("NVIDIA H800 SXM 80GB", None), hbm_bytes_per_gpu=(
        81_559 * 2**20, f"{_HS} H800: hbm_bytes 80 G (as H100); assumption: 81,559 MiB exposed, as the H100"),
        hbm_bytes_per_s=(3.35e12, f"{_HS} H800: hbm_bandwidth 3.35 TB/s"),
        bf16_flops=(989.4e12, f"{_HS} H800: bf16_dense_flops 989.4 T (same die as H100)"),
        fp8_flops=(1978.9e12, f"{_HS} H800: fp8_dense_flops 1978.9 T"),
        nvlink_bytes_per_s=(200e9, f"{_HS} H800: nvlink_bw_per_gpu 400 GB/s bidirectional (SXM; conflict "
                                   "noted there), 200 each way"),
        pcie_kernel_bytes_per_s=(35.2e9, f"{_HS} H800: pcie_h2d_sm_measured 35.2 GB/s (nvbandwidth #24 comment: "
                                         "similar to H100; SGLang's default kernel io backend)"),
        pcie_direct_bytes_per_s=(35.2e9, _NO_DIRECT),
        host_dram_bytes=(2 * 2**40, "assumption: hgx-h800 host DRAM is NOT SOURCED (docs/sources/hardware.md); "
                                    "2 TiB as the HGX H100 platform"),
        nic_bytes_per_s=(400e9, "assumption: docs/sources/hardware.md hgx-h800 has 8x mlx5 RDMA NICs, speed not "
                                "stated; 400 Gb/s each (ConnectX-7, HARDWARE.md's H800 RoCE setup) = 400 GB/s")),
    "b200": dict(_HOPPER_NODE, gpu_name=("NVIDIA B200 SXM 180GB", None), hbm_bytes_per_gpu=(
        179 * GB, f"{_HS} B200: hbm_bytes 180 G (1,440 GB / 8); docs.vultr.com shows 179 GB visible, used"),
        hbm_bytes_per_s=(8e12, f"{_HS} B200: hbm_bandwidth 8 TB/s"),
        bf16_flops=(2250e12, f"{_HS} B200: bf16_dense_flops 2250 T (HGX, 1000 W); sim/operators.py times B200 "
                    "kernels on the H100-fitted efficiency curves at this peak (an assumption: no B200 GEMM profile "
                    "is fitted; docs/sources/hardware.md, Conflicts and gaps)"),
        fp8_flops=(4500e12, f"{_HS} B200: fp8_dense_flops 4500 T"),
        nvlink_bytes_per_s=(900e9, f"{_HS} B200: NVLink 5, 1.8 TB/s bidirectional, 900 each way"),
        operator_fit=("h100", "assumption: no B200 GEMM profile is fitted (sim/opdata/vidur_fit.json): the H100 "
                              "curves at B200's peaks (docs/sources/hardware.md, Conflicts and gaps)"),
        pcie_kernel_bytes_per_s=(35.2e9, "assumption: B200 measured H2D is NOT SOURCED (docs/sources/hardware.md); "
                                         "the Hopper SM-kernel figure 35.2 GB/s on the same Gen5 x16 host link"),
        pcie_direct_bytes_per_s=(35.2e9, "assumption: B200 measured H2D is NOT SOURCED (docs/sources/hardware.md) "
                                         "and no GB/s of the direct io backend is published: the kernel's 35.2 GB/s"),
        pcie_peak_bytes_per_s=(64e9, f"{_HS} B200: host link PCIe Gen5 x16 as built, 64 GB/s per direction"),
        host_dram_bytes_per_s=(716.8e9, "assumption: not in the sources; 2x Xeon 8570 (docs/sources/hardware.md "
                                        "dgx-b200) x 8 DDR5-5600 channels x 44.8 GB/s"),
        host_dram_bytes=(2 * 2**40, f"{_HS} Node shapes dgx-b200: 2 TB DIMM; assumption: GiB (2 TiB)"),
        nic_bytes_per_s=(400e9, f"{_HS} Node shapes dgx-b200: 8x ConnectX-7 400 Gb/s = 400 GB/s")),
    "h20": dict(_HOPPER_NODE, gpu_name=("NVIDIA H20 SXM 96GB", None), hbm_bytes_per_gpu=(
        97_871 * 2**20, f"{_HS} H20: hbm_bytes 97,871 MiB exposed (nvidia-smi in the SGLang EIC snapshot)"),
        hbm_bytes_per_s=(4.0e12, f"{_HS} H20: hbm_bandwidth 4.0 TB/s"),
        bf16_flops=(148e12, f"{_HS} H20: fp16_bf16_dense_flops 148 T"),
        fp8_flops=(296e12, f"{_HS} H20: fp8_dense_flops 296 T (assumption: the INT8 rate)"),
        nvlink_bytes_per_s=(450e9, f"{_HS} H20: NVLink 4, 900 GB/s bidirectional, 450 each way"),
        operator_fit=("h100", f"assumption: no H20 GEMM profile is fitted (sim/opdata/vidur_fit.json): the H100 "
                              f"curves at the H20's peaks ({_HS} H20: a cut-down GH100, 78 SMs vs 132)"),
        pcie_kernel_bytes_per_s=(35.2e9, f"{_HS} H20: pcie_h2d_sm_measured 35.2 GB/s (nvbandwidth #24 comment: "
                                         "similar to H100; SGLang's default kernel io backend)"),
        pcie_direct_bytes_per_s=(35.2e9, _NO_DIRECT),
        pcie_peak_bytes_per_s=(64e9, f"{_HS} H20: pcie_gen 5 (assumption, the HGX Hopper board), 64 GB/s per "
                                     "direction theoretical"),
        host_dram_bytes=(2 * 2**40, "assumption: the H20 node's host DRAM is NOT SOURCED; 2 TiB as the HGX H100 "
                                    "platform (docs/sources/hardware.md Node shapes)"),
        nic_bytes_per_s=(400e9, "assumption: the H20 node's NICs are NOT SOURCED; 8x 400 Gb/s as the HGX H100 "
                                "platform (docs/sources/hardware.md Node shapes) = 400 GB/s")),
}


def _gpu_node(key: str, num_gpus: int) -> HardwarePreset:
    """`key`'s GPU (a `_GPUS` table: value and source per field) as a node slice of `num_gpus`."""
    table = _GPUS[key]
    values = {k: v for k, (v, _) in table.items()}
    sources = dict(_DERIVED_FROM_H200)
    sources.update({k: s for k, (_, s) in table.items() if s is not None})
    values.update(bf16_matmul_measured_flops=values["bf16_flops"] * 790 / 989,
                  d2d_copy_bytes_per_s=values["hbm_bytes_per_s"] * 4.3 / 4.8 / 2,
                  pcie_latency_s=10e-6, l3_latency_s=100e-6, l3_block_overhead_s=0.52e-6,
                  ssd_bytes_per_s=SSD_BYTES_PER_S, ssd_latency_s=SSD_LATENCY_S)
    return HardwarePreset(name=f"{key}x{num_gpus}", num_gpus=num_gpus, sources=sources, **values)


HARDWARE.update({f"{key}x{n}": _gpu_node(key, n) for key in _GPUS for n in (1, 2, 4, 8)})


def get_hardware(name: str) -> HardwarePreset:
    """The hardware preset `name`: a GPU and a node slice, "h200x1" .. "h200x8", "a100-40gbx1",
    "a100-80gbx4", "h100x8", "h800x8", "b200x2", "h20x8", ... (`HARDWARE` lists them)."""
    return _lookup(HARDWARE, name, "hardware")


# ------------------------------------------------------------------------------------------
# Scenario overrides: ``model: {base: ..., weight_dtype: ..., kv_dtype: ...}`` and
# ``hardware: {base: ..., <any field>: ...}`` (the plain string form names the preset alone)
# ------------------------------------------------------------------------------------------

# bytes per parameter of `model.weight_dtype` (every parameter; quantisation scales ignored, as
# the bf16 presets ignore them) and per KV element of `model.kv_dtype`
WEIGHT_DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
KV_DTYPE_BYTES = {"bf16": 2, "fp8": 1}
MODEL_OVERRIDES = ("weight_dtype", "kv_dtype", "kernel_factor")
HARDWARE_FIELDS = tuple(f.name for f in dataclasses.fields(HardwarePreset) if f.name not in ("name", "sources"))
HARDWARE_OVERRIDES = HARDWARE_FIELDS + HardwarePreset.RATES_IN_USE


def override_keys(what: str) -> tuple:
    """The keys a scenario's `what` ("model" or "hardware") mapping may hold, "base" first."""
    return ("base",) + (MODEL_OVERRIDES if what == "model" else HARDWARE_OVERRIDES)


def _split_spec(spec, what: str) -> tuple[str, dict]:
    """(preset name, {field: value}) of a plain name or a ``{base: name, field: value}`` mapping."""
    if isinstance(spec, str):
        return spec, {}
    fields = {k: v for k, v in spec.items() if k != "base"}
    unknown = sorted(set(fields) - set(override_keys(what)))
    if unknown:
        raise ValueError(f"{what}.{unknown[0]}: unknown field; expected one of {', '.join(override_keys(what))}")
    if not isinstance(spec.get("base"), str):
        raise ValueError(f"{what}.base: got {spec.get('base')!r}; expected a {what} preset name")
    return spec["base"], fields


def _overridden_source(what: str, key: str, note: str = "") -> str:
    return f"assumption: set by the scenario ({what}.{key}){note}"


def resolve_model(spec) -> tuple[ModelPreset, list]:
    """The model preset a scenario's ``model`` names, with its overrides applied, and the
    overridden keys. ``weight_dtype`` (bf16/fp8/fp4) sets ``weight_bytes`` = total_params x 2/1/0.5
    B; ``kv_dtype`` (bf16/fp8; GQA and MLA rows) sets ``kv_dtype_bytes`` 2/1 and recomputes the
    FULL and SWA KV bytes per token from the row (sidecars and MAMBA state keep their dtypes);
    ``kernel_factor`` (a number > 0) multiplies the model's kernel times (sim/operators.py)."""
    name, fields = _split_spec(spec, "model")
    m = get_model(name)
    src, kw = dict(m.sources), {}
    if "kernel_factor" in fields:
        v = _number_text(fields["kernel_factor"])
        if not (_is_number(v) and 0 < v < math.inf):
            raise ValueError(f"model.kernel_factor: got {fields['kernel_factor']!r}; expected a number > 0")
        kw["kernel_factor"] = float(v)
        src["kernel_factor"] = _overridden_source("model", "kernel_factor")
    if "weight_dtype" in fields:
        dt = _dtype(fields["weight_dtype"], WEIGHT_DTYPE_BYTES, "model.weight_dtype")
        kw.update(weight_dtype=dt, weight_bytes=int(m.total_params * WEIGHT_DTYPE_BYTES[dt]))
        src["weight_bytes"] = _overridden_source("model", "weight_dtype", f": {dt}, {WEIGHT_DTYPE_BYTES[dt]:g} "
                                                 "B/param x total_params, scales ignored")
    if "kv_dtype" in fields:
        dt = _dtype(fields["kv_dtype"], KV_DTYPE_BYTES, "model.kv_dtype")
        if m.attention == "dsv4":
            raise ValueError(f"model.kv_dtype: {m.name}'s KV rows have a fixed mixed layout (fp8 + bf16 rope + "
                             "scales); expected no kv_dtype for it")
        row = m.kv_row_bytes // m.kv_dtype_bytes * KV_DTYPE_BYTES[dt]  # GQA and MLA rows scale with the dtype
        kw.update(kv_dtype=dt, kv_dtype_bytes=KV_DTYPE_BYTES[dt], full_kv_bytes_per_token=row * m.full_layers,
                  swa_kv_bytes_per_token=row * m.swa_layers)
        for key in ("kv_dtype_bytes", "full_kv_bytes_per_token", "swa_kv_bytes_per_token"):
            src[key] = _overridden_source("model", "kv_dtype", f": {dt}, {KV_DTYPE_BYTES[dt]} B per KV element")
    if not kw:
        return m, []
    return dataclasses.replace(m, sources=src, **kw), sorted(fields)


def _dtype(value, table: dict, key: str) -> str:
    if value not in table:
        raise ValueError(f"{key}: got {value!r}; expected one of {', '.join(table)}")
    return value


def resolve_hardware(spec) -> tuple[HardwarePreset, list]:
    """The hardware preset a scenario's ``hardware`` names, with any of its fields (except the
    name) overridden, and the overridden keys. Integer fields take integral numbers; every
    value is checked as the preset's own (``HardwarePreset.__post_init__``)."""
    name, fields = _split_spec(spec, "hardware")
    hw = get_hardware(name)
    if not fields:
        return hw, []
    kinds = {f.name: f.type for f in dataclasses.fields(HardwarePreset)}
    kinds.update(dict.fromkeys(HardwarePreset.RATES_IN_USE, "float"))
    kw = {}
    for key, v in fields.items():
        v = _number_text(v) if not kinds[key].startswith("str") else v
        if key in CHOICES:
            ok, expected = v in CHOICES[key], "one of " + ", ".join(CHOICES[key])
        elif kinds[key].startswith("str"):
            ok, expected = isinstance(v, str) and v, "a name"
        elif kinds[key] == "int":
            ok, expected = _is_number(v) and float(v).is_integer() and v >= 1, "an integer >= 1"
            v = int(v) if ok else v
        else:
            ok, expected = _is_number(v) and v > 0 and math.isfinite(v), "a finite number > 0"
        if not ok:
            raise ValueError(f"hardware.{key}: got {v!r}; expected {expected}")
        kw[key] = v
    _rates_in_use(hw, kw)
    src = dict(hw.sources, **{k: _overridden_source("hardware", k) for k in kw if k in hw.sources})
    return dataclasses.replace(hw, sources=src, **kw), sorted(fields)  # ValueError: fields that disagree


def _rates_in_use(hw: HardwarePreset, kw: dict) -> None:
    """``pcie_bytes_per_s`` / ``l3_bytes_per_s`` in `kw` -> the field of the io backend (protocol)
    in use, the scenario's choice or else the preset's."""
    for rate in HardwarePreset.RATES_IN_USE:
        if rate not in kw:
            continue
        selector = _SELECTOR[rate]
        target = rate_field(rate, kw.get(selector, getattr(hw, selector)))
        if target in kw:
            raise ValueError(f"hardware.{rate}: conflicts with hardware.{target} (the rate of {selector} "
                             f"{target.split('_')[1]}); expected one of them")
        kw[target] = kw.pop(rate)


def _number_text(v):
    """A number written as text that YAML reads as a string (``20e9``) -> the number; else `v`."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def preset_doc(preset, base: str, overridden: list) -> dict:
    """A resolved preset for config.yaml: its base name, every field (sources left out) and
    which fields the scenario overrode."""
    fields = {f.name: getattr(preset, f.name) for f in dataclasses.fields(preset) if f.name != "sources"}
    fields.update({k: getattr(preset, k) for k in getattr(preset, "RATES_IN_USE", ())})
    if "sidecars" in fields:
        fields["sidecars"] = [dataclasses.asdict(s) for s in fields["sidecars"]]
    return {"base": base, **fields, "overridden": list(overridden)}


def host_pool_tokens(model: ModelPreset, tp: int, size_gb: float) -> int:
    """Tokens in an L2 (host) pool of `size_gb` GB per rank, SGLang's ``--hicache-size``: each
    rank's host pool holds ``int(size_gb x 1e9 // size_per_token)`` tokens, size_per_token being
    that rank's share of a token (HostKVCache.__init__, python/sglang/srt/mem_cache/
    memory_pool_host.py); here the FULL KV with its sidecars over `kv_shards` (MLA: replicated)."""
    return int(size_gb * 1e9 // (bytes_per_token(model, "full") / kv_shards(model, tp)))


# ------------------------------------------------------------------------------------------
# L1 sizing: l1_tokens: auto
# ------------------------------------------------------------------------------------------

# assumption: SGLang's server default --mamba-full-memory-ratio (not in MODELS.md; the seed's
# Inkling run passes 0.1 explicitly). The MAMBA pool gets this share of the attention pools.
DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9


@dataclass(frozen=True, kw_only=True)
class L1Plan:
    """How `l1_plan` split one GPU's memory. Tokens are FULL-pool tokens (the cache's
    ``capacity_tokens``); ``swa_tokens``/``mamba_slots`` are None when the model lacks them."""

    full_tokens: int
    swa_tokens: int | None
    mamba_slots: int | None
    budget_bytes_per_gpu: float
    cell_bytes_per_gpu: float
    kv_shards: int
    state_shards: int
    uncapped_full_tokens: int


def kv_shards(model: ModelPreset, tp: int) -> int:
    """How many ways tensor parallelism splits the KV (and its sidecars): GQA splits KV heads
    (a head is replicated once tp exceeds them: min(tp, kv_heads)); MLA and DeepSeek-V4 keep
    one shared latent per token, replicated on every rank (assumption: no DP attention)."""
    return min(tp, model.num_kv_heads) if model.attention == "gqa" else 1


def transfer_shards(model: ModelPreset, tp: int) -> dict:
    """Per component, how many ways a host <-> device transfer splits over the tp ranks: each
    rank copies its own shard between its host pool and its GPU over its own PCIe link, all at
    once, so a transfer lasts (bytes / ways) / one GPU's bandwidth. FULL and SWA (with their
    sidecars): `kv_shards` (GQA heads; MLA and DeepSeek-V4 latents are replicated: every rank
    copies the whole latent, as each rank's SGLang host pool holds it:
    ``MLATokenToKVPoolHost.get_size_per_token`` = (kv_lora_rank + qk_rope_head_dim) x dtype
    bytes x layers, python/sglang/srt/mem_cache/memory_pool_host.py); MAMBA state: tp (as
    `l1_plan` splits it)."""
    k = kv_shards(model, tp)
    return {"full": k, "swa": k, "mamba": tp}


def l1_plan(model, hardware, tp: int, mem_fraction_static: float, *,
            swa_full_tokens_ratio: float | None = None,
            mamba_full_memory_ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO,
            page_size: int = 1, max_total_tokens: int | None = None,
            reserve_bytes_per_gpu: float = 0) -> L1Plan:
    """Size the GPU (L1) pools of `model` served at tensor parallelism `tp` on `hardware`.

    Per GPU (every rank holds the same number of tokens, so the smallest rank decides):

        budget = hbm_bytes_per_gpu x mem_fraction_static - weight_bytes / tp - reserve
        cell   = (FULL KV + FULL sidecars) / kv_shards
                 + swa_full_tokens_ratio x (SWA KV + SWA sidecars) / kv_shards
        cell  *= 1 + mamba_full_memory_ratio            (only for a model with a MAMBA state)
        full_tokens = floor(budget / cell), down to a page multiple, capped by max_total_tokens
        swa_tokens  = int(full_tokens x swa_full_tokens_ratio)
        mamba_slots = floor(mamba_full_memory_ratio x full_tokens x attention cell
                            / (state_bytes / tp))

    Assumptions (each also in the module docs):
    - activations, CUDA graphs and communication buffers live in the (1 - mem_fraction_static)
      remainder, as in SGLang; `reserve_bytes_per_gpu` (default 0) takes more off;
    - weights split evenly over the tp ranks (replicated embeddings etc. ignored);
    - the SWA pool holds swa_full_tokens_ratio x the FULL tokens (SGLang's rule; default the
      preset's ratio: 0.1 for DeepSeek-V4 and Inkling, 0.8 otherwise), so its bytes, and those
      of the sidecars that follow it, are charged to each FULL token at that ratio;
    - the MAMBA pool gets mamba_full_memory_ratio x the attention pools' memory (default 0.9,
      SGLang's server default; the seed's Inkling run passes 0.1); recurrent state splits over
      tp ranks (heads / conv channels divide evenly);
    - with max_total_tokens (SGLang's --max-total-tokens) the FULL pool is capped and the SWA
      and MAMBA pools follow the capped count.
    """
    model = model if isinstance(model, ModelPreset) else get_model(model)
    hardware = hardware if isinstance(hardware, HardwarePreset) else get_hardware(hardware)
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= hardware.num_gpus:
        raise ValueError(f"tp must be an integer in 1..{hardware.num_gpus} on {hardware.name}, got {tp!r}")
    if not (_is_number(mem_fraction_static) and 0 < mem_fraction_static <= 1):
        raise ValueError(f"mem_fraction_static must be in (0, 1], got {mem_fraction_static!r}")
    _nonneg_int("l1_plan", "page_size", page_size, 1)
    if max_total_tokens is not None:
        _nonneg_int("l1_plan", "max_total_tokens", max_total_tokens, page_size)
    ratio = model.swa_full_tokens_ratio if swa_full_tokens_ratio is None else swa_full_tokens_ratio
    if model.swa_layers and not (_is_number(ratio) and ratio > 0):
        raise ValueError(f"swa_full_tokens_ratio must be > 0, got {ratio!r}")
    has_mamba = model.state_bytes > 0
    if has_mamba and not (_is_number(mamba_full_memory_ratio) and mamba_full_memory_ratio > 0):
        raise ValueError(f"mamba_full_memory_ratio must be > 0, got {mamba_full_memory_ratio!r}")

    budget = hardware.hbm_bytes_per_gpu * mem_fraction_static - model.weight_bytes / tp - reserve_bytes_per_gpu
    if budget <= 0:
        raise ValueError(f"{model.name} on {hardware.name} at tp={tp}: weights "
                         f"{model.weight_bytes / tp / GB:,.1f} GB per GPU (+ reserve) exceed "
                         f"{hardware.hbm_bytes_per_gpu * mem_fraction_static / GB:,.1f} GB "
                         f"(HBM x mem_fraction_static {mem_fraction_static})")
    shards = kv_shards(model, tp)
    attn_cell = bytes_per_token(model, "full") / shards
    if model.swa_layers:
        attn_cell += ratio * bytes_per_token(model, "swa") / shards
    mamba_r = mamba_full_memory_ratio if has_mamba else 0.0
    cell = attn_cell * (1 + mamba_r)
    if cell <= 0:
        raise ValueError(f"{model.name}: no per-token L1 bytes to size the pool by")
    uncapped = int(budget // cell) // page_size * page_size
    full = uncapped if max_total_tokens is None else min(uncapped, max_total_tokens // page_size * page_size)
    swa = int(full * ratio) if model.swa_layers else None
    slots = int(mamba_r * full * attn_cell // (model.state_bytes / tp)) if has_mamba else None
    return L1Plan(full_tokens=full, swa_tokens=swa, mamba_slots=slots, budget_bytes_per_gpu=budget,
                  cell_bytes_per_gpu=cell, kv_shards=shards, state_shards=tp if has_mamba else 1,
                  uncapped_full_tokens=uncapped)


def l1_tokens_auto(model, hardware, tp: int, mem_fraction_static: float, **kw) -> int:
    """``l1_tokens: auto``: the FULL-pool tokens of `l1_plan` (same arguments)."""
    return l1_plan(model, hardware, tp, mem_fraction_static, **kw).full_tokens
