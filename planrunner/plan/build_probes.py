"""`probes:` (validated data) -> ProbeSpecs, with every mistake collected.

Specs: usdt `TARGET:PROVIDER:NAME` or `TARGET:NAME`; uprobe/uretprobe `TARGET:SYMBOL`
or `TARGET:SYMBOL+OFFSET` (decimal or 0x hex). A symbol may itself hold ':' (a
demangled `ns::f(int)`), so only the text before the FIRST ':' is the target, and it
must name one of the plan's targets. tracepoint `CATEGORY:EVENT`. A span's begin/end
name usdt/uprobe/uretprobe/tracepoint probes of this plan (never another span).
profile `{hz: N}` samples every CPU; interval `D` (a duration) fires on one CPU.
`stack: {unwind, bytes, python, python_frames}` (here or plan-wide, build_stack) says
how `ustack` is captured.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, cast

from planrunner.diagnostics import Span
from planrunner.plan.context import BUILTINS, IDENT, BuildContext
from planrunner.plan.model import ArgSpec, ProbeKind, ProbeSpec, StackSpec
from planrunner.plan.params import parse_duration
from planrunner.plan.source import JsonObj, JsonPath

if TYPE_CHECKING:
    from planrunner.expr.ast import Expr

KINDS = ("usdt", "uprobe", "uretprobe", "tracepoint", "profile", "interval", "span")
SAMPLING = ("profile", "interval")
_OFFSET = re.compile(r"^(.*?)\+(0[xX][0-9a-fA-F]+|[0-9]+)$")
_TP_PART = re.compile(r"^[A-Za-z0-9_]+$")
_ARGN = re.compile(r"^arg[0-9]+$")


def probe_kind(data: JsonObj) -> str:
    return next(k for k in KINDS if k in data)


def build_probes(ctx: BuildContext, probes: JsonObj, targets: list[str] | None,
                 skip: AbstractSet[object] = frozenset()
                 ) -> tuple[ProbeSpec, ...]:
    """ProbeSpecs of `probes` but those in `skip` (schema errors: their names stay
    known to spans); `targets` None: the targets section is broken, names unchecked."""
    kinds = {name: (probe_kind(p) if name not in skip else _guess_kind(p))
             for name, p in probes.items()}
    return tuple(_probe(ctx, name, p, kinds, targets) for name, p in probes.items()
                 if name not in skip)


def _guess_kind(data: object) -> str:
    """The kind of a probe that failed the schema, as far as it can be told."""
    present = [k for k in KINDS if isinstance(data, dict) and k in data]
    return present[0] if len(present) == 1 else "broken"


def _probe(ctx: BuildContext, name: str, data: JsonObj, kinds: dict[str, str],
           targets: list[str] | None) -> ProbeSpec:
    kind = kinds[name]
    base: JsonPath = ("probes", name)
    kpath = base + (kind,)
    fields: dict[str, Any] = {}  # the kind's own ProbeSpec fields, checked by each parser
    if kind == "span":
        fields = _span(ctx, name, data["span"], kpath, kinds)
    elif kind == "profile":
        fields = {"hz": data["profile"]["hz"]}
    elif kind == "interval":
        fields = _interval(ctx, data["interval"], kpath)
    else:
        spec = ctx.sub(kpath, data[kind])
        at = ctx.spans.text(kpath)
        parser = {"usdt": _usdt, "tracepoint": _tracepoint}.get(kind, _uprobe)
        fields = parser(ctx, kind, spec, at, targets) or {}
    args = _args(ctx, base, kind, data.get("args"))
    retval = _retval(ctx, base, kind, data.get("retval"))
    where = ctx.expr(base + ("where",), data["where"]) if "where" in data else None
    stack = build_stack(ctx, base + ("stack",), data["stack"]) if "stack" in data else None
    return ProbeSpec(name=name, kind=cast(ProbeKind, kind), span=ctx.spans.key(base),
                     spec_span=ctx.spans.text(kpath), args=args, retval=retval, where=where,
                     stack=stack, **fields)


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


def _interval(ctx: BuildContext, value: object, kpath: JsonPath) -> JsonObj:
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


def _usdt(ctx: BuildContext, kind: str, spec: str, at: Span,
          targets: list[str] | None) -> JsonObj | None:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not all(IDENT.match(p) for p in parts):
        ctx.error(f"bad usdt spec '{spec}': expected TARGET:PROVIDER:NAME or TARGET:NAME", at,
                  "e.g. usdt: pg:postgresql:query__start (each part a C identifier)")
        return None
    _check_target(ctx, parts[0], at, targets)
    provider = parts[1] if len(parts) == 3 else None
    return {"target": parts[0], "provider": provider, "probe": parts[-1]}


def _uprobe(ctx: BuildContext, kind: str, spec: str, at: Span,
            targets: list[str] | None) -> JsonObj | None:
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
        if kind == "uretprobe":
            ctx.error(f"a uretprobe fires on return and takes no +OFFSET: '{spec}'", at,
                      "use uprobe: for an offset inside the function")
    if not symbol or symbol.startswith(":"):
        ctx.error(f"bad {kind} spec '{spec}': no symbol after '{target}:'", at, example)
        return None
    return {"target": target, "symbol": symbol, "offset": offset}


def _tracepoint(ctx: BuildContext, kind: str, spec: str, at: Span,
                targets: list[str] | None) -> JsonObj | None:
    parts = spec.split(":")
    if len(parts) != 2 or not all(_TP_PART.match(p) for p in parts):
        ctx.error(f"bad tracepoint spec '{spec}': expected CATEGORY:EVENT", at,
                  "e.g. tracepoint: sched:sched_process_exit")
        return None
    return {"category": parts[0], "event": parts[1]}


def _span(ctx: BuildContext, name: str, data: JsonObj, kpath: JsonPath,
          kinds: dict[str, str]) -> JsonObj:
    plain = [n for n, k in kinds.items() if k != "span" and k not in SAMPLING]
    for side in ("begin", "end"):
        ref = data[side]
        at = ctx.spans.text(kpath + (side,))
        if kinds.get(ref) == "broken":
            continue  # that probe has a schema error of its own
        if kinds.get(ref) == "span":
            ctx.error(f"span '{name}' cannot {side} at span '{ref}'", at,
                      "begin and end must be usdt, uprobe, uretprobe or tracepoint probes")
        elif kinds.get(ref) in SAMPLING:
            ctx.error(f"span '{name}' cannot {side} at {kinds[ref]} probe '{ref}'", at,
                      "a sample is no event of the program: pair usdt, uprobe, uretprobe "
                      "or tracepoint probes")
        elif ref not in kinds:
            ctx.unknown(f"{side} probe", ref, plain, at, "define it under probes:")
    key = ctx.expr(kpath + ("key",), data["key"]) if "key" in data else None
    nested = data.get("nested", False)
    items = data.get("match", [])
    match = [ctx.expr(kpath + ("match", i), item) for i, item in enumerate(items)]
    if "match" in data and not nested:
        ctx.error(f"span '{name}' has `match` but is not nested",
                  ctx.spans.key(kpath + ("match",)),
                  "match picks, among a stack of open begins, the one an end closes: "
                  "declare nested: true (calls that nest), or drop match")
    return {"begin": data["begin"], "end": data["end"], "key": key,
            "span_scope": data.get("scope", "process"), "nested": nested,
            "match": tuple(m for m in match if m is not None)}


def _args(ctx: BuildContext, base: JsonPath, kind: str, items: list[Any] | None
          ) -> tuple[ArgSpec, ...]:
    if items is None:
        return ()
    if kind in ("tracepoint", "span", *SAMPLING):
        why = ("a tracepoint's fields are used by name" if kind == "tracepoint"
               else "a sample has no arguments: use pid, comm, ustack, kstack..."
               if kind in SAMPLING
               else "declare args on the span's begin and end probes; use begin.X / end.X")
        ctx.error(f"a {kind} probe takes no args", ctx.spans.key(base + ("args",)), why)
        return ()
    if kind == "uretprobe":
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


def _retval(ctx: BuildContext, base: JsonPath, kind: str, item: JsonObj | None) -> ArgSpec | None:
    if item is None:
        return None
    jpath = base + ("retval",)
    if kind != "uretprobe":
        ctx.error(f"only a uretprobe has a return value, not a {kind}", ctx.spans.key(jpath),
                  "use uretprobe: TARGET:SYMBOL")
        return None
    _string_opts(ctx, jpath, item)
    return ArgSpec(index=0, name="retval", type=item.get("type"), size=item.get("size"),
                   length=None, span=ctx.spans.value(jpath))
