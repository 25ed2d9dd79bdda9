"""`probes:` (validated data) -> ProbeSpecs, with every mistake collected.

Specs: usdt `TARGET:PROVIDER:NAME` or `TARGET:NAME`; uprobe/uretprobe `TARGET:SYMBOL`
or `TARGET:SYMBOL+OFFSET` (decimal or 0x hex). A symbol may itself hold ':' (a
demangled `ns::f(int)`), so only the text before the FIRST ':' is the target, and it
must name one of the plan's targets. tracepoint `CATEGORY:EVENT`. A span's begin/end
name usdt/uprobe/uretprobe/tracepoint probes or other spans of this plan (a span on a
span: its event is that span's pairing; never a loop back to itself); its `key` is one
expression or one per side (`{begin: retval, end: ptr}`).
profile `{hz: N}` samples every CPU; interval `D` (a duration) fires on one CPU.
`stack: {unwind, bytes, python, python_frames}` (here or plan-wide, build_stack) says
how `ustack` is captured.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

from planrunner.diagnostics import Span
from planrunner.param_values import parse_duration
from planrunner.plan.context import BUILTINS, IDENT, BuildContext
from planrunner.plan.model import ArgSpec, ProbeSpec, StackSpec
from planrunner.plan.source import JsonObj, JsonPath
from planrunner.probe_kinds import (
    INTERVAL,
    PROFILE,
    SPAN,
    TRACEPOINT,
    UPROBE,
    URETPROBE,
    USDT,
    Kind,
    find,
    kind,
)

if TYPE_CHECKING:
    from planrunner.expr.ast import Expr

_OFFSET = re.compile(r"^(.*?)\+(0[xX][0-9a-fA-F]+|[0-9]+)$")
_TP_PART = re.compile(r"^[A-Za-z0-9_*?\[\]!-]+$")  # names, or shell globs (a set)
# a USDT provider or probe name, or a shell glob over them (a probe set)
_USDT_PART = re.compile(r"^[A-Za-z0-9_*?\[\]!-]+$")
_ARGN = re.compile(r"^arg[0-9]+$")


def probe_kind(data: JsonObj) -> Kind:
    return find(data)[0]


def build_probes(ctx: BuildContext, probes: JsonObj, targets: list[str] | None,
                 skip: AbstractSet[object] = frozenset()
                 ) -> tuple[ProbeSpec, ...]:
    """ProbeSpecs of `probes` but those in `skip` (schema errors: their names stay
    known to spans); `targets` None: the targets section is broken, names unchecked."""
    kinds: Kinds = {name: (probe_kind(p) if name not in skip else _guess_kind(p))
                   for name, p in probes.items()}
    specs = tuple(_probe(ctx, name, p, kinds, targets) for name, p in probes.items()
                  if name not in skip)
    _span_loops(ctx, specs)
    return specs


def _span_loops(ctx: BuildContext, specs: tuple[ProbeSpec, ...]) -> None:
    """A span on spans whose sides lead back to it would begin (or end) at its own
    pairing: refused, located at the side that closes the loop."""
    spans = {s.name: s for s in specs if kind(s.kind).pairs}
    reported: set[str] = set()
    for spec in spans.values():
        for side, ref in (("begin", spec.begin), *(("end", e) for e in spec.end_names)):
            seen = _loop_path(ref, spans, [spec.name])
            if seen is None or spec.name in reported:
                continue
            reported.update(seen)
            path = " -> ".join([*seen, spec.name])
            ctx.error(f"span '{spec.name}' {side}s at a span that leads back to it: "
                      f"{path}", side_span(spec, side),
                      "a span on a span uses that span's pairing as its event: the chain "
                      "must end at usdt, uprobe, uretprobe or tracepoint probes")


def side_span(spec: ProbeSpec, side: str) -> Span:
    """Where a span's `begin:` or `end:` is written (its spec, if not known)."""
    if spec.side_spans is None:
        return spec.spec_span
    return spec.side_spans[0 if side == "begin" else 1]


def _loop_path(ref: str | None, spans: dict[str, ProbeSpec], path: list[str]
               ) -> list[str] | None:
    """The chain of spans from path[0] through `ref` back to path[0], if any."""
    if ref is None or ref not in spans:
        return None
    if ref == path[0]:
        return path
    if ref in path:
        return None  # a loop that does not pass path[0]: reported from its own spans
    for nxt in (spans[ref].begin, *spans[ref].end_names):
        got = _loop_path(nxt, spans, [*path, ref])
        if got is not None:
            return got
    return None


def _guess_kind(data: object) -> Kind | None:
    """The kind of a probe that failed the schema, as far as it can be told (None:
    broken)."""
    present = find(data) if isinstance(data, dict) else ()
    return present[0] if len(present) == 1 else None


# A probe's kinds by name (None: it failed the schema, and its kind cannot be told).
Kinds = dict[str, Kind | None]
# The kind's own ProbeSpec fields from the kind's value (`data[kind]`), checked:
# (ctx, kind, probe name, value, its path, every probe's kind, the target names).
Parser = Callable[[BuildContext, Kind, str, Any, JsonPath, Kinds, list[str] | None],
                  JsonObj]


def _probe(ctx: BuildContext, name: str, data: JsonObj, kinds: Kinds,
           targets: list[str] | None) -> ProbeSpec:
    k = kinds[name]
    assert k is not None  # broken probes are skipped
    base: JsonPath = ("probes", name)
    kpath = base + (k.name,)
    fields = PARSERS[k](ctx, k, name, data[k.name], kpath, kinds, targets)
    args = _args(ctx, base, k, data.get("args"))
    retval = _retval(ctx, base, k, data.get("retval"))
    where = ctx.expr(base + ("where",), data["where"]) if "where" in data else None
    stack = build_stack(ctx, base + ("stack",), data["stack"]) if "stack" in data else None
    every = bool(data.get("all_processes", False))
    if every and not k.all_processes:
        ctx.error(f"`all_processes` applies to tracepoint probes, not to a {k.name} probe",
                  ctx.spans.key(base + ("all_processes",)),
                  "a tracepoint fires in whatever task the kernel runs; a uprobe or a "
                  "USDT probe only in the process that runs the code")
        every = False
    return ProbeSpec(name=name, kind=k.name, span=ctx.spans.key(base),
                     spec_span=ctx.spans.text(kpath), args=args, retval=retval, where=where,
                     stack=stack, all_processes=every, **fields)


def build_stack(ctx: BuildContext, jpath: JsonPath, data: JsonObj) -> StackSpec:
    """`stack:` at `jpath` (the schema checked the values' types and ranges)."""
    default = StackSpec()
    size = data.get("bytes", default.bytes)
    if size % 64:
        ctx.error(f"stack bytes must be a multiple of 64, got {size}",
                  ctx.spans.value(jpath + ("bytes",)),
                  f"e.g. {size - size % 64 or 64} (the copy is hashed 64 bytes at a time)")
    return StackSpec(unwind=data.get("unwind", default.unwind), bytes=size,
                     python=data.get("python", default.python),
                     python_frames=data.get("python_frames", default.python_frames))


def _interval(ctx: BuildContext, k: Kind, name: str, value: object, kpath: JsonPath,
              kinds: Kinds, targets: list[str] | None) -> JsonObj:
    at = ctx.spans.text(kpath)
    try:
        ns = parse_duration(ctx.sub(kpath, str(value)))
    except ValueError as exc:
        ctx.error(f"bad interval '{value}': {exc}", at, "e.g. interval: 1s or interval: 500ms")
        return {}
    if ns < 1_000_000:
        ctx.error(f"interval {value} is shorter than 1ms", at,
                  "sample with profile: {hz: N} instead")
        return {}
    return {"period_ns": ns}


def _check_target(ctx: BuildContext, target: str, at: Span, targets: list[str] | None
                  ) -> None:
    if targets is not None and target not in targets:
        ctx.unknown("target", target, targets, at.shifted(0, len(target)),
                    "declare it under targets:, e.g. targets: {app: {binary: /path/to/app}}")


def _profile(ctx: BuildContext, k: Kind, name: str, value: JsonObj, kpath: JsonPath,
             kinds: Kinds, targets: list[str] | None) -> JsonObj:
    return {"hz": value["hz"]}


def _spec_parser(parse: Callable[[BuildContext, Kind, str, Span, list[str] | None],
                                 JsonObj | None]) -> Parser:
    """A parser of a `TARGET:...` or `CATEGORY:EVENT` string (after ${param}
    substitution), located at the kind's value."""
    def parser(ctx: BuildContext, k: Kind, name: str, value: Any, kpath: JsonPath,
               kinds: Kinds, targets: list[str] | None) -> JsonObj:
        return parse(ctx, k, ctx.sub(kpath, value), ctx.spans.text(kpath), targets) or {}
    return parser


def _usdt(ctx: BuildContext, k: Kind, spec: str, at: Span,
          targets: list[str] | None) -> JsonObj | None:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not IDENT.match(parts[0]) or not all(
            _USDT_PART.match(p) for p in parts[1:]):
        ctx.error(f"bad usdt spec '{spec}': expected TARGET:PROVIDER:NAME or TARGET:NAME", at,
                  "e.g. usdt: pg:postgresql:query__start (each part a C identifier), or "
                  "a set of probes by shell glob: usdt: py:python:*")
        return None
    _check_target(ctx, parts[0], at, targets)
    provider = parts[1] if len(parts) == 3 else None
    return {"target": parts[0], "provider": provider, "probe": parts[-1]}


def _uprobe(ctx: BuildContext, k: Kind, spec: str, at: Span,
            targets: list[str] | None) -> JsonObj | None:
    kind = k.name
    target, sep, rest = spec.partition(":")
    example = f"e.g. {kind}: app:main, {kind}: app:ns::f(int) or uprobe: app:main+0x10"
    if not sep or not IDENT.match(target):
        ctx.error(f"bad {kind} spec '{spec}': expected TARGET:SYMBOL", at, example)
        return None
    if targets is not None and target not in targets and rest.startswith(":"):
        ctx.error(f"bad {kind} spec '{spec}': a C++ name needs its target first", at,
                  f"write TARGET:{spec}")
        return None
    _check_target(ctx, target, at, targets)
    symbol, offset = rest.strip(), 0
    m = _OFFSET.match(symbol)
    if m:
        text = m.group(2).lower()
        symbol = m.group(1).strip()
        offset = int(text, 16) if text.startswith("0x") else int(text, 10)
        if k.returns:
            ctx.error(f"a uretprobe fires on return and takes no +OFFSET: '{spec}'", at,
                      "use uprobe: for an offset inside the function")
    if not symbol or symbol.startswith(":"):
        ctx.error(f"bad {kind} spec '{spec}': no symbol after '{target}:'", at, example)
        return None
    return {"target": target, "symbol": symbol, "offset": offset}


def _tracepoint(ctx: BuildContext, k: Kind, spec: str, at: Span,
                targets: list[str] | None) -> JsonObj | None:
    parts = spec.split(":")
    if len(parts) != 2 or not all(_TP_PART.match(p) for p in parts):
        ctx.error(f"bad tracepoint spec '{spec}': expected CATEGORY:EVENT", at,
                  "e.g. tracepoint: sched:sched_process_exit")
        return None
    return {"category": parts[0], "event": parts[1]}


def _span(ctx: BuildContext, k: Kind, name: str, data: JsonObj, kpath: JsonPath,
          kinds: Kinds, targets: list[str] | None) -> JsonObj:
    plain = [n for n, other in kinds.items() if other is None or not other.samples]
    ends = data["end"] if isinstance(data["end"], list) else [data["end"]]
    sides = [("begin", data["begin"], kpath + ("begin",))]
    sides += [("end", ref, kpath + (("end", i) if isinstance(data["end"], list) else ("end",)))
              for i, ref in enumerate(ends)]
    for side, ref, path in sides:
        at = ctx.spans.text(path)
        if ref in kinds and kinds[ref] is None:
            continue  # that probe has a schema error of its own
        ref_kind = kinds.get(ref)
        if ref_kind is not None and ref_kind.samples:
            ctx.error(f"span '{name}' cannot {side} at {ref_kind.name} probe '{ref}'", at,
                      "a sample is no event of the program: pair usdt, uprobe, uretprobe "
                      "or tracepoint probes")
        elif ref not in kinds:
            ctx.unknown(f"{side} probe", ref, plain, at, "define it under probes:")
    key, key_end = _span_key(ctx, name, data, kpath)
    nested = data.get("nested", False)
    on_spans = [(side, ref, path) for side, ref, path in sides
                if (ref_kind := kinds.get(ref)) is not None and ref_kind.pairs]
    if nested and on_spans:
        side, ref, path = on_spans[0]
        ctx.error(f"nested span '{name}' cannot {side} at span '{ref}'", ctx.spans.text(path),
                  "a nested span keeps a stack of calls: its begin and end are the "
                  "probes of a call's entry and return")
    items = data.get("match", [])
    match = [ctx.expr(kpath + ("match", i), item) for i, item in enumerate(items)]
    if "match" in data and not nested:
        ctx.error(f"span '{name}' has `match` but is not nested",
                  ctx.spans.key(kpath + ("match",)),
                  "match picks, among a stack of open begins, the one an end closes: "
                  "declare nested: true (calls that nest), or drop match")
    if len(ends) > 1:
        _several_ends(ctx, name, data, kpath, nested or "match" in data)
    return {"begin": data["begin"], "end": ends[0], "ends": tuple(ends) if len(ends) > 1
            else (), "key": key, "key_end": key_end,
            "side_spans": tuple(ctx.spans.text(path) for _side, _ref, path in sides),
            "span_scope": data.get("scope", "process"), "nested": nested,
            "match": tuple(m for m in match if m is not None)}


def _several_ends(ctx: BuildContext, name: str, data: JsonObj, kpath: JsonPath,
                  nested: bool) -> None:
    """Several ends close a plain span only (a nested one pops its stack per call)."""
    if nested:
        ctx.error(f"nested span '{name}' has several ends", ctx.spans.text(kpath + ("end",)),
                  "a nested span pairs a call's entry with its return: one end probe")
    if len(set(data["end"])) != len(data["end"]):
        ctx.error(f"span '{name}' names an end twice", ctx.spans.text(kpath + ("end",)))


def _span_key(ctx: BuildContext, name: str, data: JsonObj, kpath: JsonPath
              ) -> tuple[Expr | None, Expr | None]:
    """(the key, or the begin's; the end's when it has its own): `key: EXPR` pairs
    equal values of EXPR on both sides, `key: {begin: EXPR, end: EXPR}` the begin's
    value of one with the end's of the other (malloc's retval, free's ptr)."""
    if "key" not in data:
        return None, None
    raw = data["key"]
    if not isinstance(raw, dict):
        return ctx.expr(kpath + ("key",), raw), None
    missing = [side for side in ("begin", "end") if side not in raw]
    extra = [k for k in raw if k not in ("begin", "end")]
    if missing or extra:
        what = (f"has no `{missing[0]}`" if missing else f"has '{extra[0]}'")
        ctx.error(f"span '{name}': a key per side {what}",
                  ctx.spans.key(kpath + ("key",)) if missing
                  else ctx.spans.key(kpath + ("key", extra[0])),
                  "give one expression per side: key: {begin: retval, end: ptr}, or one "
                  "for both: key: id")
        return None, None
    return (ctx.expr(kpath + ("key", "begin"), raw["begin"]),
            ctx.expr(kpath + ("key", "end"), raw["end"]))


def _args(ctx: BuildContext, base: JsonPath, k: Kind, items: list[Any] | None
          ) -> tuple[ArgSpec, ...]:
    if items is None:
        return ()
    if k.args_refused:
        ctx.error(f"a {k.name} probe takes no args", ctx.spans.key(base + ("args",)),
                  k.args_refused)
        return ()
    if k.returns:
        # At return the argument registers hold whatever the function left there.
        ctx.error("a uretprobe takes no args: at return the argument registers no longer "
                  "hold the arguments", ctx.spans.key(base + ("args",)),
                  "pair a uprobe (with the args) and this uretprobe in a span, e.g. "
                  "span: {begin: entry, end: ret}, and use begin.X")
        return ()
    seen: dict[str, int] = {}
    out = []
    for i, item in enumerate(items):
        out.append(_arg(ctx, base + ("args", i), i + 1, item, seen))
    return tuple(out)


def _arg(ctx: BuildContext, jpath: JsonPath, index: int, item: JsonObj,
         seen: dict[str, int]) -> ArgSpec:
    name = item.get("name")
    if name is not None:
        at = ctx.spans.text(jpath + ("name",))
        if not IDENT.match(name):
            ctx.error(f"argument name '{name}' is not an identifier", at,
                      "use letters, digits and '_', not starting with a digit")
        elif name in BUILTINS or _ARGN.match(name):
            ctx.error(f"argument name '{name}' is taken by a builtin", at,
                      f"pick another name, e.g. '{name}_arg'")
        elif name in seen:
            ctx.error(f"two arguments are named '{name}' (arg{seen[name]} and arg{index})", at)
        else:
            seen[name] = index
    length = _string_opts(ctx, jpath, item)
    type_span = ctx.spans.value(jpath + ("type",)) if "type" in item else None
    return ArgSpec(index=index, name=name, type=item.get("type"), size=item.get("size"),
                   length=length, span=ctx.spans.value(jpath), type_span=type_span)


def _string_opts(ctx: BuildContext, jpath: JsonPath, item: JsonObj) -> Expr | None:
    for opt in ("size", "length"):
        if opt in item and item.get("type") != "string":
            ctx.error(f"'{opt}' applies to strings only", ctx.spans.key(jpath + (opt,)),
                      "add type: string")
    return ctx.expr(jpath + ("length",), item["length"]) if "length" in item else None


def _retval(ctx: BuildContext, base: JsonPath, k: Kind, item: JsonObj | None
            ) -> ArgSpec | None:
    if item is None:
        return None
    jpath = base + ("retval",)
    if not k.returns:
        ctx.error(f"only a uretprobe has a return value, not a {k.name}",
                  ctx.spans.key(jpath),
                  "use uretprobe: TARGET:SYMBOL")
        return None
    _string_opts(ctx, jpath, item)
    return ArgSpec(index=0, name="retval", type=item.get("type"), size=item.get("size"),
                   length=None, span=ctx.spans.value(jpath))


# How each kind's value in the plan becomes its ProbeSpec fields.
PARSERS: dict[Kind, Parser] = {
    USDT: _spec_parser(_usdt),
    UPROBE: _spec_parser(_uprobe),
    URETPROBE: _spec_parser(_uprobe),
    TRACEPOINT: _spec_parser(_tracepoint),
    PROFILE: _profile,
    INTERVAL: _interval,
    SPAN: _span,
}
