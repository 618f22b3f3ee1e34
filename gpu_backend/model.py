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
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import CausalBias, causal_lower_right  # imported once here: seconds, never in a step

from .spec import HybridSpec
from .staging import PageIndexError


class MissingSwaPage(ValueError):
    """A sliding-window layer needs KV of a position whose SWA page is -1 (not kept)."""


def _randn(gen, *shape, scale):
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * scale


def _pages_array(pages) -> np.ndarray:
    """A page table as an int64 numpy array (the batch's index math runs on the host; the
    device gets each finished index tensor in one copy)."""
    if pages is None:
        return np.empty(0, dtype=np.int64)
    if isinstance(pages, torch.Tensor):
        pages = pages.cpu().numpy()
    return np.asarray(pages, dtype=np.int64).reshape(-1)


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
        head_dim / 2]: `_Batch`'s, computed once per forward; rotate-half convention)."""
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
        return _Batch(self, segments, pools, masked=masked)

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
        if isinstance(segments, _Batch):
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
            s[b.resume] = view[b.slots[b.resume]].float()
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


def _stride(lo: int, hi: int, g: int) -> np.ndarray:
    """Positions p in [lo, hi) with p % g == g - 1 (the last position of each group of g)."""
    return np.arange(min(lo + (g - 1 - lo) % g, hi), hi, g, dtype=np.int64)


@dataclass
class Segment:
    """One request's part of a batched forward: its new ``tokens`` at positions ``start ..``,
    its page tables and state slot (`SyntheticHybridModel.forward`'s arguments) and ``saves``:
    ((position, slot), ...) where the recurrent state of the prefix of ``position`` tokens
    (start < position <= end) is also written (MAMBA checkpoints, every-K snapshots)."""

    tokens: object
    start: int = 0
    full_pages: object = None
    swa_pages: object = None
    state_slot: int | None = None
    saves: tuple = ()


class _Upload:
    """The index arrays of one forward, sent to the device together: concatenated into one int64
    host buffer (pinned on CUDA) that goes over in ONE non-blocking copy; `add` returns a handle,
    `[handle]` the array's slice of the device buffer after `send`. Nothing else of the forward
    moves host -> device (`copies` counts the copies: 1 on a GPU, 0 on CPU)."""

    def __init__(self):
        self._arrays: list = []
        self.parts: list = []
        self.host = None
        self.copies = 0

    def add(self, a) -> int:
        self._arrays.append(np.ascontiguousarray(np.asarray(a, dtype=np.int64).reshape(-1)))
        return len(self._arrays) - 1

    def send(self, device) -> None:
        sizes = [a.size for a in self._arrays]
        cuda = device.type == "cuda"
        self.host = host = torch.empty(sum(sizes), dtype=torch.int64, pin_memory=cuda)
        if sizes:
            np.concatenate(self._arrays, out=host.numpy())
        flat = host
        if device.type != "cpu":
            flat = host.to(device, non_blocking=True)
            self.copies += 1
        self.parts = list(flat.split(sizes))
        self._arrays = []

    def __getitem__(self, handle: int) -> torch.Tensor:
        return self.parts[handle]


class _Source:
    """Keys of one pool for one attention kind over the whole batch: rows at the positions p
    with p % group == group - 1 (group 1: every position) of pool `comp`, addressed by the
    pages of `follows`; only the last `window` positions when windowed."""

    def __init__(self, comp, follows, group, window):
        self.comp, self.follows, self.group, self.window = comp, follows, group, window
        self._parts: dict = {}

    def add(self, name: str, values) -> None:
        self._parts.setdefault(name, []).append(values)

    def plan(self, up: _Upload, key_base: np.ndarray) -> None:
        """Register the index arrays with the upload: prefix rows to gather (pages, rows in
        page, destination key slot ``key_base[seg] + slot``), new rows (token index, pages,
        rows, destination)."""
        cat = {k: np.concatenate(v) for k, v in self._parts.items()}
        self._h = {"pre_pages": up.add(cat["pre_pages"]), "pre_rows": up.add(cat["pre_rows"]),
                   "dst_pre": up.add(key_base[cat["pre_seg"]] + cat["pre_slot"]),
                   "new_sel": up.add(cat["new_sel"]), "new_pages": up.add(cat["new_pages"]),
                   "new_rows": up.add(cat["new_rows"]), "dst_new": up.add(key_base[cat["new_seg"]] + cat["new_slot"])}
        keep = cat["new_pages"] >= 0  # SWA: -1 = a page not kept (not written)
        self._keep = None if keep.all() else up.add(np.flatnonzero(keep))
        self._parts = {}

    def bind(self, up: _Upload) -> None:
        for name, h in self._h.items():
            setattr(self, name, up[h])
        self.keep = None if self._keep is None else up[self._keep]


@dataclass
class _Call:
    """One ``scaled_dot_product_attention`` call of a layer: `count` segments of `q` query rows
    and `k` key slots each, from query row `q0` and key slot `k0` of the kind's buffers; masked
    (a padded batch under an explicit boolean mask) or not (equal shapes: `causal_lower_right`,
    or no mask at all for one query)."""

    segs: list
    q: int
    k: int
    masked: bool
    q0: int = 0
    k0: int = 0
    mask: object = None
    backend: str | None = None

    @property
    def count(self) -> int:
        return len(self.segs)


class _Keys:
    """The key layout of one attention kind ("full" or "swa") for a batch: per segment its keys
    from every source (its own KV, the sidecars attached to that kind), the prefix rows gathered
    from the pools, then the new rows; grouped into as few SDPA calls as the shapes allow
    (`_Call`). A segment whose keys are one source's positions lo..end-1 in order, every one of
    them visible to its last query (no sidecar; no window, or a window that does not cut inside
    the chunk: one new token, or end <= window), runs unmasked beside the segments of its (new
    tokens, keys) shape: a query i of n sees keys j <= i + K - n (`causal_lower_right`). The
    others (and with ``masked=True``, every segment: the reference) run in one padded call
    under a boolean mask, as do the one-token segments when their key counts differ."""

    def __init__(self, batch, kind, up: _Upload, masked: bool = False):
        spec = batch.model.spec
        W = spec.window
        srcs = [_Source(kind, kind, 1, W if kind == "swa" else None)]
        srcs += [_Source(sc.name, sc.follows, sc.group, W if sc.follows == "swa" else None)
                 for sc in spec.sidecars if kind in spec.sidecar_kinds(sc)]
        self.sources = {s.comp: s for s in srcs}
        self.window = W
        kpos, kwin = [], []
        for i, seg in enumerate(batch.segs):
            pos, win, slot = [], [], 0
            for s in srcs:
                p = self._place(batch, i, s, slot)
                slot += len(p)
                pos.append(p)
                win.append(np.full(len(p), s.window is not None))
            kpos.append(np.concatenate(pos))
            kwin.append(np.concatenate(win))
        self.calls = calls = self._calls(batch, [len(k) for k in kpos], srcs, masked)
        key_base = np.zeros(batch.B, dtype=np.int64)
        q_base = np.zeros(batch.B, dtype=np.int64)
        q0 = k0 = 0
        for c in calls:
            c.q0, c.k0 = q0, k0
            for g, i in enumerate(c.segs):
                q_base[i], key_base[i] = q0 + g * c.q, k0 + g * c.k
            q0, k0 = q0 + c.count * c.q, k0 + c.count * c.k
        self.rows, self.slots = q0, k0
        self.padded = any(c.masked and any(batch.n[i] < c.q for i in c.segs) for c in calls)
        self.key_padded = any(c.masked for c in calls)
        for s in srcs:
            s.plan(up, key_base)
        q_dst = np.concatenate([q_base[i] + np.arange(n) for i, n in enumerate(batch.n)])
        self.identity = q0 == len(q_dst) and bool((q_dst == np.arange(q0)).all())
        self._q_dst = up.add(q_dst)
        self._masks = []
        for c in calls:
            if not c.masked:
                continue
            kp = np.full((c.count, c.k), -1, dtype=np.int64)
            wn = np.zeros((c.count, c.k), dtype=np.int64)
            qp = np.zeros((c.count, c.q), dtype=np.int64)
            for g, i in enumerate(c.segs):
                kp[g, : len(kpos[i])] = kpos[i]
                wn[g, : len(kwin[i])] = kwin[i]
                seg, n = batch.segs[i], batch.n[i]
                qp[g] = seg.start + n - 1  # a pad row repeats the last position: some key is visible
                qp[g, :n] = np.arange(seg.start, seg.start + n)
            self._masks.append((c, up.add(kp), up.add(wn), up.add(qp)))

    @staticmethod
    def _calls(batch, K: list, srcs: list, masked: bool) -> list:
        W = srcs[0].window
        groups: dict = {}
        rest = []
        for i, seg in enumerate(batch.segs):
            n = batch.n[i]
            whole = len(srcs) == 1 and (W is None or n == 1 or seg.start + n <= W)
            if masked or not whole:
                rest.append(i)
            else:
                groups.setdefault((n, K[i]), []).append(i)
        singles = [key for key in groups if key[0] == 1]
        if len(singles) > 1:  # decodes of different lengths: one padded call, not one per length
            for key in singles:
                rest += groups.pop(key)
        calls = [_Call(segs, n, k, False) for (n, k), segs in groups.items()]
        if rest:
            rest.sort()
            calls.append(_Call(rest, max(batch.n[i] for i in rest), max(K[i] for i in rest), True))
        return calls

    def bind(self, up: _Upload) -> None:
        """The index tensors (on the device) and each masked call's mask [G, 1, q, k]."""
        for s in self.sources.values():
            s.bind(up)
        self.q_dst = up[self._q_dst]
        W = self.window
        for c in self.calls:
            if not c.masked and c.q > 1:
                c.mask = causal_lower_right(c.q, c.k)
        for c, hk, hw, hq in self._masks:
            kp, wn = up[hk].view(c.count, 1, c.k), up[hw].view(c.count, 1, c.k).bool()
            qp = up[hq].view(c.count, c.q, 1)
            allow = (kp >= 0) & (kp <= qp)
            if W:
                allow &= ~wn | (kp > qp - W)
            c.mask = allow[:, None]

    @staticmethod
    def _place(batch, i: int, s: _Source, slot: int) -> np.ndarray:
        """Segment i's keys from source s, from key slot `slot` on: its prefix rows (read from
        the pool), then its new rows. Returns their positions."""
        seg, P, g = batch.segs[i], batch.P, s.group
        start, end = seg.start, seg.start + batch.n[i]
        lo = 0 if s.window is None else max(0, start - s.window + 1)
        pre, new = _stride(lo, start, g), _stride(start, end, g)
        pages = batch.pages[i].get(s.follows, np.empty(0, dtype=np.int64))
        pre_pg = pages[pre // P] if len(pre) else pre
        if s.window is not None and (pre_pg < 0).any():
            bad = sorted(set((pre[pre_pg < 0] // P).tolist()))
            raise MissingSwaPage(f"{s.comp}: a sliding-window layer needs positions {lo}..{start - 1} "
                                 f"(window {s.window}), but the SWA page of page position(s) {bad} is -1")
        s.add("pre_pages", pre_pg)
        s.add("pre_rows", pre % P // g)
        s.add("pre_seg", np.full(len(pre), i))
        s.add("pre_slot", np.arange(slot, slot + len(pre)))
        s.add("new_sel", batch.offset[i] + new - start)
        s.add("new_pages", pages[new // P] if len(pages) else new)  # no pools: nothing is written
        s.add("new_rows", new % P // g)
        s.add("new_seg", np.full(len(new), i))
        s.add("new_slot", np.arange(slot + len(pre), slot + len(pre) + len(new)))
        return np.concatenate([pre, new])

    def source(self, comp) -> _Source:
        return self.sources[comp]

    def gather_and_write(self, rows: dict, layers: dict, pools, dtype) -> torch.Tensor:
        """[slots, 2, D] keys/values in `dtype` in the calls' layout: prefix rows read from each
        source's pool layer, new rows (`rows[comp]`: [k, 2, D]) placed after them and written to
        the pool (where the page is kept: not -1). Pad slots (masked calls) are zeros."""
        any_rows = next(iter(rows.values()))
        alloc = torch.zeros if self.key_padded else torch.empty
        out = alloc((self.slots,) + tuple(any_rows.shape[1:]), dtype=dtype, device=any_rows.device)
        for comp, s in self.sources.items():
            new = rows[comp]
            if pools is not None:
                view = pools.layer_view("L1", comp, layers[comp])
                if s.pre_pages.numel():
                    out[s.dst_pre] = view[s.pre_pages, :, s.pre_rows].to(dtype)
                stored = new.to(view.dtype)
                if s.keep is None:
                    view[s.new_pages, :, s.new_rows] = stored
                elif s.keep.numel():
                    view[s.new_pages[s.keep], :, s.new_rows[s.keep]] = stored[s.keep]
                new = stored  # what a later read gets back
            out[s.dst_new] = new.to(dtype)
        return out

    def place_queries(self, q) -> torch.Tensor:
        """q [N, h, d] -> the calls' query rows [rows, h, d] (pad rows zero)."""
        if self.identity:
            return q
        out = (torch.zeros if self.padded else torch.empty)((self.rows,) + tuple(q.shape[1:]), dtype=q.dtype,
                                                            device=q.device)
        out[self.q_dst] = q
        return out

    def take_rows(self, out) -> torch.Tensor:
        return out if self.identity else out[self.q_dst]


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


class _Batch:
    """The token layout of one batched forward: the segments' new tokens concatenated (N), the
    padded query layout [B, Q] (the recurrence) and, per attention kind, its `_Keys`. Built on the
    host before layer 0: page tables checked against the pools (`PageIndexError`), index math in
    numpy, every index tensor sent to the device in one copy (`_Upload`); the rotary angles of
    the batch's positions computed once."""

    def __init__(self, model, segments, pools, *, masked: bool = False):
        spec = model.spec
        self.model, self.segs, self.pools = model, list(segments), pools
        self.device = dev = model.device
        self.P = spec.page_size
        toks = [np.asarray(torch.as_tensor(s.tokens, dtype=torch.int64).reshape(-1).cpu()) for s in self.segs]
        self.n = [len(t) for t in toks]
        self.B, self.Q = len(toks), max(self.n)
        offs = np.concatenate([[0], np.cumsum(self.n)]).astype(np.int64)
        self.offset = offs[:-1].tolist()
        self.pages = []
        for seg, n in zip(self.segs, self.n):
            self._check(seg, n)
            self.pages.append(self._page_tables(seg, n) if pools is not None else {})
        up = self.upload = _Upload()
        h = {"last": up.add(offs[1:] - 1), "tokens": up.add(np.concatenate(toks))}
        pos = np.concatenate([np.arange(s.start, s.start + n) for s, n in zip(self.segs, self.n)])
        h["pos"] = up.add(pos)
        # padded query rows: segment i's token j at row i*Q + j
        h["q_dst"] = up.add(np.concatenate([i * self.Q + np.arange(n) for i, n in enumerate(self.n)]))
        if spec.n_rec:
            self._state_plan(up, h)
        self.keys = {kind: _Keys(self, kind, up, masked) for kind in ("full", "swa") if kind in spec.kinds}
        up.send(dev)
        for name, handle in h.items():
            setattr(self, name, up[handle])
        for k in self.keys.values():
            k.bind(up)
        ang = self.pos.float()[:, None] * model._inv_freq[None, :]
        self.cos, self.sin = ang.cos()[:, None, :], ang.sin()[:, None, :]

    def _check(self, seg, n) -> None:
        if n == 0:
            raise ValueError("forward: no new tokens")
        if seg.start < 0:
            raise ValueError(f"forward: start must be >= 0, got {seg.start}")
        if self.pools is None and seg.start:
            raise ValueError("forward without pools computes from position 0 only")

    def _page_tables(self, seg, n) -> dict:
        spec, P = self.model.spec, self.P
        end = seg.start + n
        need = -(-end // P)
        full, swa = _pages_array(seg.full_pages), _pages_array(seg.swa_pages)
        uses_full = spec.n_full or any(sc.follows == "full" for sc in spec.sidecars)
        if uses_full and len(full) < need:
            raise ValueError(f"forward: {need} FULL pages cover positions 0..{end - 1}, got {len(full)}")
        if uses_full and (full[:need] < 0).any():
            raise ValueError("forward: a FULL page covering positions 0..{} is -1".format(end - 1))
        if spec.n_swa and len(swa) < need:
            raise ValueError(f"forward: {need} SWA page entries (-1 allowed) cover positions "
                             f"0..{end - 1}, got {len(swa)}")
        if spec.n_rec and seg.state_slot is None:
            raise ValueError("forward: rec layers need a state_slot")
        for name, pages, used in (("FULL", full, uses_full), ("SWA", swa, spec.n_swa)):
            phys = pages[seg.start // P: need] if used else pages[:0]
            phys = phys[phys >= 0]
            if (np.diff(np.sort(phys)) == 0).any():  # (np.unique would import numpy.ma within the first step)
                raise ValueError(f"forward: two page positions of the new tokens share one {name} "
                                 f"page ({phys.tolist()}); pass -1 (SWA) for pages not kept")
        for name, comp, pages, used in (("FULL", "full", full, uses_full), ("SWA", "swa", swa, spec.n_swa)):
            if used:
                _in_range(f"forward: {name} page", pages[:need], self.pools.size("L1", comp), allow_minus_one=True)
        return {"full": full, "swa": swa}

    def _state_plan(self, up: _Upload, h: dict) -> None:
        """Which segments resume a stored state, and which padded rows of the state trajectory
        go to which slots (the final state, and `saves`)."""
        resume, slots, rows, dst = [], [], [], []
        for i, (seg, n) in enumerate(zip(self.segs, self.n)):
            slot = -1 if seg.state_slot is None else int(seg.state_slot)
            slots.append(slot)
            if self.pools is None or slot < 0:
                continue
            if seg.start > 0:
                resume.append(i)
            for pos, to in tuple(seg.saves) + ((seg.start + n, slot),):
                if not seg.start < pos <= seg.start + n:
                    raise ValueError(f"forward: a state save at {pos} is outside {seg.start + 1}..{seg.start + n}")
                rows.append(i * self.Q + pos - seg.start - 1)
                dst.append(int(to))
        if self.pools is not None:
            _in_range("forward: state slot", np.asarray(slots + dst, dtype=np.int64), self.pools.size("L1", "state"),
                      allow_minus_one=True)
        h.update(resume=up.add(resume), slots=up.add(slots), save_rows=up.add(rows), save_slots=up.add(dst))

    def pad(self, x, fill: float = 0.0) -> torch.Tensor:
        """[N, ...] -> [B * Q, ...] (padded rows = fill)."""
        out = torch.full((self.B * self.Q,) + tuple(x.shape[1:]), fill, dtype=x.dtype, device=x.device)
        out[self.q_dst] = x
        return out

    def unpad(self, x) -> torch.Tensor:
        return x[self.q_dst]


def _in_range(what: str, idx: np.ndarray, size: int, allow_minus_one: bool = False) -> None:
    """`PageIndexError` unless every index is in [0, size) (-1 allowed with `allow_minus_one`)."""
    idx = np.asarray(idx, dtype=np.int64)
    bad = idx[(idx >= size) | (idx < (-1 if allow_minus_one else 0))]
    if bad.size:
        raise PageIndexError(f"{what} {int(bad[0])} is out of range [0, {size})")


__all__ = ["HybridSpec", "SyntheticHybridModel", "MissingSwaPage", "PageIndexError", "Segment", "sdpa_backend"]
