"""Published hardware runs (`validation/*.json`) -> scenarios, for `radixsim validate`.

A case file holds ``source`` and ``cases``; each case its ``id``, ``model``, ``gpu``, ``tp``,
``page_size``, ``workload`` (bench_multiturn's knobs), ``tiers`` (text), ``server_flags`` and
``published`` (``ttft_mean_s_per_round``, ``hit_rate_per_round``; the first is the cold round).

The mapping uses only what a case's setup says plus the presets: NO per-case knob. What the
simulator cannot express is said in the case's notes:

- model: the preset whose name is the checkpoint's name (org prefix, parenthesis and trailing
  ``-Instruct``/date parts dropped); GPU: `GPU_PRESETS` by the name in ``gpu``, node slice by its
  count (``8x ...`` -> ``h800x8``);
- L2: ``--hicache-ratio R`` (ratio of L1) or ``--hicache-size G`` (G x 1e9 bytes per rank;
  assumption: SGLang's host pool counts GB as 1e9, per rank, tokens = bytes / per-rank KV bytes);
  ``--enable-hierarchical-cache`` without either: SGLang's default ratio 2;
- L3: ``--hicache-storage-backend``; its size is the Mooncake pool (``MOONCAKE_GLOBAL_SEGMENT_SIZE``
  in bytes, or ``--global_segment_size=80GB`` with GB = GiB as Mooncake's size parser reads it);
  every TP rank stores its own KV shard, so tokens = pool bytes / (per-rank KV bytes x tp);
- a Mooncake backend is the Mooncake store model (``cache.l3_model: mooncake``, cache_core/tiers/store.py),
  any other the prefix LRU index; SSD offload below a Mooncake pool is its SSD tier, sized by the
  case's ``ssd_bytes`` (not modelled without it);
- links: ``--hicache-io-backend`` is the hardware's ``pcie_io_backend`` (``--hicache-mem-layout
  page_first_direct`` makes it ``direct``, as SGLang's server arguments do); a Mooncake protocol
  stated as ``MOONCAKE_PROTOCOL``/``protocol`` is ``l3_protocol`` (default rdma);
  flags the scenario lacks (e.g. NUMA pinning) are ignored; knobs the case does not state keep
  the scenario defaults (listed in the notes), except the two SGLang derives from the GPU's memory;
- ``--chunked-prefill-size`` and ``--mem-fraction-static`` not stated: SGLang's own defaults for the
  card (`sglang_memory_defaults`, from `server_args._handle_gpu_memory_settings`);
- a Mooncake pool holds SGLang's objects: K and V per TP rank per page for GQA/MHA models, one
  per rank for MLA (SGLang's mooncake_store.py ``_get_mha_buffer_meta``/``_get_mla_buffer_meta``);
  with per-shard eviction (``cache.l3_eviction_shards`` > 1) they are the store's objects
  (``cache.l3_objects_per_page`` = 2 x tp or tp); with one pool-wide pass a page's objects share
  their lease and go together, so one object per page is the same model (and cheaper);
- documented software: a case's ``cache`` mapping (scenario cache keys the published run's
  software implies, e.g. Mooncake's eviction at the run's date, the commits in ``cache_source``,
  which a ``cache`` or ``hardware`` mapping must have: no knob without its source);
- the client: a case whose ``workload.tool`` is SGLang's bench_multiturn.py (it sends text) runs with
  ``engine.frontend: sglang-text`` (sim/serving_cpu.py: tokenization, per-request cost, first token out);
- an L3 storage backend: SGLang's prefetch I/O thread reads it one prefetch at a time, one get per 128 pages
  (``engine.l3_get_batch_pages: 128``; sim/l3_reads.py);
- documented hardware: a case's ``hardware`` mapping (hardware fields the published run's text
  states, e.g. its NICs, with the arithmetic and the source line in ``hardware_source``) overrides
  the preset's fields; it is the run's stated setup, never a fitted knob.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

CASE_DIR = Path(__file__).resolve().parent.parent / "validation"
# GPU names as cases write them -> hardware preset family (longest name first wins; a whole name only)
GPU_PRESETS = {"A100-SXM4-40GB": "a100-40gb", "A100-SXM4-80GB": "a100-80gb", "A100-40GB": "a100-40gb",
               "A100-80GB": "a100-80gb", "H100": "h100", "H800": "h800", "H200": "h200", "B200": "b200",
               "H20": "h20"}
REQUIRED = ("model", "gpu", "tp", "page_size", "workload", "tiers", "published")
WORKLOAD_KEYS = ("num_clients", "num_rounds", "request_length", "output_length", "max_parallel",
                 "request_rate", "round_barrier", "ready_queue_policy")
SERIES = ("ttft_mean_s_per_round", "hit_rate_per_round")
MAPPED_FLAGS = {"tp", "page-size", "enable-hierarchical-cache", "hicache-ratio", "hicache-size", "hicache-write-policy",
                "hicache-storage-backend", "hicache-storage-prefetch-policy", "mem-fraction-static",
                "hicache-io-backend", "hicache-mem-layout", "chunked-prefill-size"}
DEFAULT_L2_RATIO = 2.0  # SGLang's --hicache-ratio default
NOT_STATED = ("engine.max_running_requests",)
# SGLang's bench client that posts the conversation as text to /generate ({"text": history}: the server
# tokenizes the whole prompt every round; sgl-project/sglang@028e262d7b3a9ae432ec16b08b11ed618b7cfd20
# benchmark/hicache/bench_multiturn.py): a case run with it gets engine.frontend sglang-text
TEXT_CLIENT = "bench_multiturn.py"
SGLANG_STORAGE_BATCH_SIZE = 128  # sim/l3_reads.py: SGLang's hicache_storage.py STORAGE_BATCH_SIZE
# SGLang server_args._handle_gpu_memory_settings: (card memory below, MiB) -> chunked_prefill_size,
# cuda_graph_max_bs at tp < 4, at tp >= 4; the last row is every larger card
SGLANG_MEMORY_ROWS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160),
                      (160 * 1024, 8192, 256, 512), (None, 16384, 512, 512))


class CaseError(ValueError):
    """A case file that cannot be read or lacks a field: one line naming the file and the field."""


def case_files(names=()) -> list:
    """(file, case) pairs: every case in CASE_DIR, or those named (a file path or a case id)."""
    if not names:
        return [pair for p in sorted(CASE_DIR.glob("*.json")) for pair in _read(p)]
    out = []
    for name in names:
        p = Path(name)
        if p.suffix == ".json" or p.exists():
            out += _read(p)
            continue
        hits = [pair for f in sorted(CASE_DIR.glob("*.json")) for pair in _read(f) if pair[1]["id"] == name]
        if not hits:
            raise CaseError(f"{name}: no such case file or case id in {CASE_DIR}")
        out += hits
    return out


def _read(path: Path) -> list:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CaseError(f"{path}: no such case file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CaseError(f"{path}: cannot read as JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise CaseError(f"{path}: cases: missing; expected a list of published cases")
    for key in ("source",):
        _need(doc, key, path, "")
    out = []
    for i, case in enumerate(doc["cases"]):
        if not isinstance(case, dict):
            raise CaseError(f"{path}: cases[{i}]: expected a mapping")
        _need(case, "id", path, f"cases[{i}].")
        case = dict(case, _file=str(path), _source=doc["source"], _partial=_partial_reason(doc, case))
        out.append((path, case))
    return out


def _need(mapping: dict, key: str, path, where: str):
    if mapping.get(key) in (None, ""):
        raise CaseError(f"{path}: {where}{key}: missing; expected a value")
    return mapping[key]


def _partial_reason(doc: dict, case: dict) -> str | None:
    """Why a case cannot be simulated as a per-round run (None when it can)."""
    if doc.get("kind"):
        kind = re.split(r" \(|:", str(doc["kind"]))[0]
        return f"not a per-round multi-turn run ({kind})"
    if doc.get("setup_incomplete") or case.get("setup_incomplete"):
        return "setup incomplete: model, GPU or bench knobs not recovered from the source"
    return None


def check(case: dict) -> None:
    """CaseError naming the file and the field when a full case lacks one."""
    path, cid = case["_file"], case["id"]
    for key in REQUIRED:
        _need(case, key, path, f"{cid}: ")
    for key in ("workload", "published"):
        if not isinstance(case[key], dict):
            raise CaseError(f"{path}: {cid}: {key}: expected a mapping, got {type(case[key]).__name__}")
    for key in WORKLOAD_KEYS:
        _need(case["workload"], key, path, f"{cid}: workload.")
    for key in SERIES:
        v = _need(case["published"], key, path, f"{cid}: published.")
        if not (isinstance(v, list) and v and all(isinstance(x, (int, float)) and x >= 0 for x in v)):
            raise CaseError(f"{path}: {cid}: published.{key}: expected a list of numbers >= 0")


def model_for(text: str):
    """The model preset a case's ``model`` names, or None."""
    from scenarios import presets  # here: `radixsim --help` imports no numpy

    name = re.split(r"[\s,(]", text.strip().split("/")[-1])[0]
    parts = name.split("-")
    for n in range(len(parts), 0, -1):
        try:
            return presets.get_model("-".join(parts[:n]))
        except ValueError:
            continue
    return None


def hardware_for(text: str):
    """The hardware preset a case's ``gpu`` names (``8x NVIDIA H800 ...`` -> h800x8), or None."""
    from scenarios import presets  # here: `radixsim --help` imports no numpy

    m = re.match(r"\s*(\d+)\s*x\s*(.*)", text)
    if not m:
        return None
    for name in sorted(GPU_PRESETS, key=len, reverse=True):
        # a whole name: "B200" is not a "GB200", nor "H20" an "H200" (other parts, no preset)
        if re.search(rf"(?<![a-z0-9]){re.escape(name.lower())}(?![a-z0-9])", m.group(2).lower()):
            try:
                return presets.get_hardware(f"{GPU_PRESETS[name]}x{m.group(1)}")
            except ValueError:
                return None
    return None


def skip_reason(case: dict) -> str | None:
    """Why a case is skipped (partial, or no preset for its model/GPU), None to simulate it."""
    if case["_partial"]:
        return case["_partial"]
    check(case)
    if model_for(str(case["model"])) is None:
        return f"no model preset for {case['model']!r}"
    if hardware_for(str(case["gpu"])) is None:
        return f"no hardware preset for {case['gpu']!r}"
    return None


def _flag(flags: str, name: str):
    m = re.search(rf"(?:--|\b){re.escape(name)}[ =]([^\s]+)", flags)
    return m.group(1) if m else None


def _pool_bytes(case: dict):
    """The Mooncake pool in bytes (None when not stated) and how it was read."""
    text = " ".join(str(case.get(k, "")) for k in ("server_flags", "mooncake", "tiers"))
    exact = _flag(text, "MOONCAKE_GLOBAL_SEGMENT_SIZE")
    if exact and exact.isdigit():
        return int(exact), f"L3 pool {int(exact):,} B (MOONCAKE_GLOBAL_SEGMENT_SIZE)"
    size = _flag(text, "global_segment_size")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)GB", size or "")
    if m:
        return int(float(m.group(1)) * 2**30), f"L3 pool {size} read as {m.group(1)} GiB (Mooncake's parser)"
    return None, "L3 pool size not stated: unbounded L3"


def tiers_of(case: dict, model, tp: int) -> tuple[dict, list]:
    """The scenario's cache keys for the case's tiers, and notes on the mapping."""
    from scenarios import presets  # here: `radixsim --help` imports no numpy

    flags, notes = str(case.get("server_flags", "")), []
    cache: dict = {}
    shard_bytes = presets.bytes_per_token(model, "full") / presets.kv_shards(model, tp)
    ratio, size = _flag(flags, "hicache-ratio"), _flag(flags, "hicache-size")
    if "--enable-hierarchical-cache" in flags or ratio or size:
        if size:
            cache["l2_tokens"] = presets.host_pool_tokens(model, tp, float(size))
            notes.append(f"L2 --hicache-size {size} GB per rank = {cache['l2_tokens']:,} tokens")
        else:
            cache["hicache_ratio"] = float(ratio) if ratio else DEFAULT_L2_RATIO
        write = _flag(flags, "hicache-write-policy")
        if write:
            cache["write_policy"] = write
    backend = _flag(flags, "hicache-storage-backend")
    if backend:
        pool, how = _pool_bytes(case)
        cache["l3_tokens"] = "unbounded" if pool is None else int(pool // (shard_bytes * tp))
        notes.append(how)
        prefetch = _flag(flags, "hicache-storage-prefetch-policy")
        if prefetch:
            cache["prefetch_policy"] = prefetch
        if backend == "mooncake":
            cache["l3_model"] = "mooncake"
            notes.append("L3 as Mooncake Store (cache.l3_model mooncake, Mooncake's default watermark 0.90 and "
                         "eviction ratio 0.05)")
        else:
            notes.append(f"L3 ({backend}) is the prefix LRU index (cache.l3_model prefix)")
    if "ssd" in str(case.get("tiers", "")).lower():
        ssd = case.get("ssd_bytes")
        if cache.get("l3_model") == "mooncake" and ssd:
            cache["l3_ssd_tokens"] = int(ssd // (shard_bytes * tp))
            notes.append(f"SSD tier {ssd:,.0f} B below the pool (cache.l3_ssd_tokens)")
        else:
            notes.append("SSD tier not modelled: simulated as L3 without SSD")
    stated = _mapping(case, "cache", "scenario cache keys")
    if stated:
        cache.update(stated)
        notes.append("case cache: " + ", ".join(f"{k} {v}" for k, v in stated.items()))
    if cache.get("l3_model") == "mooncake" and cache.get("l3_eviction_shards", 1) > 1:
        cache["l3_objects_per_page"] = (2 if model.attention == "gqa" else 1) * tp
        notes.append(f"L3 objects per page: {cache['l3_objects_per_page']} (SGLang's K and V per rank)")
    return cache, notes


def _mapping(case: dict, key: str, what: str) -> dict:
    """A case's optional mapping `key` (documented setup), or a one-line CaseError; a non-empty
    one needs `<key>_source`: the run's text or code at its date it comes from, never a fit."""
    value = case.get(key) or {}
    if not isinstance(value, dict):
        raise CaseError(f"{case['_file']}: {case['id']}: {key}: expected a mapping of {what}")
    if value and not str(case.get(f"{key}_source") or "").strip():
        raise CaseError(f"{case['_file']}: {case['id']}: {key}_source: missing; expected the source "
                        f"(the run's text, or code at its date) of {key} {', '.join(value)}")
    return value


def links_of(case: dict) -> tuple[dict, list]:
    """The hardware fields the case's flags set (io backend, L3 protocol), and notes."""
    flags = str(case.get("server_flags", ""))
    text = " ".join(str(case.get(k, "")) for k in ("server_flags", "mooncake", "tiers"))
    out, notes = {}, []
    io = _flag(flags, "hicache-io-backend")
    if _flag(flags, "hicache-mem-layout") == "page_first_direct" and io in (None, "kernel"):
        io = "direct"
        notes.append("--hicache-mem-layout page_first_direct: io backend direct (SGLang switches kernel to direct "
                     "for this layout)")
    if io:
        out["pcie_io_backend"] = io
    protocol = _flag(text, "MOONCAKE_PROTOCOL") or _flag(text, "protocol")
    if protocol:
        out["l3_protocol"] = protocol.lower()
    out.update(_mapping(case, "hardware", "hardware fields"))
    if out:
        notes.append("hardware " + ", ".join(f"{k} {v}" for k, v in out.items()))
    return out, notes


def sglang_memory_defaults(hw, tp: int, chunk: int | None = None) -> dict:
    """SGLang's defaults for a server that sets neither --chunked-prefill-size nor --mem-fraction-static
    (sgl-project/sglang python/sglang/srt/server_args.py ``_handle_gpu_memory_settings``; the card's
    memory in MiB as nvidia-smi reports it, here the preset's HBM / 2**20):

        chunked_prefill_size, cuda_graph_max_bs  by the card's memory (SGLANG_MEMORY_ROWS)
        reserved = 512 + max(chunk, 2048) x 1.5 + cuda_graph_max_bs x 2 + tp / 8 x 1024   (MiB;
                   pp 1, no DP attention, speculative decoding or piecewise CUDA graphs)
        reserved = max(reserved, 10 GiB) on a card above 60 GiB
        mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3)
    """
    gpu_mem = hw.hbm_bytes_per_gpu / 2**20
    row = next(r for r in SGLANG_MEMORY_ROWS if r[0] is None or gpu_mem < r[0])
    chunk = row[1] if chunk is None else chunk
    graph_bs = row[2] if tp < 4 else row[3]
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp / 8 * 1024
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return {"chunked_prefill_tokens": chunk, "cuda_graph_max_bs": graph_bs,
            "mem_fraction_static": round((gpu_mem - reserved) / gpu_mem, 3)}


def _memory_knobs(flags: str, hw, tp: int, cache: dict, notes: list) -> dict:
    """The case's --mem-fraction-static (into `cache`) and SGLang's defaults for what it leaves unset."""
    mem, chunk = _flag(flags, "mem-fraction-static"), _flag(flags, "chunked-prefill-size")
    chunk = int(chunk) if chunk and chunk.isdigit() else None
    sglang = sglang_memory_defaults(hw, tp, chunk)
    if mem and re.fullmatch(r"[0-9.]+", mem):
        cache["mem_fraction_static"] = float(mem)
    else:
        cache["mem_fraction_static"] = sglang["mem_fraction_static"]
        notes.append(f"--mem-fraction-static not stated: SGLang's default for the card, "
                     f"{sglang['mem_fraction_static']} (cuda_graph_max_bs {sglang['cuda_graph_max_bs']})")
    if chunk is None:
        notes.append("--chunked-prefill-size not stated: SGLang's default for the card, "
                     f"{sglang['chunked_prefill_tokens']}")
    return sglang


def scenario_of(case: dict, seed: int = 0) -> tuple[dict, list]:
    """The raw scenario (for `scenarios.scenario.resolve`) of a full case, and its notes."""
    model, hw = model_for(str(case["model"])), hardware_for(str(case["gpu"]))
    tp = int(case["tp"])
    cache, notes = tiers_of(case, model, tp)
    links, link_notes = links_of(case)
    notes += link_notes
    flags = str(case.get("server_flags", ""))
    sglang = _memory_knobs(flags, hw, tp, cache, notes)
    cache.update(page_size=int(case["page_size"]), l1_tokens="auto")
    w = case["workload"]
    workload = {k: w[k] for k in WORKLOAD_KEYS}
    workload["kind"] = "multiturn"
    engine = {"chunked_prefill_tokens": sglang["chunked_prefill_tokens"]}
    if TEXT_CLIENT in str(w.get("tool", "")):
        engine["frontend"] = "sglang-text"
        notes.append(f"client {TEXT_CLIENT} sends text: engine.frontend sglang-text (tokenization of the whole "
                     "prompt, the per-request cost, the first token's way out; sim/serving_cpu.py)")
    if _flag(flags, "hicache-storage-backend"):
        engine["l3_get_batch_pages"] = SGLANG_STORAGE_BATCH_SIZE
        notes.append(f"L3 reads as SGLang's prefetch I/O thread: one prefetch at a time, one store get per "
                     f"{SGLANG_STORAGE_BATCH_SIZE} pages (engine.l3_get_batch_pages; sim/l3_reads.py)")
    raw = {"name": case["id"], "description": f"validate: {case['_source'][:120]}", "seed": seed,
           "model": model.name, "hardware": dict(base=hw.name, **links) if links else hw.name, "tp": tp,
           "cache": cache, "engine": engine, "workload": workload}
    mapped = set()
    backend = _flag(flags, "attention-backend")
    from sim.attention_backends import backend_names  # here: `radixsim --help` imports no numpy

    if backend in backend_names():  # the run's stated backend; unstated: the model's own curve
        raw["engine"]["attention_backend"] = backend
        mapped.add("attention-backend")
        notes.append(f"--attention-backend {backend}: engine.attention_backend {backend} "
                     "(sim/opdata/attention_backends.json)")
    notes.insert(0, f"{model.name} on {hw.name} tp={tp}; not stated, scenario defaults: {', '.join(NOT_STATED)}")
    notes += _unmapped(flags, w, mapped)
    return raw, notes


def _unmapped(flags: str, workload: dict, mapped: set = frozenset()) -> list:
    """Notes naming the server flags and workload keys the scenario does not express."""
    ignored = sorted(set(re.findall(r"--([a-z][a-z0-9-]*)", flags)) - MAPPED_FLAGS - set(mapped))
    extra = sorted(set(workload) - set(WORKLOAD_KEYS) - {"tool"})
    out = [f"server flags not modelled: {', '.join('--' + f for f in ignored)}"] if ignored else []
    return out + ([f"workload keys not modelled: {', '.join(extra)}"] if extra else [])


__all__ = ["CaseError", "case_files", "check", "skip_reason", "scenario_of", "sglang_memory_defaults", "model_for",
           "hardware_for",
           "CASE_DIR", "GPU_PRESETS"]
