"""Per-request equality with vLLM 0.33.0's own CPU KV offloading connector (OffloadingConnectorScheduler
over CPUOffloadingManager, LRU and ARC) beside its KVCacheManager: GPU-hit and CPU-hit tokens,
refusals, the GPU blocks evicted, the CPU chunks stored and evicted (in order), on generated
branchy traces (tests/test_vllm_reference.py's generator) at block sizes 4 and 16, two GPU
capacities, a CPU smaller and one larger than the GPU, offload blocks of 1 and 4 GPU blocks,
offloading the prompt only (vLLM's default) or every computed block; on the constructed traces
of tests/test_vllm_offload.py; and on scenarios/data/mooncake_synthetic_trace.jsonl through
`radixsim replay --engine vllm --l2-tokens` (GPU/CPU hits, refusals, GPU evictions per request,
CPU chunks stored and evicted in total).

vLLM runs in the harness tools/vllm_ref/run_vllm_offload.py inside its venv (as
tests/test_vllm_reference.py: RADIXSIM_VLLM_REF_VENV, else ~/.cache/vllm-ref; skipped, saying
so, only when absent, a failure under CI=true).
"""
import csv
import json
import os
import pathlib
import subprocess
import sys

import pytest

from cache_core.vllm_offload import VllmOffloadCache
from radixsim.replay_vllm import num_blocks
from tests.test_vllm_offload import CPU_HIT, LRU, REFUSED
from tests.test_vllm_reference import branchy_trace

ROOT = pathlib.Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tools" / "vllm_ref"
VENV = pathlib.Path(os.environ.get("RADIXSIM_VLLM_REF_VENV", pathlib.Path.home() / ".cache" / "vllm-ref"))
PYTHON = VENV / "bin" / "python"
MOONCAKE = ROOT / "scenarios" / "data" / "mooncake_synthetic_trace.jsonl"
MOONCAKE_GPU, MOONCAKE_CPU, MOONCAKE_CHUNK = 200_000, 400_000, 64  # tokens; 64 = 4 GPU blocks of 16

SEEDS = (1, 2)
REQUESTS = 150
# (block size, GPU tokens, CPU tokens, GPU blocks per offload block, policy, prompt only)
RUNS = [(bs, gpu, cpu, 1, pol, True) for bs in (4, 16) for gpu in (2000, 6000) for cpu in (1000, 12000)
        for pol in ("lru", "arc")]
RUNS += [(bs, 700, cpu, 4, pol, False) for bs in (4, 16) for cpu in (500, 12000) for pol in ("lru", "arc")]

pytestmark = pytest.mark.timeout(1800)  # vLLM's connector replays the Mooncake trace in minutes here

if not PYTHON.exists():
    pytest.skip(f"no vLLM reference venv at {VENV} (set RADIXSIM_VLLM_REF_VENV or run "
                "tools/vllm_ref/setup_venv.sh)", allow_module_level=True)

# Runs in the harness venv: each (trace, block size, GPU blocks, CPU chunks, bpc, policy, prompt only).
DRIVER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import run_vllm_offload as h
out = {}
for key, (trace, bs, nb, chunks, bpc, pol, po, full) in json.load(sys.stdin).items():
    rp = h.OffloadReplayer(bs, nb, chunks, bpc, pol, po)
    rows = [rp.run_one(*r) for r in h.read_trace(trace)]
    out[key] = [[r["gpu_hit"], r["cpu_hit"], r["oom"], r["evicted"], r["stored"], r["cpu_evicted"]] if full else
                [r["gpu_hit"], r["cpu_hit"], r["oom"], len(r["evicted"]), len(r["stored"]), len(r["cpu_evicted"])]
                for r in rows]
json.dump(out, sys.stdout)
"""


def _key(name, bs, gpu, cpu, bpc, pol, po):
    return f"{name}|{bs}|{gpu}|{cpu}|{bpc}|{pol}|{po}"


def _write(path, trace):
    path.write_text("".join(json.dumps({"rid": i, "tokens": p, "output_tokens": o}) + "\n"
                            for i, (p, o) in enumerate(trace)))
    return str(path)


ARC = [(p, [-1]) for p in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [11, 12, 13, 14, 15], [21, 22, 23, 24, 25])]
SMALL = {"cpu_hit": (CPU_HIT, 4, 12, 16, "lru"), "lru": (LRU, 4, None, 12, "lru"),
         "refused": (REFUSED, 4, None, 8, "lru"), "arc_lru": (ARC, 4, None, 8, "lru"), "arc": (ARC, 4, None, 8, "arc")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("vllm_offload_ref")
    traces = {f"seed{s}": branchy_trace(s, REQUESTS) for s in SEEDS}
    cfg = {}
    for name, trace in traces.items():
        path = _write(d / f"{name}.jsonl", trace)
        for bs, gpu, cpu, bpc, pol, po in RUNS:
            cfg[_key(name, bs, gpu, cpu, bpc, pol, po)] = (path, bs, num_blocks(gpu, bs), cpu // (bs * bpc), bpc,
                                                            pol, po, True)
    for name, (trace, bs, gpu, cpu, pol) in SMALL.items():
        traces[name] = trace
        # an unbounded GPU (None): more blocks than the trace ever holds
        cfg[_key(name, bs, gpu, cpu, 1, pol, True)] = (_write(d / f"{name}.jsonl", trace), bs,
                                                       num_blocks(gpu or 4096, bs), cpu // bs, 1, pol, True, True)
    cfg["mooncake"] = (str(MOONCAKE), 16, num_blocks(MOONCAKE_GPU, 16), MOONCAKE_CPU // MOONCAKE_CHUNK,
                       MOONCAKE_CHUNK // 16, "lru", True, False)
    run = subprocess.run([str(PYTHON), "-W", "ignore", "-c", DRIVER, str(HARNESS)], input=json.dumps(cfg),
                         capture_output=True, text=True, cwd=HARNESS, timeout=1800)
    assert run.returncode == 0, run.stderr[-2000:]
    return traces, json.loads(run.stdout)


def _ours(trace, bs, gpu, cpu, bpc, pol, po):
    c = VllmOffloadCache(bs, None if gpu is None else num_blocks(gpu, bs), cpu // (bs * bpc), bpc, pol,
                         prompt_only=po)
    names, rows = {}, []
    for p, o in trace:
        r = c.step(p, o)
        for k in r.stored:
            names.setdefault(k, "c%d" % len(names))
        rows.append([r.gpu_hit, r.cpu_hit, r.rejected, r.gpu_evicted, [names[k] for k in r.stored],
                     [names[k] for k in r.cpu_evicted]])
    c.check()
    return rows


@pytest.mark.parametrize("run", RUNS, ids=lambda r: "-".join(map(str, r)))
def test_branchy_traces_equal_vllms_offloading_connector_per_request(reference, run):
    traces, ref = reference
    for seed in SEEDS:
        want = ref[_key(f"seed{seed}", *run)]
        ours = _ours(traces[f"seed{seed}"], *run)
        diff = [i for i, (a, b) in enumerate(zip(ours, want)) if a != b]
        assert len(ours) == len(want) == REQUESTS and diff == [], \
            f"seed {seed}: {len(diff)} requests differ, first {[(i, ours[i][:3], want[i][:3]) for i in diff[:3]]}"
        assert sum(len(w[4]) for w in want) > 0  # it stores


def test_the_branchy_runs_reach_cpu_hits_cpu_evictions_and_refusals(reference):
    _, ref = reference
    rows = [r for key, v in ref.items() if key.startswith("seed") for r in v]
    assert sum(r[1] for r in rows) > 0 and sum(len(r[5]) for r in rows) > 0 and sum(r[2] for r in rows) > 0


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_constructed_traces_equal_vllm(reference, name):
    traces, ref = reference
    trace, bs, gpu, cpu, pol = SMALL[name]
    assert _ours(trace, bs, gpu, cpu, 1, pol, True) == ref[_key(name, bs, gpu, cpu, 1, pol, True)]


def test_mooncake_trace_through_radixsim_replay_equals_vllm_per_request(reference, tmp_path):
    _, ref = reference
    want = ref["mooncake"]
    out = tmp_path / "run"
    run = subprocess.run([sys.executable, "-m", "radixsim", "replay", str(MOONCAKE), "--engine", "vllm",
                          "--capacity-tokens", str(MOONCAKE_GPU), "--l2-tokens", str(MOONCAKE_CPU),
                          "--offload-block-size", str(MOONCAKE_CHUNK), "--out", str(out), "--no-progress"],
                         cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-2000:]
    with open(out / "requests.csv") as f:
        ours = [[int(r["cached_device"]), int(r["cached_host"]), r["rejected"] == "1", int(r["evicted_tokens"]) // 16]
                for r in csv.DictReader(f)]
    diff = [i for i, (a, b) in enumerate(zip(ours, want)) if a != b[:4]]
    assert len(ours) == len(want) == 3993 and diff == [], f"{len(diff)} requests differ, first {diff[:5]}"
    cache = json.loads((out / "summary.json").read_text())["cache"]
    assert (cache["cpu_chunks_stored"], cache["cpu_chunks_evicted"]) == (sum(w[4] for w in want),
                                                                        sum(w[5] for w in want))
    assert sum(w[1] for w in want) > 0 and sum(w[5] for w in want) > 0  # CPU hits and CPU evictions
