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

One API for prefill chunks and decode: `SyntheticHybridModel.forward` (see its docstring).
Weights come from a seeded CPU ``torch.Generator`` and are then moved to ``device`` /
``dtype``, so the same seed gives the same model on every device.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .spec import HybridSpec


class MissingSwaPage(ValueError):
    """A sliding-window layer needs KV of a position whose SWA page is -1 (not kept)."""


def _randn(gen, *shape, scale):
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * scale


def _pages_tensor(pages, device) -> torch.Tensor:
    if pages is None:
        return torch.empty(0, dtype=torch.int64, device=device)
    if isinstance(pages, torch.Tensor):
        return pages.to(device=device, dtype=torch.int64).reshape(-1)
    return torch.as_tensor(np.asarray(pages, dtype=np.int64).reshape(-1), device=device)


class SyntheticHybridModel:
    """Random weights for `spec`, seeded; ``device``/``dtype`` of the weights and activations
    (attention scores, softmax and the recurrence are computed in float32)."""

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
        mv = lambda t: t.to(device=self.device, dtype=dtype)  # noqa: E731
        self.w = {k: mv(v) for k, v in w.items()}
        self.layers = [{k: mv(v) for k, v in lw.items()} for lw in layers]
        half = spec.head_dim // 2
        self._inv_freq = 1.0 / (spec.rope_base ** (torch.arange(half, dtype=torch.float32) / half))

    # -- pieces ------------------------------------------------------------------------------
    def _norm(self, x, weight):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * weight

    def _rope(self, x, pos):
        """x [n, heads, head_dim] rotated by positions pos [n] (rotate-half convention)."""
        ang = pos.float()[:, None] * self._inv_freq.to(pos.device)[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        xf = x.float()
        x1, x2 = xf.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    def _attend(self, q, k, v, q_pos, k_pos, window):
        """q [n,h,d] at q_pos; k, v [T,h,d] at k_pos; causal (and windowed) mask."""
        allow = k_pos[None, :] <= q_pos[:, None]
        if window:
            allow &= k_pos[None, :] > q_pos[:, None] - window
        out = F.scaled_dot_product_attention(q.transpose(0, 1).float(), k.transpose(0, 1).float(),
                                             v.transpose(0, 1).float(), attn_mask=allow)
        return out.transpose(0, 1).to(q.dtype)

    def _mlp(self, lw, h):
        gate, up = (h @ lw["w_mlp_in"]).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ lw["w_mlp_out"]

    # -- the forward -------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, tokens, start: int = 0, full_pages=None, swa_pages=None, state_slot=None,
                pools=None) -> torch.Tensor:
        """Logits ``[n, vocab]`` of the new tokens at positions ``start .. start+n-1``.

        - ``full_pages``: the L1 FULL page of every page covering positions 0..start+n-1 in
          order (a cached prefix's pages from ``RadixCache.slots_of`` followed by the
          request's own). The new tokens' full-layer KV is written there; positions < start
          are read from there.
        - ``swa_pages``: the L1 SWA page per page position (same length), -1 where no SWA KV
          is kept. New tokens' swa-layer KV is written to the pages that are not -1; a swa
          layer reads positions start-window+1 .. start-1 from the pool and raises
          `MissingSwaPage` when one of their pages is -1.
        - ``state_slot``: the L1 state slot holding the recurrent state after position
          start-1 (read; ignored when start == 0: the state starts at zero) and receiving the
          state after the last new token (written).
        - ``pools``: a `KVPools` on the model's device; None = no cache at all (start must be
          0; nothing is read or written): the reference computation.
        """
        spec = self.spec
        P, dev = spec.page_size, self.device
        tokens = torch.as_tensor(tokens, dtype=torch.int64).reshape(-1).to(dev)
        n = tokens.numel()
        if n == 0:
            raise ValueError("forward: no new tokens")
        if start < 0:
            raise ValueError(f"forward: start must be >= 0, got {start}")
        end = start + n
        if pools is None:
            if start:
                raise ValueError("forward without pools computes from position 0 only")
        else:
            need = -(-end // P)
            full_pages = _pages_tensor(full_pages, dev)
            swa_pages = _pages_tensor(swa_pages, dev)
            if spec.n_full and full_pages.numel() < need:
                raise ValueError(f"forward: {need} FULL pages cover positions 0..{end - 1}, "
                                 f"got {full_pages.numel()}")
            if spec.n_full and bool((full_pages[:need] < 0).any()):
                raise ValueError("forward: a FULL page covering positions 0..{} is -1".format(end - 1))
            if spec.n_swa and swa_pages.numel() < need:
                raise ValueError(f"forward: {need} SWA page entries (-1 allowed) cover positions "
                                 f"0..{end - 1}, got {swa_pages.numel()}")
            if spec.n_rec and state_slot is None:
                raise ValueError("forward: rec layers need a state_slot")
            new_pp = torch.arange(start // P, need, device=dev)
            for name, pages, used in (("FULL", full_pages, spec.n_full), ("SWA", swa_pages, spec.n_swa)):
                phys = pages[new_pp] if used else pages[:0]
                phys = phys[phys >= 0]
                if phys.numel() != torch.unique(phys).numel():
                    raise ValueError(f"forward: two page positions of the new tokens share one {name} "
                                     f"page ({phys.tolist()}); pass -1 (SWA) for pages not kept")
        pos = torch.arange(start, end, device=dev)
        x = self.w["embed"][tokens]
        groups = spec.group_index
        for kind, gi, lw in zip(spec.kinds, groups, self.layers):
            h = self._norm(x, lw["norm1"])
            if kind == "rec":
                y = self._recurrence(lw, h, start, gi, state_slot, pools)
            else:
                pages = full_pages if kind == "full" else swa_pages
                y = self._attention(lw, h, pos, start, kind, gi, pages, pools)
            x = x + y
            x = x + self._mlp(lw, self._norm(x, lw["norm2"]))
        return (self._norm(x, self.w["norm_f"]) @ self.w["lm_head"]).float()

    __call__ = forward

    def _attention(self, lw, h, pos, start, kind, gi, pages, pools):
        spec = self.spec
        P, nh, hd, W = spec.page_size, spec.num_heads, spec.head_dim, spec.window
        n = h.shape[0]
        q, k, v = (h @ lw["w_qkv"]).chunk(3, dim=-1)
        q = self._rope(q.reshape(n, nh, hd), pos)
        k = self._rope(k.reshape(n, nh, hd), pos)
        v = v.reshape(n, nh, hd)
        window = W if kind == "swa" else None
        if pools is None:
            return self._attend(q, k, v, pos, pos, window).reshape(n, -1) @ lw["w_out"]
        view = pools.layer_view("L1", kind, gi)  # [pages, 2, P, D]
        kd, vd = k.to(view.dtype), v.to(view.dtype)  # what a later read gets back
        # prefix positions this layer reads from the pool
        lo = 0 if window is None else max(0, start - window + 1)
        if start > lo:
            ppos = torch.arange(lo, start, device=h.device)
            pg = pages[ppos // P]
            if window is not None and bool((pg < 0).any()):
                bad = sorted(set((ppos[pg < 0] // P).tolist()))
                raise MissingSwaPage(f"sliding-window layer needs the KV of positions {lo}..{start - 1} "
                                     f"(window {window}), but the SWA page of page position(s) {bad} is -1")
            kv = view[pg, :, ppos % P]  # [m, 2, D]
            kd_all = torch.cat([kv[:, 0].reshape(-1, nh, hd), kd])
            vd_all = torch.cat([kv[:, 1].reshape(-1, nh, hd), vd])
            k_pos = torch.cat([ppos, pos])
        else:
            kd_all, vd_all, k_pos = kd, vd, pos
        # write the new tokens' KV (swa: only where a page is kept)
        wp = pages[pos // P]
        keep = wp >= 0
        if bool(keep.all()):
            view[wp, :, pos % P] = torch.stack([kd, vd], 1).reshape(n, 2, -1)
        elif bool(keep.any()):
            view[wp[keep], :, pos[keep] % P] = torch.stack([kd, vd], 1).reshape(n, 2, -1)[keep]
        out = self._attend(q, kd_all.to(q.dtype), vd_all.to(q.dtype), pos, k_pos, window)
        return out.reshape(n, -1) @ lw["w_out"]

    def _recurrence(self, lw, h, start, gi, state_slot, pools):
        S = self.spec.state_dim
        a_logit, u, gate = (h @ lw["w_in"]).float().chunk(3, dim=-1)
        a = torch.sigmoid(a_logit + lw["b_a"].float())
        bu = (1 - a) * u
        if pools is None or start == 0:
            s = torch.zeros(S, dtype=torch.float32, device=h.device)
        else:
            s = pools.layer_view("L1", "state", gi)[int(state_slot)].float()
        outs = torch.empty_like(bu)
        for t in range(bu.shape[0]):
            s = a[t] * s + bu[t]
            outs[t] = s
        if pools is not None:
            view = pools.layer_view("L1", "state", gi)
            view[int(state_slot)] = s.to(view.dtype)
        return ((outs * F.silu(gate)).to(h.dtype)) @ lw["w_out"]

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


__all__ = ["HybridSpec", "SyntheticHybridModel", "MissingSwaPage"]
