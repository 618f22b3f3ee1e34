"""Fit sim/operators.py's shape-aware efficiency curves to Vidur's per-operator GPU profiles.

Usage: python benchmarks/fit_operators.py VIDUR_GIT_DIR [--out sim/opdata/vidur_fit.json]

VIDUR_GIT_DIR is a git directory of github.com/microsoft/vidur (a clone's .git or a bare
mirror, e.g. what the `fetch` tool returns); the files are read at commit ``COMMIT`` with
``git show``, nothing is copied. Vidur is MIT-licensed (Copyright (c) Microsoft Corporation);
docs/sources/vidur/README.md describes the files, columns and units (milliseconds; all-reduce
``size`` in bytes).

What is fitted, per device (``a100`` = A100-SXM4-80GB, ``h100`` = H100 SXM; peak FLOP/s and HBM
bandwidth from scenarios/presets.py's a100-80gb and h100 presets):

- GEMM (``attn_pre_proj``, ``attn_post_proj``, ``mlp_up_proj``, ``mlp_down_proj`` of every
  ``compute/<device>/*/*/mlp.csv``, per TP shard): for M tokens and an N x K shard,
  ``t = max(2 M N K / (peak x e), 2 (N K + M K + M N) / (hbm x e_bw)) + t0`` with
  ``e = e_max x M / (M + m_half) x N / (N + n_half) x K / (K + k_half)``; the six parameters
  minimise the mean squared log error (Nelder-Mead).
- elementwise ops per layer (two layernorms, rope, activation, two residual adds; Vidur
  profiles ``add`` once, counted twice here): ``t = k x t0_elem + M x hidden x bytes_per_elem / hbm``,
  linear least squares on the relative error for (t0_elem, bytes_per_elem).
- all-reduce (``network/<device>_dgx/all_reduce.csv``, 2..8 GPUs): ring model
  ``t = 2 (n-1) x lat_step + 2 (n-1)/n x size / (nvlink x e_ar)``, linear least squares on the
  relative error of the medians, single-node rows only (num_workers <= devices_per_node).

Residuals (median and 90th percentile of |log(model / measured)|, as a fraction) are written
beside each fit.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scenarios.presets import get_hardware  # noqa: E402
from sim.operators import gemm_efficiency  # noqa: E402

COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
REPO = "github.com/microsoft/vidur"
DEVICES = {"a100": "a100-80gbx8", "h100": "h100x8"}
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = {"input_layernorm": 1, "attn_rope": 1, "post_attention_layernorm": 1, "mlp_act": 1, "add": 2}
ELEM_BYTES = 2  # fp16/bf16 activations
GEMM_PARAMS = ("e_max", "m_half", "e_bw", "t0_s", "n_half", "k_half")  # the GEMM fit, in the optimiser's order


def git_show(git_dir: str, path: str) -> list[dict]:
    text = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{COMMIT}:{path}"], check=True,
                          capture_output=True, text=True).stdout
    return list(csv.DictReader(io.StringIO(text)))


def git_ls(git_dir: str, prefix: str) -> list[str]:
    out = subprocess.run(["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", COMMIT, prefix],
                         check=True, capture_output=True, text=True).stdout
    return out.split()


def gemm_shapes(row: dict) -> dict[str, tuple[int, int]]:
    """(N, K) per TP shard of each GEMM of a Vidur mlp.csv row (vidur/profiling/mlp/mlp_impl.py)."""
    h, heads, kv = int(row["n_embd"]), int(row["n_head"]), int(row["n_kv_head"])
    ffn, tp = int(row["n_expanded_embd"]), int(row["num_tensor_parallel_workers"])
    d = h // heads
    up = ffn * (2 if row["use_gated_mlp"] == "True" else 1)
    return {"attn_pre_proj": ((heads + 2 * kv) * d // tp, h), "attn_post_proj": (h, heads * d // tp),
            "mlp_up_proj": (up // tp, h), "mlp_down_proj": (h, ffn // tp)}


def gemm_time(p, M, N, K, peak, hbm):
    """Seconds of (M x K) @ (K x N) GEMMs under the fit `p` (GEMM_PARAMS' values, in order)."""
    f = dict(zip(GEMM_PARAMS, p))
    e = gemm_efficiency(f, M, N, K)
    return np.maximum(2 * M * N * K / (peak * e), 2 * (N * K + M * K + M * N) / (hbm * f["e_bw"])) + f["t0_s"]


def nelder_mead(f, x0, iters=3000):
    """Minimise f over R^n from x0 (standard Nelder-Mead; small, deterministic)."""
    n = len(x0)
    pts = [np.array(x0, float)] + [np.array(x0, float) + 0.3 * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        c = np.mean(pts[:-1], axis=0)
        r = c + (c - pts[-1])
        fr = f(r)
        if fr < vals[0]:
            e = c + 2 * (c - pts[-1])
            fe = f(e)
            pts[-1], vals[-1] = (e, fe) if fe < fr else (r, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = r, fr
        else:
            k = c + 0.5 * (pts[-1] - c)
            fk = f(k)
            if fk < vals[-1]:
                pts[-1], vals[-1] = k, fk
            else:
                pts = [pts[0] + 0.5 * (p - pts[0]) for p in pts]
                vals = [f(p) for p in pts]
    i = int(np.argmin(vals))
    return pts[i]


def residuals(model, measured) -> dict:
    err = np.abs(np.log(model / measured))
    return {"median_abs_rel": round(float(np.expm1(np.median(err))), 4),
            "p90_abs_rel": round(float(np.expm1(np.quantile(err, 0.9))), 4), "points": int(err.size)}


def fit_device(git_dir: str, device: str) -> dict:
    hw = get_hardware(DEVICES[device])
    peak, hbm = hw.bf16_flops, hw.hbm_bytes_per_s
    files = [p for p in git_ls(git_dir, f"data/profiling/compute/{device}/") if p.endswith("/mlp.csv")]
    g, el = [], []
    for path in files:
        for row in git_show(git_dir, path):
            M = int(row["num_tokens"])
            for op, (N, K) in gemm_shapes(row).items():
                g.append((M, N, K, float(row[f"time_stats.{op}.median"]) * 1e-3))
            if all(f"time_stats.{op}.median" in row for op in ELEMENTWISE):  # phi-2 lacks some
                t = sum(k * float(row[f"time_stats.{op}.median"]) for op, k in ELEMENTWISE.items()) * 1e-3
                el.append((M, int(row["n_embd"]), t))
    M, N, K, t = (np.array(c, float) for c in zip(*g))

    def params(q):  # fractions through a logistic, the rest positive through exp
        return (1 / (1 + math.exp(-q[0])), math.exp(q[1]), 1 / (1 + math.exp(-q[2])), *map(math.exp, q[3:]))

    def loss(q):
        return float(np.mean(np.log(gemm_time(params(q), M, N, K, peak, hbm) / t) ** 2))

    p = params(nelder_mead(loss, [1.0, math.log(64.0), 0.5, math.log(5e-6), math.log(100.0), math.log(100.0)],
                           iters=4000))
    em, eh, et = (np.array(c, float) for c in zip(*el))
    A = np.stack([np.full_like(em, sum(ELEMENTWISE.values())), em * eh * ELEM_BYTES / hbm], axis=1)
    (t0_elem, elem_bytes), *_ = np.linalg.lstsq(A / et[:, None], np.ones_like(et), rcond=None)
    return {
        "fit_against": {"preset": DEVICES[device], "bf16_flops": peak, "hbm_bytes_per_s": hbm},
        "gemm": {"e_max": round(p[0], 4), "m_half": round(p[1], 2), "e_bw": round(p[2], 4),
                 "t0_s": round(p[3], 9), "n_half": round(p[4], 2), "k_half": round(p[5], 2),
                 "shapes": {"M": [int(M.min()), int(M.max())], "N": [int(N.min()), int(N.max())],
                            "K": [int(K.min()), int(K.max())]}, "residuals": residuals(gemm_time(p, M, N, K, peak, hbm), t),
                 "files": sorted(files)},
        "elementwise": {"kernels_per_layer": sum(ELEMENTWISE.values()), "t0_s": round(float(t0_elem), 9),
                        "bytes_per_token_hidden": round(float(elem_bytes), 3),
                        "residuals": residuals(A @ np.array([t0_elem, elem_bytes]), et)},
        "allreduce": fit_allreduce(git_dir, device, hw.nvlink_bytes_per_s),
    }


def fit_allreduce(git_dir: str, device: str, nvlink: float) -> dict:
    path = f"data/profiling/network/{device}_dgx/all_reduce.csv"
    rows = [r for r in git_show(git_dir, path)  # one node: all workers on NVLink
            if 1 < int(r["num_workers"]) <= int(r["devices_per_node"])]
    n = np.array([int(r["num_workers"]) for r in rows], float)
    size = np.array([float(r["size"]) for r in rows])
    t = np.array([float(r["time_stats.all_reduce.median"]) * 1e-3 for r in rows])
    A = np.stack([2 * (n - 1), 2 * (n - 1) / n * size / nvlink], axis=1)
    w = 1 / t  # relative error weighting
    (lat, inv_e), *_ = np.linalg.lstsq(A * w[:, None], t * w, rcond=None)
    return {"latency_per_step_s": round(float(lat), 9), "e_ar": round(float(1 / inv_e), 4),
            "nvlink_bytes_per_s": nvlink, "residuals": residuals(A @ np.array([lat, inv_e]), t), "file": path}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("vidur_git_dir")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "sim/opdata/vidur_fit.json"))
    args = ap.parse_args(argv)
    probe = subprocess.run(["git", f"--git-dir={args.vidur_git_dir}", "cat-file", "-e", f"{COMMIT}^{{commit}}"],
                           capture_output=True)
    if probe.returncode:
        print(f"fit_operators.py: {args.vidur_git_dir}: not a git directory holding {REPO} commit {COMMIT} "
              "(expected a clone's .git or a mirror)", file=sys.stderr)
        return 2
    doc = {"source": {"repository": REPO, "commit": COMMIT, "license": "MIT (Copyright (c) Microsoft Corporation)",
                      "paper": "Agrawal et al., Vidur, MLSys 2024, arXiv:2405.05465",
                      "script": "benchmarks/fit_operators.py"},
           "devices": {d: fit_device(args.vidur_git_dir, d) for d in DEVICES}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({d: {k: {kk: vv for kk, vv in v.items() if kk != "files"} for k, v in f.items()
                          if k != "fit_against"} for d, f in doc["devices"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
