"""The headers every rendered program includes verbatim, and how the goldens show them:
one marker line each (tests/unit/test_golden.py writes them so, each golden then shows its
own feature), put back before the e2e tier compiles the goldens
(tests/e2e/test_golden_compile.py)."""

from __future__ import annotations

from pathlib import Path

from planrunner.render.contracts import c_block

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
SHARED = ("runtime_helpers.h", "expr_helpers.h", "record_helpers.h")
# Included only by programs that call one of its functions (render/program.py).
OPTIONAL = {"expr_helpers.h": "PLANRUNNER_EXPR_HELPERS_H"}


def marker(name: str) -> str:
    return f"/* templates/{name}: included verbatim */\n"


# The generated block of render/contracts.py, shown as one line like the headers.
CONTRACTS_MARKER = "/* render/contracts.py: generated */\n"


def to_golden(c_source: str) -> str:
    """Rendered C with each shared header, and the contracts block, replaced by its
    marker line."""
    block = c_block()
    assert block in c_source, "the contracts block is no longer rendered"
    c_source = c_source.replace(block, CONTRACTS_MARKER)
    for name in SHARED:
        if name in OPTIONAL and OPTIONAL[name] not in c_source:
            continue
        text = (TEMPLATES / name).read_text()
        assert text in c_source, f"{name} is no longer included verbatim"
        c_source = c_source.replace(text, marker(name))
    return c_source


def from_golden(text: str) -> str:
    """A golden with its marker lines replaced by the headers (and the contracts block)
    again: the C bcc compiles."""
    text = text.replace(CONTRACTS_MARKER, c_block())
    for name in SHARED:
        text = text.replace(marker(name), (TEMPLATES / name).read_text())
    return text
