"""A request's serving cost outside the GPU: SGLang's front end (issue 29 item 2b).

A bench client that sends text (SGLang's ``benchmark/hicache/bench_multiturn.py`` posts
``{"text": history}`` to ``/generate``: the whole conversation every round) pays, inside its
measured TTFT, for work the GPU step model does not see. SGLang's processes (its
``TokenizerManager`` in the HTTP server's process, the ``Scheduler``, the ``DetokenizerManager``)
split it as follows, and `Frontend` models each part where SGLang runs it:

- **tokenization** of the whole prompt (new + cached tokens) in the TokenizerManager, one
  request at a time on its event loop (sgl-project/sglang#9382: the tokenizer queue alone made
  P99 4.6 s at 500 RPS; #39771: a 100k-token prompt occupies the event loop for hundreds of ms),
  in series before the request reaches the scheduler, but overlapped with the GPU steps (another
  process). Modelled as one FIFO server: a request waits for the requests tokenized before it,
  then ``tokens x tokenize_s_per_token`` (the model's tokenizer, measured here:
  docs/sources/clock_terms.md section b; divided by the hardware's ``host_cpu_speed``).
- **the request's fixed cost**: HTTP parsing, the TokenizerManager's bookkeeping, the ZMQ hand-off
  and the scheduler's intake of the request (``request_s``), in series on the request's own path
  and overlapped with everything else (the scheduler takes requests in between steps; its overlap
  scheduler hides that behind the GPU step): a pure delay before the engine sees the request.
- **the first token's way out**: the DetokenizerManager's detokenization and the TokenizerManager's
  streaming of the first chunk (``first_token_out_s``), after the step that made it: it delays the
  first token as the client sees it, and the response (a closed-loop client's next round), by a
  constant; overlapped with the next GPU steps.

The figures and their sources are in `FRONTENDS` (and docs/sources/clock_terms.md). ``engine.frontend``
(null by default: none of this, every figure as before) names one; `install` puts it on an engine.
The TTFT a result row reports still runs from the client's send (``arrival_s``); the front end's
part is ``frontend_s`` (the tokenizer wait, tokenization and the fixed cost before the engine, plus
the first token's way out), so queue + load + compute + frontend = TTFT.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cache_core.engine_types import FRONTENDS as FRONTEND_NAMES

# tokenizer families: the model presets' `family` -> the tokenizer whose cost is measured
TOKENIZER_OF_FAMILY = {"qwen3": "qwen2-bpe", "qwen3-moe": "qwen2-bpe"}

# Qwen2/Qwen3 byte-level BPE (vocab.json + merges.txt of alibaba/rtp-llm@4b8d39cd5cbe4eff0cf0661411e15be21ccc58b9
# rtp_llm/test/tokenizer_test/testdata/qwen2_tokenizer), `tokenizers` 0.23.3, one encode per prompt,
# RAYON_NUM_THREADS=1, benchmarks/measure_tokenizer.py on this project's 2-core "Intel(R) Xeon(R) Processor"
# (family 6 model 207, the machine of sim/opdata/tree_cpu.json): best encode times 1.20 ms at 1,024 tokens,
# 6.21 ms at 4,096, 34.2 ms at 16,384, 87.4 ms at 36,864; least-squares slope 2.40 us per token.
QWEN2_BPE_S_PER_TOKEN = 2.40e-6


@dataclass(frozen=True)
class FrontendPreset:
    """One serving front end's CPU costs (module doc); ``sources`` names where each comes from."""

    name: str
    request_s: float
    first_token_out_s: float
    tokenize_s_per_token: dict  # tokenizer family -> seconds per prompt token on the calibration machine
    sources: dict = field(default_factory=dict, compare=False)


_TT3560 = ("tenstorrent/tt-inference-server#3560 (2026-05-18): SGLang with a CPU-mock forward, "
           "/v1/chat/completions, 128-token prompts, concurrency 1: median TTFT 9.54 ms with a 2.632 ms forward, "
           "per output token 0.31 ms over the forward")
FRONTENDS = {
    "sglang-text": FrontendPreset(
        name="sglang-text", request_s=6.3e-3, first_token_out_s=0.31e-3,
        tokenize_s_per_token={"qwen2-bpe": QWEN2_BPE_S_PER_TOKEN},
        sources={
            "request_s": f"{_TT3560}: 9.54 - 2.632 = 6.91 ms outside the forward, less the first token's way "
                         "out (0.31) and the 128 tokens' tokenization (0.31 at 2.4 us/token): 6.3 ms (HTTP, chat "
                         "template, TokenizerManager, ZMQ: vibesys PR #421 measured pickle + IPC at 0.1-0.2 ms, "
                         "scheduler intake); one run on an unnamed CPU, the only published figure found",
            "first_token_out_s": f"{_TT3560}: the per-output-token cost over the forward (scheduler, "
                                 "detokenizer, streaming of one token), taken for the first token's",
            "tokenize_s_per_token": "measured here: QWEN2_BPE_S_PER_TOKEN (docs/sources/clock_terms.md b)",
        }),
}
assert tuple(FRONTENDS) == FRONTEND_NAMES


def tokenize_s_per_token(preset: FrontendPreset, family: str, host_cpu_speed: float = 1.0) -> float:
    """Seconds per prompt token of `family`'s tokenizer on a host of `host_cpu_speed`; ValueError when
    no tokenizer cost is known for the family."""
    tok = TOKENIZER_OF_FAMILY.get(family)
    if tok is None or tok not in preset.tokenize_s_per_token:
        known = ", ".join(sorted(TOKENIZER_OF_FAMILY))
        raise ValueError(f"engine.frontend {preset.name}: no tokenizer cost for model family {family!r}; "
                         f"expected one of {known}")
    return preset.tokenize_s_per_token[tok] / host_cpu_speed


class Frontend:
    """The front end of one engine (module doc). `install` wraps the engine's ``arrive`` (each
    request goes through the tokenizer queue and the fixed delay first), ``done_request``
    (the first token's way out delays what the client sees) and ``close_input`` (the input closes
    once every request sent has reached the engine). Counters: ``requests``,
    ``tokenize_s`` (CPU time tokenizing), ``tokenizer_wait_s`` (time waiting for the tokenizer),
    ``fixed_s`` (request_s and first_token_out_s summed), ``busy_until`` (the tokenizer's)."""

    def __init__(self, env, preset: FrontendPreset, s_per_token: float):
        self.env = env
        self.preset = preset
        self.s_per_token = float(s_per_token)
        self.busy_until = 0.0
        self.requests = 0
        self.tokenize_s = 0.0
        self.tokenizer_wait_s = 0.0
        self.fixed_s = 0.0

    def tokenize_time_s(self, prompt_tokens: int) -> float:
        """Seconds to tokenize a prompt of `prompt_tokens` tokens."""
        return prompt_tokens * self.s_per_token

    def install(self, engine) -> "Frontend":
        arrive, done, close = engine.arrive, engine.done_request, engine.close_input
        env, pre = self.env, self.preset
        state = {"pending": 0, "closed": False}

        def front_arrive(r):
            sent = r.arrival_s
            start = max(env.now, self.busy_until)
            work = self.tokenize_time_s(r.prompt_tokens)
            self.busy_until = start + work
            self.requests += 1
            self.tokenize_s += work
            self.tokenizer_wait_s += start - env.now
            self.fixed_s += pre.request_s
            delay = self.busy_until + pre.request_s - env.now

            def reach(_e=None):
                state["pending"] -= 1
                r.arrival_s = env.now
                arrive(r)
                r.arrival_s = sent  # TTFT from the client's send; phase clocks run from here
                r.frontend_s += env.now - sent
                if state["closed"] and not state["pending"]:
                    close()

            state["pending"] += 1
            if delay > 0:
                env.timeout(delay).callbacks.append(reach)
            else:
                reach()

        def front_close():  # the input closes once every request sent has reached the engine
            state["closed"] = True
            if not state["pending"]:
                close()

        def front_done(r):
            out = pre.first_token_out_s
            if r.first_token_s is None or out <= 0:
                return done(r)
            self.fixed_s += out
            r.first_token_s += out
            r.finish_s += out
            r.frontend_s += out
            env.timeout(out).callbacks.append(lambda _e: done(r))

        engine.arrive = front_arrive
        engine.done_request = front_done
        engine.loader.on_done = front_done  # the loader holds the engine's, bound at its construction
        engine.close_input = front_close
        engine.frontend = self
        return self

    def summary(self) -> dict:
        return {"name": self.preset.name, "requests": self.requests, "tokenize_s": self.tokenize_s,
                "tokenizer_wait_s": self.tokenizer_wait_s, "fixed_s": self.fixed_s,
                "s_per_token": self.s_per_token}


def install(env, engine, name: str | None, family: str, host_cpu_speed: float = 1.0) -> Frontend | None:
    """Put front end `name` (``engine.frontend``) on `engine`; None (nothing wrapped) when `name` is None."""
    if name is None:
        return None
    preset = FRONTENDS[name]
    return Frontend(env, preset, tokenize_s_per_token(preset, family, host_cpu_speed)).install(engine)


__all__ = ["FRONTENDS", "Frontend", "FrontendPreset", "QWEN2_BPE_S_PER_TOKEN", "TOKENIZER_OF_FAMILY", "install",
           "tokenize_s_per_token"]
