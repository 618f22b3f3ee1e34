"""docs/ARCHITECTURE.md's layer diagram, enforced over every source package (issue 30 item 4).

The floors are read from the diagram itself (the code block under "## Layers"), top floor
first; packages on one line, `a/ | b/`, share a floor and never import each other. Checked
with `ast` on the source, not by importing it:

- no import goes back up a floor or sideways, counting every import statement (also those
  inside functions: an import there only waits for the call to run);
- no import circle between modules, counting the imports that run when a module is imported
  (module and class bodies; a function's imports run later). tests/test_import_cycles.py checks
  radixsim/, analysis/ and fleet/ more strictly (every import statement).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def floors(doc: str) -> dict[str, int]:
    """{package: floor} from the diagram: the top line gets the highest floor."""
    block = doc.split("## Layers", 1)[1].split("```", 2)[1]
    lines = [m.group(1) for line in block.splitlines()
             if (m := re.match(r"\s*(?:->\s*)?([a-z_]+/(?:\s*\|\s*[a-z_]+/)*)", line))]
    return {pkg.strip().rstrip("/"): len(lines) - i for i, line in enumerate(lines) for pkg in line.split("|")}


FLOORS = floors((ROOT / "docs" / "ARCHITECTURE.md").read_text())
# Imports up a floor still owed, shrink-only ("module imports target"). The two that arrived with
# engine.attention_backend ended when its data file's lookup and curve check moved down to
# scenarios/attention_backend_data.py.
KNOWN_UPWARD: set[str] = set()


def modules() -> dict[str, Path]:
    """Every module of every package in the diagram, by dotted name (a package by its own)."""
    out = {}
    for pkg in FLOORS:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def import_nodes(tree: ast.Module, at_import: bool) -> list:
    """Import statements of a module: all of them, or (`at_import`) those that run when the
    module is imported (not inside a function)."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif not (at_import and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
            todo.extend(ast.iter_child_nodes(node))
    return sorted(out, key=lambda n: n.lineno)


def targets(name: str, path: Path, node) -> list[str]:
    """Dotted names an import statement of module `name` may load (relative ones resolved)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    pkg = name if path.stem == "__init__" else name.rpartition(".")[0]
    base = node.module or ""
    if node.level:
        parts = pkg.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def upward_imports(mods: dict[str, Path], floor: dict[str, int]) -> list[str]:
    """'module:line imports target' for each import of a package on the same or a higher floor."""
    bad = []
    for name, path in mods.items():
        own = name.split(".")[0]
        for node in import_nodes(ast.parse(path.read_text()), at_import=False):
            for t in targets(name, path, node)[: 1 if isinstance(node, ast.ImportFrom) else None]:
                top = t.split(".")[0]
                if top in floor and top != own and floor[top] >= floor[own]:
                    bad.append(f"{name}:{node.lineno} imports {t}")
    return sorted(set(bad))


def graph(mods: dict[str, Path]) -> dict[str, set]:
    """Module -> the modules of `mods` its import-time statements load (its own package left out:
    a submodule's import runs its package's __init__ first, which is no circle of its own)."""
    out = {}
    for name, path in mods.items():
        deps = set()
        for node in import_nodes(ast.parse(path.read_text()), at_import=True):
            deps |= {t for t in targets(name, path, node) if t in mods}
        out[name] = deps - {name, name.rpartition(".")[0]}
    return out


def cycles(g: dict[str, set]) -> list[list[str]]:
    """The strongly connected components of `g` with more than one module (each sorted)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(g[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return sorted(out)


def test_the_diagram_names_every_source_package_on_its_floor():
    assert FLOORS == {"benchmarks": 7, "radixsim": 6, "analysis": 5, "fleet": 4, "sim": 3, "gpu_backend": 3,
                      "scenarios": 2, "cache_core": 1}
    on_disk = {p.parent.name for p in ROOT.glob("*/*.py") if p.parent.name not in ("tests", "docs", "validation")}
    assert on_disk == set(FLOORS)


def test_no_import_goes_up_a_floor_or_sideways():
    found = {re.sub(r":\d+ ", " ", line) for line in upward_imports(modules(), FLOORS)}
    assert (sorted(found - KNOWN_UPWARD), sorted(KNOWN_UPWARD - found)) == ([], [])


def test_no_import_circles_across_the_house():
    mods = modules()
    assert len(mods) > 150 and {"cache_core.cache", "sim.cost", "gpu_backend.calibrate", "benchmarks.bench_sim"} <= set(mods)
    assert cycles(graph(mods)) == []


def test_the_upward_check_sees_a_function_level_import_and_a_sideways_one(tmp_path):
    (tmp_path / "low").mkdir()
    (tmp_path / "low" / "a.py").write_text("import os\n\ndef f():\n    from high.b import g\n    return g\n")
    (tmp_path / "mid").mkdir()
    (tmp_path / "mid" / "c.py").write_text("from peer import x\nfrom low import a\nfrom . import d\n")
    mods = {"low.a": tmp_path / "low" / "a.py", "mid.c": tmp_path / "mid" / "c.py"}
    assert upward_imports(mods, {"high": 3, "mid": 2, "peer": 2, "low": 1}) == [
        "low.a:4 imports high.b", "mid.c:1 imports peer"]


def test_the_circle_finder_counts_import_time_statements_only(tmp_path):
    src = {"p.a": "from p import b\n", "p.b": "import p.c\n", "p.c": "class K:\n    from p.a import X\n",
           "p.d": "def f():\n    from p.e import Y\n", "p.e": "from . import d\n"}
    mods = {}
    for name, text in src.items():
        mods[name] = tmp_path / f"{name.split('.')[1]}.py"
        mods[name].write_text(text)
    assert cycles(graph(mods)) == [["p.a", "p.b", "p.c"]]


def test_the_floors_come_from_the_diagram():
    doc = "## Layers (x)\n```\ntop/   words\n  -> a/ | b/   more | words\n  -> base/  pure\n```\n"
    assert floors(doc) == {"top": 3, "a": 2, "b": 2, "base": 1}


def test_the_scenario_floor_mirrors_of_sim_facts_stay_equal():
    """scenarios/cost_kinds.py keeps what the resolver checks without importing sim/."""
    from scenarios.cost_kinds import OPERATOR_EFFICIENCY_FIELDS, ROUTED_EXPERT_MODELS, cost_kind_names
    from sim.cost import MOE_ROUTING
    from sim.cost_models import cost_model_names
    from sim.operators import EFFICIENCY_FIELDS

    assert OPERATOR_EFFICIENCY_FIELDS == EFFICIENCY_FIELDS
    assert ROUTED_EXPERT_MODELS == set(MOE_ROUTING)
    assert cost_kind_names() == cost_model_names() == ["operators", "roofline", "table"]
