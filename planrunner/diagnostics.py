"""Source locations and user-facing diagnostics. Pure; imports nothing of ours."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Span:
    """A place in a plan file: 1-based line and column; `end_column` is exclusive."""

    path: str
    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"

    def shifted(self, offset: int, length: int | None = None) -> Span:
        """The span `offset` characters into this one (for positions inside a scalar)."""
        col = self.column + offset
        end = col + length if length is not None else None
        return Span(self.path, self.line, col, self.line if end else None, end)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One located message (error or warning) with its hints."""

    message: str
    span: Span | None = None
    hints: tuple[str, ...] = ()
    severity: str = "error"  # "error", "warning" or "note" (what was chosen, and why)
    # Extra lines shown verbatim after the caret (e.g. an operand with its own caret).
    notes: tuple[str, ...] = field(default=())

    def headline(self) -> str:
        where = f"{self.span}: " if self.span else ""
        return f"{where}{self.severity}: {self.message}"


def render(diag: Diagnostic, source_text: str | None = None) -> str:
    """Render `file:line:col: error: message`, the source line, a caret, hints and notes."""
    lines = [diag.headline()]
    span = diag.span
    if span is not None and source_text is not None:
        src_lines = source_text.splitlines()
        if 1 <= span.line <= len(src_lines):
            text = src_lines[span.line - 1].expandtabs(1)
            lines.append(f"  {text}")
            width = 1
            if span.end_column and (span.end_line in (None, span.line)):
                width = max(1, span.end_column - span.column)
            lines.append("  " + " " * (span.column - 1) + "^" + "~" * (width - 1))
    lines.extend(f"  {note}" for note in diag.notes)
    lines.extend(f"  hint: {hint}" for hint in diag.hints)
    return "\n".join(lines)


def did_you_mean(word: str, candidates: Iterable[object]) -> str | None:
    """The closest candidate to `word`, or None when nothing is close."""
    import difflib

    matches = difflib.get_close_matches(word, sorted(map(str, candidates)), n=1, cutoff=0.6)
    return matches[0] if matches else None
