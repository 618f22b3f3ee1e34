"""Replay a trace through vLLM 0.33.0's own v1 prefix cache (KVCacheManager + BlockPool), CPU.

The reference oracle for radixsim's `engine.kind: vllm` flavour (cache_core/vllm_blocks.py).
It imports vLLM from the package index (installed --no-deps by setup_venv.sh; no vLLM source is
copied here) and drives its real scheduler-side KV cache classes request by request, as
vLLM's scheduler calls them for one request at a time:

1. `Request(prompt, block_hasher=...)`: the request's parent-chained block hashes (sha256, the
   default `prefix_caching_hash_algo`) over its full blocks;
2. `get_computed_blocks(request)` -> (blocks, num_computed_tokens): the longest run of cached
   full blocks, at most `num_tokens - 1` tokens (the last prompt token is always recomputed);
3. `allocate_slots(request, P - hit, hit, blocks)`: touches the hit blocks, takes new blocks from
   the free queue's head (evicting their hashes), caches the prompt's full blocks; None = the
   prompt does not fit: the request is rejected, nothing changes;
4. decode: each output token but the last is appended (new block hashes) and computed with
   `allocate_slots(request, 1)`, which caches each block as it fills; None = out of blocks:
   decoding stops there;
5. `free(request)`: blocks freed in reverse order (hashed ones to the free queue's tail, the
   tail block first; unhashed ones to its head).

usage: python run_vllm_blocks.py TRACE.jsonl --block-size 16 --num-blocks 4097 [-o OUT] [--quiet]

Trace lines (as ../shared/tools/sglang_ref): {"rid","tokens":[...]} or {"rid","hash_ids":[...],
"block_size":B} (hash id h -> tokens h*B .. h*B+B-1, cut to "input_length" when given),
optionally "output_tokens":[...] or "output_len"/"output_length" (unique negative ids).
Output: one JSON line per request {"rid","prompt_tokens","cached_tokens","oom","evicted_blocks"},
then {"summary":true,...,"wall_s","per_request_us"}.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vllm_stubs  # noqa: E402

vllm_stubs.install()
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import torch  # noqa: E402

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402


def read_trace(path, default_block_size=512):
    """(rid, prompt tokens, output tokens) per line; synthesised outputs are unique negative ids."""
    nxt = -1
    with open(path) as fh:
        for index, line in enumerate(x for x in fh if x.strip()):
            obj = json.loads(line)
            if "tokens" in obj:
                prompt = [int(t) for t in obj["tokens"]]
            else:
                bs = int(obj.get("block_size", default_block_size))
                prompt = [t for h in obj["hash_ids"] for t in range(int(h) * bs, int(h) * bs + bs)]
                if "input_length" in obj:
                    prompt = prompt[: int(obj["input_length"])]
            if "output_tokens" in obj:
                outputs = [int(t) for t in obj["output_tokens"]]
            else:
                n = int(obj.get("output_len", obj.get("output_length", 0)) or 0)
                outputs = list(range(nxt, nxt - n, -1))
                nxt -= n
            yield str(obj.get("rid", index)), prompt, outputs


class Replayer:
    """One vLLM KVCacheManager (one full-attention group) and the scheduler's call sequence."""

    def __init__(self, block_size: int, num_blocks: int, hash_algo: str = "sha256"):
        hash_fn = get_hash_fn_by_name(hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(block_size, hash_fn)
        spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float16)
        config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                               kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
        self.kv_cache_config = config
        self.manager = KVCacheManager(config, max_model_len=1 << 40, scheduler_block_size=block_size,
                                      hash_block_size=block_size, enable_caching=True)
        self.pool = self.manager.block_pool
        self.count = 0
        self.evicted: list[int] = []  # block ids whose hash the pool dropped, in order
        evict = self.pool._maybe_evict_cached_block

        def logged(block):  # observe BlockPool's own eviction, change nothing
            dropped = evict(block)
            if dropped:
                self.evicted.append(block.block_id)
            return dropped

        self.pool._maybe_evict_cached_block = logged

    def run_one(self, rid, prompt, outputs):
        """Cached tokens of one request and the block ids whose hashes it evicted, in order."""
        self.count += 1
        first = len(self.evicted)
        req = Request(f"{rid}#{self.count}", list(prompt), SamplingParams(max_tokens=max(1, len(outputs))),
                      None, block_hasher=self.hasher)
        blocks, hit, _ = self.manager.get_computed_blocks(req)
        row = {"rid": rid, "prompt_tokens": len(prompt), "cached_tokens": hit, "oom": False, "evicted_blocks": []}
        if self.manager.allocate_slots(req, len(prompt) - hit, hit, blocks) is None:
            row["oom"] = True
            return row
        req.status = RequestStatus.RUNNING
        req.num_computed_tokens = len(prompt)
        for tok in outputs[:-1]:
            req.append_output_token_ids(tok)
            if self.manager.allocate_slots(req, 1) is None:
                row["oom"] = True
                break
            req.num_computed_tokens += 1
        self.manager.free(req)
        row["evicted_blocks"] = self.evicted[first:]
        return row

    def free_queue(self):
        """Block ids in the free queue, head (next taken) first, with whether each is hashed."""
        return [(b.block_id, b.block_hash is not None) for b in self.pool.free_block_queue.get_all_free_blocks()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--block-size", type=int, default=16, help="vLLM's block size (its CUDA default: 16)")
    ap.add_argument("--num-blocks", type=int, required=True, help="blocks in the pool, block 0 (null) included")
    ap.add_argument("--trace-block-size", type=int, default=512, help="tokens per hash id in hash_ids traces")
    ap.add_argument("--hash-algo", default="sha256")
    ap.add_argument("--out", "-o", default="-")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    rp = Replayer(args.block_size, args.num_blocks, args.hash_algo)
    reqs = list(read_trace(args.trace, args.trace_block_size))
    out = sys.stdout if args.out == "-" else open(args.out, "w")
    total_p = total_c = ooms = 0
    t0 = time.perf_counter()
    for rid, prompt, outputs in reqs:
        row = rp.run_one(rid, prompt, outputs)
        total_p += row["prompt_tokens"]
        total_c += row["cached_tokens"]
        ooms += row["oom"]
        if not args.quiet:
            out.write(json.dumps(row) + "\n")
    wall = time.perf_counter() - t0
    out.write(json.dumps({"summary": True, "requests": len(reqs), "total_prompt_tokens": total_p,
                          "total_cached_tokens": total_c, "hit_rate": total_c / max(1, total_p),
                          "oom_requests": ooms, "wall_s": wall,
                          "per_request_us": 1e6 * wall / max(1, len(reqs))}) + "\n")
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
