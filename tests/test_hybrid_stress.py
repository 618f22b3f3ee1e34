"""Seeded random stress of the hybrid cache: FULL+SWA, FULL+MAMBA and FULL+SWA+MAMBA, each
with and without sidecars, page sizes 1 and 4.

Per composition at least 20,000 random operations in all (OPS = 4,000 per run, 8 or 10 runs:
page sizes 1 and 4 x balanced pools with and without sidecars, FULL exhausted, SWA exhausted,
MAMBA exhausted; the tiny-pool runs at P=4 carry sidecars too): `ReplayStepper.step`
on prompts cut from a few shared documents and from earlier requests (so matches, splits,
tombstones, healing and checkpoint reuse are frequent), direct `evict_swa`, `mamba.evict`
and `evict` calls of any size, bare matches, and locks held across other operations.

After EVERY operation `invariants.check(cache)` runs, and so do these exact checks:

- every match (bare or inside a step) gives the (cached, traversed, lost) an oracle computes
  from the tree *before* the call: walk the FULL path; a boundary b is accepted by SWA iff
  the ceil(W/P) pages before it (all of them when b < W) hold SWA pages, by MAMBA iff a node
  ends at b with a live checkpoint; cached = deepest boundary all accept; lost lists each
  component whose own deepest accepted boundary is short of the traversal;
- after a step that was not rejected: the sequence is in the tree; its live window
  [max(cached, end - ceil(W/P)P), end) holds SWA pages (each one either kept or computed by
  this request) while the part of the new leaf before it is tombstones; a checkpoint sits at
  the end; every-K checkpoints exist at every multiple of K in (cached, end) when the
  snapshot slots were granted; a reused checkpoint is copied
  (CopyState shared -> private), its slot is never handed out nor freed;
- evictions free at least what was asked (or everything evictable), exactly as counted by
  the pools;
- a held lock keeps its FULL pages, its SWA window pages and its checkpoint unchanged;
- with sidecars, every Alloc/Free names exactly the sidecars of its pool and `slots_of`
  gives each sidecar its source's indices;
- a rejected request leaves nothing behind (what it was given in the step is freed) and no
  CopyState; it is attributed to the first pool (FULL, SWA, MAMBA order) that gave it nothing.

Tiny-pool runs (FULL, SWA or MAMBA exhausted) must show that pool's evictions and rejections
attributed to that pool. Runs also assert they exercised what they are for (reuse of
checkpoints, snapshots, tombstones of both kinds, healing).
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from cache_core import (CacheConfig, MambaConfig, RadixCache, ReplayStepper, SidecarConfig,
                        SwaConfig, TokenSeq)
from cache_core import invariants
from cache_core.actions import Alloc, CopyState, Free
from helpers import mamba_pl, swa_pl

REASONS = {"swa": "SWA window incomplete", "mamba": "no MAMBA checkpoint at boundary"}
SIDECARS = (SidecarConfig(name="c4", follows="full"), SidecarConfig(name="c128", follows="full"),
            SidecarConfig(name="indexer", follows="full"), SidecarConfig(name="comp_a", follows="swa"),
            SidecarConfig(name="comp_b", follows="swa"))
SIDECARS_NO_SWA = tuple(s for s in SIDECARS if s.follows == "full")

ALPHABET = 3
OPS = 4000
# per page size: max sequence length, window tokens, every-K, balanced pools (FULL, SWA, slots)
SIZES = {
    1: dict(L=44, W=5, K=4, full=120, swa=30, slots=8, out=4),
    4: dict(L=150, W=10, K=8, full=400, swa=100, slots=8, out=10),
}
COMPOSITIONS = {"full+swa": (True, False), "full+mamba": (False, True), "full+swa+mamba": (True, True)}


def _variants(has_swa, has_mamba):
    v = ["balanced", "balanced+sidecars", "full_tiny"]
    if has_swa:
        v.append("swa_tiny")
    if has_mamba:
        v.append("mamba_tiny")
    return v


RUNS = [(comp, P, var) for comp, (s, m) in COMPOSITIONS.items() for P in (1, 4) for var in _variants(s, m)]
for _comp in COMPOSITIONS:
    assert sum(1 for c, _, _ in RUNS if c == _comp) * OPS >= 20_000


def make_config(comp, P, variant):
    has_swa, has_mamba = COMPOSITIONS[comp]
    z = SIZES[P]
    wp = -(-z["W"] // P)
    full, swa, slots = z["full"], z["swa"], z["slots"]
    if variant == "full_tiny":  # fewer FULL tokens than the longest request; others ample
        full, swa, slots = 24 if P == 1 else 96, 10 * full, 1000
    elif variant == "swa_tiny":  # room for one request's window and one more page
        full, swa, slots = 4 * full, (wp + 2) * P, 1000
    elif variant == "mamba_tiny":
        full, swa, slots = 4 * full, 10 * full, 1
    sidecars = ()
    if variant == "balanced+sidecars" or (variant.endswith("tiny") and P == 4):
        sidecars = SIDECARS if has_swa else SIDECARS_NO_SWA
    return CacheConfig(
        page_size=P, capacity_tokens=full,
        swa=SwaConfig(window_tokens=z["W"], capacity_tokens=swa) if has_swa else None,
        mamba=MambaConfig(slots=slots, every_tokens=z["K"] if (variant != "balanced" or P == 4) else None)
        if has_mamba else None,
        sidecars=sidecars)


# ---------------------------------------------------------------------------------------
# oracle: read-only views of the tree
# ---------------------------------------------------------------------------------------
def path(cache, tokens, n):
    t = TokenSeq(tokens)
    return cache.tree.path_nodes(t.data, min(n, t.length) // cache.page_size * cache.page_size)


def oracle_match(cache, tokens, limit):
    """(cached, traversed, lost) for a match of tokens[:limit], from the tree as it is."""
    P = cache.page_size
    nodes = path(cache, tokens, limit)
    trav = sum(k for _, k in nodes)
    bounds = range(P, trav + 1, P)
    accept = {}
    if cache.swa is not None:
        wp = -(-cache.swa.window // P)
        pages = (np.concatenate([swa_pl(nd).pages[: k // P] for nd, k in nodes])
                 if nodes else np.empty(0, dtype=np.int64))
        accept["swa"] = {b for b in bounds if (pages[max(0, b // P - wp): b // P] >= 0).all()}
    if cache.mamba is not None:
        accept["mamba"] = {nd.end for nd, k in nodes if k == nd.num_tokens
                           and mamba_pl(nd) is not None and mamba_pl(nd).slot >= 0}
    both = set(bounds)
    for s in accept.values():
        both &= s
    lost = tuple((name, trav - max(accept[name], default=0), REASONS[name])
                 for name in ("swa", "mamba") if name in accept and max(accept[name], default=0) < trav)
    return max(both, default=0), trav, lost


def node_at(cache, tokens, end):
    """The node on tokens' path that ends exactly at `end`, or None."""
    for nd, k in path(cache, tokens, end):
        if nd.end == end and k == nd.num_tokens:
            return nd
    return None


def ckpt_at(cache, tokens, end):
    nd = node_at(cache, tokens, end)
    pl = None if nd is None else mamba_pl(nd)
    return -1 if pl is None else pl.slot


def swa_evictable_pages(cache):
    tot = 0
    for n in cache.tree.iter_nodes():
        pl = swa_pl(n) if n.parent is not None else None
        if pl is not None and not pl.locks:
            tot += len(pl.pages) - pl.ntomb
    return tot


# ---------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------
class Run:
    def __init__(self, comp, P, variant, seed):
        self.rng = random.Random(seed)
        self.cfg = make_config(comp, P, variant)
        self.cache = RadixCache(self.cfg, record_actions=True)
        self.stepper = ReplayStepper(self.cache)
        self.P = P
        self.z = SIZES[P]
        self.wp = -(-self.z["W"] // P) if self.cache.swa is not None else 0
        rng = self.rng
        self.docs = [np.array([rng.randrange(ALPHABET) for _ in range(self.z["L"])], dtype=np.int64)
                     for _ in range(4)]
        self.history = []
        self.held = []  # (match, tokens, full pages, swa window pages, checkpoint slot)
        self.counts = {"step": 0, "rejected": 0, "reused_ckpt": 0, "healed": 0, "held_ops": 0,
                       "max_swa_tombstones": 0, "max_mamba_tombstones": 0, "snapshots": 0,
                       "rejected_full": 0, "rejected_swa": 0, "rejected_mamba": 0}
        self.follow = {"full": tuple(s.name for s in self.cfg.sidecars if s.follows == "full"),
                       "swa": tuple(s.name for s in self.cfg.sidecars if s.follows == "swa"), "mamba": ()}
        self.n_act = 0

    # -- inputs ---------------------------------------------------------------------------
    def tail(self, lo, hi):
        return np.array([self.rng.randrange(ALPHABET) for _ in range(self.rng.randint(lo, hi))], dtype=np.int64)

    def prompt(self):
        rng, L = self.rng, self.z["L"]
        r = rng.random()
        if r < 0.3 and self.history:
            h = rng.choice(self.history[-8:])
            p = np.concatenate([h, self.tail(0, 2 * self.P + 2)])
        elif r < 0.9:
            d = rng.choice(self.docs)
            p = np.concatenate([d[: rng.randint(1, L)], self.tail(0, self.P + 2)])
        else:
            p = self.tail(1, L)
        if len(p) == 0:
            p = self.tail(1, 3)
        return p[:L]

    # -- checks -----------------------------------------------------------------------------
    def new_actions(self):
        acts = self.cache.actions[self.n_act:]
        self.n_act = len(self.cache.actions)
        for a in acts:
            if not isinstance(a, CopyState):
                assert a.sidecars == self.follow[a.component], a
        return acts

    def check_held(self):
        c = self.cache
        for m, toks, full, win, slot in self.held:
            out = c.slots_of(toks, m.cached_tokens)
            assert np.array_equal(out["full"], full)
            if c.swa is not None:
                k = m.cached_tokens // self.P
                assert np.array_equal(out["swa"][max(0, k - self.wp): k], win)
            if c.mamba is not None and m.cached_tokens:
                assert ckpt_at(c, toks, m.cached_tokens) == slot

    def check_sidecars(self, toks):
        if self.cfg.sidecars:
            out = self.cache.slots_of(toks)
            for sc in self.cfg.sidecars:
                assert np.array_equal(out[sc.name], out[sc.follows])

    # -- operations ---------------------------------------------------------------------------
    def op_step(self):
        c, P = self.cache, self.P
        prompt = self.prompt()
        out = None if self.rng.random() < 0.5 else self.tail(1, self.z["out"])
        s = prompt if out is None or len(out) <= 1 else np.concatenate([prompt, out[:-1]])
        lp, aligned = len(prompt), len(s) // P * P
        want = oracle_match(c, prompt, max(lp - 1, 0) // P * P)
        pre = sum(k for _, k in path(c, s, aligned))
        sw_before = c.slots_of(s, aligned)["swa"] if c.swa is not None else None
        shared_slot = ckpt_at(c, prompt, want[0]) if (c.mamba is not None and want[0]) else -1
        r = self.stepper.step(prompt, out)
        self.counts["step"] += 1
        assert (r.cached_tokens, r.traversed_tokens, r.lost) == want
        acts = self.new_actions()
        self.check_sidecars(s)
        copies = [a for a in acts if isinstance(a, CopyState)]
        if r.rejected:
            self.counts["rejected"] += 1
            assert copies == []  # the finalizer runs only once every pool has said yes
            # nothing of the request stays: what it was given in this step goes back, and the
            # pool that said no is the first one (FULL, SWA, MAMBA order) it got nothing from
            got = {k: [i for a in acts if isinstance(a, Alloc) and a.component == k for i in a.indices]
                   for k in ("full", "swa", "mamba")}
            back = {k: [i for a in acts if isinstance(a, Free) and a.component == k for i in a.indices]
                    for k in ("full", "swa", "mamba")}
            assert got["mamba"] == []
            for k in ("full", "swa"):
                assert set(got[k]) <= set(back[k])
            why = ("full" if not got["full"] else "swa" if c.swa is not None and not got["swa"] else "mamba")
            self.counts["rejected_" + why] += 1
            return
        cached = r.cached_tokens
        self.history.append(s)
        full = c.slots_of(s, aligned)["full"]
        assert len(full) == aligned // P
        if c.swa is not None:
            sw = c.slots_of(s, aligned)["swa"]
            w_lo = max(cached, aligned - self.wp * P)
            assert (sw[w_lo // P: aligned // P] >= 0).all()
            assert (sw[pre // P: max(pre, w_lo) // P] == -1).all()
            # each window page is either the one that was there or one this request computed;
            # a present page is replaced only if it was freed meanwhile (evicted in this step)
            mine = {i for a in acts if isinstance(a, Alloc) and a.component == "swa" for i in a.indices}
            gone = {i for a in acts if isinstance(a, Free) and a.component == "swa" for i in a.indices}
            for j in range(w_lo // P, aligned // P):
                old = int(sw_before[j]) if j < len(sw_before) else -1
                if sw[j] != old:
                    assert sw[j] in mine and (old < 0 or old in gone), (j, old, sw[j])
            if r.evicted_tokens == 0:  # no node left the tree: positions < pre are old nodes
                lo, hi = w_lo // P, pre // P
                if hi > lo and (sw_before[lo:hi] < 0).any():
                    self.counts["healed"] += 1
        if c.mamba is not None:
            allocs = [a for a in acts if isinstance(a, Alloc) and a.component == "mamba"]
            assert len(allocs) == 1
            got = allocs[0].indices
            private = got[0]
            frees = {i for a in acts if isinstance(a, Free) and a.component == "mamba" for i in a.indices}
            reuse = [a for a in copies if a.dst == private]
            if cached:
                assert reuse == [CopyState("mamba", "L1", shared_slot, private, cached)]
                assert shared_slot not in frees and shared_slot not in got
                assert ckpt_at(c, s, cached) == shared_slot
                self.counts["reused_ckpt"] += 1
            else:
                assert reuse == []
            snaps = [a for a in copies if a.src == private]
            K = c.mamba.every
            self.counts["snapshots"] += len(snaps)
            for a in snaps:
                assert a.dst in got[1:] and K and a.at_tokens % K == 0 and cached < a.at_tokens < aligned
                assert ckpt_at(c, s, a.at_tokens) == a.dst
            if aligned > cached:
                assert ckpt_at(c, s, aligned) >= 0
                if K:
                    want_snaps = max(0, (aligned - 1) // K - cached // K)
                    if len(got) == 1 + want_snaps:
                        for q in range(cached // K * K + K, aligned, K):
                            assert ckpt_at(c, s, q) >= 0, q
                    else:
                        assert len(got) == 1 and not snaps

    def op_match(self):
        c = self.cache
        toks = self.prompt()
        limit = self.rng.randint(0, len(toks))
        want = oracle_match(c, toks, limit)
        m = c.match(toks, limit)
        assert (m.cached_tokens, m.traversed_tokens, m.lost) == want
        return toks, m

    def op_hold(self):
        if len(self.held) >= 3:
            return self.op_release()
        c = self.cache
        toks, m = self.op_match()
        c.lock(m)
        out = c.slots_of(toks, m.cached_tokens)
        k = m.cached_tokens // self.P
        win = out["swa"][max(0, k - self.wp): k].copy() if c.swa is not None else None
        if win is not None:
            assert (win >= 0).all()
        slot = ckpt_at(c, toks, m.cached_tokens) if (c.mamba is not None and m.cached_tokens) else -1
        if c.mamba is not None and m.cached_tokens:
            assert slot >= 0
        self.held.append((m, toks, out["full"].copy(), win, slot))
        self.counts["held_ops"] += 1

    def op_release(self):
        if self.held:
            m = self.held.pop(self.rng.randrange(len(self.held)))[0]
            self.cache.unlock(m)

    def op_evict_swa(self):
        c, P = self.cache, self.P
        k = self.rng.randint(1, 12 * P)
        used = c.stats()["swa"]["used_tokens"] // P
        evictable = swa_evictable_pages(c)
        free0 = c.swa.pool.free_pages
        got = c.swa.evict_tokens(k)
        assert got % P == 0
        assert got // P == c.swa.pool.free_pages - free0
        assert min(-(-k // P), evictable) * P <= got <= used * P

    def op_evict_mamba(self):
        c = self.cache
        k = self.rng.randint(1, 4)
        unlocked = sum(1 for n in c.tree.iter_nodes() if n.parent is not None and mamba_pl(n) is not None
                       and mamba_pl(n).slot >= 0 and mamba_pl(n).locks == 0)
        free0 = c.mamba.pool.free_pages
        got = c.mamba.evict(k)
        assert got == c.mamba.pool.free_pages - free0
        assert got >= min(k, unlocked)

    def op_evict_full(self):
        c, P = self.cache, self.P
        k = self.rng.randint(1, 16 * P)
        evictable = c.full.evictable_tokens
        free0 = c.free_tokens
        got = c.evict(k)
        assert got == c.free_tokens - free0
        assert got >= min(k, evictable)

    def run(self, ops):
        c = self.cache
        table = [(self.op_step, 60), (self.op_match, 8), (self.op_hold, 5), (self.op_release, 5),
                 (self.op_evict_full, 5)]
        if c.swa is not None:
            table.append((self.op_evict_swa, 8))
        if c.mamba is not None:
            table.append((self.op_evict_mamba, 8))
        fns, weights = zip(*table)
        for _ in range(ops):
            self.rng.choices(fns, weights)[0]()
            self.new_actions()
            invariants.check(c)
            self.check_held()
            if self.rng.random() < 0.05:
                st = c.stats()
                if c.swa is not None:
                    self.counts["max_swa_tombstones"] = max(self.counts["max_swa_tombstones"],
                                                            st["swa"]["tombstone_tokens"])
                if c.mamba is not None:
                    self.counts["max_mamba_tombstones"] = max(self.counts["max_mamba_tombstones"],
                                                              st["mamba"]["tombstone_nodes"])
        while self.held:
            self.op_release()
        invariants.check(c)
        return self


@pytest.mark.parametrize("comp,P,variant", RUNS, ids=[f"{c}-P{p}-{v}" for c, p, v in RUNS])
def test_hybrid_stress(comp, P, variant):
    seed = 1_000_003 * P + 7919 * list(COMPOSITIONS).index(comp) + 31 * _variants(*COMPOSITIONS[comp]).index(variant)
    run = Run(comp, P, variant, seed).run(OPS)
    st = run.cache.stats()
    n = run.counts
    # the run did what it is for: requests ran, reused and were checked
    assert n["step"] > OPS // 2 and n["held_ops"] > 0
    assert n["step"] - n["rejected"] > OPS // 4
    if run.cache.mamba is not None and run.cfg.mamba.slots == 1:
        # one slot: a request that reuses the (locked) checkpoint never gets a private slot
        assert n["reused_ckpt"] == 0 and st["mamba"]["copies"] == 0
    elif run.cache.mamba is not None:
        assert n["reused_ckpt"] > 0 and st["mamba"]["copies"] > 0 and n["max_mamba_tombstones"] > 0
        if run.cache.mamba.every:
            assert n["snapshots"] > 0
    if run.cache.swa is not None:
        assert n["max_swa_tombstones"] > 0
        if variant != "mamba_tiny":  # (with one MAMBA slot almost nothing is reused)
            assert n["healed"] > 0
    if variant == "full_tiny":
        assert st["full"]["evicted_tokens"] > 0 and n["rejected_full"] > 0
    elif variant == "swa_tiny":
        assert st["swa"]["evicted_tokens"] > 0 and st["swa"]["evicted_nodes"] > 0 and n["rejected_swa"] > 0
    elif variant == "mamba_tiny":
        assert st["mamba"]["evicted_slots"] > 0 and st["mamba"]["evicted_nodes"] > 0 and n["rejected_mamba"] > 0
