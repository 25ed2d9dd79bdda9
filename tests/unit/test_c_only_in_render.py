"""C of the generated program is written only in render/ (and templates/): a string
holding the names it defines, the helpers it calls or the types it declares anywhere else
would be C chosen outside the one place that names it (docs/architecture.md). Read off
the source with `ast`: docstrings and comments may mention such names, code may not."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "planrunner"

# pr_ names, BPF helpers and the C integer types the renderer writes, register access
# through ctx, the body's locals, bcc's map macros.
C_IDENT = re.compile(r"\bpr_[a-z]\w*|\bbpf_(probe|get|ktime|ringbuf)\w*|\b__[su](8|16|32|64)\b"
                     r"|\bctx->|\bsc->|\ba->v\d|\bBPF_[A-Z_]+\(")


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        out.append((".".join(("planrunner", *rel.parts)), path))
    return out


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of `path` that are not docstrings, with their line."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef |
                      ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


OUTSIDE_RENDER = [(m, p) for m, p in _modules() if not m.startswith("planrunner.render.")]


@pytest.mark.parametrize(("module", "path"), OUTSIDE_RENDER, ids=[m for m, _ in OUTSIDE_RENDER])
def test_c_of_the_program_is_written_only_in_render(module: str, path: Path) -> None:
    """Strings holding C of the generated program (names it defines, helpers it calls,
    the types it declares) live in render/: elsewhere they would be C chosen outside
    the one place that names it."""
    hits = [(line, text) for line, text in _code_strings(path) if C_IDENT.search(text)]
    assert not hits, f"{module}: {hits[:3]}"
