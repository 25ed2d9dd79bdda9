"""What the build steps share: the loaded file, collected errors, bound params.

Each build step reads validated data, reports mistakes with `error()` and carries on,
so a plan's every error is reported at once. `sub()` expands `${param}` and `expr()`
parses an expression (planrunner.expr.parser) at the scalar's exact position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planrunner.diagnostics import Diagnostic, Span, did_you_mean
from planrunner.errors import PlanError
from planrunner.plan.params import substitute
from planrunner.plan.source import JsonPath, LoadedPlan, SourceMap

if TYPE_CHECKING:
    from planrunner.expr.ast import Expr

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names an expression gives a meaning of its own; an argument may not take them.
BUILTINS = frozenset({"pid", "tid", "uid", "gid", "comm", "cpu", "ts", "latency", "retval",
                      "probe", "time", "ts_ns", "begin", "end", "ustack", "kstack"})


@dataclass
class BuildContext:
    """What building one plan collects: param types and values, errors."""

    loaded: LoadedPlan
    param_types: dict[str, str] = field(default_factory=dict)
    param_values: dict[str, object] = field(default_factory=dict)
    errors: list[Diagnostic] = field(default_factory=list)
    # params written into the plan's text by `${name}`: their values shape the program
    substituted: set[str] = field(default_factory=set)

    @property
    def spans(self) -> SourceMap:
        return self.loaded.spans

    def error(self, message: str, span: Span | None, *hints: str | None) -> None:
        self.errors.append(Diagnostic(message, span, tuple(h for h in hints if h)))

    def sub(self, jpath: JsonPath, text: str) -> str:
        """`text` (the string at `jpath`) with `${param}` expanded; errors collected."""
        try:
            return substitute(text, self.param_values, self.param_types, self.spans.text(jpath),
                              self.substituted)
        except PlanError as err:
            self.errors.extend(err.diagnostics)
            return text

    def expr(self, jpath: JsonPath, value: object) -> Expr | None:
        """Parse the expression at `jpath`; None (and an error collected) if it fails."""
        from planrunner.expr.parser import parse_expression

        text = _expr_text(value)
        at = self.spans.text(jpath)
        start = Span(at.path, at.line, at.column)
        ref = text.find("${")
        if ref >= 0:
            self.error("use params by name in expressions, not '${...}'",
                       start.shifted(ref, 2), "e.g. `latency >= threshold`")
            return None
        try:
            return parse_expression(text, start)
        except PlanError as err:
            self.errors.extend(err.diagnostics)
            return None

    def unknown(self, what: str, name: str, candidates: list[str], span: Span,
                none_hint: str | None = None) -> None:
        """Report `unknown WHAT 'name'` with did-you-mean among `candidates`."""
        guess = did_you_mean(name, candidates)
        hint: str | None
        if guess:
            hint = f"did you mean '{guess}'?"
        elif candidates:
            hint = f"known: {', '.join(sorted(map(str, candidates)))}"
        else:
            hint = none_hint
        self.error(f"unknown {what} '{name}'", span, hint)


def _expr_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
