"""`format:` templates of `print` outputs for the text view.

A template is a Python format string such as ``"{pid} {latency_ms:.3f} {query}"``.
Templates come from plan files, so only plain names are allowed: ``{name}``,
``{name!r}``/``!s``/``!a`` and ``{name:SPEC}`` with a literal SPEC. Positional fields
(``{}``, ``{0}``), attribute and index access (``{x.__class__}``, ``{x[0]}``) and nested
fields in a spec (``{x:{w}}``) are rejected, as are names the record does not have.
Names are the record's keys plus, when it has ``latency_ns``, the derived
``latency_us`` and ``latency_ms`` (floats: latency_ns / 1e3 and / 1e6), and, when it
has ``depth`` (nested spans and their begin/end probes), the derived ``indent``: two
spaces per level of depth (``""`` at depth 0), so ``"{indent}-> {func}"`` draws a call
tree. ``indent`` takes string specs (``{indent:>4}``).

In the rendered text a NULL string is ``(null)``, a bool is ``true``/``false`` and a
truncated string ends with ``…`` (as in the column layout).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from string import Formatter

from planrunner.records import Record

DERIVED = {"latency_us": 1_000, "latency_ms": 1_000_000}
INDENT = "indent"  # derived from `depth`: two spaces per level
INDENT_UNIT = "  "
ELLIPSIS = "…"
# Values a spec is tried on when the field's type is unknown: the spec is accepted when
# one of them formats (".3f" suits numbers, ">20" everything, "z" nothing).
_SAMPLES: tuple[object, ...] = (0, 0.5, "")
# A bool is shown as "true"/"false", so its spec must suit a string.
_TYPE_SAMPLES: Record = {"int": 0, "float": 0.5, "str": "", "bool": ""}


def template_names(names: Iterable[str]) -> set[str]:
    """The names a template may use for a record with these keys."""
    allowed = set(names)
    if "latency_ns" in allowed:
        allowed.update(DERIVED)
    if "depth" in allowed:
        allowed.add(INDENT)
    return allowed


def _fields(template: str) -> list[tuple[str | None, str, str | None]]:
    """(name, spec, conversion) per replacement field; ValueError on bad syntax."""
    return [(name, spec or "", conv) for _, name, spec, conv in Formatter().parse(template)
            if name is not None]


def check_format(template: str, names: Iterable[str] | Mapping[str, str]) -> str | None:
    """An error message for `template`, or None when it is fine.

    `names` are the record's keys; a mapping name -> "int"/"float"/"str"/"bool" also
    checks each spec against that type (otherwise a spec must suit some type)."""
    types = names if isinstance(names, Mapping) else {}
    allowed = template_names(names)
    try:
        fields = _fields(template)
    except ValueError as exc:
        return f"bad format template: {exc} (write '{{{{' and '}}}}' for literal braces)"
    for name, spec, _conv in fields:
        if not name or name.isdigit():
            return "format template fields need a name, e.g. '{pid}'"
        if "." in name or "[" in name:
            return (f"format template field '{{{name}}}': attribute and index access are "
                    "not allowed; use a plain field name")
        if name not in allowed:
            known = ", ".join(sorted(allowed))
            return f"format template uses unknown name '{name}' (known: {known})"
        if "{" in spec:
            return f"format template field '{{{name}}}': nested fields in a spec are not allowed"
        error = _check_spec(name, spec, types)
        if error:
            return error
    return None


def _check_spec(name: str, spec: str, types: Mapping[str, str]) -> str | None:
    if not spec:
        return None
    if name in DERIVED:
        samples: tuple[object, ...] = (0.5,)
    elif name == INDENT and name not in types:
        samples = ("",)
    elif name in types and types[name] in _TYPE_SAMPLES:
        samples = (_TYPE_SAMPLES[types[name]],)
    else:
        samples = _SAMPLES
    for sample in samples:
        try:
            format(sample, spec)
        except (ValueError, TypeError):
            continue
        return None
    return f"format template field '{{{name}}}': bad format spec '{spec}'"


def compile_template(template: str, names: Iterable[str]) -> Callable[[Record], str]:
    """A function record -> text line (no newline). Raises ValueError when
    `check_format` rejects the template (the plan validator should have said so)."""
    keys = tuple(names)
    error = check_format(template, keys)
    if error:
        raise ValueError(error)
    used = {name for name, _, _ in _fields(template)}
    derived = tuple((n, div) for n, div in DERIVED.items() if n in used)
    indent = INDENT in used and INDENT not in keys
    fmt = template.format_map

    def render(rec: Record) -> str:
        vals = rec.values()
        if (derived or indent or "truncated" in rec or None in vals or True in vals
                or False in vals):
            rec = readable(rec)
            for name, div in derived:
                ns = rec.get("latency_ns")
                rec[name] = ns / div if isinstance(ns, int) else ns
            if indent:
                depth = rec.get("depth")
                rec[INDENT] = INDENT_UNIT * depth if isinstance(depth, int) else ""
        return fmt(rec)

    return render


def readable(rec: Record) -> Record:
    """A copy of `rec` with NULL strings as '(null)', bools as 'true'/'false' and
    truncated strings ending in '…' (the text view's spelling of each)."""
    out = {}
    for key, value in rec.items():
        if value is None:
            value = "(null)"
        elif value is True:
            value = "true"
        elif value is False:
            value = "false"
        out[key] = value
    for key in rec.get("truncated") or ():
        if isinstance(out.get(key), str):
            out[key] = out[key] + ELLIPSIS
    return out
