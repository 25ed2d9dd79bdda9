"""Who may import whom, checked on the source with `ast` (every import statement,
those inside functions and `if TYPE_CHECKING:` blocks included, and every call of
`importlib.import_module`, `__import__` or an alias of them):

- runtime/ imports nothing of plan/, resolve/, expr/, prometheus/, otlp/, commands/ or
  the pipeline, and of render/ only model.py and layout.py (the runtime's contract);
- prometheus/ and otlp/ import nothing of runtime/ (prometheus pulls snapshots through
  records.py's SnapshotSource, otlp is a view), nor of commands/;
- only runtime/bcc_backend.py imports bcc;
- a module imported by a computed name is named by a literal, or by an f-string whose
  literal head is a planrunner package (that package counts as imported): any other
  computed name could hide any module from these rules;
- no production module reads a test hook from the environment;
- the packages of planrunner (each subpackage, and each top-level module) import each
  other without a cycle, and so do its modules;
- no stage imports a later one.
Each rule is a function of the import table, run on the tree and, in the tests at the
end, on planted violations that must make it fail.
(test_import_boundary.py checks the bcc rule again by importing every module.)"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "planrunner"
# what a call with a computed module name is counted as importing (see above)
DYNAMIC = "<a module name computed at run time>"
_IMPORTERS = ("import_module", "__import__")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(module: str, is_package: bool, text: str) -> Iterator[str]:
    """Every module the source `text` of `module` imports (absolute names; `from X
    import Y` gives X and X.Y, since Y may be a submodule), statements and calls."""
    tree = ast.parse(text)
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = _from_module(node, package)
            yield mod
            yield from (f"{mod}.{alias.name}" for alias in node.names)
    yield from called_imports(text, tree)


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module a `from ... import` statement reads."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def called_imports(text: str, tree: ast.Module | None = None) -> Iterator[str]:
    """The modules imported by calls of importlib.import_module, __import__ or an alias
    of them (DYNAMIC for a name the source does not spell)."""
    tree = tree or ast.parse(text)
    importers = set(_IMPORTERS)  # and the names bound to them (`from importlib import
    for node in ast.walk(tree):  # import_module as im`)
        if isinstance(node, ast.ImportFrom) and node.module in ("importlib", "builtins"):
            importers |= {a.asname or a.name for a in node.names if a.name in _IMPORTERS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_importer(node.func, importers):
            yield _called_name(node)


def _is_importer(func: ast.expr, importers: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in importers
    return isinstance(func, ast.Attribute) and func.attr in _IMPORTERS


def _called_name(call: ast.Call) -> str:
    """The module a call of an importer imports: its literal name, the planrunner
    package an f-string's literal head names, else DYNAMIC."""
    arg = call.args[0] if call.args else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values:
        head = arg.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            package = head.value.rstrip(".")
            if head.value.endswith(".") and package.startswith("planrunner"):
                return package
    return DYNAMIC


def imports(path: Path) -> Iterator[str]:
    return imports_of(module_name(path), path.name == "__init__.py",
                      path.read_text(encoding="utf-8"))


SOURCES = sorted(PKG.rglob("*.py"))
IMPORTS = {module_name(p): sorted(set(imports(p))) for p in SOURCES}
TEXTS = {module_name(p): (p.name == "__init__.py", p.read_text(encoding="utf-8"))
         for p in SOURCES}


def ours(names: list[str]) -> list[str]:
    return [n for n in names if n == "planrunner" or n.startswith("planrunner.")]


def within(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_the_sources_were_found() -> None:
    assert "planrunner.runtime.session" in IMPORTS and "planrunner.prometheus" in IMPORTS


# --- the rules, each a function of (module, what it imports) ----------------------------

FORBIDDEN_FOR_RUNTIME = tuple(f"planrunner.{p}" for p in (
    "plan", "resolve", "expr", "prometheus", "otlp", "commands", "pipeline", "cli", "usdt"))
RENDER_ALLOWED = ("planrunner.render.model", "planrunner.render.layout",
                  "planrunner.render.contracts")


def runtime_violations(module: str, names: list[str]) -> list[str]:
    if not within(module, "planrunner.runtime"):
        return []
    return [n for n in ours(names)
            if within(n, *FORBIDDEN_FOR_RUNTIME)
            or (within(n, "planrunner.render") and n != "planrunner.render"
                and not within(n, *RENDER_ALLOWED))]


def exporter_violations(module: str, names: list[str]) -> list[str]:
    if not within(module, "planrunner.prometheus", "planrunner.otlp"):
        return []
    return [n for n in ours(names) if within(n, "planrunner.runtime", "planrunner.commands")]


def bcc_importers(table: dict[str, list[str]]) -> list[str]:
    return sorted(m for m, names in table.items() if any(within(n, "bcc") for n in names))


def dynamic_importers(table: dict[str, list[str]]) -> list[str]:
    return sorted(m for m, names in table.items() if DYNAMIC in names)


@pytest.mark.parametrize("module", sorted(m for m in IMPORTS
                                          if within(m, "planrunner.runtime")))
def test_runtime_sees_only_the_rendered_program(module: str) -> None:
    bad = runtime_violations(module, IMPORTS[module])
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", sorted(m for m in IMPORTS
                                          if within(m, "planrunner.prometheus",
                                                    "planrunner.otlp")))
def test_exporters_do_not_know_the_runtime(module: str) -> None:
    bad = exporter_violations(module, IMPORTS[module])
    assert not bad, f"{module} imports {bad}"


def test_only_the_bcc_backend_imports_bcc() -> None:
    assert bcc_importers(IMPORTS) == ["planrunner.runtime.bcc_backend"]


def test_no_module_is_imported_by_a_name_the_rules_cannot_read() -> None:
    assert dynamic_importers(IMPORTS) == []


def hook_readers(texts: dict[str, tuple[bool, str]]) -> list[str]:
    """The modules that name a test hook (PLANRUNNER_TEST...) anywhere in their text."""
    return sorted(m for m, (_, text) in texts.items() if "PLANRUNNER_TEST" in text)


def test_no_test_hook_in_production_code() -> None:
    assert hook_readers(TEXTS) == []


# --- cycles -------------------------------------------------------------------------------

def package_of(module: str) -> str:
    """planrunner.runtime.session -> runtime; planrunner.records -> records."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def package_graph(table: dict[str, list[str]]) -> dict[str, set[str]]:
    known = {package_of(m) for m in table} - {""}
    graph: dict[str, set[str]] = {p: set() for p in known}
    for module, names in table.items():
        src = package_of(module)
        if not src:
            continue  # planrunner/__init__.py: __version__ only
        for name in ours(names):
            dst = package_of(name)
            if dst in known and dst != src:
                graph[src].add(dst)
    return graph


def module_edges(module: str, is_package: bool, text: str, known: set[str]) -> set[str]:
    """The modules of `known` that the source of `module` imports. `from P import M` of
    a submodule M is an edge to P.M alone, not to P's __init__ (which Python runs first
    in any case: a package importing its own modules makes no cycle); `from M import
    name` is an edge to M; an imported name outside `known` counts as its nearest
    known parent."""
    def nearest(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: set[str | None] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            base = _from_module(node, package)
            edges |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else nearest(base)
                      for a in node.names}
        elif isinstance(node, ast.Import):
            edges |= {nearest(a.name) for a in node.names}
    edges |= {nearest(n) for n in called_imports(text) if n != DYNAMIC}
    return {e for e in edges if e is not None and e != module and e in known}


def module_graph(sources: dict[str, tuple[bool, str]]) -> dict[str, set[str]]:
    """module -> the modules it imports, for sources {module: (is_package, text)}."""
    known = set(sources)
    return {m: module_edges(m, pkg, text, known) for m, (pkg, text) in sources.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_packages() -> None:
    graph = package_graph(IMPORTS)
    assert {"runtime", "prometheus", "render", "records"} <= set(graph)
    assert cycles(graph) == []


def test_no_import_cycle_between_modules() -> None:
    """Module by module too (the package rule sees none inside a package: text.py and
    text_agg.py, bcc_backend.py and compile_worker.py imported each other)."""
    graph = module_graph(TEXTS)
    assert "planrunner.runtime.compile_worker" in graph["planrunner.runtime.bcc_backend"] \
        or "planrunner.runtime.bcc_backend" in graph["planrunner.runtime.compile_worker"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The other stages: a package never imports a later stage nor the CLI
# (docs/architecture.md, "Who may import whom").
LATER = {
    "plan": ("resolve", "render", "runtime", "output", "prometheus", "stacks"),
    "expr": ("plan", "resolve", "render", "runtime", "output", "prometheus"),
    "elf": ("plan", "expr", "resolve", "render", "runtime", "output", "prometheus"),
    "usdt": ("plan", "resolve", "render", "runtime", "output", "prometheus"),
    "stacks": ("plan", "expr", "resolve", "render", "runtime", "output", "prometheus"),
    "resolve": ("render", "runtime", "output", "prometheus"),
    "render": ("runtime", "output", "prometheus"),
    "output": ("plan", "resolve", "render", "runtime", "prometheus"),
}


def stage_violations(module: str, names: list[str]) -> list[str]:
    if package_of(module) not in LATER:
        return []
    later = tuple(f"planrunner.{p}" for p in (*LATER[package_of(module)], "commands",
                                               "pipeline", "cli"))
    return [n for n in ours(names) if within(n, *later)]


@pytest.mark.parametrize("module", sorted(m for m in IMPORTS if package_of(m) in LATER))
def test_no_stage_imports_a_later_one(module: str) -> None:
    bad = stage_violations(module, IMPORTS[module])
    assert not bad, f"{module} imports {bad}"


# --- each rule fails on a planted violation ----------------------------------------------

def planted(module: str, source: str, is_package: bool = False) -> list[str]:
    return sorted(set(imports_of(module, is_package, textwrap.dedent(source))))


def test_a_planted_runtime_import_of_an_earlier_stage_fails() -> None:
    mod = "planrunner.runtime.planted"
    assert runtime_violations(mod, planted(mod, "from planrunner.resolve import sites"))
    assert runtime_violations(mod, planted(mod, """
        def f():
            from planrunner.render.program import render_program
        """))
    assert runtime_violations(mod, planted(mod, """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from planrunner.plan.model import Plan
        """))
    assert runtime_violations(mod, planted(mod, """
        import importlib
        importlib.import_module("planrunner.usdt.model")
        """))
    assert not runtime_violations(mod, planted(mod, "from planrunner.render.model import X"))


def test_a_planted_exporter_import_of_the_runtime_fails() -> None:
    for mod in ("planrunner.prometheus.planted", "planrunner.otlp.planted"):
        assert exporter_violations(mod, planted(mod, "import planrunner.runtime.session"))
        assert exporter_violations(mod, planted(mod, "from ..commands import run"))
        assert not exporter_violations(mod, planted(mod, "from planrunner import records"))


BCC_IMPORTS = [
    "import bcc",
    "from bcc import BPF",
    "import bcc.table as t",
    "import importlib\nimportlib.import_module('bcc')",
    "import importlib as il\nil.import_module('bcc.table')",
    "from importlib import import_module\nimport_module('bcc')",
    "from importlib import import_module as im\nim('bcc')",
    "__import__('bcc')",
    "import builtins\nbuiltins.__import__('bcc')",
    "from builtins import __import__ as imp\nimp('bcc')",
    "def later():\n    return __import__('bcc', fromlist=['BPF'])",
]


@pytest.mark.parametrize("source", BCC_IMPORTS)
def test_a_planted_import_of_bcc_anywhere_else_fails(source: str) -> None:
    table = {"planrunner.runtime.bcc_backend": ["bcc"],
             "planrunner.cli": planted("planrunner.cli", source)}
    assert bcc_importers(table) == ["planrunner.cli", "planrunner.runtime.bcc_backend"]


@pytest.mark.parametrize(("source", "imported"), [
    ("import importlib\nimportlib.import_module(name)", DYNAMIC),
    ("import importlib\nimportlib.import_module('b' + 'cc')", DYNAMIC),
    ("import importlib\nimportlib.import_module(f'{name}')", DYNAMIC),
    ("import importlib\nimportlib.import_module(f'bc{c}')", DYNAMIC),
    ("import importlib\nimportlib.import_module(f'planrunner{x}')", DYNAMIC),
    ("__import__(name)", DYNAMIC),
    ("import importlib\nimportlib.import_module(f'planrunner.output.{m}')",
     "planrunner.output"),
])
def test_a_module_name_computed_at_run_time_is_caught(source: str, imported: str) -> None:
    names = planted("planrunner.cli", source)
    assert imported in names
    assert dynamic_importers({"planrunner.cli": names}) == (
        ["planrunner.cli"] if imported == DYNAMIC else [])


def test_a_planted_test_hook_fails() -> None:
    texts = {"planrunner.a": (False, 'FAST = os.environ.get("PLANRUNNER_TEST_FAST")\n'),
             "planrunner.b": (False, "FAST = False\n")}
    assert hook_readers(texts) == ["planrunner.a"]


def test_a_planted_package_cycle_fails() -> None:
    table = {"planrunner.alpha.a": planted("planrunner.alpha.a", "from planrunner.beta import b"),
             "planrunner.beta.b": planted("planrunner.beta.b", """
                 def late():
                     from planrunner.alpha.a import f
                 """)}
    assert cycles(package_graph(table)) == [["alpha", "beta"]]


def test_a_planted_module_cycle_fails() -> None:
    sources = {
        "planrunner.out": (True, "from planrunner.out import text\n"),
        "planrunner.out.text": (False, "from planrunner.out.agg import lines\n"),
        "planrunner.out.agg": (False, "def f():\n    from planrunner.out.text import x\n"),
        "planrunner.rt": (True, ""),
        "planrunner.rt.backend": (False, "from typing import TYPE_CHECKING\n"
                                         "if TYPE_CHECKING:\n"
                                         "    from planrunner.rt.worker import W\n"),
        "planrunner.rt.worker": (False, "from planrunner.rt import backend\n"),
    }
    assert cycles(module_graph(sources)) == [
        ["planrunner.out.agg", "planrunner.out.text"],
        ["planrunner.rt.backend", "planrunner.rt.worker"]]
    # a package importing its modules, which import each other through it, is no cycle
    fine = {"planrunner.p": (True, "from planrunner.p.a import f\n"),
            "planrunner.p.a": (False, "from planrunner.p import b\n"),
            "planrunner.p.b": (False, "")}
    assert cycles(module_graph(fine)) == []


def test_a_planted_import_of_a_later_stage_fails() -> None:
    mod = "planrunner.render.planted"
    assert stage_violations(mod, planted(mod, "from planrunner.runtime import session"))
    assert stage_violations(mod, planted(mod, "import importlib\n"
                                              "importlib.import_module('planrunner.cli')"))
    assert not stage_violations(mod, planted(mod, "from planrunner.resolve import model"))
