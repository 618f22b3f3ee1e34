"""Argument parsing shared by radixsim's commands: the parser class (one-line errors, exit 2),
the option types and the check of a --device option."""
from __future__ import annotations

import argparse
import math
import sys

EXIT_BAD_INPUT = 2


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints usage too; keep it short)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


MAX_INT_OPTION = 2**40  # any integer option (a token count, a threshold): 1.1e12, far above any real value
MAX_PAGE_SIZE = 2**20  # tokens per page (SGLang's pages are 1 to 256 tokens): the scenario's cache.page_size bound


def nonneg_int(text: str, limit: int = MAX_INT_OPTION) -> int:
    """An integer >= 0 ('2_000', e-notation '2e3'), at most `limit`."""
    t = text.strip().replace("_", "")
    try:
        v = int(t)
    except ValueError:
        try:
            f = float(t)
        except ValueError:
            f = math.nan
        if not (math.isfinite(f) and f.is_integer() and any(c in t for c in "eE")):
            raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
        v = int(f)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {v}")
    if v > limit:
        raise argparse.ArgumentTypeError(f"expected at most {limit:,} (a sanity limit), got {text!r}")
    return v


def pos_int(text: str, limit: int | None = None) -> int:
    v = nonneg_int(text) if limit is None else nonneg_int(text, limit)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def page_size(text: str) -> int:
    """Tokens per page: an integer in 1..MAX_PAGE_SIZE."""
    return pos_int(text, MAX_PAGE_SIZE)


def _finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def nonneg_float(text: str) -> float:
    """A finite number >= 0 (a price)."""
    v = _finite(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return v


def pos_float(text: str) -> float:
    """A finite number > 0 (a ratio)."""
    v = _finite(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return v


def sizes(text: str) -> str:
    """A comma-separated list of sizes (a comparison run over capacities)."""
    for part in text.split(","):
        size(part)
    return text


def size(text: str) -> str:
    """Syntax check of a size option (tokens, bytes with a unit, or 'unbounded'); the value is
    converted once --kv-bytes-per-token is known."""
    from scenarios.units import is_size_text

    if not is_size_text(text):
        raise argparse.ArgumentTypeError(f"expected a non-negative token count or a size like 500GiB, got {text!r}")
    return text


def policy(text: str) -> str:
    """One policy name, or a comma-separated list (a comparison run)."""
    from cache_core.eviction import RENAMED, policy_names

    for name in text.split(","):
        if name in RENAMED:
            raise argparse.ArgumentTypeError(RENAMED[name])
        if name not in policy_names():
            raise argparse.ArgumentTypeError(f"unknown policy {name!r}; expected one of {', '.join(policy_names())}")
    return text


class _ReplayWorkloads:
    """argparse `choices` of --workload, read from the workload kind registry when an argument is
    checked or help is shown, not when the parser is built (so that `--help` imports no numpy)."""

    @staticmethod
    def _names() -> list[str]:
        from .replay import replay_workload_names

        return replay_workload_names()

    def __contains__(self, name) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())


REPLAY_WORKLOADS = _ReplayWorkloads()  # choices=REPLAY_WORKLOADS, metavar="KIND"


class _Policies:
    """argparse `choices` of --policy, read from the eviction policy registry when an argument is
    checked or help is shown (so a newly registered policy shows up by itself, and building the
    parser imports no numpy). A comma-separated list is in it when each name is; `policy` above
    gives the one-line refusal first."""

    @staticmethod
    def _names() -> list[str]:
        from cache_core.eviction import policy_names

        return policy_names()

    def __contains__(self, text) -> bool:
        return all(name in self._names() for name in str(text).split(","))

    def __iter__(self):
        return iter(self._names())


POLICIES = _Policies()  # choices=POLICIES, metavar="POLICY", help="... %(choices)s ..."


def workload_sets(sets) -> tuple:
    import yaml

    out = []
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.startswith("workload.") or len(key) <= len("workload."):
            raise ValueError(f"--set {item!r}: expected workload.KEY=VALUE")
        out.append((key[len("workload."):], yaml.safe_load(value)))
    return tuple(out)


class DeviceError(RuntimeError):
    """A torch device this machine cannot use, or a torch device failure (one line)."""


def check_device(device: str, option: str) -> None:
    """Refuse, before any work, a torch device that does not exist or is not available here."""
    try:
        import torch
    except ImportError:
        raise DeviceError(f"{option} {device}: the torch backend needs torch (pip install torch)") from None
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise DeviceError(f"{option} {device!r}: not a torch device; expected cpu or cuda[:N]") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"{option} {device}: CUDA is not available on this machine (torch {torch.__version__}); "
                          "expected cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise DeviceError(f"{option} {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def torch_device(args, sc) -> str:
    """The device a torch command uses (--device, else the scenario's torch.device), checked."""
    device = args.device or sc.doc.get("torch", {}).get("device") or "cpu"
    check_device(device, "--device" if args.device else "torch.device")
    return device


def warn(prog: str, warnings) -> None:
    """One stderr line per warning, after the command's name."""
    for w in warnings:
        sys.stderr.write(f"{prog}: warning: {w}\n")
