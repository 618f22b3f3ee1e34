#!/usr/bin/env python3
"""Replay a trace through SGLang 0.5.23's UnifiedRadixCache with an SWA or a MAMBA component
(issue 31 item 2): the hybrid counterpart of ``shared/tools/sglang_ref/run_sglang_radix.py``,
which has FULL only. Runs in the sglang_ref venv (``~/.cache/sglang-ref/bin/python``); imports
that harness's ``sglang_stubs`` (``--harness``) and SGLang's own classes; no SGLang code copied.

The cache is built on CPU as SGLang's hybrid models build it, with tiny KV tensors (one head of
dimension 8, one full-attention layer and one SWA / linear-attention layer):

- ``--component swa``: ``SWAKVPool`` + ``SWATokenToKVPoolAllocator`` (full and SWA pools; each
  full slot maps to an SWA slot), ``tree_components=(FULL, SWA)``, ``sliding_window_size=W``;
- ``--component mamba``: ``HybridReqToTokenPool`` (its ``MambaPool`` and slot allocator) +
  ``HybridLinearKVPool`` + ``TokenToKVPoolAllocator``, ``tree_components=(FULL, MAMBA)``;
- ``--impl python`` (the Python UnifiedTreeCore) or ``--impl rust`` (the bundled Rust TreeCore;
  SGLang's registry falls back to Python for components it does not support: refused here).

One request, as the scheduler calls the cache (sequential, no batching):

1. ``match_prefix`` capped at len(prompt) - 1 -> cached tokens (the component's validator:
   SWA needs the window before the boundary, MAMBA a state at it);
2. ``lock``; evict for the shortfall (full and SWA tokens; one MAMBA slot), then allocate the
   extend + decoded tokens and (MAMBA) one state slot;
3. finish: SWA frees the request's own slots that fell out of the window (the decode loop's
   ``swa_evicted_seqlen``) and inserts with ``component_evicted_seqlens`` (they become
   tombstones); MAMBA inserts the state slot (freed when the node already had one); then the
   prompt is inserted again (the split at the prompt boundary; MAMBA with a state slot of its
   own, as cache_unfinished_req copies one), unlock.

Output lines as the shared harness's: ``{"rid","prompt_tokens","cached_tokens","kv_tokens",
"evicted_tokens","match_us","alloc_us","insert_us","t_us"}`` then a summary line.

    ~/.cache/sglang-ref/bin/python benchmarks/sglang_hybrid_ref.py TRACE.jsonl --component swa
        --impl python --window 128 [--capacity N] [--swa-capacity N] [--mamba-slots N]
        [--harness ../shared/tools/sglang_ref] -o OUT.jsonl
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from array import array
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent


def fail(msg: str) -> None:
    print(f"sglang_hybrid_ref: {msg}", file=sys.stderr)
    sys.exit(2)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--component", choices=("swa", "mamba", "full"), required=True)
    ap.add_argument("--paired", default="", help="comma-separated caches (full,swa,mamba) that serve each request "
                                                  "right after --component's, timed the same way (in the row under "
                                                  "their name): a difference measured under the same machine load")
    ap.add_argument("--impl", choices=("python", "rust"), default="python")
    ap.add_argument("--window", type=int, default=128, help="SWA sliding window (tokens)")
    ap.add_argument("--capacity", type=int, default=0, help="full KV slots (0: the whole trace)")
    ap.add_argument("--swa-capacity", type=int, default=0, help="SWA slots (0: as --capacity)")
    ap.add_argument("--mamba-slots", type=int, default=0, help="MAMBA state slots (0: two per request + 2)")
    ap.add_argument("--harness", default=os.environ.get("SGLANG_REF", str(HERE.parent.parent / "shared" / "tools"
                                                                          / "sglang_ref")))
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args(argv)
    a.paired = [k for k in a.paired.split(",") if k]
    bad = [k for k in a.paired if k not in ("full", "swa", "mamba")]
    if bad:
        fail(f"--paired: {bad[0]!r}: expected full, swa or mamba")
    if not (Path(a.harness) / "sglang_stubs.py").is_file():
        fail(f"--harness: {a.harness}: no sglang_stubs.py; expected the sglang_ref directory")
    for name in ("window", "capacity", "swa_capacity", "mamba_slots"):
        if getattr(a, name) < (1 if name == "window" else 0):
            fail(f"--{name.replace('_', '-')}: expected a non-negative integer (window >= 1), got {getattr(a, name)}")
    return a


def read_trace(path):
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines()):
        if line.strip():
            o = json.loads(line)
            out.append((str(o.get("rid", i)), [int(t) for t in o["tokens"]],
                        [int(t) for t in o.get("output_tokens", [])]))
    return out


def load_sglang(harness: str) -> SimpleNamespace:
    """SGLang's classes (and torch) in one namespace, after the shared harness's stubs are installed."""
    sys.path.insert(0, harness)
    import sglang_stubs  # noqa: E402

    sglang_stubs.install()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.environ import envs
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool, ReqToTokenPool
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    sa = ServerArgs(model_path="dummy", page_size=1)
    sa._mamba_cache_chunk_size = 64  # no HF config to read it from (SGLang's own unit tests preset it too)
    set_global_server_args_for_scheduler(sa)
    return SimpleNamespace(
        torch=torch, Mamba2CacheParams=Mamba2CacheParams, Mamba2StateShape=Mamba2StateShape, envs=envs,
        TokenToKVPoolAllocator=TokenToKVPoolAllocator, SWATokenToKVPoolAllocator=SWATokenToKVPoolAllocator,
        EvictParams=EvictParams, InsertParams=InsertParams, MatchPrefixParams=MatchPrefixParams,
        CacheInitParams=CacheInitParams, HybridLinearKVPool=HybridLinearKVPool,
        HybridReqToTokenPool=HybridReqToTokenPool, ReqToTokenPool=ReqToTokenPool, RadixKey=RadixKey,
        SWAKVPool=SWAKVPool, ComponentType=ComponentType, UnifiedRadixCache=UnifiedRadixCache)


def mamba_pools(S, a, sizes):
    """(req pool with its MambaPool, KV allocator, components) as SGLang's hybrid linear-attention models build them."""
    N, longest, n_reqs = sizes
    dev, dt = "cpu", S.torch.bfloat16
    slots = a.mamba_slots or 2 * n_reqs + 2
    with S.envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
        shape = S.Mamba2StateShape.create(tp_world_size=1, intermediate_size=16, n_groups=1, num_heads=1,
                                          head_dim=16, state_size=4, conv_kernel=4)
        params = S.Mamba2CacheParams(shape=shape, layers=[0])
    pool = S.HybridReqToTokenPool(size=2, mamba_size=slots, mamba_spec_state_size=2, max_context_len=longest,
                                  device=dev, enable_memory_saver=False, cache_params=params,
                                  mamba_layer_ids=[0], enable_mamba_extra_buffer=False,
                                  speculative_num_draft_tokens=3)
    kv = S.HybridLinearKVPool(size=N, dtype=dt, page_size=1, head_num=1, head_dim=8,
                              full_attention_layer_ids=[1], device=dev, enable_memory_saver=False,
                              mamba_pool=pool.mamba_pool)
    alloc = S.TokenToKVPoolAllocator(size=N, dtype=dt, device=dev, kvcache=kv, need_sort=False)
    return pool, alloc, (S.ComponentType.FULL, S.ComponentType.MAMBA)


def swa_pools(S, a, sizes):
    """(req pool, SWA allocator over full and SWA pools, components) as SGLang's SWA models build them."""
    N, longest, _ = sizes
    dev, dt = "cpu", S.torch.bfloat16
    NS = a.swa_capacity or N
    pool = S.ReqToTokenPool(size=2, max_context_len=longest, device=dev, enable_memory_saver=False)
    kv = S.SWAKVPool(size=N, size_swa=NS, page_size=1, dtype=dt, head_num=1, head_dim=8,
                     swa_attention_layer_ids=[0], full_attention_layer_ids=[1], device=dev)
    alloc = S.SWATokenToKVPoolAllocator(size=N, size_swa=NS, page_size=1, dtype=dt, device=dev, kvcache=kv,
                                        need_sort=False)
    return pool, alloc, (S.ComponentType.FULL, S.ComponentType.SWA)


def build_cache(S, a, kind, sizes):
    """(req pool, allocator, window, UnifiedRadixCache) of one kind (full, swa or mamba); sizes =
    (full KV slots, longest request + 2, number of requests)."""
    window = None
    if kind == "mamba":
        pool, alloc, comps = mamba_pools(S, a, sizes)
    elif kind == "swa":
        pool, alloc, comps = swa_pools(S, a, sizes)
        window = a.window
    else:  # FULL only, as the shared harness's --impl unified / unified-rust
        pool = None
        alloc = S.TokenToKVPoolAllocator(sizes[0], S.torch.int64, "cpu", None, False)
        comps = (S.ComponentType.FULL,)
    cache = S.UnifiedRadixCache(params=S.CacheInitParams(
        req_to_token_pool=pool, token_to_kv_pool_allocator=alloc, page_size=1, disable=False,
        sliding_window_size=window, tree_components=comps, eviction_policy="lru", tree_core_backend=a.impl))
    return pool, alloc, window, cache


class Replayer:
    """One cache (full, swa or mamba) and its pools; `run_one` serves a request."""

    def __init__(self, S, a, kind, sizes):
        self.S, self.kind = S, kind
        self.pool, self.alloc, self.window, self.cache = build_cache(S, a, kind, sizes)
        self.tree_core = type(self.cache.tree_core).__name__
        if (a.impl == "rust") != (self.tree_core == "RustUnifiedTreeCore"):
            fail(f"--impl {a.impl}: SGLang built {self.tree_core} for {kind}")
        self.evicted = 0

    def evict_for(self, n):
        """Evict for the shortfall of n tokens (and, MAMBA, one state slot): the tokens evicted."""
        S, cache, alloc, kind = self.S, self.cache, self.alloc, self.kind
        if kind == "swa":
            short_full = n - alloc.full_available_size()
            short_swa = n - alloc.swa_available_size()
            if short_full > 0 or short_swa > 0:
                return cache.evict_for_alloc(S.EvictParams(num_tokens=max(short_full, 0),
                                                           swa_num_tokens=max(short_swa, 0))).num_tokens_evicted
        elif kind == "mamba":
            short_full = n - alloc.available_size()
            short_mamba = 1 - self.pool.mamba_allocator.available_size()
            if short_full > 0 or short_mamba > 0:
                return cache.evict_for_alloc(S.EvictParams(num_tokens=max(short_full, 0),
                                                           mamba_num=max(short_mamba, 0))).num_tokens_evicted
        elif n - alloc.available_size() > 0:
            return cache.evict_for_alloc(S.EvictParams(num_tokens=n - alloc.available_size())).num_tokens_evicted
        return 0

    def insert(self, tokens, seq, row, prefix_len, slot):
        """Insert the request (SWA: its slots out of the window freed, as tombstones; MAMBA: its
        state slot), then the prompt again with a state slot of its own (MAMBA)."""
        S, cache, alloc, kind = self.S, self.cache, self.alloc, self.kind
        lp, kv_len = len(tokens), len(seq)
        ins = S.InsertParams(key=S.RadixKey(seq), value=row[:kv_len].clone(), prev_prefix_len=prefix_len)
        if kind == "swa":
            ws = kv_len - self.window  # the request's own slots before its last window left the SWA pool
            if ws > prefix_len:
                alloc.free_swa(row[prefix_len:ws])
                ins.component_evicted_seqlens = {S.ComponentType.SWA: ws}
        elif kind == "mamba":
            ins.mamba_value = slot
        res = cache.insert(ins)
        if kind == "mamba" and res.mamba_exist:
            self.pool.mamba_allocator.free(slot)
        if 0 < lp < kv_len:
            pins = S.InsertParams(key=S.RadixKey(array("q", tokens)), value=row[:lp].clone(), prev_prefix_len=lp,
                                  inserted_len=lp, priority=1)
            if kind == "mamba":  # a state at the prompt boundary: its own slot (cache_unfinished_req copies one)
                pins.mamba_value = self.pool.mamba_allocator.alloc(1)
            if kind != "mamba" or pins.mamba_value is not None:
                pres = cache.insert(pins)
                if kind == "mamba" and pres.mamba_exist:
                    self.pool.mamba_allocator.free(pins.mamba_value)

    def run_one(self, rid, tokens, outputs):
        S, cache, kind = self.S, self.cache, self.kind
        t0 = time.perf_counter()
        lp = len(tokens)
        seq = array("q", tokens)
        if outputs:
            seq.extend(outputs[:-1])
        kv_len = len(seq)
        m = cache.match_prefix(S.MatchPrefixParams(key=S.RadixKey(array("q", tokens), limit=max(lp - 1, 0))))
        prefix_len, last = m.device_prefix_len, m.last_device_node
        t1 = time.perf_counter()
        lock = cache.lock(last)
        prefix_idx = cache.path_device_indices(last)[:prefix_len]
        n = kv_len - prefix_len
        evicted = self.evict_for(n)
        new_idx = self.alloc.alloc(n)
        slot = self.pool.mamba_allocator.alloc(1) if kind == "mamba" else None
        t2 = time.perf_counter()
        rec = {"rid": rid, "prompt_tokens": lp, "cached_tokens": prefix_len, "kv_tokens": kv_len,
               "evicted_tokens": evicted}
        if new_idx is None or (kind == "mamba" and slot is None):
            cache.unlock(lock)
            rec["oom"] = True
            return rec
        self.evicted += evicted
        row = S.torch.cat([prefix_idx.to(S.torch.int64), new_idx.to(S.torch.int64)])
        self.insert(tokens, seq, row, prefix_len, slot)
        cache.unlock(lock)
        t3 = time.perf_counter()
        rec.update(match_us=round((t1 - t0) * 1e6, 1), alloc_us=round((t2 - t1) * 1e6, 1),
                   insert_us=round((t3 - t2) * 1e6, 1), t_us=round((t3 - t0) * 1e6, 1))
        return rec


def replay(reqs, kinds, reps):
    """[row per request]: the first kind's record, each paired kind's timings under its name."""
    rows_out = []
    for rid, tokens, outputs in reqs:
        rec = None
        for k in kinds:  # the paired caches serve the same request right after: the same machine load
            r = reps[k].run_one(rid, tokens, outputs)
            if rec is None:
                rec = r
            else:
                rec[k] = {g: r.get(g) for g in ("cached_tokens", "match_us", "alloc_us", "insert_us", "t_us", "oom")
                          if g in r}
        rows_out.append(rec)
    return rows_out


def summary(a, kinds, reps, rows_out, wall):
    tot_p = sum(r["prompt_tokens"] for r in rows_out)
    tot_c = sum(r["cached_tokens"] for r in rows_out)
    return {"summary": True, "component": a.component, "impl": a.impl, "tree_core": reps[a.component].tree_core,
            "window": reps[a.component].window, "paired": kinds[1:],
            "num_requests": len(rows_out), "total_prompt_tokens": tot_p, "total_cached_tokens": tot_c,
            "hit_rate": tot_c / tot_p if tot_p else 0.0, "total_evicted_tokens": reps[a.component].evicted,
            "oom_requests": sum(1 for r in rows_out if r.get("oom")), "wall_s": round(wall, 3)}


def main(argv=None) -> int:
    a = parse(argv)
    reqs = read_trace(a.trace)
    S = load_sglang(a.harness)
    need = sum(len(t) + len(o) for _, t, o in reqs) + 2
    sizes = (a.capacity or need, max(len(t) + len(o) for _, t, o in reqs) + 2, len(reqs))
    kinds = [a.component] + [k for k in a.paired if k != a.component]
    reps = {k: Replayer(S, a, k, sizes) for k in kinds}
    wall0 = time.perf_counter()
    rows_out = replay(reqs, kinds, reps)
    summ = summary(a, kinds, reps, rows_out, time.perf_counter() - wall0)
    with open(a.out, "w") as fh:
        for r in rows_out + [summ]:
            fh.write(json.dumps(r) + "\n")
    print(json.dumps(summ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
