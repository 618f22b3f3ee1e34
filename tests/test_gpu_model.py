"""gpu_backend: the synthetic hybrid model over paged KV equals the model without a cache.

Every pool starts filled with NaN and every page a request gives up is NaN-filled again, so
a read of any KV or state the forward should not need shows up as NaN in the logits.
Specs: FULL, FULL+SWA, FULL+REC, FULL+SWA+REC (hidden 64, 4 heads, page 4, window 8,
vocab 97); fp32 on CPU (and on CUDA too when it is there).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cache_core import CacheConfig, MambaConfig, RadixCache, ReplayStepper, SwaConfig, TokenSeq  # noqa: E402
from gpu_backend.model import MissingSwaPage, SyntheticHybridModel  # noqa: E402
from gpu_backend.pools import KVPools  # noqa: E402
from gpu_backend.spec import HybridSpec, interleave, scale_counts  # noqa: E402
from scenarios.presets import get_model  # noqa: E402

TOL = 1e-4
P, W = 4, 8
KINDS = {
    "full": ("full", "full", "full"),
    "full+swa": ("swa", "full", "swa", "full"),
    "full+rec": ("rec", "rec", "full", "rec", "full"),
    "full+swa+rec": ("swa", "rec", "full", "swa", "rec", "full"),
}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def make_spec(name):
    return HybridSpec(kinds=KINDS[name], hidden=64, num_heads=4, head_dim=16, window=W,
                      state_dim=32, vocab=97, page_size=P)


_MODELS = {}


def model_for(name, device="cpu"):
    if (name, device) not in _MODELS:
        _MODELS[name, device] = SyntheticHybridModel(make_spec(name), seed=7, device=device)
    return _MODELS[name, device]


def nan_pools(spec, layout="page_first", device="cpu", full=48, swa=48, slots=8, l2=None):
    l2 = l2 or {"full": full, "swa": swa, "state": slots}
    pools = KVPools(spec, full_pages={"L1": full, "L2": l2["full"]}, swa_pages={"L1": swa, "L2": l2["swa"]},
                    state_slots={"L1": slots, "L2": l2["state"]}, layout=layout, device=device)
    for tier in ("L1", "L2"):
        for comp in ("full", "swa", "state"):
            pools.tensor(tier, comp).fill_(float("nan"))
    return pools


def poison(pools, comp, idx, tier="L1"):
    t = pools.tensor(tier, comp)
    for i in idx:
        t.select(pools.page_dim, int(i)).fill_(float("nan"))


def tokens(n, seed):
    return torch.randint(0, 97, (n,), generator=torch.Generator().manual_seed(seed))


def perm(n, seed, count):
    """`count` distinct page indices out of n, scattered (not 0, 1, 2, ...)."""
    return [int(x) for x in np.random.default_rng(seed).permutation(n)[:count]]


def kept_swa(swa, length):
    """The core's rule after an insert of `length` tokens: only pages from
    w_lo = max(0, length - window_pages * P) keep SWA KV; the others become -1."""
    wp = -(-W // P)
    w_lo = max(0, length - wp * P)
    return [s if i * P >= w_lo else -1 for i, s in enumerate(swa)]


def close(a, b):
    assert not torch.isnan(a).any(), "NaN: the forward read KV or state it should not need"
    assert (a.cpu() - b.cpu()).abs().max().item() <= TOL


SPECS = list(KINDS)


# -- HybridSpec -----------------------------------------------------------------------------
def test_spec_from_presets_keeps_mix_and_order():
    q = HybridSpec.from_preset(get_model("qwen3-next-80b"), max_layers=8, hidden=64, vocab=97,
                               page_size=4)
    assert q.kinds == ("rec", "rec", "rec", "full") * 2
    g = HybridSpec.from_preset(get_model("gpt-oss-20b"), max_layers=4, hidden=64, page_size=4)
    assert g.kinds == ("swa", "full") * 2 and g.window == 128
    ink = HybridSpec.from_preset(get_model("inkling-small"), max_layers=8, hidden=64, page_size=4)
    assert ink.n_rec == 1 and ink.n_full >= 1 and ink.n_swa >= 1 and ink.num_layers == 8
    full = HybridSpec.from_preset(get_model("llama-3.1-8b"))
    assert full.kinds == ("full",) * 32 and full.num_heads == 8 and full.head_dim == 128
    assert scale_counts({"full": 1, "swa": 99, "rec": 0}, 4) == {"full": 1, "swa": 3, "rec": 0}
    assert interleave(1, 0, 3) == ("rec", "rec", "rec", "full")
    with pytest.raises(ValueError):
        scale_counts({"full": 1, "swa": 1, "rec": 1}, 2)
    with pytest.raises(ValueError):
        HybridSpec(kinds=("swa",), hidden=8, num_heads=1, head_dim=8, window=None, state_dim=1,
                   vocab=5, page_size=1)


# -- (a) prefix reuse, (b) through L2, (c) chunks ----------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", SPECS)
def test_prefix_reuse_equals_no_cache(name, device):
    m = model_for(name, device)
    toks, L = tokens(30, 1), 12
    ref = m.forward(toks)
    pools = nan_pools(m.spec, device=device)
    full, swa = perm(48, 2, 8), perm(48, 3, 8)
    a = m.forward(toks[:L], 0, full[:3], swa[:3], 5, pools)
    close(a, ref[:L])
    kept = kept_swa(swa[:3], L)
    poison(pools, "swa", [s for s, k in zip(swa[:3], kept) if k < 0])
    b = m.forward(toks[L:], L, full, kept + swa[3:], 5, pools)
    close(b, ref[L:])


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
@pytest.mark.parametrize("name", SPECS)
def test_prefix_reuse_after_l1_l2_l1_copies(name, layout):
    m = model_for(name)
    toks, L = tokens(30, 4), 12
    ref = m.forward(toks)
    pools = nan_pools(m.spec, layout=layout, l2={"full": 20, "swa": 20, "state": 4})
    full_a, swa_a = perm(48, 5, 3), perm(48, 6, 3)
    m.forward(toks[:L], 0, full_a, swa_a, 1, pools)
    kept = kept_swa(swa_a, L)
    keep_idx = [i for i, k in enumerate(kept) if k >= 0]
    # L1 -> L2 (scattered host pages) -> L1 (different device pages), then poison the originals
    full_h, swa_h = perm(20, 7, 3), perm(20, 8, len(keep_idx))
    pools.copy_pages("L1", "L2", "full", full_a, full_h).synchronize()
    pools.copy_pages("L1", "L2", "swa", [swa_a[i] for i in keep_idx], swa_h).synchronize()
    pools.copy_pages("L1", "L2", "mamba", [1], [3]).synchronize()
    poison(pools, "full", full_a)
    poison(pools, "swa", swa_a)
    poison(pools, "state", [1])
    free_full = [i for i in perm(48, 9, 48) if i not in full_a]
    free_swa = [i for i in perm(48, 10, 48) if i not in swa_a]
    full_b, swa_b = free_full[:3], free_swa[:len(keep_idx)]
    pools.copy_pages("L2", "L1", "full", full_h, full_b).synchronize()
    pools.copy_pages("L2", "L1", "swa", swa_h, swa_b).synchronize()
    pools.copy_pages("L2", "L1", "state", [3], [6]).synchronize()
    swa_prefix = [-1] * 3
    for i, s in zip(keep_idx, swa_b):
        swa_prefix[i] = s
    b = m.forward(toks[L:], L, full_b + free_full[3:8], swa_prefix + free_swa[3:8], 6, pools)
    close(b, ref[L:])


@pytest.mark.parametrize("name", SPECS)
def test_chunked_prefill_equals_no_cache(name):
    m = model_for(name)
    toks = tokens(41, 11)
    ref = m.forward(toks)
    pools = nan_pools(m.spec)
    full, swa = perm(48, 12, 11), perm(48, 13, 11)
    # a cached prefix, then the rest in uneven chunks (boundaries inside pages)
    out = [m.forward(toks[:8], 0, full, swa, 2, pools)]
    pos = 8
    for n in (5, 1, 7, 3, 9, 8):
        out.append(m.forward(toks[pos:pos + n], pos, full, swa, 2, pools))
        pos += n
    close(torch.cat(out), ref)


@pytest.mark.parametrize("name", ["full+swa", "full+swa+rec"])
def test_chunks_with_swa_pages_dropped_outside_the_window(name):
    """SWA pages wholly before the next chunk's window are given up (-1 and NaN) as they
    fall out: the swa layers read only the last W positions."""
    m = model_for(name)
    toks = tokens(37, 14)
    ref = m.forward(toks)
    pools = nan_pools(m.spec)
    full, swa = perm(48, 15, 10), perm(48, 16, 10)
    out, pos = [], 0
    for n in (6, 3, 10, 1, 9, 8):
        out.append(m.forward(toks[pos:pos + n], pos, full, swa, 0, pools))
        pos += n
        for i in range(len(swa)):
            if swa[i] >= 0 and (i + 1) * P <= pos - W + 1:
                poison(pools, "swa", [swa[i]])
                swa[i] = -1
    close(torch.cat(out), ref)


def test_missing_swa_page_raises():
    m = model_for("full+swa")
    toks = tokens(20, 17)
    pools = nan_pools(m.spec)
    m.forward(toks[:12], 0, list(range(3)), [0, 1, 2], None, pools)
    with pytest.raises(MissingSwaPage, match="page position"):
        m.forward(toks[12:], 12, list(range(5)), [0, -1, 2, 3, 4], None, pools)
    with pytest.raises(ValueError, match="share one"):
        m.forward(toks[12:], 12, list(range(5)), [0, 1, 2, 3, 3], None, pools)
    with pytest.raises(ValueError, match="FULL page covering"):
        m.forward(toks[12:], 12, [0, 1, 2, -1, 4], [0, 1, 2, 3, 4], None, pools)
    with pytest.raises(ValueError, match="FULL pages"):
        m.forward(toks[12:], 12, list(range(4)), [0, 1, 2, 3, 4], None, pools)


# -- (d) decode ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SPECS)
def test_greedy_decode_equals_no_cache_continuation(name):
    m = model_for(name)
    prompt = tokens(13, 18)
    want, want_logits = m.greedy_reference(prompt, 10)
    pools = nan_pools(m.spec)
    full, swa = perm(48, 19, 6), perm(48, 20, 6)
    m.forward(prompt[:8], 0, full[:2], swa[:2], 3, pools)  # a cached prefix, reused below
    got, got_logits = m.greedy_decode(prompt, 10, full, swa, 3, pools, start=8)
    assert got == want
    close(got_logits, want_logits)


# -- recurrent checkpoints -------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
@pytest.mark.parametrize("name", ["full+rec", "full+swa+rec"])
def test_state_checkpoint_reused_by_two_continuations_stays_identical(name, layout):
    m = model_for(name)
    L = 12
    prefix = tokens(L, 21)
    cont = [tokens(9, 22), tokens(14, 23)]
    pools = nan_pools(m.spec, layout=layout)
    ckpt = 0
    m.forward(prefix, 0, [0, 1, 2], [0, 1, 2], ckpt, pools)
    kept = kept_swa([0, 1, 2], L)
    poison(pools, "swa", [0])
    state0 = pools.tensor("L1", "state").select(pools.page_dim, ckpt).clone()
    full0 = pools.tensor("L1", "full").index_select(pools.page_dim, torch.tensor([0, 1, 2])).clone()
    for j, c in enumerate(cont):
        slot = 1 + j
        pools.copy_state("L1", ckpt, slot)
        own = [3 + 10 * j + i for i in range(6)]
        out = m.forward(c, L, [0, 1, 2] + own, kept + own, slot, pools)
        close(out, m.forward(torch.cat([prefix, c]))[L:])
        assert torch.equal(pools.tensor("L1", "state").select(pools.page_dim, ckpt), state0)
    assert torch.equal(pools.tensor("L1", "full").index_select(pools.page_dim, torch.tensor([0, 1, 2])), full0)


# -- the core's indices are the pools' indices -----------------------------------------------
def test_core_slots_drive_the_pools():
    """A request served by the core (FULL + SWA + MAMBA); a second one reuses its prefix with
    the indices the core hands out: `slots_of` pages, its own pages, `finalize`'s CopyState."""
    m = model_for("full+swa+rec")
    cache = RadixCache(CacheConfig(page_size=P, capacity_tokens=64 * P,
                                   swa=SwaConfig(window_tokens=W, capacity_tokens=32 * P),
                                   mamba=MambaConfig(slots=8)))
    pools = nan_pools(m.spec, full=64, swa=32, slots=8)
    first = tokens(22, 24)
    ReplayStepper(cache).step(first.numpy())
    second = torch.cat([first[:20], tokens(10, 25)])
    seq = TokenSeq(second.numpy())
    m2 = cache.match(seq, (len(second) - 1) // P * P)
    assert m2.cached_tokens == 20
    cache.lock(m2)
    private = int(cache.mamba.acquire(1)[0])
    (copy,) = cache.finalize(m2, {"mamba": [private]})
    slots = cache.slots_of(seq, 20)
    assert (slots["swa"][:3] == -1).all() and (slots["swa"][3:] >= 0).all()
    # the first request's KV and state, where the core keeps them (computed after the fact)
    m.forward(first[:20], 0, slots["full"], slots["swa"], copy.src, pools)
    pools.copy_state(copy.tier, copy.src, copy.dst)
    own_full, own_swa = cache.alloc(3), cache.swa.alloc(3)
    out = m.forward(second[20:], 20, np.concatenate([slots["full"], own_full]),
                    np.concatenate([slots["swa"], own_swa]), private, pools)
    close(out, m.forward(second)[20:])
    cache.unlock(m2)
