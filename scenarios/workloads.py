"""Multi-turn workload: the knobs of SGLang's benchmark/hicache/bench_multiturn.py.

``num_clients`` sessions each hold a conversation of ``num_rounds`` rounds. Round r of a
client sends its whole history plus ``request_length`` new tokens and gets
``output_length`` output tokens, which join the history::

    prompt(1) = new(1)
    prompt(r) = prompt(r-1) + output(r-1) + new(r)
    len(prompt(r)) = r * request_length + (r - 1) * output_length

Tokens
    Each client owns a disjoint block of ids, ``[c * span, (c + 1) * span)`` with
    ``span = vocab_size // num_clients``, and draws its tokens uniformly from it with its own
    generator (``numpy.random.default_rng(SeedSequence(seed, spawn_key=(0, c)))``; one draw of
    request_length + output_length tokens per round: new tokens, then output). So two
    clients share no token at all (as bench_multiturn's random text per client shares no
    prefix), and a client's tokens depend only on (seed, client, config), never on the order
    in which requests are replayed. Output tokens stand for what the model generates; they
    are fixed up front so the next round's prompt is known.

Memory
    A client's history lives in one preallocated int64 buffer of its final size;
    ``prompt`` and ``output`` are read-only views into it (no history is ever copied), and
    the buffer is written only past every view already handed out. ``page_keys`` likewise is
    a read-only view of a per-client uint64 key buffer: each round hashes only the tokens
    after the last full page of the previous prompt (the partial tail page is re-sent, as
    `cache_core.keys.page_keys` requires), continuing from the client's `KeyState`.

Replay order (no clock)
    ``round_barrier=True``: round 1 of every client, then round 2, ... . Within a round the
    clients come in order 0..N-1 (``"fifo"``) or in a seeded permutation drawn per round
    (``"random"``; ``SeedSequence(seed, spawn_key=(1, r))``).
    ``round_barrier=False``: client c's round r is ready at the nominal time
    ``arrival_s(c, r)`` below, and requests are yielded by (arrival_s, round, position of the
    client in the round-1 dispatch order); with "fifo" that position is the client id.

arrival_s (nominal ordering times; the simulator recomputes real times)
    The dispatcher sends requests at Poisson times at ``request_rate``, as bench_multiturn's
    sender does: s_1 = 0, s_{k+1} = s_k + Exp(request_rate) (seeded,
    ``SeedSequence(seed, spawn_key=(2,))``); an infinite rate makes every s_k = 0.
    ``period_s = num_clients / request_rate`` is the mean time to dispatch one request per
    client (0 for an infinite rate).

    * with the round barrier, the k-th request of round r (in that round's order) has
      ``arrival_s = (r - 1) * max(period_s, s_N) + s_k``, so a round never starts before the
      previous one has been dispatched and arrival_s never decreases along the replay order;
    * without it, the client at position k of the round-1 order has
      ``arrival_s(c, r) = s_k + (r - 1) * period_s``: every client comes back once per period
      in its round-1 position (with "random", the round-1 permutation holds for every round),
      so the order departs from the barrier order only where the round-1 dispatch outlasts a
      period (s_k > period_s): those clients' round r then comes after the first clients'
      round r + 1. With an infinite rate every time is 0 and the order is the barrier order.

    In replay these times only fix the order. A simulation is closed-loop instead: round r+1
    of a client becomes ready when round r completes, dispatch is paced by request_rate, and
    at most ``max_parallel`` requests are in flight (that knob has no effect here).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from cache_core.keys import ROOT_STATE, TOKEN_DTYPE, KeyState, page_keys
from cache_core.records import TokenSeq

from .seeding import rng as _rng
from .traces import MAX_PROMPT_TOKENS
from .workload_kinds import ReplayHook, ReplayRequest, WorkloadSpec

READY_QUEUE_POLICIES = ("fifo", "random")
MAX_VOCAB_SIZE = 2**62  # token ids stay non-negative int64 (the trace reader's bound)

# SeedSequence spawn keys: one independent stream per purpose.
_STREAM_TOKENS, _STREAM_ORDER, _STREAM_ARRIVALS = 0, 1, 2


def _check_int(name: str, value, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"MultiTurnConfig.{name} must be an integer >= {lo}, got {value!r}")
    if value < lo:
        raise ValueError(f"MultiTurnConfig.{name} must be an integer >= {lo}, got {value}")


@dataclass(frozen=True, kw_only=True)
class MultiTurnConfig(WorkloadSpec):
    """bench_multiturn's knobs (defaults: the DeepSeek-V4-Flash experiment of SPEC.md 5)."""

    num_clients: int = 48
    num_rounds: int = 60
    request_length: int = 4096  # new tokens per round
    output_length: int = 16  # output tokens per round
    max_parallel: int = 16  # requests in flight (used by the simulator only)
    request_rate: float = 64.0  # requests/s; math.inf sends everything at once
    round_barrier: bool = True
    ready_queue_policy: str = "fifo"  # "fifo" | "random"
    seed: int = 20260626
    page_size: int = 64  # tokens per page for `WorkloadRequest.page_keys`
    vocab_size: int = 128_000  # token ids lie in [0, vocab_size)

    def __post_init__(self):
        _check_int("num_clients", self.num_clients, 1)
        _check_int("num_rounds", self.num_rounds, 1)
        _check_int("request_length", self.request_length, 1)
        _check_int("output_length", self.output_length, 0)
        _check_int("max_parallel", self.max_parallel, 1)
        rate = self.request_rate
        if (isinstance(rate, bool) or not isinstance(rate, numbers.Real)
                or math.isnan(rate) or rate <= 0):
            raise ValueError(
                f"MultiTurnConfig.request_rate must be a number > 0 (requests/s; inf sends all "
                f"at once), got {rate!r}")
        if not isinstance(self.round_barrier, bool):
            raise ValueError(f"MultiTurnConfig.round_barrier must be True or False, got {self.round_barrier!r}")
        if self.ready_queue_policy not in READY_QUEUE_POLICIES:
            raise ValueError(
                f"MultiTurnConfig.ready_queue_policy must be 'fifo' or 'random', got {self.ready_queue_policy!r}")
        _check_int("seed", self.seed, 0)
        _check_int("page_size", self.page_size, 1)
        _check_int("vocab_size", self.vocab_size, 1)
        if self.vocab_size > MAX_VOCAB_SIZE:
            raise ValueError(f"MultiTurnConfig.vocab_size must be <= 2**62, got {self.vocab_size}")
        if self.vocab_size < self.num_clients:
            raise ValueError(
                f"MultiTurnConfig.vocab_size must be >= num_clients ({self.num_clients}): each client "
                f"draws from its own disjoint block of token ids, got {self.vocab_size}")
        longest = self.max_prompt_tokens
        if longest > MAX_PROMPT_TOKENS:
            raise ValueError(
                f"MultiTurnConfig.num_rounds x (request_length + output_length) gives a last prompt of "
                f"{longest:,} tokens, over the limit of {MAX_PROMPT_TOKENS:,}")

    @property
    def max_prompt_tokens(self) -> int:
        """Length of the last round's prompt."""
        return self.num_rounds * self.request_length + (self.num_rounds - 1) * self.output_length


@dataclass(frozen=True, slots=True, eq=False)
class WorkloadRequest:
    """One round of one client. Arrays are read-only views (compare with numpy, not ==)."""

    rid: int  # 0-based position in the replay order
    session_id: int  # the client
    round: int  # 1-based
    prompt: np.ndarray  # int64: whole history + this round's new tokens
    output: np.ndarray  # int64: this round's output tokens (part of the next prompt)
    page_keys: np.ndarray  # uint64: keys of every full page of prompt (cache_core.keys)
    arrival_s: float  # nominal ordering time (module docstring); the simulator recomputes it
    sequence: np.ndarray = None  # int64 view: prompt + output[:-1] (what a server caches), no copy
    key_state: KeyState = ROOT_STATE  # hash state after the prompt's full pages

    def sequence_keys(self, page_size: int) -> np.ndarray:
        """Keys of every full page of `sequence`: the prompt's keys plus the few pages the
        output completes, hashed from `key_state` (O(page + output) work). Keys are prefix
        hashes at page ends, so those of another page size than the workload's (the vLLM flavour's
        engine.block_size) are hashed from the whole sequence instead."""
        st = self.key_state
        if len(self.page_keys) and st.length != len(self.page_keys) * page_size:
            return page_keys(self.sequence, page_size)[0]
        extra, _ = page_keys(self.sequence[st.length :], page_size, st)
        return np.concatenate([self.page_keys[: st.length // page_size], extra])


class _Session:
    """One client's growing history, key buffer and generator."""

    __slots__ = ("tokens", "keys", "state", "filled", "rng", "lo", "hi")

    def __init__(self, cfg: MultiTurnConfig, client: int):
        span = cfg.vocab_size // cfg.num_clients
        self.lo, self.hi = client * span, (client + 1) * span
        self.rng = _rng(cfg.seed, _STREAM_TOKENS, client)
        self.tokens = np.empty(cfg.max_prompt_tokens + cfg.output_length, dtype=TOKEN_DTYPE)
        self.keys = np.empty(cfg.max_prompt_tokens // cfg.page_size, dtype=np.uint64)
        self.state: KeyState = ROOT_STATE
        self.filled = 0  # tokens written: every previous round's new tokens and output

    def next_round(self, cfg: MultiTurnConfig):
        L, O, P = cfg.request_length, cfg.output_length, cfg.page_size
        a = self.filled
        self.tokens[a : a + L + O] = self.rng.integers(self.lo, self.hi, size=L + O, dtype=np.int64)
        self.filled = a + L + O
        n = a + L  # prompt length
        done = self.state.length  # tokens already absorbed into the key state (page-aligned)
        new_keys, self.state = page_keys(self.tokens[done:n], P, self.state)
        k0 = done // P
        self.keys[k0 : k0 + len(new_keys)] = new_keys
        prompt, output = self.tokens[:n], self.tokens[n : n + O]
        seq = self.tokens[: n + max(O - 1, 0)]
        keys = self.keys[: n // P]
        for v in (prompt, output, keys, seq):
            v.flags.writeable = False
        return prompt, output, keys, seq


class ClientHistory:
    """One client's rounds, generated on demand in round order (a closed-loop simulator asks
    for a client's next round when the previous one has completed). The tokens and keys are
    exactly those `MultiTurnWorkload.__iter__` yields for the client."""

    def __init__(self, cfg: MultiTurnConfig, client: int):
        self.cfg = cfg
        self.client = client
        self.round = 0
        self._s = _Session(cfg, client)

    def next_round(self, rnd: int) -> WorkloadRequest:
        if rnd != self.round + 1 or rnd > self.cfg.num_rounds:
            raise ValueError(f"client {self.client}: round {rnd} requested after round {self.round} "
                             f"(of {self.cfg.num_rounds})")
        self.round = rnd
        prompt, output, keys, seq = self._s.next_round(self.cfg)
        return WorkloadRequest(-1, self.client, rnd, prompt, output, keys, math.nan, seq, self._s.state)


class MultiTurnWorkload:
    """Iterate a multi-turn workload as `WorkloadRequest`s in replay order.

    Each iteration starts from scratch (fresh buffers), so iterating twice gives identical
    requests. A client's buffers are dropped by the iterator after its last round."""

    def __init__(self, config: MultiTurnConfig | None = None):
        if config is None:
            config = MultiTurnConfig()
        if not isinstance(config, MultiTurnConfig):
            raise TypeError(f"config must be a MultiTurnConfig, got {type(config).__name__}")
        self.config = config
        self._schedule = None

    def __len__(self) -> int:
        return self.config.num_clients * self.config.num_rounds

    def total_prompt_tokens(self) -> int:
        """Sum of all prompt lengths: N * (L * R(R+1)/2 + O * R(R-1)/2), no generation."""
        c = self.config
        R = c.num_rounds
        return c.num_clients * (c.request_length * R * (R + 1) // 2 + c.output_length * R * (R - 1) // 2)

    def client(self, c: int) -> ClientHistory:
        """Client `c`'s rounds on demand (fresh buffers)."""
        if not 0 <= c < self.config.num_clients:
            raise ValueError(f"client {c} out of range 0..{self.config.num_clients - 1}")
        return ClientHistory(self.config, c)

    def round_order(self, r: int) -> np.ndarray:
        """Client ids of round `r` (1-based) in ready-queue order: fifo or a seeded permutation."""
        c = self.config
        if c.ready_queue_policy == "fifo":
            return np.arange(c.num_clients)
        return _rng(c.seed, _STREAM_ORDER, r).permutation(c.num_clients)

    def dispatch_times(self) -> np.ndarray:
        """Poisson dispatch times s_1 = 0 <= s_2 <= ... <= s_N of the first round (seconds)."""
        c = self.config
        if math.isinf(c.request_rate) or c.num_clients == 1:
            return np.zeros(c.num_clients)
        gaps = _rng(c.seed, _STREAM_ARRIVALS).exponential(1.0 / c.request_rate, size=c.num_clients - 1)
        return np.concatenate([[0.0], np.cumsum(gaps)])

    def schedule(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(client, round, arrival_s) of every request in replay order, without any tokens."""
        if self._schedule is None:
            self._schedule = self._build_schedule()
        return self._schedule

    def _build_schedule(self):
        c = self.config
        N, R = c.num_clients, c.num_rounds
        s = self.dispatch_times()
        period = 0.0 if math.isinf(c.request_rate) else N / c.request_rate
        if c.round_barrier:
            step = max(period, float(s[-1]))
            clients = np.concatenate([self.round_order(r) for r in range(1, R + 1)])
            rounds = np.repeat(np.arange(1, R + 1), N)
            times = (rounds - 1) * step + np.tile(s, R)
        else:
            first = self.round_order(1)
            pos = np.empty(N, dtype=np.int64)
            pos[first] = np.arange(N)  # position of each client in the round-1 order
            cl = np.tile(np.arange(N), R)
            rd = np.repeat(np.arange(1, R + 1), N)
            t = s[pos[cl]] + (rd - 1) * period
            order = np.lexsort((pos[cl], rd, t))  # by time, then round, then position
            clients, rounds, times = cl[order], rd[order], t[order]
        for a in (clients, rounds, times):
            a.flags.writeable = False
        return clients, rounds, times

    def __iter__(self) -> Iterator[WorkloadRequest]:
        c = self.config
        clients, rounds, times = self.schedule()
        sessions: dict[int, _Session] = {}
        for rid, (client, rnd, t) in enumerate(zip(clients.tolist(), rounds.tolist(), times.tolist())):
            sess = sessions.get(client)
            if sess is None:
                sess = sessions[client] = _Session(c, client)
            prompt, output, keys, seq = sess.next_round(c)
            if rnd == c.num_rounds:
                del sessions[client]
            yield WorkloadRequest(rid, client, rnd, prompt, output, keys, t, seq, sess.state)


def _replay_items(wl: MultiTurnWorkload, page_size: int, keyed: bool):
    """`radixsim replay --workload multiturn`: every request with its sequence (and, for an L3
    tier, its page keys, continued from the prompt's incrementally built ones)."""
    for r in wl:
        seq = TokenSeq(r.sequence, keys=r.sequence_keys(page_size), page_size=page_size) if keyed \
            else TokenSeq(r.sequence)
        yield ReplayRequest(r.rid, r.session_id, r.round, r.prompt, r.output, seq)


def _replay_future(wl: MultiTurnWorkload) -> list:
    return [np.array(r.page_keys) for r in wl]


REPLAY = ReplayHook(MultiTurnConfig, MultiTurnWorkload, _replay_items, _replay_future)  # the kind's replay hook
