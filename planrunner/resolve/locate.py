"""Locating a plan probe: one locator per probe kind, each a function of the probe's
spec and its target binary that returns a frozen `Located` (where the probe fires and
what names its expressions may use). Spans are not located: they pair two probes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from planrunner.diagnostics import Diagnostic
from planrunner.elf.golang import GO_INT_REGS, GOROUTINE_INDEX, Abi
from planrunner.errors import ResolveError
from planrunner.expr.types import IntType, StrType, Type
from planrunner.plan.model import ProbeSpec
from planrunner.probe_kinds import (
    INTERVAL,
    PROFILE,
    TRACEPOINT,
    UPROBE,
    URETPROBE,
    USDT,
    Kind,
    kind,
)
from planrunner.resolve import sites as S
from planrunner.resolve.model import BinaryRef, TracepointField
from planrunner.resolve.scope import Constants, ProbeScope
from planrunner.usdt.model import ArgOperand, ProbeSite


@dataclass(frozen=True, slots=True)
class Located:
    """Where a probe fires and the names its expressions may use."""

    spec: ProbeSpec
    scope: ProbeScope
    binary: BinaryRef | None = None
    usdt_sites: tuple[ProbeSite, ...] = ()
    locations: tuple[tuple[int, int], ...] = ()  # uprobes: (pc, file offset) each
    notes: tuple[str, ...] = ()  # for the summary (an IFUNC resolved, a shared name)
    tp_fields: tuple[TracepointField, ...] = ()
    usdt: tuple[str, str] | None = None  # (provider, name) of a USDT probe
    warnings: tuple[Diagnostic, ...] = ()  # located; the plan is valid all the same
    # Mistakes found while locating that leave the probe's names usable, so the plan's
    # other mistakes are reported with them (an argument declared past the probe's end).
    errors: tuple[ResolveError, ...] = ()
    abi: Abi = "c"  # uprobes: the function's calling convention (elf/golang.py)
    # `func` at each location (uprobes: of `locations`, USDT: of `usdt_sites`) or
    # tracepoint (of `tp_events`): the function, probe or event that fired
    funcs: tuple[str, ...] = ()
    tp_events: tuple[tuple[str, str], ...] = ()  # tracepoints: (category, event) each


def locate_tracepoint(spec: ProbeSpec, binary: BinaryRef | None, constants: Constants,
                      string_size: int) -> Located:
    if spec.is_set:
        return _locate_tracepoint_set(spec, constants, string_size)
    fields = S.tracepoint_fields(spec)
    args = _tracepoint_args(fields, string_size)
    return Located(spec, ProbeScope(MappingProxyType(args), constants), tp_fields=fields,
                   funcs=(str(spec.event),),
                   tp_events=((str(spec.category), str(spec.event)),))


def _tracepoint_args(fields: tuple[TracepointField, ...], string_size: int
                     ) -> dict[str, tuple[int, Type]]:
    args: dict[str, tuple[int, Type]] = {}
    for fld in fields:
        if fld.is_string:  # a char[N] array holds at most N bytes, NUL or not
            typ: Type = StrType(min(fld.array_len or string_size, string_size) + 1)
        elif fld.size in (1, 2, 4, 8):
            typ = IntType(fld.size * 8, fld.signed)
        else:
            continue  # arrays of integers and structs: no expression can read them
        args[fld.name] = (len(args) + 1, typ)
    return args


def _locate_tracepoint_set(spec: ProbeSpec, constants: Constants,
                           string_size: int) -> Located:
    """A set of tracepoints: one thunk each (their records differ); the fields it
    offers are those every event has at the same place with the same type."""
    from planrunner.resolve import sets

    events = sets.match_tracepoints(spec)
    shared: tuple[TracepointField, ...] | None = None
    for category, event in events:
        fields = S.tracepoint_fields(replace(spec, category=category, event=event))
        shared = fields if shared is None else tuple(f for f in shared if f in fields)
    fields = shared or ()
    names = [sets.tracepoint_func(c, e, spec) for c, e in events]
    scope = ProbeScope(MappingProxyType(_tracepoint_args(fields, string_size)), constants,
                       f"tracepoint set '{spec.name}' ({len(events)} events)")
    return Located(spec, scope, tp_fields=fields, funcs=tuple(names),
                   tp_events=tuple(events), notes=(_matched(names),))


def _matched(names: list[str]) -> str:
    from planrunner.resolve.sets import first_few

    return f"a set of {len(names)}: {first_few(names)}"


def locate_usdt(spec: ProbeSpec, binary: BinaryRef | None, constants: Constants,
                string_size: int) -> Located:
    assert binary is not None
    if spec.is_set:
        return _locate_usdt_set(spec, binary, constants, string_size)
    probe = S.find_usdt(spec, binary)
    count = min(len(s.args) for s in probe.sites)
    types = S.usdt_arg_types(probe)
    errors = tuple(ResolveError(
        f"probe '{spec.name}' declares argument {arg.index}, but "
        f"{spec.provider or ''}{':' if spec.provider else ''}{spec.probe} has "
        f"{count} argument{'s' if count != 1 else ''}", arg.span)
        for arg in spec.args if arg.index > count)
    # An argument declared past the end keeps its name in the scope (as an int64, never
    # rendered: the error above stops the plan), so the probe's other mistakes are still
    # found and its name, used elsewhere, adds no error of its own.
    types.update({arg.index: IntType(64, True) for arg in spec.args if arg.index > count})
    names = {name: ref for name, ref in _arg_names(spec, _declared(spec, types, string_size)
                                                   ).items()
             if not re.fullmatch(r"arg\d+", name) or ref[0] <= count}
    scope = ProbeScope(MappingProxyType(names), constants,
                       f"probe '{spec.name}' ({probe.qualified} in {binary.display})", count)
    return Located(spec, scope, binary, usdt_sites=probe.sites,
                   usdt=(probe.provider, probe.name), errors=errors,
                   warnings=tuple(_type_warnings(spec, probe.sites[0].args)),
                   funcs=(probe.name,) * len(probe.sites))


def _locate_usdt_set(spec: ProbeSpec, binary: BinaryRef, constants: Constants,
                     string_size: int) -> Located:
    """A set of USDT probes: each location keeps its own thunk (operands differ per
    location). arg1..argN are those every probe of the set has (N: the fewest); a
    declared argument some probes lack is refused, naming them. An argument whose size
    or sign differs between probes is read as an int64."""
    from planrunner.resolve import sets

    probes = sets.match_usdt(spec, binary)
    counts = {p.qualified: min(len(s.args) for s in p.sites) for p in probes}
    count = min(counts.values())
    types: dict[int, Type] = {}
    for probe in probes:
        for i, typ in S.usdt_arg_types(probe).items():
            if i <= count:
                types[i] = typ if types.get(i, typ) == typ else IntType(64, True)
    errors = []
    for arg in spec.args:
        odd = sorted(name for name, n in counts.items() if n < arg.index)
        if odd:
            errors.append(ResolveError(
                f"probe set '{spec.name}' declares argument {arg.index}, which "
                f"{len(odd)} of its {len(probes)} probes lack: {sets.first_few(odd)}",
                arg.span, hints=(
                    f"a set reads only the arguments all its probes share (here "
                    f"{count}); narrow the glob to probes that have argument {arg.index}",)))
    types.update({arg.index: IntType(64, True) for arg in spec.args if arg.index > count})
    names = {name: ref for name, ref in _arg_names(spec, _declared(spec, types, string_size)
                                                   ).items()
             if not re.fullmatch(r"arg\d+", name) or ref[0] <= count}
    sites = tuple(site for p in probes for site in p.sites)
    funcs = tuple(sets.usdt_func(p, spec) for p in probes for _ in p.sites)
    shown = sorted({sets.usdt_func(p, spec) for p in probes})
    scope = ProbeScope(MappingProxyType(names), constants,
                       f"probe set '{spec.name}' ({len(probes)} probes in {binary.display}, "
                       f"which share {count} argument{'s' if count != 1 else ''})", count)
    return Located(spec, scope, binary, usdt_sites=sites, errors=tuple(errors),
                   funcs=funcs, notes=(_matched(shown),))


def _type_warnings(spec: ProbeSpec, operands: tuple[ArgOperand, ...]) -> list[Diagnostic]:
    """A declared type that disagrees with the size of the operand the note gives."""
    out = []
    for arg in spec.args:
        if arg.type is None or arg.type == "bool":
            continue
        if arg.index > len(operands):
            continue  # declared past the probe's end: an error of its own
        size = operands[arg.index - 1].size
        what = f"argument {arg.index} is a {size}-byte value in the probe's note"
        if arg.type in ("string", "pointer") and size != 8:
            out.append(Diagnostic(
                f"{what}, but `{arg.type}` needs an 8-byte pointer", arg.type_span or arg.span,
                ("a string is read at an address: declare the integer type instead, or "
                 "check the argument's position with `planrunner list BINARY -vv`",),
                severity="warning"))
        elif arg.type not in ("string", "pointer") and (
                bits := S.VALUE_TYPES[arg.type].bits) != 8 * size:
            effect = ("its upper bytes are dropped" if bits < 8 * size else
                      f"only {size} bytes are read")
            hint = ("an 8-byte value may be a pointer: `type: string` reads the string it "
                    "points to" if size == 8 else
                    f"declare int{8 * size} or uint{8 * size}")
            out.append(Diagnostic(f"{what}, but `{arg.type}` is {bits // 8} bytes: {effect}",
                                  arg.type_span or arg.span, (hint,), severity="warning"))
    return out


def locate_uprobe(spec: ProbeSpec, binary: BinaryRef | None, constants: Constants,
                  string_size: int) -> Located:
    """uprobe and uretprobe: every function named SYMBOL, at +OFFSET. A uretprobe sees
    `retval` (and, for now, the argument registers it declares). A Go function offers
    the 9 integer registers of Go's register ABI."""
    assert binary is not None
    if spec.is_set:
        return _locate_uprobe_set(spec, binary, constants, string_size)
    locations, notes, abi = S.uprobe_sites(spec, binary)
    offered = len(GO_INT_REGS) if abi == "go" else S.MAX_UPROBE_ARGS
    if abi == "go":
        _check_go_args(spec)
    returns = kind(spec.kind).returns
    count = max([0 if returns else offered, len(spec.args)])
    types: dict[int, Type] = {i: IntType(64, True) for i in range(1, count + 1)}
    names = dict(_arg_names(spec, _declared(spec, types, string_size)))
    what, arg_count, at_return = "", None, False
    if returns:
        rv = spec.retval
        typ = (S.declared_type(rv, string_size) if rv else None) or IntType(64, True)
        names["retval"] = (0, typ)
        if rv and rv.name:
            names[rv.name] = (0, typ)
        if not spec.args:
            what, arg_count, at_return = f"uretprobe ('{spec.name}')", 0, True
            for i in range(1, count + 1):
                names.pop(f"arg{i}", None)
    if abi == "go":
        names["goroutine"] = (GOROUTINE_INDEX, IntType(64, False))
        if returns:  # results take the argument registers, in order
            names.update({f"ret{i}": (i, IntType(64, True))
                          for i in range(2, len(GO_INT_REGS) + 1)})
    scope = ProbeScope(MappingProxyType(names), constants, what, arg_count,
                       at_return=at_return)
    return Located(spec, scope, binary, locations=locations, notes=notes, abi=abi,
                   funcs=(str(spec.symbol),) * len(locations))


def _locate_uprobe_set(spec: ProbeSpec, binary: BinaryRef, constants: Constants,
                       string_size: int) -> Located:
    """A set of functions: one program for all (its arguments are registers, the same
    everywhere), `func` from the attach cookie. Arguments are integers: the functions'
    types are unknown and differ."""
    from planrunner.resolve import sets

    if spec.offset:
        raise ResolveError(f"probe set '{spec.name}' has +{spec.offset}: an offset means "
                           "one place in one function", spec.spec_span,
                           hints=("probe the functions' entries (drop +OFFSET), or name "
                                  "one function",))
    for arg in spec.args:
        if arg.type is not None and (arg.type not in S.VALUE_TYPES or arg.type == "bool"):
            raise ResolveError(
                f"probe set '{spec.name}' declares argument {arg.index} a {arg.type}: "
                "the functions of a set are read as integers (their types differ)",
                arg.type_span or arg.span,
                hints=("declare an integer type, or probe the function by its name to "
                       "read a string",))
    funcs, notes = sets.match_functions(spec, binary)
    from planrunner.elf.reader import vaddr_to_offset

    locations = tuple((f.vaddr, vaddr_to_offset(binary.path, f.vaddr)) for f in funcs)
    names = [f.name for f in funcs]
    returns = kind(spec.kind).returns
    count = max([0 if returns else S.MAX_UPROBE_ARGS, len(spec.args)])
    types: dict[int, Type] = {i: IntType(64, True) for i in range(1, count + 1)}
    args = dict(_arg_names(spec, _declared(spec, types, string_size)))
    what, arg_count, at_return = "", None, False
    if returns:
        rv = spec.retval
        typ = (S.declared_type(rv, string_size) if rv else None) or IntType(64, True)
        if not isinstance(typ, IntType):
            raise ResolveError(f"probe set '{spec.name}' declares its return value a "
                               f"{rv.type if rv else typ}: a set's values are integers",
                               (rv.type_span or rv.span) if rv else spec.spec_span)
        args["retval"] = (0, typ)
        if rv and rv.name:
            args[rv.name] = (0, typ)
        if not spec.args:
            what, arg_count, at_return = f"uretprobe ('{spec.name}')", 0, True
            for i in range(1, count + 1):
                args.pop(f"arg{i}", None)
    scope = ProbeScope(MappingProxyType(args), constants, what, arg_count,
                       at_return=at_return)
    return Located(spec, scope, binary, locations=locations,
                   notes=(_matched(names), *notes), funcs=tuple(names))


def _check_go_args(spec: ProbeSpec) -> None:
    """Go's register ABI passes 9 integer words in registers; later ones are on the
    stack, where only the types of all the arguments would say."""
    for arg in spec.args:
        if arg.index > len(GO_INT_REGS):
            raise ResolveError(
                f"argument {arg.index} of Go function '{spec.symbol}' is not in a "
                f"register: Go's register ABI passes {len(GO_INT_REGS)} integer words "
                "(rax, rbx, rcx, rdi, rsi, r8, r9, r10, r11)", arg.span,
                hints=("a string takes two words (pointer, length), a slice three: count "
                       "words, not parameters",))


def _declared(spec: ProbeSpec, types: Mapping[int, Type], string_size: int
              ) -> dict[int, Type]:
    """The offered types with the plan's declared ones in their place."""
    out = dict(types)
    for arg in spec.args:
        declared = S.declared_type(arg, string_size)
        if declared is not None:
            out[arg.index] = declared
    return out


def _arg_names(spec: ProbeSpec, types: Mapping[int, Type]) -> Mapping[str, tuple[int, Type]]:
    """`argN` for every argument, then the names the plan gave."""
    names = {f"arg{index}": (index, typ) for index, typ in types.items()}
    for arg in spec.args:
        if arg.name:
            names[arg.name] = (arg.index, types[arg.index])
    return MappingProxyType(names)


def locate_sampling(spec: ProbeSpec, binary: BinaryRef | None, constants: Constants,
                    string_size: int) -> Located:
    """profile and interval: a timer, not a place in a program; no arguments."""
    what = f"{spec.kind} probe ('{spec.name}')"
    return Located(spec, ProbeScope(MappingProxyType({}), constants, what, 0))


Locator = Callable[[ProbeSpec, BinaryRef | None, Constants, int], Located]
# Where a probe of each kind fires and what its scope offers (a span is not located:
# it pairs two probes).
LOCATORS: dict[Kind, Locator] = {
    TRACEPOINT: locate_tracepoint,
    USDT: locate_usdt,
    UPROBE: locate_uprobe,
    URETPROBE: locate_uprobe,
    PROFILE: locate_sampling,
    INTERVAL: locate_sampling,
}
