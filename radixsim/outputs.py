"""Every file a command writes, and the directories they go to.

- `write(path, data, columns=None)`: THE writer of result files (.csv, .json, .yaml). Every
  value passes through `plain`: numpy scalars become Python numbers, tuples lists, anything
  else unexpected (arrays, objects) is refused with a TypeError naming the file. Each file is
  written beside itself and renamed into place, so a reader never sees half a file.
- `result_dir(target)`: a run is written into a fresh directory beside `target` and renamed
  into place at the end; the target then holds exactly the new run (an earlier run's files are
  gone), or, if the run stopped, the earlier run untouched. A target holding anything that is
  not a radixsim result is refused (`OutputError`), never deleted. The temporary directory is
  created before anything is simulated, so an unwritable target fails at once.
- `owned_dir(out, identity, what)`: a sweep's or plan's directory: held under a lock (a
  second command on the same directory refuses) and tied to one definition (`identity`,
  stored in `DIR/<what>.yaml`): a directory of a different sweep/plan is refused.
"""
from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import yaml

# the files a run (run, replay, torch backend, fleet) writes; only these may be replaced by a new run
RUN_FILES = frozenset({
    "config.yaml", "requests.csv", "rounds.csv", "timeline.csv", "summary.json", "tree.json",
    "report.html", "ttft_per_round.png", "hit_rate_per_round.png", ".done", "engines.csv", "fleet.json",
})
_SCALARS = (bool, int, float, str, type(None))


class OutputError(ValueError):
    """An output directory that cannot or must not be written (one line)."""


def plain(v, where: str = "<value>"):
    """`v` with numpy scalars as Python numbers and tuples as lists; TypeError for anything
    that is not None, bool, int, float, str, a list/tuple or a mapping with str/int keys."""
    if isinstance(v, np.generic) and not isinstance(v, (np.void, np.object_)):
        v = v.item()
    if type(v) in _SCALARS:
        return v
    if isinstance(v, str):  # a str subclass (torch.__version__): its text
        return str(v)
    if isinstance(v, dict):
        return {_key(k, where): plain(x, f"{where}.{k}") for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x, f"{where}[{i}]") for i, x in enumerate(v)]
    raise TypeError(f"{where}: {type(v).__name__} value {str(v)[:60]!r}; expected a number, string, "
                    "bool, null, list or mapping")


def _key(k, where: str):
    k = plain(k, where)
    if type(k) not in (str, int):
        raise TypeError(f"{where}: mapping key {k!r}; expected a string or an integer")
    return k


def cell(v, where: str = "<cell>") -> str:
    """One CSV cell: empty for None, 1/0 for booleans, repr for floats (round-trips)."""
    t = type(v)
    if t is float:
        return repr(v)
    if t is int or t is str:
        return str(v)
    v = plain(v, where)
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float, str)):
        return cell(v)
    raise TypeError(f"{where}: {type(v).__name__} in a CSV cell; expected a number, string, bool or null")


def fmt_or_dash(v, spec: str) -> str:
    """`v` formatted with `spec`, or "-" where it is None (a printed table's missing value)."""
    return "-" if v is None else format(v, spec)


def plural(n: int, noun: str) -> str:
    """`n` and `noun`, with an "s" unless n is 1 ("1 engine", "16 engines")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def ruled(head: str) -> list:
    """A printed table's first lines: its header and a rule as wide."""
    return [head, "-" * len(head)]


def write(path, data, columns=None) -> None:
    """Write `data` to `path` by its suffix: .csv (`columns`, then one line per row: a dict
    keyed by the columns, missing keys empty, or a sequence in column order), .json, .yaml."""
    path = Path(path)
    kind = path.suffix.lower()
    if kind == ".csv":
        if columns is None:
            raise ValueError(f"{path}: a CSV needs its columns")
        _replace(path, lambda f: _write_csv(f, path, data, list(columns)))
    elif kind == ".json":
        doc = plain(data, str(path))
        _replace(path, lambda f: f.write(json.dumps(doc, indent=2) + "\n"))
    elif kind in (".yaml", ".yml"):
        doc = plain(data, str(path))
        _replace(path, lambda f: yaml.safe_dump(doc, f, sort_keys=False))
    else:
        raise ValueError(f"{path}: expected a .csv, .json or .yaml result file")


def _write_csv(f, path: Path, rows, columns: list) -> None:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(columns)
    for i, r in enumerate(rows):
        vals = [r.get(c) for c in columns] if isinstance(r, dict) else r
        w.writerow([cell(v, f"{path}: row {i + 1}") for v in vals])


def _replace(path: Path, fill) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "w", newline="") as f:
            fill(f)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _foreign(target: Path) -> list:
    """Names in `target` that are not a run's files (sorted); OutputError if it is not a directory."""
    if not target.exists():
        return []
    if not target.is_dir():
        raise OutputError(f"{target}: not a directory; expected a result directory (new or an earlier run's)")
    return sorted(p.name for p in target.iterdir() if p.name not in RUN_FILES or not p.is_file())


def _shown(names: list) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _check_target(target: Path) -> None:
    other = _foreign(target)
    if other:
        raise OutputError(f"{target}: holds files that are not radixsim results ({_shown(other)}); "
                          "expected a new or empty directory or an earlier run's")


def _beside(target: Path, tag: str) -> Path:
    return target.parent / f".{target.name}.{tag}-{secrets.token_hex(4)}"


def _fresh_dir(target: Path) -> Path:
    """A new empty directory beside `target` (created with the umask's mode, as `target` would be)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        while True:
            d = _beside(target, "tmp")
            try:
                d.mkdir()
                return d
            except FileExistsError:
                continue
    except OSError as e:
        blocker = next((p for p in target.parents if p.exists()), None)
        why = f"{blocker} is not a directory" if blocker is not None and not blocker.is_dir() else e.strerror or e
        raise OutputError(f"{target}: cannot write results there ({why})") from None


def _swap(tmp: Path, target: Path) -> Path | None:
    """Rename `tmp` to `target`; an existing `target` is first renamed aside (returned)."""
    if not target.exists():
        os.rename(tmp, target)
        return None
    old = _beside(target, "old")
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    return old


@contextmanager
def result_dir(target):
    """Yield a fresh directory to write a run into; on success it replaces `target` (module
    docstring); on any exception (Ctrl-C included) it is removed and `target` is untouched."""
    target = Path(os.path.realpath(target))  # a symlinked run directory: replace what it points to
    _check_target(target)
    tmp = _fresh_dir(target)
    try:
        yield tmp
        _check_target(target)  # nothing foreign appeared meanwhile
        old = _swap(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def owned_dir(out, identity: dict, what: str):
    """Hold `out` for one sweep/plan (module docstring): create it, take `out/.lock` (refuse
    if another command holds it), check or write `out/<what>.yaml`. Yields the Path."""
    out = Path(out)
    marker = out / f"{what}.yaml"
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise OutputError(f"{out}: cannot write the {what} there ({e.strerror or e})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(f"{out}: another {what} is running in this directory; expected one at a time") \
                from None
        _check_identity(out, marker, identity, what)
        yield out
    finally:
        os.close(fd)


def _check_identity(out: Path, marker: Path, identity: dict, what: str) -> None:
    doc = yaml.safe_load(yaml.safe_dump(plain(identity, str(marker)), sort_keys=False))
    if marker.is_file():
        with open(marker) as f:
            if yaml.safe_load(f) != doc:
                raise OutputError(f"{out}: holds a different {what} ({marker.name} records another scenario, "
                                  f"--set or {what} options); expected a new directory or the same command")
        return
    other = sorted(p.name for p in out.iterdir() if p.name != ".lock")
    if other:
        raise OutputError(f"{out}: holds files but no {marker.name} ({_shown(other)}); "
                          f"expected a new or empty directory or an earlier run of the same {what}")
    write(marker, identity)


def scenario_key(doc: dict) -> str:
    """A short hash of a fully resolved scenario (`Scenario.doc`): what a sweep/plan point is."""
    text = json.dumps(plain(doc, "scenario"), sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


__all__ = ["write", "plain", "cell", "result_dir", "owned_dir", "scenario_key", "OutputError", "RUN_FILES"]
