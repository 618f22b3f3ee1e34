"""The `radixsim` command line: one parser, one error path; each command family's parser and
handler live in its own module (replay_cli, run_cli, sweep_cli, calibrate_cli, report_cli,
lab_cli, workload_cli, validate, sensitivity_cli), each with its own parser builder.

Bad input (a missing or malformed file, an impossible option) ends with exit status 2 and
one line on stderr that names the file, line or option and what was expected; never a
traceback.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from . import calibrate_cli, lab_cli, replay_cli, report_cli, run_cli, sensitivity_cli, sweep_cli, validate, workload_cli
from .args import DeviceError, check_device  # noqa: F401  (re-exported)
from .args import EXIT_BAD_INPUT, Parser as _Parser

# The families' parser builders, in the order `radixsim --help` lists their commands.
PARSERS = (replay_cli.add_replay, run_cli.add_run, sweep_cli.add_sweep, sweep_cli.add_plan, report_cli.add_parsers,
           lab_cli.add_parsers, workload_cli.add_parsers, validate.add_parser, sensitivity_cli.add_parser,
           calibrate_cli.add_calibrate, run_cli.add_scenarios, replay_cli.add_trace)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="radixsim", description=(
        "Radix-tree KV-cache core for LLM serving: simulate a scenario (run), replay a trace exactly "
        "(replay); one cache core and one engine loop for every mode."))
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    for add in PARSERS:
        add(sub)
    return p


COMMANDS = {**replay_cli.COMMANDS, **run_cli.COMMANDS, **sweep_cli.COMMANDS, **calibrate_cli.COMMANDS}
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `... | head`
EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is: it leaves as on Ctrl-C (workers stopped,
    temporary directories removed), then main says "terminated"."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def _sent_again(unraisable) -> None:
    """`sys.unraisablehook` while a command runs: an interrupt raised where Python cannot let it
    out (a signal landing in a weakref or import-lock callback is printed as "Exception ignored"
    and lost: a SIGTERM once let a run finish) is sent again, to land where the command is; from
    a timer thread, so that it cannot land in this hook (where it would be lost again)."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        import threading

        sig = signal.SIGTERM if isinstance(unraisable.exc_value, Terminated) else signal.SIGINT
        threading.Timer(0.001, os.kill, (os.getpid(), sig)).start()
    else:
        sys.__unraisablehook__(unraisable)


def main(argv=None) -> int:
    """Parse and run one command. Every command shares one error path: Ctrl-C -> one line
    "interrupted", exit 130; SIGTERM -> the same way out, "terminated", exit 143; an OS error,
    out of memory, a torch device error or a failed sweep point -> one line naming what failed,
    exit 2; a closed output pipe -> quiet, exit 141 (a command's own handler lets
    BrokenPipeError through)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["radixsim"] + argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    prog = f"radixsim {args.command}"
    oom = None
    try:
        old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: SIGTERM keeps its handler
        old_term = None
    old_hook, sys.unraisablehook = sys.unraisablehook, _sent_again
    try:
        rc = _dispatch(parser, args)
        sys.stdout.flush()  # a closed pipe shows here, inside the error path, not at interpreter exit
        return rc
    except Terminated:
        sys.stderr.write(f"{prog}: terminated\n")
        return EXIT_TERMINATED
    except MemoryError as e:  # reported below, once this block has let go of the traceback (and its memory)
        oom = e.args  # not e: its traceback holds what filled the memory
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`radixsim ... | head`): stop quietly; stdout goes to devnull so
        # that the interpreter's final flush cannot fail again (Python docs, "Note on SIGPIPE")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as e:  # noqa: BLE001 -- the one place that turns any failure into one line
        try:
            line = failure_line(e)
        except MemoryError:  # the error path's own imports may fail for want of memory too
            line = "out of memory: an allocation failed"
        if line is None:
            raise
        sys.stderr.write(f"{prog}: {line}\n")
        return EXIT_BAD_INPUT
    finally:
        sys.unraisablehook = old_hook
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    text = str(oom[0]).strip() if oom else ""
    sys.stderr.write(f"{prog}: out of memory: {text.splitlines()[0] if text else 'an allocation failed'}\n")
    return EXIT_BAD_INPUT


def failure_line(e: BaseException) -> str | None:
    """One line naming what failed, for the failures every command may meet (None: a bug,
    whose traceback is kept)."""
    from cache_core.engine_types import EngineStalled

    from .sweep import PointError

    if isinstance(e, EngineStalled):  # a run that cannot finish: which requests are stuck, where
        return f"the engine stalled: {_first_line(e)}"
    if isinstance(e, MemoryError):
        return f"out of memory: {_first_line(e) or 'an allocation failed'}"
    if isinstance(e, OSError):
        reason = e.strerror or _first_line(e) or type(e).__name__
        return f"{e.filename}: {reason}" if e.filename is not None else reason
    if isinstance(e, (PointError, DeviceError)):
        return _first_line(e)
    torch = sys.modules.get("torch")  # only a run that imported torch can meet its device errors
    if torch is not None and isinstance(e, (torch.OutOfMemoryError, getattr(torch, "AcceleratorError", ()))):
        return f"torch device error: {_first_line(e)}"
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _dispatch(parser, args) -> int:
    cmd = COMMANDS.get(args.command)
    if cmd is not None:
        return cmd(args)
    for mod in (report_cli, workload_cli, validate, sensitivity_cli, lab_cli):
        rc = mod.dispatch(args)
        if rc is not None:
            return rc
    parser.error(f"unknown command {args.command}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
