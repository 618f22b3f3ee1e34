"""Measure a Qwen2/Qwen3 fast tokenizer's encode time per prompt token (issue 29 item 2b).

SGLang's TokenizerManager tokenizes each request's whole text prompt with the model's Hugging Face
fast tokenizer (one ``encode`` of one string: single-threaded). This script times exactly that
with the `tokenizers` package (not a dependency of radixsim: run it from a venv that has it) on
the Qwen2 byte-level BPE that Qwen2.5 and Qwen3 share (vocab.json + merges.txt; the pipeline of
Qwen's tokenizer.json: NFC, the Qwen2 split regex, byte-level, BPE), for prompts of a range of
lengths built as SGLang's bench clients build them:

- ``text``: natural text (any UTF-8 files given with --text; bench_serving's default random
  dataset cuts ShareGPT prompts to length, `sglang/benchmark/datasets/random.py`);
- ``seqids``: the decode of consecutive vocabulary ids ``(offset + j) % vocab`` (the same file's
  ``random_sample=False`` branch, bench_multiturn's ``--disable-random-sample``).

It prints, per kind, the best of --repeat encodes at each length, and the least-squares line
t = a + b x tokens over the lengths (b: us per token). The files are not in the repository:

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    RAYON_NUM_THREADS=1 /tmp/tokvenv/bin/python benchmarks/measure_tokenizer.py \
        --vocab /tmp/qwen2tok/vocab.json --merges /tmp/qwen2tok/merges.txt --text README.md docs/*.md
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

# Qwen2's pre-tokenizer split (Qwen2/Qwen3 tokenizer.json; the same pattern as torchtune's Qwen2 tokenizer)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def build(vocab: str, merges: str):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(vocab, merges, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def best_s(tok, text: str, repeat: int) -> tuple:
    n, best = 0, float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = len(tok.encode(text, add_special_tokens=False).ids)
        best = min(best, time.perf_counter() - t0)
    return n, best


def fit(points) -> tuple:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--merges", required=True)
    ap.add_argument("--text", nargs="+", required=True, help="UTF-8 files of natural text")
    ap.add_argument("--lengths", default="1024,4096,16384,36864")
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args(argv)
    tok = build(a.vocab, a.merges)
    corpus = "\n".join(open(p, encoding="utf-8").read() for p in a.text)
    ids = tok.encode(corpus, add_special_tokens=False).ids
    vocab = len(json.load(open(a.vocab, encoding="utf-8")))
    lengths = [int(x) for x in a.lengths.split(",")]
    out = {"machine": {"cpu": _cpu(), "python": platform.python_version()}, "vocab": vocab, "kinds": {}}
    for kind in ("text", "seqids"):
        pts = []
        for L in lengths:
            if kind == "text":
                src = (ids * (L // max(len(ids), 1) + 1))[:L]
            else:
                src = [(1234 + j) % vocab for j in range(L)]
            text = tok.decode(src)
            n, s = best_s(tok, text, a.repeat)
            pts.append((n, s))
            print(f"{kind:7s} {L:7d} ids -> {n:7d} tokens: {s * 1e3:9.3f} ms  {s / n * 1e6:7.3f} us/token")
        c, b = fit(pts)
        out["kinds"][kind] = {"points": pts, "fixed_us": c * 1e6, "us_per_token": b * 1e6}
        print(f"{kind:7s} fit: {c * 1e6:.1f} us + {b * 1e6:.4f} us/token")
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
