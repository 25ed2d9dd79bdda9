"""Who may import whom, checked on the source with `ast` (every import statement,
those inside functions and `if TYPE_CHECKING:` blocks included):

- runtime/ imports nothing of plan/, resolve/, expr/, prometheus/, otlp/, commands/ or
  the pipeline, and of render/ only model.py and layout.py (the runtime's contract);
- prometheus/ and otlp/ import nothing of runtime/ (prometheus pulls snapshots through
  records.py's SnapshotSource, otlp is a view), nor of commands/;
- only runtime/bcc_backend.py imports bcc;
- no production module reads a test hook from the environment;
- the packages of planrunner (each subpackage, and each top-level module) import each
  other without a cycle.
(test_import_boundary.py checks the bcc rule again by importing every module.)"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "planrunner"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> Iterator[str]:
    """Every module `path` imports (absolute names; `from X import Y` gives X and X.Y,
    since Y may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module_name(path) if path.name == "__init__.py" else \
        module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod
            yield from (f"{mod}.{alias.name}" for alias in node.names)


SOURCES = sorted(PKG.rglob("*.py"))
IMPORTS = {module_name(p): sorted(set(imports(p))) for p in SOURCES}


def ours(names: list[str]) -> list[str]:
    return [n for n in names if n == "planrunner" or n.startswith("planrunner.")]


def within(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_the_sources_were_found() -> None:
    assert "planrunner.runtime.session" in IMPORTS and "planrunner.prometheus" in IMPORTS


FORBIDDEN_FOR_RUNTIME = tuple(f"planrunner.{p}" for p in (
    "plan", "resolve", "expr", "prometheus", "otlp", "commands", "pipeline", "cli", "usdt"))
RENDER_ALLOWED = ("planrunner.render.model", "planrunner.render.layout")


@pytest.mark.parametrize("module", sorted(m for m in IMPORTS
                                          if within(m, "planrunner.runtime")))
def test_runtime_sees_only_the_rendered_program(module: str) -> None:
    bad = [n for n in ours(IMPORTS[module])
           if within(n, *FORBIDDEN_FOR_RUNTIME)
           or (within(n, "planrunner.render") and n != "planrunner.render"
               and not within(n, *RENDER_ALLOWED))]
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", sorted(m for m in IMPORTS
                                          if within(m, "planrunner.prometheus",
                                                    "planrunner.otlp")))
def test_exporters_do_not_know_the_runtime(module: str) -> None:
    bad = [n for n in ours(IMPORTS[module])
           if within(n, "planrunner.runtime", "planrunner.commands")]
    assert not bad, f"{module} imports {bad}"


def test_only_the_bcc_backend_imports_bcc() -> None:
    importers = sorted(m for m, names in IMPORTS.items()
                       if any(within(n, "bcc") for n in names))
    assert importers == ["planrunner.runtime.bcc_backend"]


def test_no_test_hook_in_production_code() -> None:
    hooks = [str(p.relative_to(ROOT)) for p in SOURCES
             if "PLANRUNNER_TEST" in p.read_text(encoding="utf-8")]
    assert not hooks


def package_of(module: str) -> str:
    """planrunner.runtime.session -> runtime; planrunner.records -> records."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def package_graph() -> dict[str, set[str]]:
    known = {package_of(m) for m in IMPORTS} - {""}
    graph: dict[str, set[str]] = {p: set() for p in known}
    for module, names in IMPORTS.items():
        src = package_of(module)
        if not src:
            continue  # planrunner/__init__.py: __version__ only
        for name in ours(names):
            dst = package_of(name)
            if dst in known and dst != src:
                graph[src].add(dst)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one package (Tarjan)."""
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
    graph = package_graph()
    assert {"runtime", "prometheus", "render", "records"} <= set(graph)
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


@pytest.mark.parametrize("module", sorted(m for m in IMPORTS if package_of(m) in LATER))
def test_no_stage_imports_a_later_one(module: str) -> None:
    later = tuple(f"planrunner.{p}" for p in (*LATER[package_of(module)], "commands",
                                               "pipeline", "cli"))
    bad = [n for n in ours(IMPORTS[module]) if within(n, *later)]
    assert not bad, f"{module} imports {bad}"
