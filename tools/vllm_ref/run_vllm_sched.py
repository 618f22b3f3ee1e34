"""Drive vLLM 0.33.0's own v1 `Scheduler` step by step (CPU, no model): the reference for
radixsim's `engine.kind: vllm` scheduler (cache_core/vllm_sched.py).

The scheduler is built with its real `SchedulerConfig` and `KVCacheConfig` (one full-attention
group) and a namespace standing in for the rest of `VllmConfig` (no model, no parallelism, no
connector, no speculative decoding, synchronous scheduling). Each step: `schedule()`, then a stub
model output that samples one token (the request's next given output token) for every request
whose computed tokens reach its tokens after the step (a finished prefill or a decode; none for a
prefill chunk), passed to `update_from_output()`; until no request is left.

usage: python run_vllm_sched.py < CONFIGS.json   (a list of configs; one result each, in order)
CONFIG: {"block_size", "num_blocks", "max_num_batched_tokens", "max_num_seqs",
         "enable_chunked_prefill", "requests": [[rid, [prompt tokens], [output tokens]], ...]}
Output (JSON): {"steps": [[[rid, tokens], ...] per step, in schedule order], "preempted": [rid, ...],
"cached": {rid: hit at its first scheduling}, "evicted": [block id, ...], "free_queue": [[id, hashed], ...]}
"""
from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vllm_stubs  # noqa: E402

vllm_stubs.install()
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import torch  # noqa: E402

from vllm.config.scheduler import SchedulerConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402

MAX_MODEL_LEN = 1 << 20


class Namespace(SimpleNamespace):
    """A config stand-in: an attribute the scheduler reads and this harness did not set is None."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def build(cfg: dict) -> Scheduler:
    B, N = cfg["block_size"], cfg["num_blocks"]
    # without chunked prefill vLLM needs max_num_batched_tokens >= max_model_len (arg_utils raises the budget)
    max_len = MAX_MODEL_LEN if cfg["enable_chunked_prefill"] else cfg["max_num_batched_tokens"]
    sched = SchedulerConfig(max_num_batched_tokens=cfg["max_num_batched_tokens"], max_num_seqs=cfg["max_num_seqs"],
                            enable_chunked_prefill=cfg["enable_chunked_prefill"], max_model_len=max_len,
                            is_encoder_decoder=False)
    model = Namespace(uses_mrope=False, is_encoder_decoder=False, max_model_len=max_len, is_diffusion=False,
                      return_sampling_mask=False, runner_type="generate", supports_multimodal_inputs=False)
    vc = Namespace(
        scheduler_config=sched, model_config=model, lora_config=None, kv_events_config=None,
        cache_config=Namespace(enable_prefix_caching=True, num_gpu_blocks=N, mamba_cache_mode="none",
                               enable_mamba_shared_prefix_checkpoint=False, block_size=B),
        parallel_config=Namespace(data_parallel_index=0, data_parallel_size=1, pipeline_parallel_size=1,
                                  decode_context_parallel_size=1, prefill_context_parallel_size=1),
        observability_config=Namespace(per_request_spec_decode_metrics=False, kv_cache_metrics=False,
                                       enable_mfu_metrics=False),
        is_mm_encoder_only=False, ec_transfer_config=None, kv_transfer_config=None, max_concurrent_batches=1,
        speculative_config=None, num_hash_lookahead_tokens=0, num_lookahead_tokens=0, num_prefill_lookahead_tokens=0,
        num_speculative_tokens=0, max_in_flight_tokens=None, aux_output_config=Namespace(enabled=False),
        ec_manager_config=Namespace(get_encoder_cache_manager_obj=lambda: None))
    spec = FullAttentionSpec(block_size=B, num_kv_heads=1, head_size=1, dtype=torch.float16)
    kvc = KVCacheConfig(num_blocks=N, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    structured = Namespace(accept_tokens=lambda request, tokens: True)  # no grammar: every token accepted
    return Scheduler(vc, kvc, structured_output_manager=structured, block_size=B)


def run(cfg: dict) -> dict:
    s = build(cfg)
    pool = s.kv_cache_manager.block_pool
    evicted: list = []
    evict = pool._maybe_evict_cached_block

    def logged(block):  # observe the pool's own eviction, change nothing
        dropped = evict(block)
        if dropped:
            evicted.append(block.block_id)
        return dropped

    pool._maybe_evict_cached_block = logged
    init_none_hash(get_hash_fn_by_name("sha256"))
    hasher = get_request_block_hasher(cfg["block_size"], get_hash_fn_by_name("sha256"))
    outputs, reqs = {}, {}
    for rid, prompt, out in cfg["requests"]:
        r = Request(str(rid), list(prompt), SamplingParams(max_tokens=len(out), ignore_eos=True), None,
                    block_hasher=hasher)
        outputs[str(rid)], reqs[str(rid)] = list(out), r
        s.add_request(r)
    steps, preempted, cached = [], [], {}
    while s.has_requests():
        so = s.schedule()
        steps.append([[rid, n] for rid, n in so.num_scheduled_tokens.items()])
        preempted += sorted(so.preempted_req_ids or ())
        for nr in so.scheduled_new_reqs:
            cached.setdefault(nr.req_id, nr.num_computed_tokens)
        ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            r = reqs[rid]
            done = r.num_computed_tokens >= r.num_tokens  # advanced by the schedule already
            sampled.append([outputs[rid][len(r.output_token_ids)]] if done else [])
        s.update_from_output(so, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                                   sampled_token_ids=sampled))
        if len(steps) > 100_000:
            raise SystemExit("run_vllm_sched: more than 100,000 steps")
    queue = [[b.block_id, b.block_hash is not None] for b in pool.free_block_queue.get_all_free_blocks()]
    return {"steps": steps, "preempted": preempted, "cached": cached, "evicted": evicted, "free_queue": queue}


if __name__ == "__main__":
    json.dump([run(cfg) for cfg in json.load(sys.stdin)], sys.stdout)
