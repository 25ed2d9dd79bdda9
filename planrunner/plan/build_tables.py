"""`table: [OUTPUT | {COLUMN: [OUTPUT, ...]}, ...]` entries of `outputs:` -> TableSpecs,
every mistake collected.

A table joins count and sum outputs that group by the same `by` keys into one row per
key, a column per output or per group of outputs it adds (bcc's ustat: calls/s,
objects/s, GC/s per process, one count output per runtime's probe). Rules,
each a located error: the joined names are outputs of this plan (not tables, not
prints), counts or sums, listed once and in one table only; they share their `by`
keys (same names, same order); they have no `every` or `top` of their own (the table's
interval and cut apply to all its columns, read at one moment); `sort` names one of
the columns; `by`, `value`, `where`, `fields`, `format` and `range` belong to the
joined outputs, not to the table.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from planrunner.diagnostics import Span
from planrunner.param_values import ParamValueError, parse_duration
from planrunner.plan.context import BuildContext
from planrunner.plan.model import OutputSpec, TableColumn, TableSpec
from planrunner.plan.params import DURATION_HINT
from planrunner.plan.source import JsonObj, JsonPath

JOINABLE = ("count", "sum")
_NOT_ON_TABLE = ("by", "value", "where", "fields", "format", "range")


def build_tables(ctx: BuildContext, items: list[Any], outputs: tuple[OutputSpec, ...],
                 skip: AbstractSet[object]) -> tuple[TableSpec, ...]:
    by_name = {o.name: o for o in outputs}
    tables: list[TableSpec] = []
    joined: dict[str, str] = {}  # output -> the table that joins it
    for index, item in enumerate(items):
        if index in skip or not isinstance(item, dict) or "table" not in item:
            continue
        table = _table(ctx, index, item, by_name, joined)
        if table is not None:
            tables.append(table)
    return tuple(tables)


def _table(ctx: BuildContext, index: int, item: JsonObj, by_name: dict[str, OutputSpec],
           joined: dict[str, str]) -> TableSpec | None:
    base: JsonPath = ("outputs", index)
    name = ctx.sub(base + ("name",), item["name"]) if "name" in item else str(index)
    for key in (k for k in _NOT_ON_TABLE if k in item):
        ctx.error(f"'{key}' belongs to the outputs a table joins, not to the table",
                  ctx.spans.key(base + (key,)),
                  "a table's rows are keyed by its outputs' by: [...]; filter them there")
    columns: list[TableColumn] = []
    members: list[OutputSpec] = []
    for j, entry in enumerate(item["table"]):
        jpath = base + ("table", j)
        if isinstance(entry, str):
            col, names, spans = entry, [entry], [ctx.spans.text(jpath)]
        else:
            (col, listed), = entry.items()
            names = [listed] if isinstance(listed, str) else list(listed)
            spans = ([ctx.spans.text(jpath + (col,))] if isinstance(listed, str) else
                     [ctx.spans.text(jpath + (col, k)) for k in range(len(listed))])
        if any(c.name == col for c in columns):
            ctx.error(f"table '{name}' has two columns named '{col}'", spans[0])
            continue
        kept = tuple(n for n, at in zip(names, spans, strict=True)
                     if _joinable(ctx, name, n, at, by_name, joined, members))
        if kept:
            columns.append(TableColumn(col, kept, spans[0]))
    sort = columns[0].name if columns else ""
    if "sort" in item:
        sort = ctx.sub(base + ("sort",), item["sort"])
        if columns and all(c.name != sort for c in columns):
            ctx.unknown("column", sort, [c.name for c in columns],
                        ctx.spans.text(base + ("sort",)))
    if not members:
        return None
    return TableSpec(
        index=index, name=name, columns=tuple(columns), sort=sort,
        rate=bool(item.get("rate", False)), key_fields=members[0].by_keys,
        span=ctx.spans.value(base), table_span=ctx.spans.value(base + ("table",)),
        every_ns=parse_every(ctx, base, item), top=item.get("top"))


def _joinable(ctx: BuildContext, table: str, col: str, at: Span,
              by_name: dict[str, OutputSpec], joined: dict[str, str],
              members: list[OutputSpec]) -> bool:
    """Whether output `col` may join `table` (each reason is a located error); joined."""
    out = by_name.get(col)
    if out is None:
        joinable = [o.name for o in by_name.values() if o.kind in JOINABLE]
        ctx.unknown("output", col, joinable, at,
                    "a table joins count and sum outputs of this plan by name "
                    "(give them a name: ...)")
        return False
    if out.kind not in JOINABLE:
        ctx.error(f"table '{table}' joins counts and sums; output '{col}' is a "
                  f"{out.kind}", at,
                  "count: PROBE with by: [...] gives a table its events per key")
        return False
    if col in joined:
        where = "this table" if joined[col] == table else f"table '{joined[col]}'"
        ctx.error(f"output '{col}' is already joined by {where}", at,
                  "an output shows in one column of one table")
        return False
    if members and out.by_keys != members[0].by_keys:
        first = members[0]
        ctx.error(f"output '{col}' groups by [{', '.join(out.by_keys)}] but "
                  f"'{first.name}' by [{', '.join(first.by_keys)}]", at,
                  "the outputs of a table share their by: keys (one row per key)")
        return False
    for own in ("every", "top"):
        if own in _keys(out):
            ctx.error(f"output '{col}' is joined by table '{table}': its '{own}' is "
                      "the table's", ctx.spans.key(("outputs", out.index, own)),
                      f"move {own}: to the table")
    joined[col] = table
    members.append(out)
    return True


def _keys(out: OutputSpec) -> set[str]:
    """Which of every/top the output's entry sets (its spec keeps only the values)."""
    return {k for k, v in (("every", out.every_ns), ("top", out.top)) if v is not None}


def parse_every(ctx: BuildContext, base: JsonPath, item: JsonObj) -> int | None:
    """The `every:` of an output entry in ns; None when absent or wrong (reported)."""
    if "every" not in item:
        return None
    at = ctx.spans.text(base + ("every",))
    raw = item["every"]
    try:
        ns = parse_duration(ctx.sub(base + ("every",), raw) if isinstance(raw, str) else raw)
    except ParamValueError as exc:
        ctx.error(f"bad 'every': {exc}", at, DURATION_HINT)
        return None
    if ns == 0 and isinstance(raw, str) and "${" in raw:
        return None  # a param set to 0 turns the interval off: once at exit
    if ns <= 0:
        ctx.error("'every' must be a duration greater than 0", at,
                  "omit 'every' to print once at exit")
        return None
    return ns
