"""`radixsim --help` and the commands that do not need them import no heavy libraries (issue 16:
start-up under 0.3 s): networkx, matplotlib, simpy, torch and ray come with the commands that use
them, and `--help` imports not even numpy. Checked in a fresh interpreter: which of them are in
sys.modules after building the parser, and after a replay."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("networkx", "matplotlib", "simpy", "torch", "ray", "scipy", "pandas")


def _heavy_after(code: str, heavy=HEAVY) -> list:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cli_parser_imports_no_heavy_library():
    assert _heavy_after("import radixsim.cli as c\nc.build_parser()", HEAVY + ("numpy", "yaml")) == []


def test_replay_imports_no_heavy_library(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"hash_ids": [1, 2], "output_length": 2}\n{"hash_ids": [1, 3], "output_length": 2}\n')
    code = ("from radixsim.cli import main\n"
            f"assert main(['replay', {str(trace)!r}, '--block-size', '4', '--out', {str(tmp_path / 'out')!r},"
            " '--no-progress']) == 0")
    assert _heavy_after(code) == []
