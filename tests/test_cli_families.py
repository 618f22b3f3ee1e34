"""The CLI as one module per command family (issue 30 item 7): radixsim/cli.py builds the parser
from each family's builder, in the order `radixsim --help` lists the commands, and runs a
command through the handler its own family module holds."""
from __future__ import annotations

import argparse
import ast
import inspect

from radixsim import cli


def commands_by_builder() -> list[tuple[str, str]]:
    """(command, module of the builder that added it), in help order."""
    out = []
    for add in cli.PARSERS:
        p = argparse.ArgumentParser()
        sub = p.add_subparsers()
        add(sub)
        out += [(name, add.__module__) for name in sub.choices]
    return out


def test_every_command_comes_from_its_family_module_in_help_order():
    assert commands_by_builder() == [
        ("replay", "radixsim.replay_cli"), ("run", "radixsim.run_cli"), ("sweep", "radixsim.sweep_cli"),
        ("plan", "radixsim.sweep_cli"), ("plot", "radixsim.report_cli"), ("report", "radixsim.report_cli"),
        ("curve", "radixsim.lab_cli"), ("leaderboard", "radixsim.lab_cli"), ("workload", "radixsim.workload_cli"),
        ("validate", "radixsim.validate"), ("sensitivity", "radixsim.sensitivity_cli"),
        ("calibrate", "radixsim.calibrate_cli"), ("scenarios", "radixsim.run_cli"), ("trace", "radixsim.replay_cli")]
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [name for name, _ in commands_by_builder()]


def test_a_command_in_the_table_runs_the_handler_of_its_family():
    family = dict(commands_by_builder())
    assert {name: fn.__module__ for name, fn in cli.COMMANDS.items()} == {
        name: family[name] for name in ("replay", "trace", "run", "scenarios", "sweep", "plan", "calibrate")}


def test_cli_py_adds_no_option_itself():
    calls = [n.func.attr for n in ast.walk(ast.parse(inspect.getsource(cli)))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert "add_argument" not in calls and calls.count("add_subparsers") == 1


def test_building_the_parser_loads_no_command_engine():
    """The family modules hold parsers and handlers; what a command runs is imported when it runs
    (`radixsim sensitivity` once pulled dataclasses and inspect into every start)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import sys, json, radixsim.cli as c; c.build_parser(); "
            "print(json.dumps(sorted(m for m in sys.modules if m in ('radixsim.sensitivity', 'radixsim.run', "
            "'radixsim.replay', 'radixsim.sweep', 'radixsim.plan', 'radixsim.calibrate'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert json.loads(out.stdout) == []
