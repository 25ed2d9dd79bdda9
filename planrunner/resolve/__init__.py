"""resolve_plan: Plan -> ResolvedPlan, as small steps in order.

    targets   every target binary found (path, build id, machine)
    locate    each probe by its kind's locator (resolve/locate.py): where it fires, the
              names its expressions may use
    check     each probe's own expressions (where, string lengths), then the spans'
              (keys, where), then the outputs' (resolve/outputs.py), every one typed
    usage     which arguments each probe reads and which values each span captures, read
              off the typed trees (resolve/usage.py)
    finish    argument slots and one ResolvedSite per place the probe fires

Every step collects its errors, so a plan's mistakes are reported at once; an
expression is checked only against probes that were found (a missing probe has already
been reported, and its outputs would only repeat it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from planrunner.diagnostics import Diagnostic, Span
from planrunner.errors import OperandError, PlanError, ResolveError, attempt, raise_collected
from planrunner.expr.check import Scope, check_condition, check_value
from planrunner.expr.typed import TExpr
from planrunner.expr.types import BoolType, IntType, StackType, StrType, Type
from planrunner.plan.model import Plan, ProbeSpec, StackSpec
from planrunner.resolve import sites as S
from planrunner.resolve.locate import LOCATORS, Located
from planrunner.resolve.model import (
    ArgSlot,
    BinaryRef,
    ResolvedOutput,
    ResolvedPlan,
    ResolvedProbe,
    ResolvedSite,
)
from planrunner.resolve.outputs import check_outputs
from planrunner.resolve.preflight import Process, warnings_for
from planrunner.resolve.scope import Constants
from planrunner.resolve.spans import SpanScope
from planrunner.resolve.usage import arg_indexes, captures, output_exprs, stack_kinds
from planrunner.targets import resolve_target
from planrunner.usdt.model import ArgOperand, RipRel, SymMem, TlsMem
from planrunner.usdt.operands import operand_error


@dataclass(frozen=True, slots=True)
class _Checked:
    """A located probe with its own expressions typed."""

    located: Located
    where: TExpr | None
    lengths: Mapping[int, TExpr]  # string arguments read with an explicit length


@dataclass(frozen=True, slots=True)
class _Span:
    """A span with its key and condition expressions typed."""

    scope: SpanScope
    key_begin: TExpr | None
    key_end: TExpr | None
    where: TExpr | None
    match: tuple[tuple[TExpr, TExpr], ...]  # `match:` values, (begin side, end side)


def resolve_plan(plan: Plan, pid: int | None = None,
                 command: Sequence[str] | None = None) -> ResolvedPlan:
    """`pid` (--pid) and `command` (-c) say which process will be traced, when known."""
    errors: list[PlanError] = []
    size = plan.settings.string_size
    constants = Constants.of(plan)
    left_out: list[Diagnostic] = []
    binaries = _binaries(plan, pid, errors, left_out)
    located = {spec.name: _with_nested(got, plan) for spec in plan.probes
               if spec.kind != "span"
               if (got := _locate(spec, binaries, constants, size, errors)) is not None}
    checked = {name: _check_probe(loc, size, errors) for name, loc in located.items()}
    span_specs = [s for s in plan.probes if s.kind == "span"
                  and s.begin in checked and s.end in checked]
    for spec in span_specs:
        attempt(errors, _check_span_targets, spec, checked)
    scopes = {s.name: SpanScope(s, checked[s.begin or ""].located.scope,
                                checked[s.end or ""].located.scope) for s in span_specs}
    keys = {name: attempt(errors, sc.check_keys, size) for name, sc in scopes.items()}
    wheres = {name: attempt(errors, sc.check_where, size) for name, sc in scopes.items()}
    matches = {name: attempt(errors, sc.check_match, size) for name, sc in scopes.items()}
    all_scopes: dict[str, Scope] = {n: c.located.scope for n, c in checked.items()}
    all_scopes.update(scopes)
    outputs = check_outputs(plan.outputs, all_scopes, size, errors)
    raise_collected(errors, ResolveError)
    spans = {name: _Span(sc, *(keys[name] or (None, None)), wheres[name], matches[name] or ())
             for name, sc in scopes.items()}
    resolved: list[ResolvedProbe] = []
    for spec in plan.probes:
        if spec.name not in spans and spec.name not in checked:
            continue  # on an optional target left out (any other failure raised above)
        if spec.kind == "span":
            resolved.append(_span_probe(spans[spec.name], outputs))
        else:
            probe = attempt(errors, _finish, checked[spec.name], spans, outputs,
                            plan.stack_of(spec))
            if probe is not None:
                resolved.append(probe)
    raise_collected(errors, ResolveError)
    _check_size(plan, resolved)
    proc = (Process.of_pid(pid) if pid else Process.of_command(command) if command
            else None)
    warnings = list(left_out)
    gated = []
    for loc in located.values():
        preflight = warnings_for(loc.spec, *loc.usdt, proc) if loc.usdt is not None else []
        warnings += [*loc.warnings, *preflight]
        gated += [(loc.spec.name, w.message) for w in preflight]
    return ResolvedPlan(plan, tuple(resolved), tuple(outputs), pid, tuple(warnings),
                        tuple(gated))


def _check_size(plan: Plan, probes: list[ResolvedProbe]) -> None:
    """Refuse a plan with more sites than settings.max_sites, with what starting them
    would cost as measured (resolve/site_cost.py)."""
    sites = sum(len(p.sites) for p in probes)
    limit = plan.settings.max_sites
    if sites <= limit:
        return
    from planrunner.resolve.site_cost import refusal

    biggest = max((p for p in probes if p.sites), key=lambda p: len(p.sites))
    message, hint = refusal(sites, limit)
    raise ResolveError(message, biggest.spec.spec_span, hints=(
        f"the most sites: probe '{biggest.spec.name}' ({len(biggest.sites)})", hint))


def _binaries(plan: Plan, pid: int | None, errors: list[PlanError],
              left_out: list[Diagnostic]) -> dict[str, BinaryRef]:
    """The targets found; an `optional: true` one that is not is a warning in
    `left_out`, and its probes (then their outputs) are skipped as if it failed. How a
    --pid's path was chosen (a container's file, not the host's) is a note there."""
    out = {}
    for target in plan.targets:
        try:
            notes: list[str] = []
            path = resolve_target(target.binary, pid, target.span, notes)
            out[target.name] = S.binary_ref(path, path, target.build_id, target.span)
            left_out += [Diagnostic(f"target '{target.name}': {note}", target.span,
                                    severity="note") for note in notes]
        except PlanError as err:
            if not target.optional:
                errors.append(err)
                continue
            probes = [p.name for p in plan.probes if p.target == target.name]
            first = err.diagnostics[0].message if err.diagnostics else str(err)
            left_out.append(Diagnostic(
                f"optional target '{target.name}' left out ({first}): probes "
                f"{', '.join(probes) or '(none)'} will not fire", target.span,
                ("install it, or --set its path, to trace it too",), severity="warning"))
    return out


def _locate(spec: ProbeSpec, binaries: Mapping[str, BinaryRef], constants: Constants,
            size: int, errors: list[PlanError]) -> Located | None:
    """The probe located by its kind's locator; None when it, or its target, failed."""
    binary = None
    if spec.kind not in ("tracepoint", "profile", "interval"):
        if spec.target is None or spec.target not in binaries:
            return None  # the target's own error was reported
        binary = binaries[spec.target]
    got = attempt(errors, LOCATORS[spec.kind], spec, binary, constants, size)
    if got is not None:
        errors.extend(got.errors)
    return got


def _with_nested(loc: Located, plan: Plan) -> Located:
    """The located probe whose scope knows the nested spans it begins or ends."""
    name = loc.spec.name
    nested = tuple(s.name for s in plan.probes if s.kind == "span" and s.nested
                   and name in (s.begin, s.end))
    return replace(loc, scope=replace(loc.scope, nested_spans=nested)) if nested else loc


def _check_probe(loc: Located, size: int, errs: list[PlanError]) -> _Checked:
    """The probe with its where: and string lengths typed (what failed is left out, and
    its error appended to `errs`)."""
    where = None
    if loc.spec.where is not None:
        where = attempt(errs, check_condition, loc.spec.where, loc.scope, string_size=size)
    lengths = {}
    for arg in loc.spec.args:
        if arg.length is not None:
            got = attempt(errs, check_value, arg.length, loc.scope, string_size=size)
            if got is not None:
                lengths[arg.index] = got
    return _Checked(loc, where, lengths)


def _check_span_targets(spec: ProbeSpec, checked: Mapping[str, _Checked]) -> None:
    """The default key (the thread) cannot pair a begin and an end that fire in
    different programs: such a span needs a key both sides share."""
    begin, end = checked[spec.begin or ""].located, checked[spec.end or ""].located
    if spec.key is None and begin.binary and end.binary and begin.binary != end.binary:
        raise ResolveError(
            f"span '{spec.name}' pairs '{begin.spec.name}' in {begin.binary.display} with "
            f"'{end.spec.name}' in {end.binary.display} by thread, but they fire in "
            "different programs", spec.spec_span,
            hints=("give `key:` an expression both sides share, e.g. a request id "
                   "argument",))


def _outputs_of(name: str, outputs: list[ResolvedOutput]) -> list[ResolvedOutput]:
    return [o for o in outputs if o.spec.probe == name]


def _span_exprs(span: _Span, outputs: list[ResolvedOutput]) -> list[TExpr]:
    """The expressions that run when the span ends, in checking order."""
    own = [span.where] if span.where is not None else []
    return own + output_exprs(_outputs_of(span.scope.spec.name, outputs))


def _span_probe(span: _Span, outputs: list[ResolvedOutput]) -> ResolvedProbe:
    return ResolvedProbe(span.scope.spec, (), (), span.where, key_begin=span.key_begin,
                         key_end=span.key_end, captures=captures(_span_exprs(span, outputs)),
                         match=span.match)


def _probe_exprs(c: _Checked, spans: Mapping[str, _Span],
                 outputs: list[ResolvedOutput]) -> list[TExpr | None]:
    """Every expression that runs in this probe: its own, its outputs', and those of the
    spans it begins (key, captures) or ends (key, filter, outputs)."""
    name = c.located.spec.name
    exprs: list[TExpr | None] = [c.where, *c.lengths.values(),
                                 *output_exprs(_outputs_of(name, outputs))]
    for span in spans.values():
        spec = span.scope.spec
        if spec.begin == name:
            exprs.append(span.key_begin)
            exprs += [cap.expr for cap in captures(_span_exprs(span, outputs))]
            exprs += [begin for begin, _end in span.match]
        if spec.end == name:
            exprs.append(span.key_end)
            exprs += [end for _begin, end in span.match]
            exprs += _span_exprs(span, outputs)
    return exprs


def _finish(c: _Checked, spans: Mapping[str, _Span], outputs: list[ResolvedOutput],
            stack: StackSpec) -> ResolvedProbe:
    """Slots for the arguments the plan uses, and one ResolvedSite per location."""
    loc = c.located
    spec, scope = loc.spec, loc.scope
    _check_stack_captures(spec, spans, outputs, stack)
    # Names the plan or a tracepoint gave (not argN: a tracepoint field may be `argv`).
    names = {i: n for n, (i, _t) in scope.args.items()
             if not (n.startswith("arg") and n[3:].isdigit())}
    exprs = _probe_exprs(c, spans, outputs)
    slots = [_slot(index, names.get(index), scope.type_of(index), c.lengths.get(index))
             for index in sorted(arg_indexes(exprs) | set(c.lengths))]
    sites: list[ResolvedSite] = []
    if spec.kind == "profile":
        sites.append(ResolvedSite("perf", spec.name, 0, sample_hz=spec.hz or 0))
    elif spec.kind == "interval":
        sites.append(ResolvedSite("perf", spec.name, 0, sample_period_ns=spec.period_ns or 0))
    elif spec.kind == "tracepoint":
        sites.append(ResolvedSite("tracepoint", spec.name, 0, category=spec.category or "",
                                  event=spec.event or ""))
    elif spec.kind == "usdt":
        sites = _usdt_sites(loc, slots)
    else:
        assert loc.binary is not None and spec.kind in ("uprobe", "uretprobe")
        machine = loc.binary.machine
        args: list[ArgOperand | None] = [None] * (max([s.index for s in slots], default=0) + 1)
        for slot in slots:
            size_bytes = slot.bits // 8 if slot.kind == "int" else 8
            args[slot.index] = (S.return_value(size_bytes, slot.signed, machine)
                                if slot.index == 0 else
                                S.register_arg(slot.index, size_bytes, slot.signed, machine,
                                               loc.abi))
        # a Go function returns where its RETs are probed (resolve/sites.py)
        kind = "uprobe" if loc.abi != "c" else spec.kind
        sites += [ResolvedSite(kind, spec.name, n, loc.binary, pc, offset,
                               args=tuple(args))
                  for n, (pc, offset) in enumerate(loc.locations)]
    targets = (loc.binary,) if loc.binary else ()
    return ResolvedProbe(spec, tuple(sites), tuple(slots), c.where, targets,
                         tracepoint_fields=loc.tp_fields, offered=_offered(scope.args),
                         notes=loc.notes, stacks=stack_kinds(exprs),
                         stack=stack, abi=loc.abi if spec.kind in ("uprobe", "uretprobe")
                         else "")


def _check_stack_captures(spec: ProbeSpec, spans: Mapping[str, _Span],
                          outputs: list[ResolvedOutput], stack: StackSpec) -> None:
    """`begin.ustack` keeps a stack id in the span's map: a copied stack (16 KiB) has
    none, so the begin probe must walk frame pointers."""
    if stack.unwind == "fp":
        return
    for span in spans.values():
        if span.scope.spec.begin != spec.name:
            continue
        for cap in captures(_span_exprs(span, outputs)):
            typ = cap.expr.type
            if isinstance(typ, StackType) and typ.kind == "user":
                raise ResolveError(
                    f"span '{span.scope.spec.name}' keeps the user stack of its begin "
                    f"probe '{spec.name}', which copies stacks (unwind: {stack.unwind})",
                    cap.expr.span,
                    hints=(f"give probe '{spec.name}' stack: {{unwind: fp}} (a stack id "
                           "is kept), or print `ustack` of the end probe",))


def _slot(index: int, name: str | None, typ: Type, length: TExpr | None) -> ArgSlot:
    if isinstance(typ, StrType):
        cap = typ.size - 1  # the declared size:, a char[N] field's N, or string_size
        if length is not None:
            return ArgSlot(index, name, "lstring", 64, False, cap, length)
        return ArgSlot(index, name, "string", 64, False, cap)
    if isinstance(typ, BoolType):  # a byte in the register or memory
        return ArgSlot(index, name, "int", 8, False, 0)
    assert isinstance(typ, IntType)
    return ArgSlot(index, name, "int", typ.bits, typ.signed, 0)


def _offered(args: Mapping[str, tuple[int, Type]]) -> tuple[tuple[str, str], ...]:
    """Every argument the probe offers, for summaries: (names, type) in argument order."""
    by_index: dict[int, tuple[list[str], Type]] = {}
    for name, (index, typ) in args.items():
        by_index.setdefault(index, ([], typ))[0].append(name)
    return tuple(("/".join(names), str(typ)) for _i, (names, typ) in sorted(by_index.items()))


def _usdt_sites(loc: Located, slots: list[ArgSlot]) -> list[ResolvedSite]:
    binary, spec = loc.binary, loc.spec
    assert binary is not None
    errors: list[PlanError] = []
    no_thread_pointer: set[int] = set()
    out = []
    for n, site in enumerate(loc.usdt_sites):
        args: list[ArgOperand | None] = [None] * (max([s.index for s in slots], default=0) + 1)
        for slot in slots:
            operand = site.args[slot.index - 1]
            if not operand.readable:
                errors.append(OperandError([Diagnostic(
                    f"argument {slot.index} of probe '{spec.name}' cannot be read at "
                    f"location {n} (pc 0x{site.pc:x}) of {binary.display}",
                    _span_of(spec, slot.index),
                    hints=("the probe can still be traced: read only its other arguments",),
                    notes=tuple(operand_error(operand, spec.name, site.pc)
                                .splitlines()))]))
                continue
            tp_errors = _thread_pointer_errors(operand, spec, slot.index)
            if tp_errors:
                if slot.index not in no_thread_pointer:  # once per argument, not per site
                    no_thread_pointer.add(slot.index)
                    errors += tp_errors
                continue
            args[slot.index] = _with_address(operand, binary.path, errors, spec)
        out.append(ResolvedSite("uprobe", spec.name, n, binary, site.pc, site.file_offset,
                                site.semaphore_offset, site.semaphore, tuple(args)))
    raise_collected(errors, OperandError)
    return out


def _with_address(operand: ArgOperand, path: str, errors: list[PlanError],
                  spec: ProbeSpec) -> ArgOperand:
    """Fill a symbolic operand's value from the symbol table: a rip-relative or absolute
    global's link-time address, a thread-local variable's offset (elf/tls.py)."""
    op = operand.operand
    symbol = _symbol_of(op)
    if symbol is None:
        return operand
    # lazily: most operands name no symbol, and the reader imports subprocess
    from planrunner.elf.symbols import lookup_symbol

    tls = isinstance(op, TlsMem) or (isinstance(op, SymMem) and op.reloc == "dtpoff")
    syms = [s for s in lookup_symbol(path, symbol)
            if (s.type == "STT_TLS") == tls and (s.value or tls)]
    if len({s.value for s in syms}) != 1:
        what = "thread-local symbol" if tls else "symbol"
        errors.append(OperandError(
            f"operand '{operand.text}' of probe '{spec.name}' names {what} '{symbol}', "
            f"which {'is ambiguous' if syms else 'is not'} in the symbol table of {path}",
            spec.spec_span,
            hints=("a stripped binary cannot resolve symbolic operands",)))
        return operand
    value = syms[0].value
    if isinstance(op, RipRel):
        return replace(operand, operand=replace(op, address=value + op.offset))
    if isinstance(op, SymMem):
        return replace(operand, operand=replace(op, value=value + op.offset))
    assert isinstance(op, TlsMem)
    from planrunner.elf.tls import tls_segment, x86_64_tpoff

    segment = tls_segment(path)
    if segment is None:
        errors.append(OperandError(
            f"operand '{operand.text}' of probe '{spec.name}' names thread-local '{symbol}', "
            f"but {path} has no PT_TLS segment", spec.spec_span))
        return operand
    if not segment.executable:
        errors.append(OperandError(
            f"operand '{operand.text}' of probe '{spec.name}' reads thread-local '{symbol}' "
            f"at a fixed offset from the thread pointer (@tpoff), but {path} is a shared "
            "library, whose TLS block is placed at load time", spec.spec_span))
        return operand
    return replace(operand, operand=replace(op, tpoff=x86_64_tpoff(value, segment)))


def _symbol_of(op: object) -> str | None:
    """The symbol a still unresolved operand names (None: nothing to resolve)."""
    if isinstance(op, RipRel):
        return op.symbol if op.address is None else None
    if isinstance(op, SymMem):
        return op.symbol if op.value is None else None
    if isinstance(op, TlsMem):
        return op.symbol if op.tpoff is None else None
    return None


def _thread_pointer_errors(operand: ArgOperand, spec: ProbeSpec, index: int) -> list[PlanError]:
    """A `%fs:` operand is read at the task's thread pointer, whose offset in task_struct
    only the running kernel's BTF gives: refuse here, at the argument, when it has none."""
    if not isinstance(operand.operand, TlsMem):
        return []
    from planrunner.elf.btf import THREAD_POINTER, BtfError, kernel_offset

    try:
        kernel_offset(THREAD_POINTER)
    except BtfError as exc:
        return [OperandError([Diagnostic(
            f"argument {index} of probe '{spec.name}' is thread-local ('{operand.text}'), "
            f"and the thread pointer cannot be found: {exc}", _span_of(spec, index),
            hints=("the offset of thread.fsbase in task_struct is read from the running "
                   "kernel's BTF (/sys/kernel/btf/vmlinux)",
                   "the probe can still be traced: read only its other arguments"))])]
    return []


def _span_of(spec: ProbeSpec, index: int) -> Span:
    for arg in spec.args:
        if arg.index == index:
            return arg.span
    return spec.spec_span

