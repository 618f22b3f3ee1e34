"""cache_core must stay pure: standard library + numpy (DESIGN.md rule)."""
import ast
import pathlib
import subprocess
import sys

CORE = pathlib.Path(__file__).resolve().parent.parent / "cache_core"
FORBIDDEN = {"simpy", "torch", "matplotlib", "pandas", "sim", "gpu_backend", "analysis", "radixsim", "scenarios", "fleet"}


def test_cache_core_imports_only_stdlib_and_numpy():
    bad = []
    for path in CORE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            bad += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert bad == []


def test_importing_cache_core_loads_no_heavy_module():
    code = ("import sys, cache_core, cache_core.invariants, cache_core.keys; "
            "print(sorted(m for m in ('simpy','torch','matplotlib','pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=CORE.parent, check=True)
    assert out.stdout.strip() == "[]"
