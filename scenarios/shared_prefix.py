"""inference-perf's shared-prefix workload under staged load (workload kind ``shared_prefix``).

What the routing benchmarks run (llm-d's precise prefix-cache scheduling, Dynamo's KV router A/B):
kubernetes-sigs/inference-perf's ``SharedPrefixDataGenerator`` driven by its ``LoadGenerator``.
Read at kubernetes-sigs/inference-perf@0ba9aceb (inference_perf/datagen/shared_prefix_datagen.py),
@0949afc8 (inference_perf/loadgen/load_timer.py) and the LoadGenerator's ``mp_run``:

Prompts
    ``num_groups`` groups, each one system prompt of ``system_prompt_len`` random tokens and
    ``num_prompts_per_group`` questions of ``question_len`` random tokens; a prompt is
    system prompt + question. The prompt list (group-major) is shuffled once (seeded), and
    request k of the run (counted across stages) sends prompt ``k % (groups x prompts)``:
    after the last prompt the list starts over, so a prompt repeats exactly. Each request asks
    for ``output_len`` tokens; outputs are fresh tokens that nothing else uses (a single-turn
    workload never sends them back). inference-perf's multi-turn mode
    (``enable_multi_turn_chat``) and length distributions are not modelled (refused in one line).

Load
    ``stages``: a list of ``{rate, duration}``. Stage s sends ``int(rate x duration)`` requests;
    ``poisson`` (inference-perf's PoissonLoadTimer): each second draws a Poisson(rate) count of
    requests and spreads them over that second by exponential gaps scaled to sum to one
    second; ``constant`` (ConstantLoadTimer): n exponential gaps scaled to sum to the duration.
    The first request comes ``stage_lead_s`` (inference-perf: 1 s) after the stage starts. A
    stage ends at the later of its nominal end (lead + duration) and the completion of its last
    request (inference-perf joins its request queue), then ``stage_interval_s`` (load.interval,
    1 s) passes before the next stage (none after the last).

Every random draw comes from its own stream (`scenarios.seeding.rng(seed, 7, ...)`): the token
ids of the prompts, the shuffle, and each stage's arrival times.

`read_inference_perf(path)` takes these knobs from an inference-perf config file (its
``data.shared_prefix`` and ``load`` sections, with the aliases inference-perf accepts)."""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .seeding import rng
from .workload_kinds import WorkloadSpec

LOAD_TYPES = ("poisson", "constant")
_STREAM = 7  # scenarios.seeding spawn key of this workload (others: multiturn 0-2, agentic, programs)


@dataclass(frozen=True, slots=True)
class Stage:
    rate: float  # requests per second
    duration: float  # seconds

    @property
    def requests(self) -> int:
        return int(self.rate * self.duration)


@dataclass(frozen=True)
class SharedPrefixConfig(WorkloadSpec):
    """The knobs (inference-perf's names and defaults: its SharedPrefix and LoadConfig)."""

    num_groups: int = 10
    num_prompts_per_group: int = 10
    system_prompt_len: int = 100
    question_len: int = 50
    output_len: int = 50
    stages: tuple = ((1.0, 30.0),)  # ((rate, duration), ...)
    load_type: str = "poisson"
    stage_interval_s: float = 1.0
    stage_lead_s: float = 1.0
    vocab_size: int = 128_000
    seed: int = 0

    def __post_init__(self):
        for name in ("num_groups", "num_prompts_per_group", "question_len", "vocab_size"):
            _check_int(self, name, 1)
        for name in ("system_prompt_len", "output_len"):
            _check_int(self, name, 0)
        if self.load_type not in LOAD_TYPES:
            raise ValueError(f"SharedPrefixConfig.load_type: got {self.load_type!r}; expected one of "
                             + ", ".join(LOAD_TYPES))
        for name in ("stage_interval_s", "stage_lead_s"):
            v = getattr(self, name)
            if not (isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 <= v < float("inf")):
                raise ValueError(f"SharedPrefixConfig.{name}: got {v!r}; expected seconds >= 0")
        object.__setattr__(self, "stages", tuple(parse_stages(self.stages, "SharedPrefixConfig.stages")))

    @property
    def num_prompts(self) -> int:
        return self.num_groups * self.num_prompts_per_group

    @property
    def stage_list(self) -> tuple:
        return tuple(Stage(*s) for s in self.stages)

    @property
    def total_requests(self) -> int:
        return sum(s.requests for s in self.stage_list)


def _check_int(cfg, name: str, lo: int) -> None:
    v = getattr(cfg, name)
    if not (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= lo):
        raise ValueError(f"SharedPrefixConfig.{name}: got {v!r}; expected an integer >= {lo}")


def parse_stages(stages, what: str) -> list:
    """[(rate, duration), ...] from a list of {rate, duration} mappings or pairs; ValueError
    naming `what`[i] and the field for an empty list, a missing, negative, zero or non-finite
    field, or a stage that sends no request (int(rate x duration) = 0)."""
    if isinstance(stages, (str, bytes, dict)) or not hasattr(stages, "__iter__"):
        raise ValueError(f"{what}: got {stages!r}; expected a list of {{rate, duration}}")
    out = []
    for i, st in enumerate(stages):
        where = f"{what}[{i}]"
        if isinstance(st, dict):
            extra = sorted(set(st) - {"rate", "duration"})
            if extra:
                raise ValueError(f"{where}.{extra[0]}: unknown key; expected rate and duration "
                                 "(interval-based stages are not modelled)")
            pair = [st.get("rate"), st.get("duration")]
        elif isinstance(st, (list, tuple)) and len(st) == 2:
            pair = list(st)
        else:
            raise ValueError(f"{where}: got {st!r}; expected a mapping {{rate, duration}}")
        for name, v in zip(("rate", "duration"), pair):
            v = _number(v)
            if not (isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 < v < float("inf")):
                raise ValueError(f"{where}.{name}: got {v!r}; expected a number > 0"
                                 + (" (requests/s)" if name == "rate" else " (seconds)"))
        rate, duration = float(_number(pair[0])), float(_number(pair[1]))
        if int(rate * duration) < 1:
            raise ValueError(f"{where}: rate {rate:g} x duration {duration:g} sends no request; "
                             "expected rate x duration >= 1")
        out.append((rate, duration))
    if not out:
        raise ValueError(f"{what}: empty; expected at least one stage {{rate, duration}}")
    return out


def _number(v):
    from .schema import as_number

    return as_number(v)


@dataclass
class SharedPrefixWorkload:
    """The prompts and the arrival times of a config (built lazily, deterministic)."""

    config: SharedPrefixConfig
    _prompts: list = field(default=None, repr=False)

    def __len__(self) -> int:
        return self.config.total_requests

    def prompts(self) -> list:
        """Every prompt (int64 arrays), in request order modulo its length (after the shuffle)."""
        if self._prompts is None:
            c = self.config
            tok = rng(c.seed, _STREAM, 0)
            out = []
            for _ in range(c.num_groups):
                system = tok.integers(0, c.vocab_size, c.system_prompt_len, dtype=np.int64)
                for _ in range(c.num_prompts_per_group):
                    q = tok.integers(0, c.vocab_size, c.question_len, dtype=np.int64)
                    out.append(np.concatenate([system, q]))
            order = rng(c.seed, _STREAM, 1).permutation(len(out))
            self._prompts = [out[i] for i in order]
        return self._prompts

    def group_of(self, k: int) -> int:
        """The group of request k's prompt (for tests and reports)."""
        c = self.config
        order = rng(c.seed, _STREAM, 1).permutation(c.num_prompts)
        return int(order[k % c.num_prompts]) // c.num_prompts_per_group

    def prompt(self, k: int) -> np.ndarray:
        p = self.prompts()
        return p[k % len(p)]

    def arrival_offsets(self, stage: int) -> np.ndarray:
        """Stage `stage`'s request times in seconds from its first possible request (its start
        + stage_lead_s): inference-perf's timers."""
        c = self.config
        st = c.stage_list[stage]
        n = st.requests
        g = rng(c.seed, _STREAM, 2, stage)
        if c.load_type == "constant":
            gaps = g.exponential(1.0 / st.rate, n)
            return np.cumsum(gaps * (st.duration / gaps.sum()))
        times: list = []
        second = 0.0
        while len(times) < n:
            count = int(g.poisson(st.rate))
            if count >= 1:
                gaps = g.exponential(1.0 / count, count)
                times.extend(second + np.cumsum(gaps / gaps.sum()))
            second += 1.0
        return np.asarray(times[:n], dtype=float)


def read_inference_perf(path) -> dict:
    """The shared_prefix knobs of an inference-perf config file (data.type shared_prefix; load
    type poisson or constant with {rate, duration} stages). ValueError, one line naming the
    file and the field, for anything else."""
    from .yamlfile import read_mapping

    p = Path(path)
    doc = read_mapping(p, "an inference-perf config (data, load)", allow_empty=False)
    data = doc.get("data") or {}
    load = doc.get("load") or {}
    if not isinstance(data, dict) or not isinstance(load, dict):
        raise ValueError(f"{p}: data, load: expected mappings")
    if data.get("type") != "shared_prefix":
        raise ValueError(f"{p}: data.type: got {data.get('type')!r}; expected shared_prefix")
    sp = data.get("shared_prefix") or {}
    if not isinstance(sp, dict):
        raise ValueError(f"{p}: data.shared_prefix: got {sp!r}; expected a mapping")
    aliases = {"num_unique_system_prompts": "num_groups", "num_users_per_system_prompt": "num_prompts_per_group"}
    known = ("num_groups", "num_prompts_per_group", "system_prompt_len", "question_len", "output_len")
    out = {}
    for key, v in sp.items():
        name = aliases.get(key, key)
        if key == "enable_multi_turn_chat" and not v:
            continue
        if name not in known:
            raise ValueError(f"{p}: data.shared_prefix.{key}: not modelled by radixsim's shared_prefix "
                             f"workload; expected only {', '.join(known)} (fixed token counts)")
        if isinstance(v, dict):
            raise ValueError(f"{p}: data.shared_prefix.{key}: a distribution is not modelled; expected a token count")
        out[name] = v
    kind = load.get("type", "constant")
    if kind not in LOAD_TYPES:
        raise ValueError(f"{p}: load.type: got {kind!r}; expected one of {', '.join(LOAD_TYPES)}")
    out["load_type"] = kind
    if "interval" in load:
        out["stage_interval_s"] = load["interval"]
    for key in load:
        if key not in ("type", "interval", "stages", "num_workers", "worker_max_concurrency",
                       "worker_max_tcp_connections", "base_seed"):
            raise ValueError(f"{p}: load.{key}: not modelled by radixsim's shared_prefix workload; "
                             "expected type, interval, stages")
    try:
        out["stages"] = parse_stages(load.get("stages") or [], "load.stages")
    except ValueError as err:
        raise ValueError(f"{p}: {err}") from None
    return out


__all__ = ["SharedPrefixConfig", "SharedPrefixWorkload", "Stage", "parse_stages", "read_inference_perf", "LOAD_TYPES"]


# -- the workload kind ---------------------------------------------------------------------------
def _stages_check(v) -> bool:
    """The schema's check of `workload.stages` (the fields are checked one by one in `_build`)."""
    return isinstance(v, (list, tuple)) and len(v) > 0


def _schema() -> dict:
    from .schema import SCHEMA

    d = SharedPrefixConfig()
    return {
        "kind": SCHEMA["workload"]["kind"],
        "num_groups": (d.num_groups, "int1", "an integer >= 1 (system prompts)"),
        "num_prompts_per_group": (d.num_prompts_per_group, "int1", "an integer >= 1 (questions per system prompt)"),
        "system_prompt_len": (d.system_prompt_len, "int0", "an integer >= 0 (tokens)"),
        "question_len": (d.question_len, "int1", "an integer >= 1 (tokens)"),
        "output_len": (d.output_len, "int0", "an integer >= 0 (tokens)"),
        "stages": ([{"rate": r, "duration": t} for r, t in d.stages], _stages_check,
                   "a non-empty list of {rate: requests/s > 0, duration: seconds > 0}"),
        "load_type": (d.load_type, ("choice", LOAD_TYPES), " or ".join(LOAD_TYPES)),
        "stage_interval_s": (d.stage_interval_s, "nonneg", "seconds >= 0 (inference-perf's load.interval)"),
        "inference_perf": (None, "str_or_none", "null or an inference-perf config file (its data.shared_prefix "
                           "and load sections replace the keys above)"),
        "vocab_size": (d.vocab_size, "int1", "an integer >= 1"),
    }


_KNOBS = ("num_groups", "num_prompts_per_group", "system_prompt_len", "question_len", "output_len",
          "load_type", "stage_interval_s", "vocab_size")


def _build(w: dict, ctx) -> SharedPrefixConfig:
    from .schema import ScenarioError

    where = ctx.where
    knobs = {k: w[k] for k in _KNOBS}
    knobs["stages"] = w["stages"]
    if w["inference_perf"]:
        path = Path(w["inference_perf"])
        if not path.is_file() and (Path(where).parent / path).is_file():
            path = Path(where).parent / path
        if not path.is_file():
            raise ScenarioError(f"{where}: workload.inference_perf: {w['inference_perf']}: no such file; "
                                "expected an inference-perf config file")
        try:
            knobs.update(read_inference_perf(path))
        except (ValueError, OSError) as err:
            raise ScenarioError(f"{where}: workload.inference_perf: {err}") from None
    else:
        try:
            knobs["stages"] = parse_stages(knobs["stages"], "workload.stages")
        except ValueError as err:
            raise ScenarioError(f"{where}: {err}") from None
    try:
        cfg = SharedPrefixConfig(seed=ctx.seed, **knobs)
    except ValueError as err:
        raise ScenarioError(f"{where}: workload.{str(err).removeprefix('SharedPrefixConfig.')}") from None
    longest = cfg.system_prompt_len + cfg.question_len + cfg.output_len
    if -(-longest // ctx.page_size) * ctx.page_size >= ctx.l1_tokens:
        raise ScenarioError(f"{where}: cache.l1_tokens: {ctx.l1_tokens} tokens cannot hold the longest request "
                            f"({longest} tokens); expected more L1, or shorter prompts")
    return cfg


def _smoke(w: dict) -> None:
    """At smoke size: the first two stages, each at most 4 requests/s for at most 3 s."""
    st = w.get("stages")
    if isinstance(st, list) and st and all(isinstance(s, dict) for s in st):
        w["stages"] = [{**s, "rate": min(_number(s.get("rate")), 4), "duration": min(_number(s.get("duration")), 3)}
                       if all(isinstance(_number(s.get(k)), (int, float)) for k in ("rate", "duration")) else s
                       for s in st[:2]]


def _replay_items(wl: SharedPrefixWorkload, page_size: int, keyed: bool):
    """`radixsim replay --workload shared_prefix`: the requests in send order, no clock."""
    from cache_core.records import TokenSeq

    from .workload_kinds import ReplayRequest

    c = wl.config
    out_id = -1
    k = 0
    for s, stage in enumerate(c.stage_list):
        for _ in range(stage.requests):
            prompt = wl.prompt(k)
            output = np.arange(out_id, out_id - c.output_len, -1, dtype=np.int64)
            out_id -= c.output_len
            tokens = np.concatenate([prompt, output[:-1]]) if c.output_len > 1 else prompt
            seq = TokenSeq(tokens)  # page keys computed on first need (keyed or not)
            yield ReplayRequest(k, k, s + 1, prompt, output, seq)
            k += 1


def _register() -> None:
    from .workload_kinds import ReplayHook, register_workload_kind

    register_workload_kind("shared_prefix", _schema(), _build, smoke=_smoke,
                           replay=ReplayHook(SharedPrefixConfig, SharedPrefixWorkload, _replay_items))


_register()
