"""Read a TOML plan with positions: text -> LoadedPlan (data + SourceMap).

Data comes from tomllib; positions from toml_spans.py (a scanner over the same text).
Decode errors become a PlanSyntaxError whose Span is parsed from tomllib's message
("... (at line 3, column 5)"); "at end of document" points at the last line.
"""

from __future__ import annotations

import re
import tomllib

from planrunner.diagnostics import Span
from planrunner.errors import PlanSyntaxError
from planrunner.plan.source import LoadedPlan
from planrunner.plan.toml_spans import toml_spans

_AT = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)\s*$")

_HINTS = {
    "Cannot overwrite a value": "a key is set twice; keep one of them",
    "Cannot declare": "a table is declared twice; merge the two [sections]",
    "Invalid value": "strings need quotes in TOML: key = \"text\"",
    "Illegal character '\\n'": "a string must be closed on its line (or use \"\"\" for several)",
}


def _syntax_error(path: str, text: str, exc: tomllib.TOMLDecodeError) -> PlanSyntaxError:
    message = str(exc)
    m = _AT.search(message)
    if m and m.group(1):
        span = Span(path, int(m.group(1)), int(m.group(2)))
    else:
        lines = text.splitlines() or [""]
        span = Span(path, len(lines), len(lines[-1]) + 1)
    problem = message[:m.start()] if m else message
    hints = tuple(h for prefix, h in _HINTS.items() if problem.startswith(prefix))
    return PlanSyntaxError(f"TOML syntax error: {problem[:1].lower()}{problem[1:]}", span, hints)


def load_toml(path: str, text: str) -> LoadedPlan:
    """Parse `text` (the content of `path`) into a LoadedPlan; raise PlanSyntaxError."""
    from planrunner.plan.limits import toml_too_deep

    deep = toml_too_deep(path, text)  # before tomllib, which recurses (RecursionError)
    if deep is not None:
        raise deep
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(path, text, exc) from None
    return LoadedPlan(path, text, data, toml_spans(path, text), "toml")
