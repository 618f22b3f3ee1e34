"""Step-by-step equality with vLLM 0.33.0's own v1 `Scheduler` (tools/vllm_ref/run_vllm_sched.py:
its real schedule() and update_from_output() with a stub model that samples one given token per
finished prefill or decode): the tokens scheduled per request in every step, in schedule order,
the preemptions, each request's hit at first scheduling, the evicted block ids in order and the
final free queue, for radixsim's `engine.kind: vllm` scheduler (cache_core/vllm_sched.py) on the
two hand-computed traces of tests/test_vllm_engine.py and on seeded concurrent traces (shared
prefixes, chunked prefill on and off, few sequences, pools that force preemptions).

vLLM runs in the harness venv (RADIXSIM_VLLM_REF_VENV, else ~/.cache/vllm-ref; built by
tools/vllm_ref/setup_venv.sh); the module is skipped, saying so, only when it is absent (a failure
under CI=true: tests/ci_strict.py).
"""
import json
import os
import pathlib
import random
import subprocess

import pytest

from cache_core.vllm_sched import VllmConfig
from tests.test_vllm_engine import _req, _run

ROOT = pathlib.Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tools" / "vllm_ref" / "run_vllm_sched.py"
VENV = pathlib.Path(os.environ.get("RADIXSIM_VLLM_REF_VENV", pathlib.Path.home() / ".cache" / "vllm-ref"))
PYTHON = VENV / "bin" / "python"

if not PYTHON.exists():
    pytest.skip(f"no vLLM reference venv at {VENV} (set RADIXSIM_VLLM_REF_VENV or run "
                "tools/vllm_ref/setup_venv.sh)", allow_module_level=True)

pytestmark = pytest.mark.timeout(600)


def _ours(cfg: dict) -> dict:
    reqs = [_req(rid, prompt, len(out)) for rid, prompt, out in cfg["requests"]]
    config = VllmConfig(block_size=cfg["block_size"], max_num_seqs=cfg["max_num_seqs"],
                        max_num_batched_tokens=cfg["max_num_batched_tokens"],
                        enable_chunked_prefill=cfg["enable_chunked_prefill"])
    eng, log = _run(config, cfg["num_blocks"], reqs)
    return {"steps": [[[rid, n] for rid, n, _ in s[0]] for s in log], "preempted": eng.sched.preempted_log,
            "cached": {r.rid: r.cached_tokens for r in eng.finished}, "evicted": eng.blocks.evicted_log,
            "free_queue": [[b, h] for b, h in eng.blocks.free_queue()]}


def _theirs(cfgs: list) -> list:
    """vLLM's results for the configs (one harness process, the configs as a JSON list on stdin)."""
    p = subprocess.run([str(PYTHON), str(HARNESS)], input=json.dumps(cfgs), capture_output=True, text=True,
                       timeout=500)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    for got in out:
        got["steps"] = [s for s in got["steps"] if s]  # schedule() calls that ran nothing (finished ones freed)
    return out


def _outputs(rid: str, n: int) -> list:
    """The output tokens `_req` gives request `rid` (fresh negative ids)."""
    return [-(i + 1) - 1000 * (ord(rid) - ord("A") + 1) for i in range(n)]


def _config(requests, **kw) -> dict:
    return {"block_size": 4, "num_blocks": None, "max_num_batched_tokens": 8192, "max_num_seqs": 1024,
            "enable_chunked_prefill": True, **kw,
            "requests": [[rid, list(p), _outputs(rid, n)] for rid, p, n in requests]}


HAND = [
    _config([("A", range(1, 11), 3), ("B", [1, 2, 3, 4, 5, 6, 7, 8, 20], 2), ("C", range(30, 38), 2)],
            num_blocks=7, max_num_batched_tokens=8, max_num_seqs=2),
    _config([("X", [1, 2, 3, 4], 6), ("Y", [5, 6, 7, 8], 6)], num_blocks=5, max_num_batched_tokens=16, max_num_seqs=4),
]


def _generated(seed: int, **kw) -> dict:
    """20 requests over 3 shared prefixes and follow-ups extending earlier prompts (outputs not
    re-sent), arriving together; prompts of 3..40 tokens, outputs of 1..12."""
    rnd = random.Random(seed)
    systems = [[s * 100 + i for i in range(k)] for s, k in ((1, 9), (2, 14), (3, 5))]
    prompts, reqs = [], []
    for i in range(20):
        base = rnd.choice(prompts) if prompts and rnd.random() < 0.4 else rnd.choice(systems)
        p = (base + [10_000 + 50 * i + j for j in range(rnd.randint(1, 12))])[:40]
        prompts.append(p)
        reqs.append((chr(ord("A") + i), p, rnd.randint(1, 12)))
    return _config(reqs, **kw)


GENERATED = [_generated(s, **kw) for s, kw in (
    (1, {"num_blocks": 61, "max_num_batched_tokens": 32, "max_num_seqs": 6}),
    (2, {"num_blocks": 25, "max_num_batched_tokens": 24, "max_num_seqs": 8}),  # preemptions
    (3, {"num_blocks": 40, "max_num_batched_tokens": 64, "max_num_seqs": 3, "enable_chunked_prefill": False}),
    (4, {"num_blocks": 30, "max_num_batched_tokens": 64, "max_num_seqs": 16, "block_size": 2}),
)]


@pytest.fixture(scope="module")
def reference():
    return _theirs(HAND + GENERATED)


@pytest.mark.parametrize("i", range(len(HAND) + len(GENERATED)))
def test_every_step_preemption_hit_and_eviction_equals_vllms_scheduler(reference, i):
    cfg = (HAND + GENERATED)[i]
    assert _ours(cfg) == reference[i]


def test_the_generated_traces_exercise_preemption_chunking_and_hits(reference):
    gen = reference[len(HAND):]
    assert sum(len(r["preempted"]) for r in gen) > 0
    assert sum(len(r["evicted"]) for r in gen) > 0
    assert sum(v for r in gen for v in r["cached"].values()) > 0
    mixed = [s for r in gen for s in r["steps"] if any(n == 1 for _, n in s) and any(n > 1 for _, n in s)]
    assert mixed  # steps that decode some requests and prefill others
