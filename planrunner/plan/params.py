"""Plan params: typed values, `--set NAME=VALUE` overrides and `${name}` substitution.

Types, their values and durations: planrunner/param_values.py.

`${name}` inside plan strings is replaced by the param's value (durations as `<N>ns`,
bools as true/false); `$${` writes a literal `${`. Params inside expressions are used
by name, never by text substitution, so nothing is pasted into C.
"""

from __future__ import annotations

import re

from planrunner.diagnostics import Diagnostic, Span, did_you_mean
from planrunner.errors import PlanSemanticError, UsageError
from planrunner.param_values import ParamValueError, convert, format_value

_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}?")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DURATION_HINT = "write a duration as a number and a unit: 10ms, 1.5s, 500us, 100ns, 1m"


def parse_overrides(items: list[str]) -> dict[str, str]:
    """`["a=1", "b=x=y"]` -> {"a": "1", "b": "x=y"}; UsageError for an item without `=`."""
    out: dict[str, str] = {}
    bad: list[Diagnostic] = []
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            bad.append(Diagnostic(f"--set {item!r}: expected NAME=VALUE",
                                  hints=("for example: --set threshold=100ms",)))
            continue
        out[name] = value
    if bad:
        raise UsageError(bad)
    return out


def check_overrides(overrides: dict[str, str], types: dict[str, str]) -> dict[str, object]:
    """Convert overrides to the params' types; UsageError naming what is wrong."""
    values: dict[str, object] = {}
    errors: list[Diagnostic] = []
    known = ", ".join(sorted(types)) or "none"
    for name, text in overrides.items():
        if name not in types:
            hints = [f"the plan's params: {known}"]
            guess = did_you_mean(name, types)
            if guess:
                hints.insert(0, f"did you mean '{guess}'?")
            errors.append(Diagnostic(f"--set {name}={text}: the plan has no param '{name}'",
                                     hints=tuple(hints)))
            continue
        try:
            values[name] = convert(types[name], text)
        except ParamValueError as exc:
            hint = (DURATION_HINT,) if types[name] == "duration" else ()
            article = "an" if types[name] == "int" else "a"
            errors.append(Diagnostic(f"--set {name}={text}: param '{name}' is {article} "
                                     f"{types[name]}: "
                                     f"{exc}", hints=hint))
    if errors:
        raise UsageError(errors)
    return values


def substitute(text: str, values: dict[str, object], types: dict[str, str],
               span: Span, used: set[str] | None = None) -> str:
    """Expand `${name}` in `text`; `span` is where the text starts (errors point inside).
    The names expanded are added to `used`."""
    errors: list[Diagnostic] = []

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$${":
            return "${"
        name = m.group(1)
        at = span.shifted(m.start(), len(m.group(0)))
        if not m.group(0).endswith("}"):
            errors.append(Diagnostic("unterminated '${' in a string", at,
                                     ("close it with '}', or write '$${' for a literal '${'",)))
            return m.group(0)
        if name in values:
            if used is not None:
                used.add(name)
            return format_value(types[name], values[name])
        if name in types:  # declared, but required and not given: reported elsewhere
            return m.group(0)
        guess = did_you_mean(name, types) if _IDENT.match(name or "") else None
        hints = [f"did you mean '${{{guess}}}'?" if guess else
                 "declare it under params:, or write '$${' for a literal '${'"]
        errors.append(Diagnostic(f"unknown param '${{{name}}}'", at, tuple(hints)))
        return m.group(0)

    result = _REF.sub(repl, text)
    if errors:
        raise PlanSemanticError(errors)
    return result
