"""The `json` view: one JSON object per line (UTF-8, not ASCII-escaped; lines end with
"\n" and only there: a reader must not split on U+2028 or U+0085, which JSON keeps raw).

- A print record is written as it is (its keys already follow the contract in
  records.py; a NULL string is ``null``); a stack is a list of frames, innermost first:
  ``[{"address", "symbol" (null when unknown), "offset", "module", "line" (a CPython
  frame's; else null), "kind" ("native" or "python")}, ...]`` (so is a stack
  key of an aggregation row).
- An aggregation snapshot gives one object per row, in the order given:
  ``{"output", "interval_start" (ISO 8601 UTC; null if the snapshot has none, which
  `run` never passes: without `every` it is the run's start),
  "interval_end", the key fields..., then each statistic the row carries among
  "count", "sum", "min", "max", "avg"}``; histograms carry
  ``"buckets": [{"low", "high", "count"}...]`` with the buckets from the first to the
  last non-empty one (empty ones between them kept, so the shape is visible); ``low``
  is inclusive, ``high`` exclusive, ``null`` for the unbounded side of an lhist's
  underflow/overflow bucket. An empty snapshot writes nothing.
- A `table:` snapshot gives one object per row: ``{"output", "interval_start",
  "interval_end", the key fields..., "cmdline" (when a key is `pid`: the process's
  command line, null if it could not be read), then one key per column}``; a column's
  value is the interval's count or sum, or with `rate: true` that per second (a float).
- Keys that did not fit in an aggregation map:
  ``{"lost": N, "reason": "map full", "output": NAME}``; losses given by the runtime:
  ``{"lost": N, "reason": REASON}``.

Lines are buffered per batch: one write per `records()` call; `flush()` is the
runtime's, after each batch. A print output whose schema says which fields may hold
None or a bool (PrintSchema.nullable, .bools: `run`'s) and that has no bool and no stack
field is written by a %-template of its own (`_template_line`), the bytes the encoder
writes for it, ~2x faster; a record it does not fit (a NULL, `truncated`, another
output) goes to the encoder.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TextIO, cast

from planrunner.output.base import ViewBase
from planrunner.output.histogram import trim
from planrunner.records import (
    RECORD_HEAD,
    STAT_KEYS,
    AggRow,
    AggSnapshot,
    PrintSchema,
    Record,
    Stack,
    TableRow,
    TableSnapshot,
    UserSymbol,
    iso_utc,
)


def _default(obj: object) -> object:
    if isinstance(obj, Stack | UserSymbol):
        return obj.json()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


class JsonView(ViewBase):
    def __init__(self, stream: TextIO, schemas: Sequence[PrintSchema]) -> None:
        super().__init__(stream, schemas)
        # One encoder, built once: json.dumps with options builds a new one per call.
        encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                   default=_default)
        self.encode = encoder.encode
        flat = _flat_encoder(encoder)
        lines = {s.output: _template_line(s, flat) for s in self.schemas}
        if len(lines) == 1:  # each template line hands another output's record on
            self._records_line = next(iter(lines.values()))
        else:
            self._records_line = lambda rec: lines.get(rec["output"], flat)(rec)

    def records(self, batch: Sequence[Record]) -> None:
        if batch:
            self.stream.write("\n".join(map(self._records_line, batch)) + "\n")

    def aggregate(self, snap: AggSnapshot) -> None:
        objs = [row_object(snap, row) for row in snap.rows]
        if snap.dropped:
            objs.append({"lost": snap.dropped, "reason": "map full", "output": snap.output})
        if objs:
            self.stream.write("".join(self.encode(o) + "\n" for o in objs))

    def table(self, snap: TableSnapshot) -> None:
        objs = [table_object(snap, row) for row in snap.rows]
        if snap.dropped:
            objs.append({"lost": snap.dropped, "reason": "map full", "output": snap.output})
        if objs:
            self.stream.write("".join(self.encode(o) + "\n" for o in objs))

    def lost(self, count: int, reason: str) -> None:
        self.stream.write(self.encode({"lost": count, "reason": reason}) + "\n")


def _flat_encoder(encoder: json.JSONEncoder) -> Callable[[Record], str]:
    """encoder.encode for print records, without its per-call set-up: JSONEncoder.encode
    builds a new C encoder for every object (1.4x slower on records). Print records hold
    only str/int/bool/None, stacks and a list of keys, so no cycle check is needed."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # not CPython's C accelerator: the plain way
        return encoder.encode
    encode = make(None, encoder.default, json.encoder.encode_basestring, None,
                  encoder.key_separator, encoder.item_separator, False, False, True)
    return lambda rec: "".join(encode(rec, 0))  # noqa: E731 - the encoder is closed over


def _template_line(schema: PrintSchema, encoded: Callable[[Record], str]
                   ) -> Callable[[Record], str]:
    """A print record of `schema` as the encoder writes it, by one %-format over its
    values in the decoder's key order (runtime/decode.py: RECORD_HEAD, then the fields):
    each string through the encoder's own escaping (json.encoder.encode_basestring, as
    with ensure_ascii=False), each int as its repr. A record it does not fit goes to
    `encoded`: other keys or more of them (`truncated`, `reread`), another output, a
    None where a string may be (a NULL string, the encoder's `null`). The encoder
    builds a C encoder state and walks the dict per record: ~2x this cost. `encoded`
    alone where the schema does not say which fields may hold None or a bool, or has
    bools or stacks."""
    if (schema.nullable is None or schema.bools is None or schema.bools
            or schema.stacks):
        return encoded
    keys = (*RECORD_HEAD, *schema.fields)
    if len(set(keys)) != len(keys):  # a field named like a head key: the dict holds fewer
        return encoded
    strings = {"time", "comm", *schema.nullable}
    esc = json.encoder.encode_basestring
    # the output and probe are the schema's (else `encoded`): written in the template
    fixed = {"output": schema.output, "probe": schema.probe}
    template = "{" + ",".join(
        esc(k).replace("%", "%%") + ":" + (esc(fixed[k]).replace("%", "%%") if k in fixed
                                           else "%s") for k in keys) + "}"
    names = [f"v{i}" for i in range(len(keys))]
    values = [f"esc({n})" if k in strings else n
              for n, k in zip(names, keys, strict=True) if k not in fixed]
    out, probe = names[keys.index("output")], names[keys.index("probe")]
    source = "\n".join([
        "def line(rec):",
        f"    if len(rec) != {len(keys)}:",
        "        return encoded(rec)",
        "    try:",
        f"        {', '.join(names)}, = get(rec)",
        f"        if {out} != output or {probe} != probe:",
        "            return encoded(rec)",
        f"        return template % ({', '.join(values)},)",
        "    except (KeyError, TypeError):  # a key missing, a None for esc",
        "        return encoded(rec)",
    ]) + "\n"
    namespace: dict[str, object] = {"get": itemgetter(*keys), "esc": esc, "encoded": encoded,
                                    "template": template, "output": schema.output,
                                    "probe": schema.probe}
    exec(compile(source, f"<json line {schema.output}>", "exec"), namespace)  # noqa: S102
    return cast(Callable[[Record], str], namespace["line"])  # defined by `source`


def table_object(snap: TableSnapshot, row: TableRow) -> Record:
    obj: Record = {
        "output": snap.output,
        "interval_start": iso_utc(snap.interval_start),
        "interval_end": iso_utc(snap.interval_end),
    }
    obj.update(row.key)
    if snap.has_cmdline:
        obj["cmdline"] = row.cmdline
    obj.update(zip(snap.columns, row.values, strict=True))
    return obj


def row_object(snap: AggSnapshot, row: AggRow) -> Record:
    obj: Record = {
        "output": snap.output,
        "interval_start": None if snap.interval_start is None else iso_utc(snap.interval_start),
        "interval_end": iso_utc(snap.interval_end),
    }
    obj.update(row.key)
    for stat in STAT_KEYS:
        value = getattr(row, stat)
        if value is not None:
            obj[stat] = value
    if row.buckets is not None:
        obj["buckets"] = [{"low": b.low, "high": b.high, "count": b.count}
                          for b in trim(row.buckets)]
    return obj
