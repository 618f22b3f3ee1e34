"""No import cycles between the modules of radixsim/, analysis/ and fleet/ (with its routers)
(issue 16 item 4, issue 30: the fleet <-> pd and run <-> fleet_run circles), counting every
import statement, also those inside functions (a cycle there only hides until a command runs).
Every module of these packages also imports on its own. cache_core/ has its own, stricter
check (tests/test_house_rules.py)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("radixsim", "analysis", "fleet")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path, known: set) -> set:
    """Modules of `known` that `name` imports (absolute or relative, at any depth)."""
    pkg = name if path.stem == "__init__" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def _cycle(graph: dict) -> list | None:
    """One cycle of `graph` as a list of names, or None (iterative DFS, white/grey/black)."""
    state, stack_path = {}, []

    def visit(start):
        stack = [(start, iter(sorted(graph[start])))]
        state[start], stack_path[:] = 1, [start]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                stack_path.pop()
            elif state.get(nxt) == 1:
                return stack_path[stack_path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                stack_path.append(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycles_in_radixsim_analysis_and_fleet():
    mods = _modules()
    graph = {name: _imports(name, path, set(mods)) - {name.rpartition(".")[0]} for name, path in mods.items()}
    assert _cycle(graph) is None


def test_the_graph_covers_every_package_and_its_subpackages():
    mods = _modules()
    assert {"radixsim.run", "radixsim.fleet_run", "analysis", "fleet.fleet", "fleet.pd",
            "fleet.routers.round_robin"} <= set(mods)
    assert {m.split(".")[0] for m in mods} == set(PACKAGES)


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("name", sorted(m for m in _modules() if not m.endswith(".__main__")))
def test_module_imports(name):
    importlib.import_module(name)
