"""Every file a command writes, and the directories they go to.

- `write(path, data, columns=None)`: THE writer of result files (.csv, .json, .yaml). Every
  value passes through `plain`: numpy scalars become Python numbers, tuples lists, anything
  else unexpected (arrays, objects) is refused with a TypeError naming the file. Each file is
  written beside itself and renamed into place, so a reader never sees half a file.
- `result_dir(target)`: a run is written into a fresh directory beside `target` and renamed
  into place at the end; the target then holds exactly the new run (an earlier run's files are
  gone), or, if the run stopped, the earlier run untouched. A target holding anything that is
  not a radixsim result is refused (`OutputError`), never deleted. The temporary directory is
  created before anything is simulated, so an unwritable target fails at once. While it runs
  the command holds `.NAME.lock` beside the target: a second run or replay into the same
  target is refused (`OutputError`). `kind="comparison"` (replay's policy x capacity table):
  the target may also hold comparison.csv and run directories.
  The directories beside the target (`.NAME.tmp-PID-HEX`, `.NAME.old-PID-HEX`) name the
  process that made them: they are removed on every exit (SIGTERM included: `cli.main` turns
  it into an exception), and a later run into the same target removes those whose process is
  gone (a crash, SIGKILL).
- `owned_dir(out, identity, what)`: a sweep's or plan's directory: held under a lock (a
  second command on the same directory refuses) and tied to one definition (`identity`,
  stored in `DIR/<what>.yaml`): a directory of a different sweep/plan is refused.
- Every lock (`hold`) is a file locked with flock(2), removed when its holder leaves (a
  refused command leaves none); a taker checks that the file it locked is still the one at
  the path (not one just removed by the previous holder).
"""
from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import secrets
import shutil
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import yaml

# the files a run (run, replay, torch backend, fleet) writes; only these may be replaced by a new run
RUN_FILES = frozenset({
    "config.yaml", "requests.csv", "rounds.csv", "timeline.csv", "summary.json", "tree.json",
    "report.html", "ttft_per_round.png", "hit_rate_per_round.png", ".done", "engines.csv", "fleet.json", "stages.csv",
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


def check_out_file(path, option: str, suffixes=(".json", ".yaml", ".yml")) -> None:
    """Refuse (`OutputError`, one line), before any work, an output file `write` could not write
    at the end: a directory, another suffix, a directory that is missing or not writable."""
    p = Path(path)
    kinds = ", ".join(suffixes[:-1]) + " or " + suffixes[-1] if len(suffixes) > 1 else suffixes[0]
    if p.is_dir():
        raise OutputError(f"{option} {path}: is a directory; expected a {kinds} file")
    if p.suffix.lower() not in suffixes:
        raise OutputError(f"{option} {path}: expected a {kinds} file")
    parent = p.parent
    if not parent.is_dir():
        raise OutputError(f"{option} {path}: {parent} is not a directory; expected an existing directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {path}: cannot write in {parent}; expected a writable directory")


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


def _run_file(p: Path) -> bool:
    return p.name in RUN_FILES and p.is_file()


def _comparison_entry(p: Path) -> bool:
    """A comparison's own entry: comparison.csv, a run's file or a run directory."""
    if p.is_dir() and not p.is_symlink():
        return all(_run_file(q) for q in p.iterdir())
    return _run_file(p) or (p.name == "comparison.csv" and p.is_file())


_OURS = {"run": _run_file, "comparison": _comparison_entry}


def _foreign(target: Path, kind: str = "run") -> list:
    """Names in `target` that are not a run's (or a comparison's) entries (sorted); OutputError if
    it is not a directory."""
    if not target.exists():
        return []
    if not target.is_dir():
        raise OutputError(f"{target}: not a directory; expected a result directory (new or an earlier run's)")
    ours = _OURS[kind]
    return sorted(p.name for p in target.iterdir() if not ours(p))


def _shown(names: list) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _check_target(target: Path, kind: str = "run") -> None:
    other = _foreign(target, kind)
    if other:
        raise OutputError(f"{target}: holds files that are not radixsim results ({_shown(other)}); "
                          f"expected a new or empty directory or an earlier {kind}'s")


def _beside(target: Path, tag: str) -> Path:
    return target.parent / f".{target.name}.{tag}-{os.getpid()}-{secrets.token_hex(4)}"


def _dead_pid(name: str, prefix: str) -> bool:
    """Whether `name` is PREFIX + PID-HEX (a directory `_beside` made) of a process that is gone."""
    pid, dash, tag = name[len(prefix):].partition("-")
    if not (name.startswith(prefix) and dash and pid.isdigit() and len(tag) == 8
            and all(c in "0123456789abcdef" for c in tag)):
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive (another user's): not ours to remove
        return False
    return False


def clean_stale(target: Path) -> list:
    """Remove the temporary directories beside `target` left by runs whose process is gone
    (killed); the names removed, sorted."""
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return []
    gone = sorted(p.name for p in entries if p.is_dir() and not p.is_symlink()
                  and any(_dead_pid(p.name, f".{target.name}.{tag}-") for tag in ("tmp", "old")))
    for name in gone:
        shutil.rmtree(target.parent / name, ignore_errors=True)
    return gone


@contextmanager
def hold(path: Path, busy: str):
    """Hold the lock file `path` (module docstring); OutputError(`busy`) if another process holds
    it. Removed when left."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(busy) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed it meanwhile: take the new one
    try:
        yield
    finally:
        try:
            os.unlink(path)
        except OSError:  # already gone (the directory removed meanwhile): nothing to release but the fd
            pass
        os.close(fd)


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
def result_dir(target, kind: str = "run"):
    """Yield a fresh directory to write a run (or a comparison: `kind`) into; on success it
    replaces `target` (module docstring); on any exception (Ctrl-C included) it is removed and
    `target` is untouched. A second command on the same target meanwhile is refused."""
    target = Path(os.path.realpath(target))  # a symlinked run directory: replace what it points to
    _check_target(target, kind)
    tmp = _fresh_dir(target)
    try:
        with ExitStack() as stack:
            try:
                stack.enter_context(hold(target.parent / f".{target.name}.lock",
                                         f"{target}: another run is writing to this directory; expected one at a time"))
            except OSError as e:
                raise OutputError(f"{target}: cannot write results there ({e.strerror or e})") from None
            clean_stale(target)
            yield tmp
            _check_target(target, kind)  # nothing foreign appeared meanwhile
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
    busy = f"{out}: another {what} is running in this directory; expected one at a time"
    with ExitStack() as stack:
        try:
            out.mkdir(parents=True, exist_ok=True)
            stack.enter_context(hold(out / ".lock", busy))
        except OSError as e:
            raise OutputError(f"{out}: cannot write the {what} there ({e.strerror or e})") from None
        _check_identity(out, marker, identity, what)
        yield out


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


__all__ = ["write", "check_out_file", "plain", "cell", "result_dir", "owned_dir", "hold", "clean_stale", "scenario_key",
           "OutputError", "RUN_FILES"]
