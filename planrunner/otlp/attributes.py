"""Which attributes a record's span or log record carries, and record values as OTLP
AnyValues.

Every field of the print under its record key (`id`, `status`, `query`), `thread.id`,
then the output's `otlp: {attributes: {NAME: SOURCE}}`: a SOURCE that is a field key is
that field's value (the field then appears only under NAME: `db.query.text: query`),
`first_word(KEY)` the first word of that field in capitals (`db.operation.name`:
SELECT), anything else a literal string (`db.system.name: postgresql`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from planrunner.otlp.wire import ROW_HEAD, TID

_INT64_MAX = (1 << 63) - 1
_FIRST_WORD = re.compile(r"^first_word\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$")
_WORD = re.compile(r"[A-Za-z]+")
# record keys that are not fields, or that say something of the fields
_NOT_FIELDS = frozenset({"truncated", "reread"})


def any_value(value: object) -> AnyValue | None:
    """A record value as an OTLP AnyValue (None: a NULL string, left out)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        if -_INT64_MAX - 1 <= value <= _INT64_MAX:
            return AnyValue(int_value=value)
        return AnyValue(string_value=str(value))  # a uint64 past int64
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, (list, tuple)):
        return AnyValue(string_value=",".join(map(str, value)))
    return AnyValue(string_value=str(value))  # a Stack, a UserSymbol


def set_value(out: AnyValue, value: object) -> None:
    """`value` (not None) written into `out` in place: any_value without a copy."""
    if isinstance(value, str):
        out.string_value = value
    elif isinstance(value, int) and not isinstance(value, bool) and \
            -_INT64_MAX - 1 <= value <= _INT64_MAX:
        out.int_value = value
    else:
        v = any_value(value)
        assert v is not None
        out.CopyFrom(v)


def key_values(pairs: Iterable[tuple[str, object]]) -> list[KeyValue]:
    out = []
    for key, value in pairs:
        v = any_value(value)
        if v is not None:
            out.append(KeyValue(key=key, value=v))
    return out


def first_word(text: object) -> str | None:
    """The statement's first keyword in capitals (`select 1` -> SELECT), else None."""
    if not isinstance(text, str):
        return None
    found = _WORD.search(text)
    return found.group(0).upper() if found else None


@dataclass(frozen=True, slots=True)
class AttributePlan:
    """For one print: (attribute, place in the row) pairs, derived ones, and literals.
    A row is what wire.py hands the exporter: ts_ns, pid, tid, then the fields."""

    fields: tuple[tuple[str, int], ...]
    words: tuple[tuple[str, int], ...]  # (attribute, place of the field): first_word
    literals: tuple[KeyValue, ...]

    def fill(self, out: Any, row: Sequence[Any]) -> None:
        """The row's attributes appended to `out` (a repeated KeyValue field)."""
        add = out.add
        for name, i in self.fields:
            value = row[i]
            if value is None:  # a NULL string: left out
                continue
            kv = add()
            kv.key = name
            kind = type(value)  # the common kinds inline: this runs per field and span
            if kind is str:
                kv.value.string_value = value
            elif kind is int and -_INT64_MAX - 1 <= value <= _INT64_MAX:
                kv.value.int_value = value
            else:
                set_value(kv.value, value)
        kv = add()
        kv.key = "thread.id"
        kv.value.int_value = row[TID]
        for name, i in self.words:
            word = first_word(row[i])
            if word is not None:
                kv = add()
                kv.key = name
                kv.value.string_value = word
        if self.literals:
            out.extend(self.literals)


def attribute_plan(row: Sequence[str], skip: str,
                   extra: Sequence[tuple[str, str]]) -> AttributePlan:
    """`row`: the record keys of a row (wire.row_keys); `skip`: a field that is not an
    attribute (a span's latency: its duration)."""
    renamed: dict[str, str] = {}
    words: list[tuple[str, int]] = []
    literals: list[KeyValue] = []
    field_keys = [k for k in row[len(ROW_HEAD):] if not skip or k != skip]
    for name, source in extra:
        source = source.strip()
        word = _FIRST_WORD.match(source)
        if source in field_keys:
            renamed[source] = name
        elif word:
            if word.group(1) in field_keys:  # else it never has a value
                words.append((name, row.index(word.group(1), len(ROW_HEAD))))
        else:
            literals.append(KeyValue(key=name, value=AnyValue(string_value=source)))
    fields = tuple((renamed.get(k, k), i) for i, k in enumerate(row)
                   if i >= len(ROW_HEAD) and k not in _NOT_FIELDS and (not skip or k != skip))
    return AttributePlan(fields, tuple(words), tuple(literals))
