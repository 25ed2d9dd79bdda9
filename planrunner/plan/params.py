"""Plan params: typed values, `--set NAME=VALUE` overrides and `${name}` substitution.

Types and their Python values: int -> int, number -> float, string -> str,
bool -> bool (true/false/yes/no/on/off/1/0), duration -> int nanoseconds.

Durations are a decimal number and a unit: ns, us (or µs), ms, s, m, h
(`10ms`, `1.5s`, `500us`, `100ns`, `1m`); the result must be a whole number of ns and
not negative. A bare number is refused (`--set threshold=5` would silently mean 5 ns
where users mean 5 ms or 5 s) except `0`, which needs no unit.

`${name}` inside plan strings is replaced by the param's value (durations as `<N>ns`,
bools as true/false); `$${` writes a literal `${`. Params inside expressions are used
by name, never by text substitution, so nothing is pasted into C.
"""

from __future__ import annotations

import re

from planrunner.diagnostics import Diagnostic, Span, did_you_mean
from planrunner.errors import PlanSemanticError, UsageError

PARAM_TYPES = ("int", "number", "string", "duration", "bool")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
          "m": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ns|us|µs|ms|s|m|h)\s*$")
_BOOLS = {"true": True, "yes": True, "on": True, "1": True,
          "false": False, "no": False, "off": False, "0": False}
_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}?")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DURATION_HINT = "write a duration as a number and a unit: 10ms, 1.5s, 500us, 100ns, 1m"


class ParamValueError(ValueError):
    """A value that does not fit a param type; the message says what was expected."""


def parse_duration(value: object) -> int:
    """`10ms` -> 10_000_000 ns; raise ParamValueError for anything else (see module doc)."""
    if isinstance(value, bool):
        raise ParamValueError("expected a duration, got a boolean")
    if isinstance(value, int):
        if value == 0:
            return 0
        raise ParamValueError(f"a duration needs a unit: {value} what? (e.g. {value}ms)")
    text = str(value)
    if text.strip() == "0":
        return 0
    m = _DURATION.match(text)
    if not m:
        if text.strip().startswith("-"):
            raise ParamValueError(f"a duration cannot be negative: '{text}'")
        if re.fullmatch(r"\s*\d+(\.\d+)?\s*", text):
            bare = text.strip()
            raise ParamValueError(f"a duration needs a unit: '{bare}' what? (e.g. {bare}ms)")
        raise ParamValueError(f"'{text}' is not a duration")
    # lazily: exact decimal arithmetic only for plans with durations (start-up, issue 17)
    from decimal import Decimal, InvalidOperation

    try:
        ns = Decimal(m.group(1)) * _UNITS[m.group(2)]
    except InvalidOperation:  # pragma: no cover - the regex only admits decimals
        raise ParamValueError(f"'{text}' is not a duration") from None
    if ns != ns.to_integral_value():
        raise ParamValueError(f"'{text}' is not a whole number of nanoseconds")
    return int(ns)


def convert(ptype: str, value: object) -> object:
    """Convert a default (from the plan) or an override (text) to the param's type."""
    if ptype == "duration":
        return parse_duration(value)
    if ptype == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str | int) and str(value).strip().lower() in _BOOLS:
            return _BOOLS[str(value).strip().lower()]
        raise ParamValueError(f"'{value}' is not a bool (true/false, yes/no, 1/0)")
    if ptype == "string":
        if isinstance(value, str):
            return value
        raise ParamValueError(f"{_show(value)} is not a string (quote it)")
    if ptype == "int":
        return _to_int(value)
    if ptype == "number":
        return _to_number(value)
    raise ValueError(f"unknown param type {ptype!r}")  # the schema rules this out


def _show(value: object) -> str:
    return f"'{value}'" if isinstance(value, str) else repr(value)


def _to_int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""), 0)
        except ValueError:
            pass
    raise ParamValueError(f"{_show(value)} is not an int")


def _to_number(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ParamValueError(f"{_show(value)} is not a number")


def format_value(ptype: str, value: object) -> str:
    """The text a `${name}` reference expands to."""
    if ptype == "duration":
        return f"{value}ns"
    if ptype == "bool":
        return "true" if value else "false"
    return str(value)


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
               span: Span) -> str:
    """Expand `${name}` in `text`; `span` is where the text starts (errors point inside)."""
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
