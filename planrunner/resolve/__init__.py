"""resolve_plan: Plan -> ResolvedPlan.

Finds every target binary, every probe's sites (USDT locations, uprobe symbols,
tracepoints), type-checks every expression against what the probes really offer, and
decides which arguments each site must read. Collects all errors of the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planrunner.diagnostics import Diagnostic, Span
from planrunner.errors import OperandError, PlanError, ResolveError, collect
from planrunner.expr.ast import Name
from planrunner.expr.check import check, check_condition, check_value
from planrunner.expr.typed import TExpr
from planrunner.expr.types import BoolType, IntType, StrType, Type
from planrunner.plan.model import FieldSpec, Plan, ProbeSpec
from planrunner.resolve import sites as S
from planrunner.resolve.model import (
    ArgSlot,
    AttachSite,
    BinaryRef,
    CheckedField,
    ResolvedOutput,
    ResolvedPlan,
    ResolvedProbe,
)
from planrunner.resolve.scope import ProbeScope
from planrunner.resolve.spans import SpanScope
from planrunner.targets import resolve_target
from planrunner.usdt.model import ArgOperand, ProbeSite
from planrunner.usdt.operands import operand_error


class _Unresolved(Exception):
    """A probe whose target failed to resolve: already reported, skip it quietly."""


@dataclass
class _Probe:
    """Working state for one non-span probe while the plan is checked."""

    spec: ProbeSpec
    scope: ProbeScope
    binary: BinaryRef | None = None
    usdt_sites: tuple[ProbeSite, ...] = ()
    locations: tuple[tuple[int, int], ...] = ()  # uprobes: (pc, file offset) each
    notes: tuple[str, ...] = ()  # for the summary (an IFUNC resolved, a shared name)
    arg_count: int = 0
    types: dict[int, Type] = field(default_factory=dict)
    tp_fields: tuple = ()
    where: TExpr | None = None
    lengths: dict[int, TExpr] = field(default_factory=dict)


def resolve_plan(plan: Plan, pid: int | None = None) -> ResolvedPlan:
    errors: list[PlanError] = []
    binaries = _binaries(plan, pid, errors)
    probes: dict[str, _Probe] = {}
    for spec in plan.probes:
        if spec.kind != "span":
            try:
                probes[spec.name] = _locate(plan, spec, binaries)
            except PlanError as err:
                errors.append(err)
            except _Unresolved:
                pass
    size = plan.settings.string_size
    for work in probes.values():
        _guard(errors, _check_probe_exprs, work, size)
    # Expressions are checked only against probes that were found: a missing probe has
    # already been reported, and its outputs would only repeat it.
    spans = {s.name: SpanScope(s, probes[s.begin].scope, probes[s.end].scope,  # type: ignore[index]
                               plan.param_values)
             for s in plan.probes
             if s.kind == "span" and s.begin in probes and s.end in probes}
    for name in spans:
        _guard(errors, _check_span_targets, plan.probe(name), probes)
    span_keys = {name: _guard(errors, sc.check_keys, size) for name, sc in spans.items()}
    span_where = {name: _guard(errors, sc.check_where, size) for name, sc in spans.items()}
    outputs = _check_outputs(plan, probes, spans, errors)
    if errors:
        raise collect(errors, ResolveError)  # type: ignore[misc]
    resolved: list[ResolvedProbe] = []
    for spec in plan.probes:
        if spec.kind == "span":
            keys = span_keys.get(spec.name) or (None, None)
            resolved.append(ResolvedProbe(spec, (), (), span_where.get(spec.name),
                                          key_begin=keys[0], key_end=keys[1],
                                          captures=spans[spec.name].captures()))
        else:
            got = _guard(errors, _finish, plan, probes[spec.name])
            if got is not None:
                resolved.append(got)
    if errors:
        raise collect(errors, ResolveError)  # type: ignore[misc]
    return ResolvedPlan(plan, tuple(resolved), tuple(outputs), pid)


def _guard(errors: list[PlanError], fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """fn(*args, **kwargs), or None with its PlanError appended to `errors`."""
    try:
        return fn(*args, **kwargs)
    except PlanError as err:
        errors.append(err)
        return None


def _binaries(plan: Plan, pid: int | None, errors: list[PlanError]) -> dict[str, BinaryRef]:
    out = {}
    for target in plan.targets:
        try:
            path = resolve_target(target.binary, pid, target.span)
            out[target.name] = S.binary_ref(path, path, target.build_id, target.span)
        except PlanError as err:
            errors.append(err)
    return out


def _locate(plan: Plan, spec: ProbeSpec, binaries: dict[str, BinaryRef]) -> _Probe:
    scope = ProbeScope({}, plan.param_values)
    work = _Probe(spec, scope)
    size = plan.settings.string_size
    if spec.kind == "tracepoint":
        work.tp_fields = S.tracepoint_fields(spec)
        for fld in work.tp_fields:
            if fld.is_string:  # a char[N] array holds at most N bytes, NUL or not
                typ: Type = StrType(min(fld.array_len or size, size) + 1)
            elif fld.size in (1, 2, 4, 8):
                typ = IntType(fld.size * 8, fld.signed)
            else:
                continue  # arrays of integers and structs: no expression can read them
            scope.args[fld.name] = (len(scope.args) + 1, typ)
        return work
    if spec.target not in binaries:
        raise _Unresolved()  # the target's own error was reported
    work.binary = binary = binaries[spec.target]
    if spec.kind == "usdt":
        probe = S.find_usdt(spec, binary)
        work.usdt_sites = probe.sites
        work.arg_count = min(len(s.args) for s in probe.sites)
        work.types = dict(S.usdt_arg_types(probe))
        scope.what = f"probe '{spec.name}' ({probe.qualified} in {binary.display})"
        scope.arg_count = work.arg_count
    else:
        work.locations, work.notes = S.uprobe_sites(spec, binary)
        work.arg_count = max([S.MAX_UPROBE_ARGS if spec.kind == "uprobe" else 0,
                              len(spec.args)])
        work.types = {i: IntType(64, True) for i in range(1, work.arg_count + 1)}
    for arg in spec.args:
        declared = S.declared_type(arg, size)
        if arg.index > work.arg_count and spec.kind == "usdt":
            raise ResolveError(
                f"probe '{spec.name}' declares argument {arg.index}, but "
                f"{spec.provider or ''}{':' if spec.provider else ''}{spec.probe} has "
                f"{work.arg_count} argument{'s' if work.arg_count != 1 else ''}", arg.span)
        if declared is not None:
            work.types[arg.index] = declared
    for index, typ in work.types.items():
        scope.args[f"arg{index}"] = (index, typ)
    for arg in spec.args:
        if arg.name:
            scope.args[arg.name] = (arg.index, work.types[arg.index])
    if spec.kind == "uretprobe" and not spec.args:
        scope.what, scope.arg_count = f"uretprobe ('{spec.name}')", 0
    if spec.kind == "uretprobe":
        rv = spec.retval
        typ = S.declared_type(rv, size) if rv else None
        scope.args["retval"] = (0, typ or IntType(64, True))
        if rv and rv.name:
            scope.args[rv.name] = (0, typ or IntType(64, True))
        if spec.kind == "uretprobe" and not spec.args:
            for i in range(1, work.arg_count + 1):
                scope.args.pop(f"arg{i}", None)
    return work


def _check_span_targets(spec: ProbeSpec, probes: dict[str, _Probe]) -> None:
    """The default key (the thread) cannot pair a begin and an end that fire in
    different programs: such a span needs a key both sides share."""
    begin, end = probes[spec.begin or ""], probes[spec.end or ""]
    if spec.key is None and begin.binary and end.binary and begin.binary != end.binary:
        raise ResolveError(
            f"span '{spec.name}' pairs '{begin.spec.name}' in {begin.binary.display} with "
            f"'{end.spec.name}' in {end.binary.display} by thread, but they fire in "
            "different programs", spec.spec_span,
            hints=("give `key:` an expression both sides share, e.g. a request id "
                   "argument",))


def _check_probe_exprs(work: _Probe, size: int) -> None:
    errs: list[PlanError] = []
    if work.spec.where is not None:
        work.where = _guard(errs, check_condition, work.spec.where, work.scope,
                            string_size=size)
    for arg in work.spec.args:
        if arg.length is not None:
            got = _guard(errs, check_value, arg.length, work.scope, string_size=size)
            if got is not None:
                work.lengths[arg.index] = got
    if errs:
        raise collect(errs)  # type: ignore[misc]


def _check_outputs(plan: Plan, probes: dict[str, _Probe], spans: dict[str, SpanScope],
                   errors: list[PlanError]) -> list[ResolvedOutput]:
    size = plan.settings.string_size
    out = []
    for spec in plan.outputs:
        if spec.probe in spans:
            scope: SpanScope | ProbeScope = spans[spec.probe]
        elif spec.probe in probes:
            scope = probes[spec.probe].scope
        else:
            continue
        errs: list[PlanError] = []

        def field_list(items, scope=scope, errs=errs):  # type: ignore[no-untyped-def]
            got = []
            for f in items:
                if _head_only(f, scope):
                    continue  # time, ts_ns, probe: every record carries them already
                texpr = _guard(errs, check, f.expr, scope, string_size=size)
                if texpr is not None:
                    got.append(CheckedField(f.key, texpr, f.span))
            return tuple(got)

        fields = field_list(spec.fields)
        by = field_list(spec.by)
        value = where = None
        if spec.value is not None:
            value = _guard(errs, check_value, spec.value, scope, string_size=size)
        if spec.where is not None:
            where = _guard(errs, check_condition, spec.where, scope, string_size=size)
        if errs:
            errors.extend(errs)
            continue
        unit = "ns" if value is not None and "pr_latency" in repr(value) else None
        out.append(ResolvedOutput(spec, fields, by, value, where, unit))
    return out


# Record keys that no expression computes: the record head has them for every event.
HEAD_ONLY = frozenset({"time", "ts_ns", "probe"})


def _head_only(f: FieldSpec, scope: ProbeScope | SpanScope) -> bool:
    """A `fields:` entry naming a head-only key (unless the probe gives it that name)."""
    return (isinstance(f.expr, Name) and f.expr.ident in HEAD_ONLY
            and f.key == f.expr.ident and f.expr.ident not in scope.names())


def _finish(plan: Plan, work: _Probe) -> ResolvedProbe:
    """Slots for the arguments the plan used, and one AttachSite per location."""
    spec, scope = work.spec, work.scope
    slots = []
    # Names the plan or a tracepoint gave (not argN: a tracepoint field may be `argv`).
    names = {i: n for n, (i, _t) in scope.args.items()
             if not (n.startswith("arg") and n[3:].isdigit())}
    for index in sorted(scope.used_args | set(work.lengths)):
        typ = dict((i, t) for i, t in scope.args.values())[index]
        if isinstance(typ, StrType):
            kind = "lstring" if index in work.lengths else "string"
            cap = typ.size - 1  # the declared size:, a char[N] field's N, or string_size
            slots.append(ArgSlot(index, names.get(index), kind, 64, False, cap,  # type: ignore[arg-type]
                                 work.lengths.get(index)))
        elif isinstance(typ, BoolType):  # a byte in the register or memory
            slots.append(ArgSlot(index, names.get(index), "int", 8, False, 0))
        else:
            assert isinstance(typ, IntType)
            slots.append(ArgSlot(index, names.get(index), "int", typ.bits, typ.signed, 0))
    fn = "pr_" + "".join(c if c.isalnum() else "_" for c in spec.name)
    sites: list[AttachSite] = []
    if spec.kind == "tracepoint":
        sites.append(AttachSite("tracepoint", f"{fn}_tp", spec.name, 0,
                                category=spec.category or "", event=spec.event or ""))
    elif spec.kind == "usdt":
        sites = _usdt_sites(work, slots, fn)
    else:
        assert work.binary is not None
        args: list[ArgOperand | None] = [None] * (max([s.index for s in slots], default=0) + 1)
        for slot in slots:
            size_bytes = slot.bits // 8 if slot.kind == "int" else 8
            args[slot.index] = (S.return_value(size_bytes, slot.signed, work.binary.machine)
                                if slot.index == 0 else
                                S.register_arg(slot.index, size_bytes, slot.signed,
                                               work.binary.machine))
        sites += [AttachSite(spec.kind, f"{fn}_s{n}", spec.name, n,  # type: ignore[arg-type]
                             work.binary, pc, offset, 0, 0, tuple(args))
                  for n, (pc, offset) in enumerate(work.locations)]
    targets = (work.binary,) if work.binary else ()
    by_index: dict[int, tuple[list[str], Type]] = {}
    for name, (index, typ) in scope.args.items():
        by_index.setdefault(index, ([], typ))[0].append(name)
    offered = tuple(("/".join(names), str(typ)) for _i, (names, typ) in sorted(by_index.items()))
    return ResolvedProbe(spec, tuple(sites), tuple(slots), work.where, targets,
                         tracepoint_fields=tuple(work.tp_fields), offered=offered,
                         notes=work.notes)


def _usdt_sites(work: _Probe, slots: list[ArgSlot], fn: str) -> list[AttachSite]:
    assert work.binary is not None
    errors: list[PlanError] = []
    out = []
    for n, site in enumerate(work.usdt_sites):
        args: list[ArgOperand | None] = [None] * (max([s.index for s in slots], default=0) + 1)
        for slot in slots:
            operand = site.args[slot.index - 1]
            if not operand.readable:
                errors.append(OperandError([Diagnostic(
                    f"argument {slot.index} of probe '{work.spec.name}' cannot be read at "
                    f"location {n} (pc 0x{site.pc:x}) of {work.binary.display}",
                    _span_of(work.spec, slot.index),
                    hints=("the probe can still be traced: read only its other arguments",),
                    notes=tuple(operand_error(operand, work.spec.name, site.pc)
                                .splitlines()))]))
                continue
            args[slot.index] = _with_address(operand, work.binary.path, errors, work.spec)
        out.append(AttachSite("uprobe", f"{fn}_s{n}", work.spec.name, n, work.binary,
                              site.pc, site.file_offset, site.semaphore_offset,
                              site.semaphore, tuple(args)))
    if errors:
        raise collect(errors, OperandError)  # type: ignore[misc]
    return out


def _with_address(operand: ArgOperand, path: str, errors: list[PlanError],
                  spec: ProbeSpec) -> ArgOperand:
    """Fill a rip-relative operand's link-time address from the symbol table."""
    from dataclasses import replace

    from planrunner.elf.symbols import lookup_symbol
    from planrunner.usdt.model import RipRel

    op = operand.operand
    if not isinstance(op, RipRel) or op.address is not None:
        return operand
    syms = [s for s in lookup_symbol(path, op.symbol) if s.value]
    if len({s.value for s in syms}) != 1:
        errors.append(OperandError(
            f"operand '{operand.text}' of probe '{spec.name}' names symbol '{op.symbol}', "
            f"which {'is ambiguous' if syms else 'is not'} in the symbol table of {path}",
            spec.spec_span,
            hints=("a stripped binary cannot resolve rip-relative operands",)))
        return operand
    return replace(operand, operand=replace(op, address=syms[0].value + op.offset))


def _span_of(spec: ProbeSpec, index: int) -> Span:
    for arg in spec.args:
        if arg.index == index:
            return arg.span
    return spec.spec_span
