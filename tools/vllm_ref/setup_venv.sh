#!/usr/bin/env bash
# Build the CPU-only venv the vLLM reference harness imports vLLM 0.33.0 from.
# usage: bash tools/vllm_ref/setup_venv.sh VENV_DIR      (e.g. ~/.cache/vllm-ref; outside the repo)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV=${1:?usage: setup_venv.sh VENV_DIR}
python3 -m venv "$VENV"
PIP="$VENV/bin/pip"
# CPU torch: this exact version resolves to the local CPU wheel on this machine (a looser spec
# pulls a multi-GB CUDA build). vLLM's KV-cache specs name torch dtypes.
"$PIP" install -q --no-compile torch==2.13.0 numpy
# vLLM itself without its GPU dependency tree (a 336 MB wheel: most of it compiled kernels).
"$PIP" install -q --no-compile --no-deps vllm==0.33.0
# Only what `import vllm.v1.core.kv_cache_manager, vllm.v1.request` needs, also --no-deps.
"$PIP" install -q --no-compile --no-deps -r "$HERE/requirements-nodeps.txt"
cd "$HERE" && "$VENV/bin/python" -W ignore -c "
import vllm_stubs; vllm_stubs.install()
import vllm.v1.core.kv_cache_manager, vllm.v1.request
import vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler, vllm.v1.kv_offload.cpu.spec
print('vllm v1 core + CPU offloading connector import OK')"
