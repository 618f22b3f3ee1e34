"""docs/ARCHITECTURE.md (and README.md) stay true to the code, checked on the source with `ast`:

- every repository path they name (backticked or not: `cache_core/x.py`, tests/test_x.py, docs/x.md,
  a directory `fleet/routers/`) exists, and every bare backticked `name.py` exists somewhere;
- every `path.py: name, other` reference names a function, class or assignment of that file
  (`Class.member` a member of that class);
- every backticked `Class.member`, `module.name` or `module.Class.member` whose head is a class or
  a module of the repository resolves (a scenario key such as `cache.policy` resolves against
  `scenarios/schema.py: SCHEMA`); every backticked CamelCase name is a class of the repository;
- every `tests/test_x.py::test_name` names a test function of that file;
- in the two "path of one request" sections, every call chain `A.f` -> `B.g` holds: the
  function `A.f` calls a `g` (itself or through its class's own private helpers);
- the "Where each concept lives" table names every module of cache_core/ (a directory row
  `cache_core/d/` covers the modules directly in it).

Each failure lists every stale reference with its document.
"""
from __future__ import annotations

import ast
import builtins
import re
from functools import lru_cache
from pathlib import Path

import pytest

from scenarios.schema import FREE_FORM, SCHEMA

ROOT = Path(__file__).resolve().parent.parent
ARCH = ROOT / "docs" / "ARCHITECTURE.md"
DOCS = (ARCH, ROOT / "README.md")
TOP_DIRS = ("cache_core", "sim", "scenarios", "radixsim", "analysis", "fleet", "gpu_backend",
            "benchmarks", "validation", "tests", "docs", ".ci")
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*[\w/])(?![\w/])" % "|".join(re.escape(d) for d in TOP_DIRS))
FILE_SUFFIXES = ("py", "md", "yaml", "yml", "json", "jsonl", "csv", "png", "txt", "toml", "log", "html")
TEST_RE = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
TICK_RE = re.compile(r"`([^`]+)`")  # a code span may wrap a line
FILE_REF_RE = re.compile(r"^([\w/]+\.py): (.+)$")
DOTTED_RE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?(?:: .*)?$")
CHAIN_RE = re.compile(r"`(\w+\.\w+)(?:\([^`]*\))?` -> (?=`(\w+\.\w+)(?:\([^`]*\))?`)")
CALL_RE = re.compile(r"^@?([a-z_]\w*)\(.*\)$")
CLASS_RE = re.compile(r"^([A-Z][a-z]\w*)(?:\(.*\))?$")


def text(doc: Path) -> str:
    return re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # fenced blocks are no references


def ticks(doc: Path) -> list[str]:
    """Every code span of `doc`, its whitespace (a wrapped line) collapsed."""
    return [" ".join(t.split()) for t in TICK_RE.findall(text(doc))]


@lru_cache(maxsize=None)
def source_files() -> tuple[Path, ...]:
    return tuple(p for d in TOP_DIRS if (ROOT / d).is_dir() for p in sorted((ROOT / d).rglob("*.py")))


@lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def assigned(node: ast.AST) -> set[str]:
    """Names a statement binds at its own level (assignments, annotated fields)."""
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def defined(body: list) -> set[str]:
    """Functions, classes and assignments of a module or class body, at its own level."""
    out: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        out |= assigned(node)
    return out


def top_names(tree: ast.Module) -> set[str]:
    return defined(tree.body)


def own_members(cls: ast.ClassDef) -> set[str]:
    """Methods, class-level fields and every `self.X = ...` of a class body."""
    out = defined(cls.body)
    for node in ast.walk(cls):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id == "self"):
            out.add(node.attr)
    return out


@lru_cache(maxsize=None)
def classes() -> dict[str, list[ast.ClassDef]]:
    out: dict[str, list[ast.ClassDef]] = {}
    for p in source_files():
        for node in ast.walk(parsed(p)):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(node)
    return out


@lru_cache(maxsize=None)
def functions() -> dict[str, set[str]]:
    """Function name -> the parameter names of every repository function of that name."""
    out: dict[str, set[str]] = {}
    for p in source_files():
        for n in ast.walk(parsed(p)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = n.args
                out.setdefault(n.name, set()).update(x.arg for x in a.posonlyargs + a.args + a.kwonlyargs)
    return out


def takes(name: str, keywords: list[str]) -> bool:
    """A repository function `name` exists and takes every one of `keywords`."""
    return name in functions() and set(keywords) <= functions()[name]


def members(name: str, seen: frozenset = frozenset()) -> set[str]:
    """Members of every repository class called `name`, with those of its repository bases."""
    out: set[str] = set()
    for cls in classes().get(name, []):
        out |= own_members(cls)
        for base in cls.bases:
            b = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if b and b not in seen and b != name:
                out |= members(b, seen | {name})
    return out


def modules_named(stem: str) -> list[Path]:
    return [p for p in source_files() if p.stem == stem]


def resolves_in_file(path: Path, dotted: str) -> bool:
    head, *rest = dotted.split(".")
    tree = parsed(path)
    if head not in top_names(tree):
        return any(head in own_members(c) for c in ast.walk(tree) if isinstance(c, ast.ClassDef)) and not rest
    return not rest or rest[0] in members(head)


def schema_key(dotted: str) -> bool | None:
    """True/False for a scenario key `section.key`; None when the head is no scenario section."""
    from scenarios.schema import _workload_union  # every registered kind's workload keys

    head, *rest = dotted.split(".")
    section = _workload_union() if head == "workload" else SCHEMA.get(head)
    if not isinstance(section, dict) or len(rest) != 1:
        return None
    return head in FREE_FORM or rest[0] in section


def resolves(dotted: str) -> bool | None:
    """True/False for a `Class.member` or `module[.Class].member`; None when the head is unknown."""
    head, second, *rest = dotted.split(".")
    if schema_key(dotted):
        return True
    if head in classes():
        return second in members(head)
    mods = modules_named(head)
    if not mods:
        return schema_key(dotted)
    return any(resolves_in_file(p, ".".join([second, *rest])) for p in mods)


def stale_paths(doc: Path) -> list[str]:
    body = text(doc)
    named = [p for p in sorted(set(PATH_RE.findall(body)))
             if "NAME" not in p and (p.endswith("/") or "." in p.rsplit("/", 1)[-1] or f"`{p}`" in body)]
    out = [p for p in named if not (ROOT / p).exists()]
    bare = {t for t in ticks(doc) if re.fullmatch(r"\w+\.py", t)} if doc == ARCH else set()
    names = {p.name for p in source_files()}
    return out + sorted(b for b in bare if b not in names)


def stale_file_refs(doc: Path) -> list[str]:
    out = []
    for tick in ticks(doc):
        m = FILE_REF_RE.match(tick)
        if not m or not (ROOT / m.group(1)).exists():
            continue
        for name in (n.strip() for n in m.group(2).split(",")):
            if not resolves_in_file(ROOT / m.group(1), name):
                out.append(f"{m.group(1)}: {name}")
    return out


def stale_dotted(doc: Path) -> list[str]:
    out = []
    for tick in sorted(set(ticks(doc))):
        m = DOTTED_RE.match(tick)
        if m and tick.rsplit(".", 1)[-1] not in FILE_SUFFIXES and resolves(m.group(1)) is False:
            out.append(tick)
        c = CLASS_RE.match(tick)
        if c and c.group(1) not in classes():
            out.append(tick)
        f = CALL_RE.match(tick)
        if f and not hasattr(builtins, f.group(1)) and not takes(f.group(1), re.findall(r"(\w+)=", tick)):
            out.append(tick)
    return out


def stale_tests(doc: Path) -> list[str]:
    out = []
    for path, name in sorted(set(TEST_RE.findall(text(doc)))):
        f = ROOT / path
        defs = {n.name for n in ast.walk(parsed(f)) if isinstance(n, ast.FunctionDef)} if f.exists() else set()
        if name not in defs:
            out.append(f"{path}::{name}")
    return out


def section(title: str) -> str:
    body = text(ARCH)
    start = body.index("## " + title)
    return body[start:body.index("\n## ", start + 1)]


def concept_table() -> str:
    return section("Where each concept lives")


def defs_of(ref: str) -> list[tuple[ast.AST, ast.ClassDef | None]]:
    """(function, its class or None) for `Class.f` or `module.f` (`module.Class` not)."""
    head, name = ref.split(".")
    out = [(f, c) for c in classes().get(head, []) for f in c.body
           if isinstance(f, ast.FunctionDef) and f.name == name]
    for p in modules_named(head):
        tree = parsed(p)
        out += [(f, None) for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name]
    return out


def called(fn: ast.AST, cls: ast.ClassDef | None, seen: set) -> set[str]:
    """Names `fn` calls (`x.g(...)` or `g(...)`), with those of the `self._helper`s it calls."""
    out: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            out.add(name)
            if (cls is not None and isinstance(f, ast.Attribute) and private(f.attr)
                    and isinstance(f.value, ast.Name) and f.value.id == "self" and f.attr not in seen):
                seen.add(f.attr)
                for h in cls.body:
                    if isinstance(h, ast.FunctionDef) and h.name == f.attr:
                        out |= called(h, cls, seen)
    return out


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def broken_chains() -> list[str]:
    out = []
    for title in ("The path of one request (replay)", "The path of one request (simulation"):
        body = " ".join(section(title).split())
        for a, b in CHAIN_RE.findall(body):
            defs = defs_of(a)
            if not defs or not any(b.split(".")[1] in called(f, c, set()) for f, c in defs):
                out.append(f"`{a}` -> `{b}`")
    return out


def unlisted_core_modules() -> list[str]:
    rows = concept_table().splitlines()
    out = []
    for p in sorted((ROOT / "cache_core").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        parent = p.parent.relative_to(ROOT).as_posix() + "/"
        if p.name == "__init__.py" or any(rel in r or f"`{parent}`" in r for r in rows):
            continue
        out.append(rel)
    return out


def report(finder) -> str:
    """Every stale reference, one line each as `DOC: reference` ('' when none)."""
    return "\n".join(f"{d.relative_to(ROOT).as_posix()}: {s}" for d in DOCS for s in finder(d))


@pytest.mark.parametrize("finder", [stale_paths, stale_file_refs, stale_dotted, stale_tests],
                         ids=["every named path exists", "every file reference names a definition of that file",
                              "every class and dotted reference resolves", "every named test exists"])
def test_no_stale_reference(finder):
    stale = report(finder)
    assert stale == "", "stale:\n" + stale


def test_the_concept_table_names_every_cache_core_module():
    unlisted = "\n".join(unlisted_core_modules())
    assert unlisted == "", "not in the table:\n" + unlisted


def test_every_call_chain_of_the_request_paths_holds():
    broken = "\n".join(broken_chains())
    assert broken == "", "no such call:\n" + broken


def test_the_checks_catch_a_stale_reference():
    assert resolves("RadixCache.match") is True
    assert resolves("RadixCache.no_such_method") is False
    assert resolves("cache.policy") is True and resolves("cache.no_such_key") is False
    assert resolves_in_file(ROOT / "cache_core" / "cache.py", "RadixCache.insert")
    assert not resolves_in_file(ROOT / "cache_core" / "cache.py", "no_such_function")
    assert "commit" in called(*defs_of("Loader.complete")[0], set())  # through Loader._finish
    assert "walk" not in called(*defs_of("RadixCache.match")[0], set())
    assert takes("register_workload_kind", ["smoke"]) and not takes("register_workload_kind", ["no_such"])
