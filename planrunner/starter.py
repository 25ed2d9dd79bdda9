"""Starter plans for `planrunner new`: a StarterPlan (what to write) and its YAML or TOML
text, with comments for the reader.

    usdt_starter(spec, path, probes, cap)   -> StarterPlan  (args typed from the notes)
    tracepoint_starter(events)              -> StarterPlan  (fields from tracefs)
    uprobe_starter(spec, symbols)           -> StarterPlan  (arguments left to declare)
    to_yaml(plan) / to_toml(plan)           -> str

A USDT argument's type comes from its operand (size and sign: int8..int64,
uint8..uint64); an 8-byte unsigned operand is a `pointer`, with a comment saying that
`string` reads the text when it is a `char *`. Arguments are left unnamed: they are
`arg1`, `arg2`... in expressions until the user names them; but a well-known provider's
probe (providers.py: python, ruby, php, hotspot, postgresql, mysql) gets the names and
types of its definition, where its operands agree. Every probe gets one `print`
output listing its arguments (or its tracepoint fields). Strings are written as JSON
strings, which both YAML (double-quoted) and TOML (basic strings) read back unchanged.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planrunner.providers import ProviderArg, known_args

if TYPE_CHECKING:
    from planrunner.tracefs import EventFormat
    from planrunner.usdt.model import ArgOperand, UsdtProbe

DOCS = "docs/plan-format.md"
DEFAULT_CAP = 20
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")
# Names an expression gives a meaning of its own (plan/context.py BUILTINS): a
# tracepoint field of that name is shown as the builtin, so it is not listed.
_BUILTINS = frozenset({"pid", "tid", "uid", "gid", "comm", "cpu", "ts", "latency",
                       "retval", "probe", "time", "ts_ns", "begin", "end"})


@dataclass(frozen=True)
class StarterArg:
    type: str | None
    comment: str
    shown: bool = True  # listed in the print output's fields
    name: str | None = None  # from the table of known providers (providers.py)
    length: str | None = None  # `length:` of a string (the argument holding it)


@dataclass(frozen=True)
class StarterProbe:
    name: str
    kind: str  # usdt, uprobe, tracepoint
    spec: str
    args: tuple[StarterArg, ...] = ()
    fields: tuple[str, ...] = ()
    comments: tuple[str, ...] = ()  # above the probe


@dataclass(frozen=True)
class StarterPlan:
    name: str
    description: str
    header: tuple[str, ...]
    targets: dict[str, str] = field(default_factory=dict)  # name -> binary
    probes: tuple[StarterProbe, ...] = ()
    footer: tuple[str, ...] = ()  # after the outputs (probes left out...)


def identifier(text: str, fallback: str = "t") -> str:
    """`python3.11` -> `python3_11`; a name starting with a digit gets `fallback_`."""
    name = _NOT_IDENT.sub("_", text) or fallback
    return f"{fallback}_{name}" if name[0].isdigit() else name


def starter_arg(arg: ArgOperand) -> StarterArg:
    """The declaration of one USDT operand; one that cannot be read is not shown."""
    if not arg.readable:
        reason = getattr(arg.operand, "reason", "not readable")
        return StarterArg(None, f"{arg.text}: not readable ({reason}); not in fields",
                          shown=False)
    if arg.is_float:
        return StarterArg(None, f"{arg.text}: a floating-point value (planrunner reads "
                                "its bits only); not in fields", shown=False)
    return StarterArg(*operand_type(arg))


_TYPE_SIZES = {"string": 8, "pointer": 8, "bool": 1, "int8": 1, "uint8": 1, "int16": 2,
               "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8}


def known_arg(arg: ArgOperand, known: ProviderArg) -> StarterArg:
    """One USDT operand named and typed from the table of known providers; the table's
    type only where the operand's size agrees (another build may differ)."""
    base = starter_arg(arg)
    typ = known.type if known.type and _TYPE_SIZES[known.type] == arg.size else base.type
    if not base.shown:
        typ = None
    comment = base.comment if not base.shown else \
        f"{arg.size} {'signed' if arg.signed else 'unsigned'} bytes, {arg.text}"
    if typ == "string":
        comment += ": a char *"
    if typ != known.type and known.type is not None:
        comment += f" (a {known.type} in the provider's definition; this build differs)"
    return StarterArg(typ, comment, base.shown, known.name,
                      known.length if typ == "string" else None)


def operand_type(arg: ArgOperand) -> tuple[str | None, str]:
    """(plan type, comment) of one USDT operand."""
    sign = "signed" if arg.signed else "unsigned"
    what = f"{arg.size} {sign} bytes, {arg.text}"
    if arg.size == 8 and not arg.signed:
        return "pointer", f"{what}: a pointer or a 64-bit count; `type: string` if it is a char *"
    if arg.size not in (1, 2, 4, 8):
        return None, f"{what}: an operand size planrunner types by itself"
    return f"{'int' if arg.signed else 'uint'}{arg.size * 8}", what


def _header(command: str, subject: str) -> tuple[str, ...]:
    return (f"A starter plan for {subject}, written by `{command}`.",
            "Check it: `planrunner validate FILE`; run it: `planrunner run FILE` "
            "(--pid PID, -c 'CMD').",
            f"The plan format (probes, args and their types, where, outputs): {DOCS}",
            "in planrunner's sources; `planrunner schema` prints the JSON Schema.")


def usdt_starter(command: str, spec: str, path: str, probes: Sequence[UsdtProbe],
                 total: int) -> StarterPlan:
    """A plan for `probes` of the binary `path` (given as `spec`); `total` is how many
    probes matched, of which `probes` may be the first few."""
    binary = os.path.abspath(spec) if "/" in spec else spec
    target = identifier(os.path.basename(spec))
    clash = {p.name for p in probes if sum(q.name == p.name for q in probes) > 1}
    out = []
    for probe in probes:
        name = identifier(f"{probe.provider}_{probe.name}" if probe.name in clash
                          else probe.name)
        operands = probe.sites[0].args
        known = known_args(probe.provider, probe.name, len(operands))
        args = tuple(starter_arg(a) for a in operands) if known is None else \
            tuple(known_arg(a, k) for a, k in zip(operands, known, strict=True))
        comments = []
        if len(probe.sites) > 1:
            comments.append(f"{len(probe.sites)} locations; the types are those of the first")
        if known is not None:
            comments.append(f"arguments named as {probe.provider}'s probe definition names "
                            "them")
        out.append(StarterProbe(
            name=name, kind="usdt", spec=f"{target}:{probe.provider}:{probe.name}",
            args=args, fields=tuple(a.name or f"arg{i}" for i, a in enumerate(args, 1)
                                    if a.shown and not _is_length(a, args)),
            comments=tuple(comments)))
    footer: tuple[str, ...] = ()
    if total > len(probes):
        footer = (f"{total - len(probes)} more probes of {spec} are not in this plan "
                  f"(the first {len(probes)} are).",
                  f"`planrunner list {spec}` lists them all;",
                  f"`planrunner new {spec} PROBE...` writes a plan for the ones you name.")
    noun = "probe" if len(probes) == 1 else "probes"
    return StarterPlan(
        name=f"{identifier(os.path.basename(spec))}-starter",
        description=f"USDT {noun} of {spec} (a starter plan: name the arguments, add "
                    "filters and aggregations)",
        header=_header(command, path), targets={target: binary}, probes=tuple(out),
        footer=footer)


def _is_length(arg: StarterArg, args: Sequence[StarterArg]) -> bool:
    """Whether `arg` is the length of a string argument (not worth a column)."""
    return any(a.length == f"arg{args.index(arg) + 1}" for a in args)


def tracepoint_starter(command: str, events: Sequence[tuple[str, str, EventFormat | None]]
                       ) -> StarterPlan:
    out = []
    for category, event, fmt in events:
        own = fmt.own_fields if fmt else ()
        shown = tuple(f.name for f in own
                      if f.name not in _BUILTINS and not f.name.startswith("__"))
        comments = [f"its fields (C types from tracefs): "
                    f"{'; '.join(f.decl for f in own) or 'none'}"]
        hidden = [f.name for f in own if f.name not in shown]
        if hidden:
            comments.append(f"not in fields: {', '.join(hidden)} (a builtin's name, "
                            "or internal)")
        out.append(StarterProbe(name=identifier(event), kind="tracepoint",
                                spec=f"{category}:{event}", fields=shown,
                                comments=tuple(comments)))
    subject = ", ".join(f"tracepoint {c}:{e}" for c, e, _ in events[:3])
    if len(events) > 3:
        subject += f" and {len(events) - 3} more"
    return StarterPlan(name=f"{identifier(events[0][1])}-starter",
                       description=f"Kernel {subject} (a starter plan)",
                       header=_header(command, subject), probes=tuple(out))


def uprobe_starter(command: str, spec: str, symbols: Sequence[str]) -> StarterPlan:
    binary = os.path.abspath(spec) if "/" in spec else spec
    target = identifier(os.path.basename(spec))
    used: set[str] = set()
    out = []
    for symbol in symbols:
        name = identifier(symbol)
        while name in used:
            name += "_"
        used.add(name)
        out.append(StarterProbe(
            name=name, kind="uprobe", spec=f"{target}:{symbol}",
            comments=("a function's arguments have no types in the binary: declare them "
                      "in order, e.g. args: [{name: size, type: uint64}]",
                      "for its return value add a uretprobe with retval: {type: ...}")))
    return StarterPlan(
        name=f"{target}-starter",
        description=f"Calls of {', '.join(symbols)} in {spec} (a starter plan)",
        header=_header(command, f"{', '.join(symbols)} in {spec}"),
        targets={target: binary}, probes=tuple(out))


def _q(text: str) -> str:
    return json.dumps(text)


def _comment_lines(lines: Sequence[str], indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in lines]


def _arg_items(arg: StarterArg) -> list[tuple[str, str]]:
    """The keys of one `args:` entry, in the order a reader expects them."""
    items = [("name", arg.name), ("type", arg.type), ("length", arg.length)]
    return [(k, v) for k, v in items if v]


def to_yaml(plan: StarterPlan) -> str:
    out = _comment_lines(plan.header, "")
    out += ["planrunner: 1", f"name: {_q(plan.name)}", f"description: {_q(plan.description)}"]
    if plan.targets:
        out += ["", "targets:"]
        out += [f"  {name}: {{binary: {_q(binary)}}}" for name, binary in plan.targets.items()]
    out += ["", "probes:"]
    for probe in plan.probes:
        out += _comment_lines(probe.comments, "  ")
        out += [f"  {probe.name}:", f"    {probe.kind}: {_q(probe.spec)}"]
        if probe.args:
            out.append("    args:")
            items = ["{" + ", ".join(f"{k}: {v}" for k, v in _arg_items(arg)) + "}"
                     for arg in probe.args]
            width = max([17, *map(len, items)])
            for i, (arg, item) in enumerate(zip(probe.args, items, strict=True), 1):
                out.append(f"      - {item:<{width}} # arg{i}: {arg.comment}")
    out += ["", "outputs:"]
    for probe in plan.probes:
        out.append(f"  - print: {probe.name}")
        if probe.fields:
            out.append(f"    fields: [{', '.join(probe.fields)}]")
    if plan.footer:
        out += [""] + _comment_lines(plan.footer, "")
    return "\n".join(out) + "\n"


def to_toml(plan: StarterPlan) -> str:
    out = _comment_lines(plan.header, "")
    out += ["planrunner = 1", f"name = {_q(plan.name)}", f"description = {_q(plan.description)}"]
    if plan.targets:
        out += ["", "[targets]"]
        out += [f"{name} = {{ binary = {_q(binary)} }}" for name, binary in plan.targets.items()]
    for probe in plan.probes:
        out.append("")
        out += _comment_lines(probe.comments, "")
        out += [f"[probes.{probe.name}]", f"{probe.kind} = {_q(probe.spec)}"]
        if probe.args:
            out.append("args = [")
            items = [f"{{ {pairs} }}," if pairs else "{},"
                     for pairs in (", ".join(f"{k} = {_q(v)}" for k, v in _arg_items(arg))
                                   for arg in probe.args)]
            width = max([22, *map(len, items)])
            for i, (arg, item) in enumerate(zip(probe.args, items, strict=True), 1):
                out.append(f"  {item:<{width}} # arg{i}: {arg.comment}")
            out.append("]")
    for probe in plan.probes:
        out += ["", "[[outputs]]", f"print = {_q(probe.name)}"]
        if probe.fields:
            out.append(f"fields = [{', '.join(_q(f) for f in probe.fields)}]")
    if plan.footer:
        out += [""] + _comment_lines(plan.footer, "")
    return "\n".join(out) + "\n"
