"""House rules for cache_core/ (issue 16 targets), checked on the source with `ast`:

- no module over 400 lines;
- no function over 60 lines (decorators and docstring included);
- no name starting with `_` (not a dunder) used outside the module that defines it: an
  attribute read `x._name` or an import `from m import _name` whose `_name` the module itself
  never defines (as a function, class, assignment target, parameter or `__slots__` entry).

What is still owed is listed below (KNOWN_*): the test fails on any new offender and on any
entry that is no longer one, so the lists only shrink. Each failure lists the offenders.

The same three rules run over every source package of docs/ARCHITECTURE.md's diagram
(issue 30 item 4; HOUSE_*), with shrink-only lists of what each still owes: an entry fails the
test when it grows past its recorded size or when it complies and is still listed.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "cache_core"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

KNOWN_LONG: set[tuple[str, str]] = set()
KNOWN_PRIVATE: set[tuple[str, str]] = set()  # the engine holds its step builder and loader as objects


def modules() -> list[tuple[str, ast.Module, int]]:
    out = []
    for p in sorted(ROOT.rglob("*.py")):
        src = p.read_text()
        out.append((p.relative_to(ROOT).as_posix(), ast.parse(src), len(src.splitlines())))
    return out


def defined_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            names.update(c.value for c in ast.walk(node.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return names


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(tree: ast.Module) -> set[str]:
    own = defined_names(tree)
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            used.update(a.name for a in node.names if private(a.name))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and private(node.attr) \
                and node.attr not in own:
            used.add(node.attr)
    return used


def test_no_module_over_400_lines():
    big = [(rel, n) for rel, _, n in modules() if n > MAX_MODULE_LINES]
    assert big == [], f"modules over {MAX_MODULE_LINES} lines: {big}"


def test_no_function_over_60_lines():
    long = {}
    for rel, tree, _ in modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                    long[(rel, node.name)] = node.end_lineno - start + 1
    new = {k: v for k, v in long.items() if k not in KNOWN_LONG}
    assert new == {}, f"functions over {MAX_FUNCTION_LINES} lines: {new}"
    assert KNOWN_LONG <= set(long), f"no longer over the limit, drop from KNOWN_LONG: {KNOWN_LONG - set(long)}"


def test_no_private_name_used_across_modules():
    found = {(rel, name) for rel, tree, _ in modules() for name in private_uses(tree)}
    assert found - KNOWN_PRIVATE == set(), f"private names used outside their module: {sorted(found - KNOWN_PRIVATE)}"
    assert KNOWN_PRIVATE <= found, f"fixed, drop from KNOWN_PRIVATE: {sorted(KNOWN_PRIVATE - found)}"


def test_the_scanner_sees_a_private_reach():
    tree = ast.parse("from .x import _hidden\nclass A:\n    def f(self, o):\n        self._mine = o._theirs\n")
    assert private_uses(tree) == {"_hidden", "_theirs"}


ENUM_STRINGS = {"L1", "L2", "L3", "load", "backup", "store", "prefetch"}


def enum_literals(tree: ast.Module) -> list[tuple[int, str]]:
    """String constants that spell a tier or a transfer kind, docstrings left out."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in ENUM_STRINGS and id(n) not in docs]


def test_the_engine_holds_its_step_builder_and_loader():
    """No mixins: the Engine is one class that holds a StepBuilder and a Loader."""
    from cache_core.engine import Engine
    from cache_core.engine_loading import Loader
    from cache_core.engine_steps import StepBuilder
    assert Engine.__bases__ == (object,)
    assert (StepBuilder.__bases__, Loader.__bases__) == ((object,), (object,))
    src = (ROOT / "engine.py").read_text()
    assert "self.builder = StepBuilder(" in src and "self.loader = Loader(" in src


def engine_reach(tree: ast.Module) -> list[str]:
    """How a module reaches an Engine: an import of cache_core.engine, or `self.e`."""
    out = [f"import {n.module}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "engine"]
    out += [f"line {n.lineno}: self.e" for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "e"
            and isinstance(n.value, ast.Name) and n.value.id == "self"]
    return out


def test_step_builder_and_loader_get_narrow_collaborators_not_the_engine():
    """issue 16 item 3: the StepBuilder and the Loader are given what they use (cache, config,
    queues, clock, data plane, ...; callbacks as bound methods), never the Engine."""
    found = {rel: engine_reach(tree) for rel, tree, _ in modules() if rel in ("engine_steps.py", "engine_loading.py")}
    assert found == {"engine_steps.py": [], "engine_loading.py": []}
    assert engine_reach(ast.parse("from .engine import Engine\nself.e.cache\n")) == ["import engine", "line 2: self.e"]


def test_tiers_and_transfer_kinds_are_enums_in_the_logic():
    found = {rel: enum_literals(tree) for rel, tree, _ in modules() if rel != "actions.py"}
    assert {k: v for k, v in found.items() if v} == {}
    assert enum_literals(ast.parse('def f(t):\n    "load"\n    return t == "L1"\n')) == [(3, "L1")]


def test_transfers_carry_the_enums():
    from cache_core import CacheConfig, RadixCache, ReplayStepper
    from cache_core.actions import Tier, Transfer, TransferKind
    from cache_core.tiers import TierConfig

    cache = RadixCache(CacheConfig(page_size=4, capacity_tokens=32, tiers=TierConfig(hicache_ratio=2)),
                       record_actions="transfers")
    st = ReplayStepper(cache)
    st.step(list(range(16)))
    cache.evict(16)
    st.step(list(range(20)))
    ts = [a for a in cache.actions if isinstance(a, Transfer)]
    assert [(t.kind, t.src_tier, t.dst_tier) for t in ts] == [
        (TransferKind.BACKUP, Tier.L1, Tier.L2), (TransferKind.LOAD, Tier.L2, Tier.L1),
        (TransferKind.BACKUP, Tier.L1, Tier.L2)]
    assert all(type(t.kind) is TransferKind and type(t.src_tier) is Tier for t in ts)
    assert ts[1].kind == "load" and f"{ts[1].src_tier}->{ts[1].dst_tier}" == "L2->L1"  # reads as before
    assert cache.hier.tokens_moved == {"L1->L2": 20, "L2->L1": 16, "L2->L3": 0, "L3->L2": 0}


def unused_imports(src: str) -> list[str]:
    """Imported names a module never reads (as pyflakes' F401): not as a name, not in a quoted
    annotation, not in `__all__`. An import marked ``noqa`` (a registration) is left out."""
    tree, lines = ast.parse(src), src.splitlines()
    imported: dict[str, int] = {}
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)) and getattr(n, "module", None) != "__future__" and \
                not any("noqa" in line for line in lines[n.lineno - 1 : n.end_lineno]):
            for a in n.names:
                imported[a.asname or a.name.split(".")[0]] = n.lineno
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    quoted = [n.annotation for n in ast.walk(tree) if isinstance(n, (ast.arg, ast.AnnAssign))]
    quoted += [n.returns for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    quoted += [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)]
    for q in quoted:
        for c in ast.walk(q) if q is not None else ():
            if isinstance(c, ast.Constant) and isinstance(c.value, str):
                used.update(c.value.replace("|", " ").replace("[", " ").replace("]", " ").replace(".", " ").split())
    return sorted(f"{name} (line {line})" for name, line in imported.items() if name not in used)


def test_no_unused_imports_in_cache_core():
    """Every imported name is used (engine_steps.py once imported WAITING for nothing)."""
    found = {p.relative_to(ROOT).as_posix(): unused_imports(p.read_text()) for p in sorted(ROOT.rglob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}
    assert unused_imports("from .engine_types import PREFILL, WAITING\nx: 'list[PREFILL]'\n") == ["WAITING (line 1)"]


# -- the whole house (issue 30 item 4) ------------------------------------------------------------
HOUSE = ROOT.parent
# module -> its lines when listed: split when it helps (presets.py becomes data, issue 30 item 2)
HOUSE_BIG_MODULES: dict[str, int] = {}
HOUSE_LONG_FUNCTIONS: dict[tuple[str, str], int] = {}
# (module, name): torch's and argparse's own private API (`torch._fused_sdp_choice`,
# `Tensor._materialize`, a rotary module's `_inv_freq` buffer, a parser's `_actions`)
HOUSE_PRIVATE = {("gpu_backend/batch.py", "_inv_freq"), ("gpu_backend/model.py", "_fused_sdp_choice"),
                 ("gpu_backend/model.py", "_materialize"),
                 ("benchmarks/regen_entries_docs.py", "_actions")}


def house_modules() -> list[tuple[str, ast.Module, int]]:
    from test_layering import FLOORS

    out = []
    for pkg in sorted(FLOORS):
        for p in sorted((HOUSE / pkg).rglob("*.py")):
            src = p.read_text()
            out.append((p.relative_to(HOUSE).as_posix(), ast.parse(src), len(src.splitlines())))
    return out


def function_lengths(tree: ast.Module) -> dict[str, int]:
    """{name: lines} of the functions over the limit (the longest of a repeated name)."""
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - min([node.lineno] + [d.lineno for d in node.decorator_list]) + 1
            if n > MAX_FUNCTION_LINES:
                out[node.name] = max(n, out.get(node.name, 0))
    return out


def shrink_only(found: dict, known: dict) -> tuple[dict, dict, list]:
    """(new offenders, listed ones that grew: {key: (listed, now)}, listed ones that comply)."""
    new = {k: v for k, v in found.items() if k not in known}
    grew = {k: (known[k], found[k]) for k in known if k in found and found[k] > known[k]}
    return new, grew, sorted(set(known) - set(found))


def test_house_modules_stay_within_400_lines_or_shrink():
    found = {rel: n for rel, _, n in house_modules() if n > MAX_MODULE_LINES}
    assert shrink_only(found, HOUSE_BIG_MODULES) == ({}, {}, [])


def test_house_functions_stay_within_60_lines_or_shrink():
    found = {(rel, name): n for rel, tree, _ in house_modules() for name, n in function_lengths(tree).items()}
    assert shrink_only(found, HOUSE_LONG_FUNCTIONS) == ({}, {}, [])


def test_house_private_names_stay_in_their_module():
    found = {(rel, name) for rel, tree, _ in house_modules() for name in private_uses(tree)}
    assert (sorted(found - HOUSE_PRIVATE), sorted(HOUSE_PRIVATE - found)) == ([], [])


def test_the_house_scan_covers_every_package_and_the_ratchet_catches_both_ways():
    assert {rel.split("/")[0] for rel, _, _ in house_modules()} == {
        "benchmarks", "radixsim", "analysis", "fleet", "sim", "gpu_backend", "scenarios", "cache_core"}
    assert shrink_only({"a": 401, "b": 500, "c": 450}, {"a": 401, "b": 499, "d": 410}) == (
        {"c": 450}, {"b": (499, 500)}, ["d"])
    assert function_lengths(ast.parse("def f():\n" + "    x = 1\n" * 60 + "def g():\n    pass\n")) == {"f": 61}
