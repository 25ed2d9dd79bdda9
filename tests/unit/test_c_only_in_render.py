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
# through ctx, the body's locals, bcc's map macros; map operations (bpf_map_*),
# preprocessor lines (#include, #define, #ifndef ...), the program's PR_ macros, struct
# declarations and pt_regs members (`regs[3]`: render/operand_c.py names them).
C_IDENT = re.compile(r"\bpr_[a-z]\w*|\bbpf_(probe|get|ktime|ringbuf|map_)\w*"
                     r"|\b__[su](8|16|32|64)\b"
                     r"|\bctx->|\bsc->|\ba->v\d|\bBPF_[A-Z_]+\("
                     r"|#\s*(include|define|ifn?def|if|endif|error)\b"
                     r"|(\b|(?<=-D))PR_[A-Z][A-Z0-9_]*\b|\bstruct\s+\w+\s*[{*]|\bregs\[\d+\]")


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        out.append((".".join(("planrunner", *rel.parts)), path))
    return out


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of `path` that are not docstrings, with their line."""
    return code_strings(path.read_text())


def code_strings(text: str) -> list[tuple[int, str]]:
    """String constants of the source `text` that are not docstrings, with their line
    (an f-string's literal parts are constants too)."""
    tree = ast.parse(text)
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
    hits = c_strings(path.read_text())
    assert not hits, f"{module}: {hits[:3]}"


def c_strings(source: str) -> list[tuple[int, str]]:
    """The strings of `source` (outside docstrings) that hold C of the program."""
    return [(line, text) for line, text in code_strings(source) if C_IDENT.search(text)]


PLANTED = [
    'MAP = "pr_events"',
    'CALL = "bpf_probe_read_user(&v, 8, p)"',
    'LINE = f"bpf_map_lookup_elem(&{name}, &key)"',
    'HEAD = "#include <uapi/linux/ptrace.h>"',
    'HEAD = "#define MAX 4"',
    'GUARD = "#ifndef X"',
    'FLAG = f"-DPR_TASK_FSBASE_OFFSET={n}"',
    'FLAG = "-DPR_TRACERS_PIN"',
    'DECL = "struct pt_regs *ctx"',
    'DECL = "struct key {"',
    'REG = "regs[3]"',
    'FIELD = f"ctx->{member}"',
    'TYPE = "__u64"',
    'def f():\n    return "__s32 v = 0;"',
]


@pytest.mark.parametrize("source", PLANTED)
def test_planted_c_outside_render_fails(source: str) -> None:
    assert c_strings(source), source


def test_prose_and_docstrings_about_c_pass() -> None:
    source = ('"""Reads #include lines and bpf_map_lookup_elem, PR_TRACERS_PIN."""\n'
              'def f():\n    """The pt_regs member regs[3]."""\n'
              '    return "the program could not be loaded"\n')
    assert c_strings(source) == []
