"""The batch of one batched forward (`SyntheticHybridModel.forward_batch`): requests as
`Segment`s over their page tables, every index tensor built on the host before layer 0 and sent
in one upload (`_Upload`), the attention calls grouped by shape (`_Keys`: unmasked SDPA where the
shapes allow, one padded masked call for the rest), and page indices range-checked before any
kernel (`PageIndexError`). Split from `gpu_backend/model.py`, which holds the layers."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.attention.bias import causal_lower_right  # imported once here: seconds, never in a step

from .staging import PageIndexError, check_in_range, pages_array


class MissingSwaPage(ValueError):
    """A sliding-window layer needs KV of a position whose SWA page is -1 (not kept)."""


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
    seed_slot: int | None = None  # the slot the state resumes from, if not ``state_slot`` (read at the layer)


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


class Batch:
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
        full, swa = pages_array(seg.full_pages), pages_array(seg.swa_pages)
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
                check_in_range(f"forward: {name} page", pages[:need], self.pools.size("L1", comp), allow_minus_one=True)
        return {"full": full, "swa": swa}

    def _state_plan(self, up: _Upload, h: dict) -> None:
        """Which segments resume a stored state, and which padded rows of the state trajectory
        go to which slots (the final state, and `saves`)."""
        resume, slots, seeds, rows, dst = [], [], [], [], []
        for i, (seg, n) in enumerate(zip(self.segs, self.n)):
            slot = -1 if seg.state_slot is None else int(seg.state_slot)
            slots.append(slot)
            seeds.append(slot if seg.seed_slot is None else int(seg.seed_slot))
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
            check_in_range("forward: state slot", np.asarray(slots + seeds + dst, dtype=np.int64),
                           self.pools.size("L1", "state"), allow_minus_one=True)
        h.update(resume=up.add(resume), slots=up.add(slots), seeds=up.add(seeds), save_rows=up.add(rows),
                 save_slots=up.add(dst))

    def pad(self, x, fill: float = 0.0) -> torch.Tensor:
        """[N, ...] -> [B * Q, ...] (padded rows = fill)."""
        out = torch.full((self.B * self.Q,) + tuple(x.shape[1:]), fill, dtype=x.dtype, device=x.device)
        out[self.q_dst] = x
        return out

    def unpad(self, x) -> torch.Tensor:
        return x[self.q_dst]


__all__ = ["Batch", "MissingSwaPage", "PageIndexError", "Segment"]
