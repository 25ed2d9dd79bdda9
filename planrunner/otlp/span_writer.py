"""Flat spans serialized with few calls into protobuf.

Each call from Python into protobuf (upb) costs ~0.15-0.3 us, and a span written in
place into its request takes 10-20 (add, ids, times, four an attribute), plus parsing
and writing again what never changes. So a batch of spans of one output is written as:

- a *template* for each combination of the values that repeat: a ScopeSpans holding one
  Span with the output's name, kind and literal attributes and those attribute values
  (a status, a path, a thread, a statement's first word), merged from parts protobuf
  serialized once each (`Span(...).SerializeToString()`: its encoding makes
  concatenated messages their merge), plus one KeyValue for each field whose values do
  not repeat (an id);
- for each span, its ids, times and non-repeating values set in its template's span
  (~5 calls), and the template serialized by protobuf (one call). Concatenated
  ScopeSpans are their merge too: the join of a batch's is one ScopeSpans holding its
  spans in order, which requests.py merges into the request with one MergeFromString.

A field whose values do not repeat fills its cache once (CACHE_MAX values) and goes in
the templates as a KeyValue from then on; if the combinations outgrow TEMPLATES_MAX,
the cached field with the most values does too. No byte of it is
written by hand: every part is protobuf's serialization of an official message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, Span

from planrunner.otlp.attributes import AttributePlan, any_value, first_word
from planrunner.otlp.wire import TID, TS

CACHE_MAX = 512  # serialized values kept per field
TEMPLATES_MAX = 2048  # combinations of cached values kept as templates
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(slots=True, eq=False)
class _Attribute:
    name: str
    place: int  # in the row
    word: bool  # the first word of the field (first_word), not the field
    cache: dict[object, bytes] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class _Template:
    """One combination of cached values: `span` (inside a one-span ScopeSpans) gets
    each span's ids, times and in-place values, then `serialize` gives it framed."""

    const: bytes  # name, kind, literals and the cached values, serialized
    serialize: Callable[[], bytes]  # the ScopeSpans' SerializeToString
    span: Any
    values: list[Any]  # the AnyValue of each in-place field, in SpanWriter.in_place order


def _value_of(a: _Attribute, row: Sequence[Any]) -> Any:
    return first_word(row[a.place]) if a.word else row[a.place]


def _set(value_msg: Any, value: Any) -> None:
    """An in-place value (not None) into its AnyValue: the common kinds without a copy."""
    kind = type(value)
    if kind is str:
        value_msg.string_value = value
    elif kind is int and _INT64_MIN <= value <= _INT64_MAX:
        value_msg.int_value = value
    else:
        v = any_value(value)
        assert v is not None
        value_msg.CopyFrom(v)


class SpanWriter:
    def __init__(self, name: str, kind: int, attrs: AttributePlan, latency: int) -> None:
        self.head = Span(name=name, kind=kind,  # type: ignore[arg-type]
                         attributes=attrs.literals).SerializeToString()
        self.latency = latency  # its place in the row: the span's duration
        self.cached = [_Attribute(n, i, False) for n, i in attrs.fields]
        self.cached.append(_Attribute("thread.id", TID, False))
        self.cached.extend(_Attribute(n, i, True) for n, i in attrs.words)
        self.in_place: list[_Attribute] = []
        self.templates: dict[object, _Template] = {}
        self._full: list[_Attribute] = []  # caches that filled up: to go in place
        self._key = self._key_of()

    def _key_of(self) -> Callable[[Sequence[Any]], object]:
        """row -> its combination of cached values (the templates' key)."""
        if not self.cached:
            return lambda row: ()
        return itemgetter(*(a.place for a in self.cached))

    def write(self, rows: Sequence[tuple[Any, ...]], offset: int, ids: bytes) -> bytes:
        """The spans of `rows` (CLOCK_MONOTONIC + offset = epoch ns; `ids`: 24 random
        bytes a row, span id then trace id) as one serialized ScopeSpans (no scope)."""
        key_of = self._key
        templates = self.templates
        in_place = self.in_place
        lat = self.latency
        parts: list[bytes] = []
        append = parts.append
        j = 0
        for row in rows:
            t = templates.get(key_of(row))
            if t is None:
                t = self._template(row)
                if self._full or len(templates) > TEMPLATES_MAX:
                    self._reshape()
                    key_of, templates, in_place = self._key, self.templates, self.in_place
                    t = self._template(row)
            span = t.span
            span.span_id = ids[j:j + 8]
            span.trace_id = ids[j + 8:j + 24]
            j += 24
            end = row[TS] + offset
            span.start_time_unix_nano = end - int(row[lat] or 0)
            span.end_time_unix_nano = end
            if in_place:
                # (inline: hot; t.values was made from in_place, the same length)
                for a, value_msg in zip(in_place, t.values, strict=False):
                    value: Any = row[a.place]
                    if a.word:
                        value = first_word(value)
                    kind = type(value)
                    if kind is int and _INT64_MIN <= value <= _INT64_MAX:
                        value_msg.int_value = value
                    elif kind is str:
                        value_msg.string_value = value
                    elif value is None:  # a NULL string: that attribute is left out
                        append(self._alone(t, span, row))
                        break
                    else:
                        _set(value_msg, value)
                else:
                    append(t.serialize())
            else:
                append(t.serialize())
        return b"".join(parts)

    def _template(self, row: Sequence[Any]) -> _Template:
        parts = [self.head]
        for a in self.cached:
            raw = row[a.place]
            b = a.cache.get(raw)
            if b is None:
                b = self._miss(a, raw)
            parts.append(b)
        const = b"".join(parts)
        holder = ScopeSpans()
        span = holder.spans.add()
        span.MergeFromString(const)
        values = []
        for a in self.in_place:
            kv = span.attributes.add()
            kv.key = a.name
            values.append(kv.value)
        t = _Template(const, holder.SerializeToString, span, values)
        self.templates[self._key(row)] = t
        return t

    def _alone(self, t: _Template, like: Any, row: Sequence[Any]) -> bytes:
        """A span with a None among its in-place values, serialized on its own: its
        template's constant part, the ids and times set in `like`, the values not None."""
        holder = ScopeSpans()
        span = holder.spans.add()
        span.MergeFromString(t.const)
        span.span_id = like.span_id
        span.trace_id = like.trace_id
        span.start_time_unix_nano = like.start_time_unix_nano
        span.end_time_unix_nano = like.end_time_unix_nano
        for a in self.in_place:
            value = _value_of(a, row)
            if value is not None:
                kv = span.attributes.add()
                kv.key = a.name
                _set(kv.value, value)
        data: bytes = holder.SerializeToString()
        return data

    def _miss(self, a: _Attribute, raw: object) -> bytes:
        value = first_word(raw) if a.word else raw
        v = any_value(value)
        b = b"" if v is None else \
            Span(attributes=[KeyValue(key=a.name, value=v)]).SerializeToString()
        if len(a.cache) < CACHE_MAX:
            a.cache[raw] = b
        elif a not in self._full:
            self._full.append(a)
        return b

    def _reshape(self) -> None:
        """Full caches go in place; too many combinations, the field with the most
        values too. The templates are made again as rows come."""
        if not self._full and self.cached:
            self._full.append(max(self.cached, key=lambda a: len(a.cache)))
        for a in self._full:
            self.cached.remove(a)
            a.cache.clear()
            self.in_place.append(a)
        self._full.clear()
        self.templates.clear()
        self._key = self._key_of()
