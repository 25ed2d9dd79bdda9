"""`outputs:` (validated data) -> OutputSpecs, with every mistake collected.

Rules (`table:` entries: plan/build_tables.py): the named probe exists; `value` is
required by sum/min/max/avg/hist/lhist and refused by count/print; `fields` and
`format` belong to print, `by`, `every` and `top` to aggregations, `sort` and `rate` to
tables; lhist needs `range: {min, max, step}` with step > 0, max > min and at
most MAX_LHIST_BUCKETS buckets. A field given by name keeps its last part as its key
(`begin.query` -> `query`, `latency` -> `latency_ns`), `usym(NAME)` that of NAME
(`usym(begin.start)` -> `start`); two fields with one key are an
error asking for a {NAME: EXPRESSION} mapping.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any, cast

from planrunner.plan.build_tables import build_tables, parse_every
from planrunner.plan.context import BuildContext
from planrunner.plan.model import FieldSpec, OutputKind, OutputSpec, TableSpec
from planrunner.plan.source import JsonObj, JsonPath

KINDS = ("print", "count", "sum", "min", "max", "avg", "hist", "lhist")
VALUE_KINDS = ("sum", "min", "max", "avg", "hist", "lhist")
MAX_LHIST_BUCKETS = 1000
# (`begin.begin.size`: a span on a span reaches the values of the span it is on)
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# `ustack(N)` and `kstack(N)` are fields of their own, keyed ustack and kstack
_STACK_FIELD = re.compile(r"^([uk]stack)\s*\(\s*[0-9]+\s*\)$")
# `usym(NAME)` is keyed like NAME: `usym(begin.start)` -> start
_USYM_FIELD = re.compile(r"^usym\s*\(\s*((?:[A-Za-z_][A-Za-z0-9_]*\.)?([A-Za-z_][A-Za-z0-9_]*))"
                         r"\s*\)$")
# Only for print: the record keys, or only for aggregations: group keys and intervals.
_PRINT_ONLY = ("fields", "format", "otlp")
# otlp attributes: `first_word(KEY)`, the first word of a field (db.operation.name)
FIRST_WORD = re.compile(r"^first_word\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$")
_AGG_ONLY = ("by", "every", "top")
_MOVE_HINTS = {"by": "a print output lists its record's fields: [...]",
               "fields": "aggregations group with by: [...]"}


def build_outputs(ctx: BuildContext, outputs: list[Any], probes: list[str] | None,
                  skip: AbstractSet[object] = frozenset()
                  ) -> tuple[tuple[OutputSpec, ...], tuple[TableSpec, ...]]:
    """OutputSpecs and TableSpecs (`table:` entries) of `outputs` but the indexes in
    `skip` (schema errors); `probes` None: the probes section is broken or missing, so
    probe names are not checked."""
    kept = [(i, item) for i, item in enumerate(outputs)
            if i not in skip and "table" not in item]
    taken = {item["name"] for i, item in enumerate(outputs) if i not in skip and "name" in item}
    built = tuple(out if "name" in outputs[out.index] else
                  replace(out, name=_unnamed(taken, out.probe, out.kind, out.index))
                  for out in (_output(ctx, i, item, probes) for i, item in kept))
    tables = tuple(t if "name" in outputs[t.index] else
                   replace(t, name=_unnamed(taken, "table", "", t.index))
                   for t in build_tables(ctx, outputs, built, skip))
    names = sorted([(out.index, out.name) for out in built]
                   + [(t.index, t.name) for t in tables])
    seen: dict[str, int] = {}
    for i, name in names:
        if "name" in outputs[i] and name in seen:
            ctx.error(f"two outputs are named '{name}' (outputs {seen[name]} and {i})",
                      ctx.spans.text(("outputs", i, "name")))
        seen.setdefault(name, i)
    return built, tables


def _unnamed(taken: set[str], base: str, kind: str, index: int) -> str:
    """The name of an output without `name:`: its probe's (`tick`, so `-o t.csv` writes
    `t.tick.csv` and JSON says `"output": "tick"`); when another output has that name,
    with its kind (`tick_count`), then its index. Added to `taken`."""
    for name in (base, f"{base}_{kind}" if kind else "", f"{base}_{kind or 'table'}_{index}"):
        if name and name not in taken:
            break
    taken.add(name)
    return name


def _output(ctx: BuildContext, index: int, item: JsonObj, probes: list[str] | None
            ) -> OutputSpec:
    base: JsonPath = ("outputs", index)
    kind = next(k for k in KINDS if k in item)
    probe = item[kind]
    if probes is not None and probe not in probes:
        ctx.unknown("probe", probe, probes, ctx.spans.text(base + (kind,)))
    _check_keys(ctx, base, kind, item)
    value = ctx.expr(base + ("value",), item["value"]) if "value" in item else None
    where = ctx.expr(base + ("where",), item["where"]) if "where" in item else None
    fields = _fields(ctx, base + ("fields",), item.get("fields", []))
    by = _fields(ctx, base + ("by",), item.get("by", []))
    lhist = _range(ctx, base, item.get("range")) if kind == "lhist" else (None, None, None)
    name = ctx.sub(base + ("name",), item["name"]) if "name" in item else ""  # _unnamed
    fmt = ctx.sub(base + ("format",), item["format"]) if "format" in item else None
    otlp = item.get("otlp", {}) if kind == "print" else {}
    attributes = _otlp_attributes(ctx, base + ("otlp", "attributes"),
                                  otlp.get("attributes", {}), fields)
    return OutputSpec(
        index=index, name=name, kind=cast(OutputKind, kind), probe=probe,
        span=ctx.spans.value(base), probe_span=ctx.spans.text(base + (kind,)),
        fields=fields, by=by, value=value, where=where, every_ns=parse_every(ctx, base, item),
        top=item.get("top"), open=_open(ctx, base, kind, item), format=fmt,
        lhist_min=lhist[0], lhist_max=lhist[1], lhist_step=lhist[2],
        otlp_kind=otlp.get("kind", ""), otlp_attributes=attributes)


def _open(ctx: BuildContext, base: JsonPath, kind: str, item: JsonObj) -> bool:
    """`open: true`: a count or a sum of the begins of a span still open."""
    if not item.get("open", False):
        return False
    if kind not in ("count", "sum"):
        ctx.error(f"`open` applies to count and sum outputs, not {kind}",
                  ctx.spans.key(base + ("open",)),
                  "an open begin is added when it begins and taken off when it ends: "
                  "count the open begins, or sum a begin value (begin.size)")
        return False
    return True


def _otlp_attributes(ctx: BuildContext, apath: JsonPath, items: dict[str, str],
                     fields: tuple[FieldSpec, ...]) -> tuple[tuple[str, str], ...]:
    """`otlp: {attributes: {NAME: SOURCE}}`: a SOURCE that is a field key of the print
    is that field, `first_word(KEY)` needs KEY to be one; anything else is a literal."""
    keys = [f.key for f in fields]
    for name, source in items.items():
        word = FIRST_WORD.match(source.strip())
        if word and word.group(1) not in keys:
            ctx.unknown("field", word.group(1), keys, ctx.spans.value(apath + (name,)))
    return tuple(items.items())


def _check_keys(ctx: BuildContext, base: JsonPath, kind: str, item: JsonObj) -> None:
    if kind in VALUE_KINDS and "value" not in item:
        ctx.error(f"a {kind} output needs 'value' (what to aggregate)",
                  ctx.spans.key(base + (kind,)), "e.g. value: latency, or value: arg2")
    if kind not in VALUE_KINDS and "value" in item:
        hint = ("count adds 1 per event; use sum: with value: to add a value" if kind == "count"
                else "print shows fields: [...]")
        ctx.error(f"a {kind} output takes no 'value'", ctx.spans.key(base + ("value",)), hint)
    wrong = _AGG_ONLY if kind == "print" else _PRINT_ONLY
    what = "aggregations (count, sum, min, max, avg, hist, lhist)" if kind == "print" else "print"
    for key in (k for k in wrong if k in item):
        ctx.error(f"'{key}' belongs to {what}, not to {kind}", ctx.spans.key(base + (key,)),
                  _MOVE_HINTS.get(key))
    for key in (k for k in ("sort", "rate") if k in item):
        ctx.error(f"'{key}' belongs to table, not to {kind}", ctx.spans.key(base + (key,)),
                  "a table joins counts and sums: - table: [OUTPUT, ...]")
    if "range" in item and kind != "lhist":
        ctx.error(f"'range' belongs to lhist, not to {kind}", ctx.spans.key(base + ("range",)))
    if kind == "lhist" and "range" not in item:
        ctx.error("an lhist output needs 'range: {min: A, max: B, step: C}'",
                  ctx.spans.key(base + (kind,)), "or use hist: for log2 buckets")


def _range(ctx: BuildContext, base: JsonPath, rng: JsonObj | None
           ) -> tuple[int | None, int | None, int | None]:
    if rng is None:
        return None, None, None
    lo, hi, step = rng["min"], rng["max"], rng["step"]
    rpath = base + ("range",)
    if step <= 0:
        ctx.error(f"lhist 'step' must be greater than 0, got {step}",
                  ctx.spans.value(rpath + ("step",)))
    elif hi <= lo:
        ctx.error(f"lhist 'max' ({hi}) must be greater than 'min' ({lo})",
                  ctx.spans.value(rpath + ("max",)))
    elif -(-(hi - lo) // step) > MAX_LHIST_BUCKETS:
        ctx.error(f"lhist range makes {-(-(hi - lo) // step)} buckets; at most "
                  f"{MAX_LHIST_BUCKETS}", ctx.spans.value(rpath + ("step",)),
                  "use a larger step or a narrower range, or hist: for log2 buckets")
    else:
        return lo, hi, step
    return None, None, None


def _fields(ctx: BuildContext, lpath: JsonPath, items: list[Any]) -> tuple[FieldSpec, ...]:
    out: list[FieldSpec] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(items):
        jpath = lpath + (i,)
        spec = _field(ctx, jpath, item)
        if spec is None:
            continue
        label = item if isinstance(item, str) else next(iter(item))
        if spec.key in seen:
            other = seen[spec.key]
            suggestion = label.replace(".", "_") if label != spec.key else f"{label}_2"
            ctx.error(f"two fields get the key '{spec.key}' ('{other}' and '{label}')",
                      spec.span, f"name one with a mapping: {{{suggestion}: {label}}}")
            continue
        seen[spec.key] = label
        out.append(spec)
    return tuple(out)


def _field(ctx: BuildContext, jpath: JsonPath, item: str | JsonObj) -> FieldSpec | None:
    if isinstance(item, dict):
        (key, text), = item.items()
        expr = ctx.expr(jpath + (key,), text)
        return FieldSpec(key, expr, ctx.spans.key(jpath + (key,))) if expr is not None else None
    at = ctx.spans.text(jpath)
    stack = _STACK_FIELD.match(item.strip())
    if stack:
        expr = ctx.expr(jpath, item)
        return FieldSpec(stack.group(1), expr, at) if expr is not None else None
    usym = _USYM_FIELD.match(item.strip())
    if usym:
        expr = ctx.expr(jpath, item)
        return FieldSpec(usym.group(2), expr, at) if expr is not None else None
    if not _FIELD_NAME.match(item):
        ctx.error(f"field '{item}' is not a name", at,
                  f"give a computed field a key: {{NAME: \"{item}\"}}")
        return None
    expr = ctx.expr(jpath, item)
    last = item.rsplit(".", 1)[-1]
    key = "latency_ns" if last == "latency" else last
    return FieldSpec(key, expr, at) if expr is not None else None

