"""Param values: conversion of a default or a `--set` text to its type, and the class
that says whether a value can be data (read from the program's params map,
render/params.py) rather than compiled in. Apart from plan/params.py so that a warm run
(run_cache.py) converts its `--set` values without the plan modules.

Types and their Python values: int -> int, number -> float, string -> str,
bool -> bool (true/false/yes/no/on/off/1/0), duration -> int nanoseconds.

Durations are a decimal number and a unit: ns, us (or µs), ms, s, m, h
(`10ms`, `1.5s`, `500us`, `100ns`, `1m`); the result must be a whole number of ns and
not negative. A bare number is refused (`--set threshold=5` would silently mean 5 ns
where users mean 5 ms or 5 s) except `0`, which needs no unit.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence

PARAM_TYPES = ("int", "number", "string", "duration", "bool")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
          "m": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ns|us|µs|ms|s|m|h)\s*$")
_BOOLS = {"true": True, "yes": True, "on": True, "1": True,
          "false": False, "no": False, "off": False, "0": False}


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


def data_class(ptype: str | None, value: object) -> str:
    """`data` when a param of type `ptype` with `value` can be data (resolve/scope.py
    Constants: an int or a duration, not negative, so its type is the same for every
    such value), else `const`. The run cache keys a data value by this class alone."""
    if ptype in ("int", "duration") and isinstance(value, int) and not isinstance(
            value, bool) and 0 <= value < 1 << 64:
        return "data"
    return "const"


def pack_values(names: Sequence[str], values: Mapping[str, int]) -> bytes:
    """The params map's one value (render/params.py): `values` of `names` in order, each
    a __u64."""
    return b"".join(struct.pack("<Q", values[n]) for n in names)
