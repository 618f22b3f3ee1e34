"""Replay a trace through vLLM 0.33.0's prefix cache WITH its CPU KV offloading connector (CPU).

The reference oracle for radixsim's vLLM L2 (cache_core/vllm_offload.py). It drives vLLM's real
scheduler-side classes: `KVCacheManager` (+ `BlockPool`) as run_vllm_blocks.py does, and the
`OffloadingConnectorScheduler` of the OffloadingConnector
(vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py) over a real
`CPUOffloadingSpec` / `CPUOffloadingManager` with its LRU or ARC `CachePolicy`. The connector
is built from a normalised `OffloadingConfig` and a stub VllmConfig holding only the fields its
scheduler side reads (no model, no worker, no GPU). One request at a time, in the order
vllm/v1/core/sched/scheduler.py calls them, with every transfer reported done by the workers
at the end of the step that issued it:

step 1 (admission):  connector.on_new_request (add_request) -> get_computed_blocks ->
    connector.get_num_new_matched_tokens(request, local hit) -> CPU hit E tokens;
    E > 0 (an async load): allocate_slots(request, 0, local, blocks, num_external_computed_tokens=E,
        delay_cache_blocks=True) -> update_state_after_alloc(request, blocks, E) (prepare_load) ->
        build_connector_meta(nothing scheduled) -> the load completes (update_connector_output);
        step 2: cache_blocks(request, local + E) (a full-prompt hit recomputes the last token) ->
        allocate_slots(request, the rest) -> build_connector_meta(the request scheduled);
    E = 0: allocate_slots(request, P - local, local, blocks) -> update_state_after_alloc(.., 0) ->
        build_connector_meta(the request scheduled: its prompt chunks offered to prepare_store);
decode: one step per output token but the last: allocate_slots(request, 1) -> build_connector_meta;
finish: request_finished -> free -> one more (empty) step whose build_connector_meta carries
    finished_req_ids (vLLM's engine steps while has_finished_requests()): the last stores and
    manager.on_request_finished (the LRU/ARC recency of the request's chunks).
A request whose allocation fails is refused (as run_vllm_blocks.py; after a load: finished as
aborted). Decoding out of blocks stops there (finished).

usage: python run_vllm_offload.py TRACE.jsonl --block-size 16 --num-blocks 4097 --cpu-chunks 1000
       [--blocks-per-chunk 1] [--policy lru|arc] [--offload-all] [-o OUT] [--quiet]
Output: one JSON line per request {"rid","prompt_tokens","gpu_hit","cpu_hit","oom","stored","evicted",
"cpu_evicted"}: GPU-evicted block ids, CPU-evicted chunk indexes (prompt order of first store, as
"c<n>"), then a summary line.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from types import SimpleNamespace

from run_vllm_blocks import Replayer, read_trace  # noqa: E402  (installs the stubs)

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (  # noqa: E402
    OffloadingConnectorScheduler,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.kv_offload.config import (  # noqa: E402
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402

ALIGN = CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT  # one "worker byte block" per GPU block: chunks exact


def make_connector(kv_cache_config, block_size, cpu_chunks, blocks_per_chunk, policy, prompt_only):
    extra = {"cpu_bytes_to_use": cpu_chunks * blocks_per_chunk * ALIGN, "eviction_policy": policy,
             "offload_prompt_only": prompt_only}
    config = OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=block_size, layer_names=("layer.0",), group_id=0),),
        worker_kv_bytes_per_block=ALIGN, enable_kv_cache_events=False, extra_config=extra, engine_id="ref",
        model=OffloadingModelConfig(name="ref", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=block_size, blocks_per_chunk=blocks_per_chunk),
        parallel=OffloadingParallelConfig(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                                          data_parallel_index=0, data_parallel_size=1,
                                          data_parallel_rank_local=None, is_parallelism_agnostic=False))
    spec = CPUOffloadingSpec(config)
    assert spec.num_chunks == cpu_chunks, (spec.num_chunks, cpu_chunks)
    vllm_config = SimpleNamespace(
        cache_config=SimpleNamespace(prefix_cache_retention_interval=None, enable_prefix_caching=True),
        speculative_config=None, parallel_config=SimpleNamespace(world_size=1, decode_context_parallel_size=1))
    return OffloadingConnectorScheduler(spec, vllm_config, kv_cache_config)


def sched_output(new=(), cached=(), finished=()):
    """The SchedulerOutput fields the connector's scheduler side reads."""
    num = {r.request_id: n for r, _, n in new}
    num.update({r.request_id: n for r, _, n in cached})
    return SimpleNamespace(
        scheduled_new_reqs=[SimpleNamespace(req_id=r.request_id, block_ids=b) for r, b, _ in new],
        scheduled_cached_reqs=SimpleNamespace(req_ids=[r.request_id for r, _, _ in cached],
                                              new_block_ids=[b for _, b, _ in cached], resumed_req_ids=set()),
        num_scheduled_tokens=num, finished_req_ids=set(finished), preempted_req_ids=set(),
        kv_cache_block_copies=None, kv_connector_block_state=None)


class OffloadReplayer(Replayer):
    def __init__(self, block_size, num_blocks, cpu_chunks, blocks_per_chunk=1, policy="lru", prompt_only=True):
        super().__init__(block_size, num_blocks)
        self.block_size = block_size
        self.conn = make_connector(self.kv_cache_config, block_size, cpu_chunks, blocks_per_chunk, policy,
                                   prompt_only)
        self.cpu = self.conn.manager
        self.chunk_name: dict = {}  # offload key -> "c<n>", n in order of first store
        self.stored: list = []
        self.cpu_evicted: list = []
        orig = self.cpu.prepare_store

        def prepare_store(keys, ctx):  # observe the manager's own decisions, change nothing
            out = orig(keys, ctx)
            if out is not None:
                self.cpu_evicted.extend(self.chunk_name[k] for k in out.evicted_keys)
                for k in out.keys_to_store:
                    self.chunk_name.setdefault(k, "c%d" % len(self.chunk_name))
                    self.stored.append(self.chunk_name[k])
            return out

        self.cpu.prepare_store = prepare_store

    def step(self, out):
        """build_connector_meta, then every job it holds (and any left) reported done."""
        self.conn.build_connector_meta(out)
        jobs = dict.fromkeys(self.conn._jobs, 1)
        self.conn.update_connector_output(KVConnectorOutput(
            kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=jobs)))

    def blocks(self, rid):
        return tuple(list(g) for g in self.manager.get_block_ids(rid))

    def run_one(self, rid, prompt, outputs):
        self.count += 1
        firsts = (len(self.evicted), len(self.stored), len(self.cpu_evicted))
        rq = f"{rid}#{self.count}"
        req = Request(rq, list(prompt), SamplingParams(max_tokens=max(1, len(outputs))), None,
                      block_hasher=self.hasher)
        P = len(prompt)
        row = {"rid": rid, "prompt_tokens": P, "gpu_hit": 0, "cpu_hit": 0, "oom": False}
        self.conn.on_new_request(req)
        blocks, local, _ = self.manager.get_computed_blocks(req)
        ext, _async = self.conn.get_num_new_matched_tokens(req, local)
        assert ext is not None
        row["gpu_hit"], row["cpu_hit"] = local, ext
        if ext:
            if self.manager.allocate_slots(req, 0, local, blocks, num_external_computed_tokens=ext,
                                           delay_cache_blocks=True) is None:
                return self.refuse(req, row, firsts)
            self.conn.update_state_after_alloc(req, self.manager.get_blocks(rq), ext)
            req.status = RequestStatus.WAITING_FOR_REMOTE_KVS
            req.num_computed_tokens = local + ext
            self.step(sched_output())
            self.manager.cache_blocks(req, local + ext)
            if req.num_computed_tokens == P:
                req.num_computed_tokens = P - 1
            req.status = RequestStatus.WAITING
            if self.manager.allocate_slots(req, P - req.num_computed_tokens) is None:
                req.status = RequestStatus.FINISHED_ABORTED
                return self.finish(req, row, firsts, oom=True)
        else:
            if self.manager.allocate_slots(req, P - local, local, blocks) is None:
                return self.refuse(req, row, firsts)
            self.conn.update_state_after_alloc(req, self.manager.get_blocks(rq), 0)
        req.status = RequestStatus.RUNNING
        self.step(sched_output(new=[(req, self.blocks(rq), P - req.num_computed_tokens)]))
        req.num_computed_tokens = P
        oom = False
        for tok in outputs[:-1]:
            req.append_output_token_ids(tok)
            new = self.manager.allocate_slots(req, 1)
            if new is None:
                oom = True
                break
            ids = new.get_block_ids()
            self.step(sched_output(cached=[(req, ids if any(ids) else None, 1)]))
            req.num_computed_tokens += 1
        if outputs and not oom:
            req.append_output_token_ids(outputs[-1])  # the last sampled token, never computed
        req.status = RequestStatus.FINISHED_STOPPED
        return self.finish(req, row, firsts, oom)

    def refuse(self, req, row, firsts):
        """Refused at admission: vLLM would keep it waiting; it is dropped here, as aborted."""
        req.status = RequestStatus.FINISHED_ABORTED
        return self.finish(req, row, firsts, oom=True)

    def finish(self, req, row, firsts, oom):
        self.conn.request_finished(req)
        self.manager.free(req)
        self.step(sched_output(finished=[req.request_id]))
        row["oom"] = oom
        row["evicted"] = self.evicted[firsts[0]:]
        row["stored"] = self.stored[firsts[1]:]
        row["cpu_evicted"] = self.cpu_evicted[firsts[2]:]
        return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--num-blocks", type=int, required=True, help="GPU blocks, block 0 (null) included")
    ap.add_argument("--cpu-chunks", type=int, required=True, help="CPU offload chunks (vLLM's num_chunks)")
    ap.add_argument("--blocks-per-chunk", type=int, default=1)
    ap.add_argument("--policy", default="lru", choices=("lru", "arc"))
    ap.add_argument("--offload-all", action="store_true", help="offload_prompt_only = False")
    ap.add_argument("--trace-block-size", type=int, default=512)
    ap.add_argument("--out", "-o", default="-")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    rp = OffloadReplayer(args.block_size, args.num_blocks, args.cpu_chunks, args.blocks_per_chunk,
                         args.policy, not args.offload_all)
    reqs = list(read_trace(args.trace, args.trace_block_size))
    out = sys.stdout if args.out == "-" else open(args.out, "w")
    tot = {"gpu_hit": 0, "cpu_hit": 0, "oom": 0}
    t0 = time.perf_counter()
    for rid, prompt, outputs in reqs:
        row = rp.run_one(rid, prompt, outputs)
        for k in tot:
            tot[k] += row[k]
        if not args.quiet:
            out.write(json.dumps(row) + "\n")
    wall = time.perf_counter() - t0
    out.write(json.dumps({"summary": True, "requests": len(reqs), **tot, "wall_s": wall,
                          "per_request_us": 1e6 * wall / max(1, len(reqs))}) + "\n")
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
