"""`SyntheticHybridModel`: a small random-weight LM with full-attention, sliding-window and
recurrent layers that reads and writes real paged KV (`gpu_backend.pools.KVPools`).

Per layer: ``x += mixer(rmsnorm(x))``, then ``x += mlp(rmsnorm(x))`` (gated SiLU MLP); the
mixer is one of
- ``full``: causal self-attention with rotary positions over every position <= the token's;
- ``swa``: the same restricted to the last ``window`` positions (self included): a query at
  position i sees keys j with i - window < j <= i;
- ``rec``: a gated linear recurrence with a per-request state ``s`` of ``state_dim``:
  ``a_t = sigmoid(W_a x_t + b_a)``, ``s_t = a_t * s_{t-1} + (1 - a_t) * (W_u x_t)``,
  output ``W_o (s_t * silu(W_g x_t))``; the state before position 0 is zero.

Sidecars (`spec.SidecarSpec`, DeepSeek-V4-style compressed KV): an attention layer a sidecar is
attached to also attends over the sidecar's compressed rows (one K/V row per group of tokens,
projected from the layer input at the group's last position, kept in the sidecar's pool at the
pages of the component it follows).

One API for prefill chunks and decode: `SyntheticHybridModel.forward_batch` runs many requests
(`Segment`s) as one batched forward, `forward` one request (see their docstrings).
Weights come from a seeded CPU ``torch.Generator`` and are then moved to ``device`` /
``dtype``, so the same seed gives the same model on every device.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import CausalBias

from .batch import Batch, MissingSwaPage, Segment
from .spec import HybridSpec
from .staging import PageIndexError


def _randn(gen, *shape, scale):
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * scale


class SyntheticHybridModel:
    """Random weights for `spec`, seeded; ``device``/``dtype`` of the weights and activations
    (attention runs in ``dtype``, bf16 on a GPU: the fused SDPA kernels accumulate in float32;
    norms, rotary angles and the recurrence are computed in float32)."""

    def __init__(self, spec: HybridSpec, seed: int = 0, device="cpu", dtype=torch.float32):
        self.spec, self.seed = spec, seed
        self.device, self.dtype = torch.device(device), dtype
        g = torch.Generator().manual_seed(int(seed))
        H, D, S, V = spec.hidden, spec.kv_width, spec.state_dim, spec.vocab
        M = spec.mlp_mult * H
        w = {"embed": _randn(g, V, H, scale=1.0),
             "norm_f": 1.0 + _randn(g, H, scale=0.1),
             "lm_head": _randn(g, H, V, scale=1 / math.sqrt(H))}
        layers = []
        for kind in spec.kinds:
            lw = {"norm1": 1.0 + _randn(g, H, scale=0.1), "norm2": 1.0 + _randn(g, H, scale=0.1),
                  "w_mlp_in": _randn(g, H, 2 * M, scale=1 / math.sqrt(H)),
                  "w_mlp_out": _randn(g, M, H, scale=1 / math.sqrt(M))}
            if kind == "rec":
                lw["w_in"] = _randn(g, H, 3 * S, scale=1 / math.sqrt(H))
                lw["b_a"] = 2.0 + _randn(g, S, scale=0.5)  # a ~ 0.88: a memory of ~8 tokens
                lw["w_out"] = _randn(g, S, H, scale=1 / math.sqrt(S))
            else:
                lw["w_qkv"] = _randn(g, H, 3 * D, scale=1 / math.sqrt(H))
                lw["w_out"] = _randn(g, D, H, scale=1 / math.sqrt(D))
            layers.append(lw)
        for i, lw in enumerate(layers):  # drawn last: a model without sidecars keeps its weights
            for sc, _ in spec.attached(i):
                lw["w_" + sc.name] = _randn(g, H, 2 * D, scale=1 / math.sqrt(H))
        mv = lambda t: t.to(device=self.device, dtype=dtype)  # noqa: E731
        self.w = {k: mv(v) for k, v in w.items()}
        self.layers = [{k: mv(v) for k, v in lw.items()} for lw in layers]
        half = spec.head_dim // 2
        # on the device once: nothing of a forward but its one index upload moves there
        self._inv_freq = (1.0 / (spec.rope_base ** (torch.arange(half, dtype=torch.float32) / half))).to(self.device)
        self.sdpa_calls: dict = {}  # SDPA backend (`sdpa_backend`) -> attention calls that ran on it
        self._backends: dict = {}

    # -- pieces ------------------------------------------------------------------------------
    def _norm(self, x, weight):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * weight

    def _rope(self, x, cos, sin):
        """x [n, heads, head_dim] rotated by the angles of its positions (cos, sin [n, 1,
        head_dim / 2]: `Batch`'s, computed once per forward; rotate-half convention)."""
        xf = x.float()
        x1, x2 = xf.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    def _mlp(self, lw, h):
        gate, up = (h @ lw["w_mlp_in"]).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ lw["w_mlp_out"]

    # -- the forward -------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, tokens, start: int = 0, full_pages=None, swa_pages=None, state_slot=None,
                pools=None) -> torch.Tensor:
        """Logits ``[n, vocab]`` of the new tokens at positions ``start .. start+n-1`` (one
        request; `forward_batch` with one `Segment`).

        - ``full_pages``: the L1 FULL page of every page covering positions 0..start+n-1 in
          order (a cached prefix's pages from ``RadixCache.slots_of`` followed by the
          request's own). The new tokens' full-layer KV is written there; positions < start
          are read from there. Sidecars that follow FULL use the same indices.
        - ``swa_pages``: the L1 SWA page per page position (same length), -1 where no SWA KV
          is kept. New tokens' swa-layer KV is written to the pages that are not -1; a swa
          layer reads positions start-window+1 .. start-1 from the pool and raises
          `MissingSwaPage` when one of their pages is -1. Sidecars that follow SWA likewise.
        - ``state_slot``: the L1 state slot holding the recurrent state after position
          start-1 (read; ignored when start == 0: the state starts at zero) and receiving the
          state after the last new token (written).
        - ``pools``: a `KVPools` on the model's device; None = no cache at all (start must be
          0; nothing is read or written): the reference computation.
        """
        seg = Segment(tokens, start, full_pages, swa_pages, state_slot)
        return self.forward_batch([seg], pools, logits="all")[0]

    __call__ = forward

    def prepare(self, segments, pools=None, *, masked: bool = False):
        """The host half of a forward (`forward_batch`): page tables checked, index math, the
        one index upload, the rotary angles. ``masked``: every attention call padded under an
        explicit mask (the reference the unmasked calls are checked against)."""
        if not segments:
            raise ValueError("forward: no segments")
        return Batch(self, segments, pools, masked=masked)

    @torch.inference_mode()
    def forward_batch(self, segments, pools=None, *, logits: str = "last", wait_layer=None, mark=None,
                      masked: bool = False) -> list:
        """One batched forward of several requests' new tokens (an engine step: prefill chunks
        and decodes together), each a `Segment` over its own page table (`forward`'s meaning).

        The tokens of all segments go through every weight GEMM (QKV, output, MLP, recurrence
        inputs, LM head) as one matrix; attention takes as few ``scaled_dot_product_attention``
        calls per layer as the shapes allow (`_Keys`): each segment's queries against its keys
        (prefix KV gathered from the paged pool, then its new tokens' KV; sidecar rows alike),
        segments of equal shape together without a boolean mask, the others padded under a
        per-segment causal / window mask; the recurrence advances all segments' states together (a
        chunked scan). Returns per segment the logits of its last token
        ``[vocab]`` (``logits="last"``: all an engine needs) or of all its tokens ``[n, vocab]``
        (``"all"``). ``wait_layer``: called as ``wait_layer(l)`` before layer l reads the pools,
        every layer in order (a layer-wise load in flight: the data plane's
        `TorchDataPlane.layer_waiter`). `segments` may be a batch `prepare` built. ``mark``:
        called before the embedding, before layer 0, after the last layer and after the logits
        (the executor's timer). ``masked``: see `prepare`."""
        if logits not in ("last", "all"):
            raise ValueError(f"forward_batch: logits must be 'last' or 'all', got {logits!r}")
        if isinstance(segments, Batch):
            b = segments
        elif not segments:
            return []
        else:
            b = self.prepare(segments, pools, masked=masked)
        mark = mark or (lambda: None)
        mark()
        x = self.w["embed"][b.tokens]
        mark()
        for layer, (kind, gi, lw) in enumerate(zip(self.spec.kinds, self.spec.group_index, self.layers)):
            if wait_layer is not None:
                wait_layer(layer)
            h = self._norm(x, lw["norm1"])
            if kind == "rec":
                y = self._recurrence(lw, h, b, gi)
            else:
                y = self._attention(lw, h, b, layer, kind, gi)
            x = x + y
            x = x + self._mlp(lw, self._norm(x, lw["norm2"]))
        mark()
        if logits == "last":
            x = x[b.last]
        out = (self._norm(x, self.w["norm_f"]) @ self.w["lm_head"]).float()
        mark()
        return list(out) if logits == "last" else list(out.split(b.n))

    def _attention(self, lw, h, b, layer, kind, gi):
        spec = self.spec
        nh, hd, D = spec.num_heads, spec.head_dim, spec.kv_width
        keys = b.keys[kind]
        q, k, v = (h @ lw["w_qkv"]).chunk(3, dim=-1)
        q = self._rope(q.reshape(-1, nh, hd), b.cos, b.sin)
        k = self._rope(k.reshape(-1, nh, hd), b.cos, b.sin)
        rows = {kind: torch.stack([k.reshape(-1, D), v], 1)}  # new rows [N, 2, D] per pool
        layers = {kind: gi}
        for sc, idx in spec.attached(layer):  # compressed rows at the new group ends
            sel = keys.source(sc.name).new_sel
            kc, vc = (h[sel] @ lw["w_" + sc.name]).chunk(2, dim=-1)
            rows[sc.name] = torch.stack([self._rope(kc.reshape(-1, nh, hd), b.cos[sel], b.sin[sel]).reshape(-1, D),
                                         vc], 1)
            layers[sc.name] = idx
        kv = keys.gather_and_write(rows, layers, b.pools, h.dtype)  # [slots, 2, D] in the model's dtype
        qs = keys.place_queries(q)  # [rows, nh, hd]
        out = torch.empty_like(qs)
        for c in keys.calls:
            G = c.count
            qc = qs[c.q0: c.q0 + G * c.q].view(G, c.q, nh, hd).transpose(1, 2)
            kc, vc = (kv[c.k0: c.k0 + G * c.k, i].view(G, c.k, nh, hd).transpose(1, 2) for i in (0, 1))
            if c.backend is None:  # the dispatch depends on the call's kind, dtype and widths, not its lengths
                shape = (type(c.mask).__name__, c.q == 1, c.q == c.k, qc.dtype, qc.device.type, nh, hd)
                if shape not in self._backends:
                    self._backends[shape] = sdpa_backend(qc, kc, vc, c.mask)
                c.backend = self._backends[shape]
            self.sdpa_calls[c.backend] = self.sdpa_calls.get(c.backend, 0) + 1
            o = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=c.mask)
            out[c.q0: c.q0 + G * c.q] = o.transpose(1, 2).reshape(G * c.q, nh, hd)
        return keys.take_rows(out).reshape(-1, D) @ lw["w_out"]

    def _recurrence(self, lw, h, b, gi):
        """All segments' states advance together over a padded [B, Q, S] layout in which a pad
        position keeps the state (a = 1, input 0), `SCAN_CHUNK` positions at a time
        (`_scan`)."""
        S = self.spec.state_dim
        a_logit, u, gate = (h @ lw["w_in"]).float().chunk(3, dim=-1)
        a = torch.sigmoid(a_logit + lw["b_a"].float())
        bu = (1 - a) * u
        a_p = b.pad(a, fill=1.0).reshape(b.B, b.Q, S)
        bu_p = b.pad(bu, fill=0.0).reshape(b.B, b.Q, S)
        view = None if b.pools is None else b.pools.layer_view("L1", "state", gi)
        s = torch.zeros(b.B, S, dtype=torch.float32, device=h.device)
        if view is not None and b.resume.numel():
            s[b.resume] = view[b.seeds[b.resume]].float()  # after this layer's loads (`wait_layer`)
        outs = torch.empty_like(a_p)
        for c0 in range(0, b.Q, SCAN_CHUNK):
            s = _scan(a_p[:, c0:c0 + SCAN_CHUNK], bu_p[:, c0:c0 + SCAN_CHUNK], s, outs[:, c0:c0 + SCAN_CHUNK])
        if view is not None:
            flat = outs.reshape(b.B * b.Q, S)
            view[b.save_slots] = flat[b.save_rows].to(view.dtype)
        return (b.unpad(outs.reshape(b.B * b.Q, S)) * F.silu(gate)).to(h.dtype) @ lw["w_out"]

    # -- greedy decoding ---------------------------------------------------------------------
    def greedy_reference(self, prompt, max_new: int):
        """Greedy continuation without any cache (the whole sequence recomputed per token).
        Returns (new token ids, logits [max_new, vocab] that chose them)."""
        seq = [int(t) for t in torch.as_tensor(prompt).reshape(-1).tolist()]
        out, logits = [], []
        for _ in range(max_new):
            lg = self.forward(seq)[-1]
            nxt = int(lg.argmax())
            logits.append(lg)
            out.append(nxt)
            seq.append(nxt)
        return out, torch.stack(logits)

    def greedy_decode(self, prompt, max_new: int, full_pages, swa_pages, state_slot, pools,
                      start: int = 0):
        """Prefill ``prompt[start:]`` (positions < start already in the pools), then decode
        ``max_new`` tokens one forward each. The page lists must cover prompt + max_new - 1
        positions. Returns (new token ids, logits [max_new, vocab] that chose them)."""
        prompt = torch.as_tensor(prompt, dtype=torch.int64).reshape(-1)
        lg = self.forward(prompt[start:], start, full_pages, swa_pages, state_slot, pools)[-1]
        out, logits, pos = [], [], prompt.numel()
        for i in range(max_new):
            nxt = int(lg.argmax())
            out.append(nxt)
            logits.append(lg)
            if i + 1 < max_new:
                lg = self.forward([nxt], pos, full_pages, swa_pages, state_slot, pools)[0]
                pos += 1
        return out, torch.stack(logits)


SCAN_CHUNK = 64  # positions of the recurrence computed at once (a [B, C, C, S] weight block)


def _scan(a, u, s0, out):
    """``s_t = a_t * s_{t-1} + u_t`` for the C positions of a chunk at once, in log space:
    ``s_t = exp(L_t) s0 + sum_{j<=t} exp(L_t - L_j) u_j`` with ``L_t = sum_{i<=t} log a_i``
    (exponents <= 0: no overflow; a is clamped to >= 1e-30, so a decay below that counts as
    1e-30). Writes the states into `out` [B, C, S]; returns the last one. The same values as
    the step-by-step loop up to float rounding, with C times fewer kernel launches."""
    L = torch.cumsum(torch.log(a.clamp_min(1e-30)), dim=1)  # [B, C, S]
    C = a.shape[1]
    causal = torch.ones(C, C, dtype=torch.bool, device=a.device).tril()[None, :, :, None]
    w = torch.exp(torch.where(causal, L[:, :, None, :] - L[:, None, :, :], float("-inf")))  # [B, t, j, S]
    out.copy_(torch.exp(L) * s0[:, None, :] + (w * u[:, None, :, :]).sum(dim=2))
    return out[:, -1]


def sdpa_backend(q, k, v, mask) -> str:
    """The SDPA kernel torch dispatches ``scaled_dot_product_attention(q, k, v, attn_mask=mask)``
    to (`torch._fused_sdp_choice`, and for a lower-right `CausalBias` the checks of
    `torch.nn.attention.bias.CausalBias._dispatch`), e.g. ``FLASH_ATTENTION``,
    ``EFFICIENT_ATTENTION`` or ``MATH``."""
    from torch.nn.attention import SDPBackend

    try:
        if isinstance(mask, CausalBias):
            if mask.seq_len_q == mask.seq_len_kv:
                return SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, True)).name
            if q.device.type == "cuda":
                from torch.backends.cuda import SDPAParams, can_use_efficient_attention, can_use_flash_attention

                params = SDPAParams(q, k, v, None, 0.0, False, False)
                if can_use_flash_attention(params):
                    return "FLASH_ATTENTION"
                if can_use_efficient_attention(params):
                    return "EFFICIENT_ATTENTION"
            mask = mask._materialize(q.device)  # what CausalBias does without a fused kernel
            return SDPBackend(torch._fused_sdp_choice(q, k, v, mask, 0.0, False)).name + " (mask materialised)"
        return SDPBackend(torch._fused_sdp_choice(q, k, v, mask, 0.0, False)).name
    except (AttributeError, RuntimeError, TypeError, ValueError) as e:  # a torch without these probes
        return f"unknown ({type(e).__name__})"


__all__ = ["HybridSpec", "SyntheticHybridModel", "MissingSwaPage", "PageIndexError", "Segment", "sdpa_backend"]
