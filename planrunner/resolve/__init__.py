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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from planrunner.diagnostics import Diagnostic, Span
from planrunner.errors import OperandError, PlanError, ResolveError, attempt, raise_collected
from planrunner.expr.check import Scope, check_condition, check_value
from planrunner.expr.typed import CaptureRef, TExpr, refs
from planrunner.expr.types import BoolType, IntType, StackType, StrType, Type
from planrunner.plan.build_probes import side_span
from planrunner.plan.model import Plan, ProbeSpec, StackSpec
from planrunner.probe_kinds import (
    INTERVAL,
    PERF_SITE,
    PROFILE,
    TRACEPOINT,
    TRACEPOINT_SITE,
    UPROBE,
    UPROBE_SITE,
    URETPROBE,
    USDT,
    Kind,
    kind,
)
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
from planrunner.resolve.scope import Constants, ProbeScope
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
    plan = _set_spans_nest(plan)
    errors: list[PlanError] = []
    size = plan.settings.string_size
    constants = Constants.of(plan)
    left_out: list[Diagnostic] = []
    binaries = _binaries(plan, pid, errors, left_out)
    nested = [s for s in plan.probes if kind(s.kind).pairs and s.nested]
    located = {spec.name: _with_nested(got, nested) for spec in plan.probes
               if not kind(spec.kind).pairs
               if (got := _locate(spec, binaries, constants, size, errors)) is not None}
    checked = {name: _check_probe(loc, size, errors) for name, loc in located.items()}
    scopes = _span_scopes(plan, checked)
    for name in scopes:
        attempt(errors, _check_span_targets, scopes[name].spec, checked)
    keys = {name: attempt(errors, sc.check_keys, size) for name, sc in scopes.items()}
    wheres = {name: attempt(errors, sc.check_where, size) for name, sc in scopes.items()}
    matches = {name: attempt(errors, sc.check_match, size) for name, sc in scopes.items()}
    all_scopes: dict[str, Scope] = {n: c.located.scope for n, c in checked.items()}
    all_scopes.update(scopes)
    outputs = check_outputs(plan.outputs, all_scopes, size, errors)
    raise_collected(errors, ResolveError)
    for sc in scopes.values():
        if len(sc.spec.end_names) > 1:
            attempt(errors, _check_other_ends, sc, scopes, checked, outputs, size)
    raise_collected(errors, ResolveError)
    spans = {name: _Span(sc, *(keys[name] or (None, None)), wheres[name], matches[name] or ())
             for name, sc in scopes.items()}
    resolved: list[ResolvedProbe] = []
    for spec in plan.probes:
        if spec.name not in spans and spec.name not in checked:
            continue  # on an optional target left out (any other failure raised above)
        if kind(spec.kind).pairs:
            resolved.append(_span_probe(spans[spec.name], spans, outputs))
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
                        tuple(gated), constants.data_params(),
                        constants.value_params(), constants.pins)


def _check_size(plan: Plan, probes: list[ResolvedProbe]) -> None:
    """Refuse a plan with more sites than settings.max_sites, with what starting them
    would cost as measured (resolve/site_cost.py)."""
    # a uprobe set is one compiled function however many it matched
    sites = sum(p.compiled_sites for p in probes)
    limit = plan.settings.max_sites
    if sites <= limit:
        return
    from planrunner.resolve.site_cost import refusal

    biggest = max((p for p in probes if p.sites), key=lambda p: p.compiled_sites)
    message, hint = refusal(sites, limit)
    what = (f"a set: its glob matched {len(biggest.sites)}" if biggest.spec.is_set
            else str(len(biggest.sites)))
    raise ResolveError(message, biggest.spec.spec_span, hints=(
        f"the most sites: probe '{biggest.spec.name}' ({what})", hint))


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
    k = kind(spec.kind)
    if k.binary:
        if spec.target is None or spec.target not in binaries:
            return None  # the target's own error was reported
        binary = binaries[spec.target]
    got = attempt(errors, LOCATORS[k], spec, binary, constants, size)
    if got is not None:
        errors.extend(got.errors)
    return got


def _set_spans_nest(plan: Plan) -> Plan:
    """A span from a uprobe set to a uretprobe set is nested: calls of the set's
    functions nest (one calls another, or itself), and each return closes the latest
    open call of its thread, as funclatency needs (issue 29)."""
    kinds = {p.name: p for p in plan.probes}

    def set_of(name: str | None, returns: bool) -> bool:
        """Whether `name` is a set of function entries (or of returns)."""
        probe = kinds.get(name or "")
        if probe is None or not probe.is_set:
            return False
        k = kind(probe.kind)
        return k.function and k.returns == returns

    probes = tuple(replace(p, nested=True) if kind(p.kind).pairs and not p.nested
                   and set_of(p.begin, False) and set_of(p.end, True) else p
                   for p in plan.probes)
    return plan if probes == plan.probes else replace(plan, probes=probes)


def _with_nested(loc: Located, spans: Sequence[ProbeSpec]) -> Located:
    """The located probe whose scope knows the nested spans (of `spans`) it begins or
    ends."""
    name = loc.spec.name
    nested = tuple(s.name for s in spans if name in (s.begin, s.end))
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


def _span_scopes(plan: Plan, checked: Mapping[str, _Checked]) -> dict[str, SpanScope]:
    """The scope of each span whose sides resolved, a span on spans after those (the
    build refused loops); in plan order."""
    specs = {s.name: s for s in plan.probes if kind(s.kind).pairs}
    scopes: dict[str, SpanScope] = {}

    def side(name: str | None) -> ProbeScope | SpanScope | None:
        if name is not None and name in checked:
            return checked[name].located.scope
        return scopes.get(name or "")

    pending = list(specs.values())
    while pending:
        left = []
        for spec in pending:
            begin, end = side(spec.begin), side(spec.end)
            if (begin is not None and end is not None
                    and all(side(e) is not None for e in spec.end_names)):
                scopes[spec.name] = SpanScope(spec, begin, end)
            elif any(s in specs for s in (spec.begin, *spec.end_names)):
                left.append(spec)  # on a span not scoped yet
        if len(left) == len(pending):
            break  # on spans that will never be (a side left out)
        pending = left
    return {s.name: scopes[s.name] for s in plan.probes if s.name in scopes}


def _check_other_ends(sc: SpanScope, scopes: Mapping[str, SpanScope],
                      checked: Mapping[str, _Checked], outputs: list[ResolvedOutput],
                      size: int) -> None:
    """A span with several ends runs its key, filter and outputs at each, as checked at
    the first: each other end must give every value they read from it the same way
    (`end.ptr` the first argument of both free and realloc), else it is refused,
    located at that end. A span on it is refused (not supported yet)."""
    spec = sc.spec
    for other in scopes.values():
        if spec.name in (other.spec.begin, *other.spec.end_names):
            raise ResolveError(
                f"span '{other.spec.name}' is on span '{spec.name}', which has several ends",
                side_span(other.spec, "begin" if other.spec.begin == spec.name else "end"),
                hints=("a span on a span needs that span to have one end",))
    first = sc.check_keys(size)[1], sc.check_where(size)
    mine = [o for o in outputs if o.spec.probe == spec.name and not o.spec.open]
    for i, end in enumerate(spec.end_names[1:], start=1):
        scope = checked[end].located.scope if end in checked else scopes[end]
        there = SpanScope(replace(spec, end=end), sc.begin, scope)
        at = ends_span(spec, i)
        why = (f"span '{spec.name}' reads its ends' values as its first end "
               f"'{spec.end}' gives them, but its end '{end}' gives ")
        hint = (f"declare the values the span reads from its ends (end.X, the key) at the "
                f"same argument and with the same type in '{spec.end}' and '{end}'",)
        try:
            got = there.check_keys(size)[1], there.check_where(size)
        except PlanError as err:
            raise ResolveError(why + "other ones: " + err.diagnostics[0].message, at,
                               hints=hint) from None
        if got != first:
            raise ResolveError(why + "other ones (the key or the filter)", at, hints=hint)
        for out in mine:
            errs: list[PlanError] = []
            redo = check_outputs((out.spec,), {spec.name: there}, size, errs)
            if errs or redo[0] != out:  # (`there` differs in its spec's `end` only)
                raise ResolveError(why + f"other ones (output '{out.spec.name}')", at,
                                   hints=hint)


def ends_span(spec: ProbeSpec, index: int) -> Span:
    """Where end `index` of a span is written (its spec, if not known)."""
    if spec.side_spans is None or len(spec.side_spans) <= 1 + index:
        return spec.spec_span
    return spec.side_spans[1 + index]


def _event_probe(name: str | None, checked: Mapping[str, _Checked]) -> Located | None:
    """The probe whose firing is event `name` (a span's: its end's), if known."""
    return checked[name].located if name is not None and name in checked else None


def _check_span_targets(spec: ProbeSpec, checked: Mapping[str, _Checked]) -> None:
    """The default key (the thread) cannot pair a begin and an end that fire in
    different programs: such a span needs a key both sides share."""
    begin, end = _event_probe(spec.begin, checked), _event_probe(spec.end, checked)
    if begin is None or end is None:
        return
    if spec.key is None and begin.binary and end.binary and begin.binary != end.binary:
        raise ResolveError(
            f"span '{spec.name}' pairs '{begin.spec.name}' in {begin.binary.display} with "
            f"'{end.spec.name}' in {end.binary.display} by thread, but they fire in "
            "different programs", spec.spec_span,
            hints=("give `key:` an expression both sides share, e.g. a request id "
                   "argument",))


def _outputs_of(name: str, outputs: list[ResolvedOutput]) -> list[ResolvedOutput]:
    return [o for o in outputs if o.spec.probe == name]


def _span_exprs(span: _Span, spans: Mapping[str, _Span],
                outputs: list[ResolvedOutput]) -> list[TExpr]:
    """The expressions that run when the span ends, in checking order: its filter and
    outputs, and what the spans on it run at its event (their key on that side, the
    values a span beginning there captures, all that a span ending there runs)."""
    name = span.scope.spec.name
    own = [span.where] if span.where is not None else []
    out = own + output_exprs(_outputs_of(name, outputs))
    for other in spans.values():
        spec = other.scope.spec
        if spec.begin == name:
            out += [e for e in (other.key_begin,) if e is not None]
            out += [cap.expr for cap in _captures(other, spans, outputs)]
        if name in spec.end_names:
            out += [e for e in (other.key_end,) if e is not None]
            out += _span_exprs(other, spans, outputs)
    return out


def _captures(span: _Span, spans: Mapping[str, _Span],
              outputs: list[ResolvedOutput]) -> tuple[CaptureRef, ...]:
    return captures(_span_exprs(span, spans, outputs), span.scope.spec.name)


def _span_probe(span: _Span, spans: Mapping[str, _Span],
                outputs: list[ResolvedOutput]) -> ResolvedProbe:
    return ResolvedProbe(span.scope.spec, (), (), span.where, key_begin=span.key_begin,
                         key_end=span.key_end, captures=_captures(span, spans, outputs),
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
            exprs += [cap.expr for cap in _captures(span, spans, outputs)]
            exprs += [begin for begin, _end in span.match]
        if name in spec.end_names:
            exprs.append(span.key_end)
            exprs += [end for _begin, end in span.match]
            exprs += _span_exprs(span, spans, outputs)
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
    sites = SITE_MAKERS[kind(spec.kind)](loc, slots)
    targets = (loc.binary,) if loc.binary else ()
    return ResolvedProbe(spec, tuple(sites), tuple(slots), c.where, targets,
                         tracepoint_fields=loc.tp_fields, offered=_offered(scope.args),
                         notes=loc.notes, stacks=stack_kinds(exprs),
                         stack=stack, abi=loc.abi if kind(spec.kind).function else "")


def _check_stack_captures(spec: ProbeSpec, spans: Mapping[str, _Span],
                          outputs: list[ResolvedOutput], stack: StackSpec) -> None:
    """`begin.ustack` of a begin that copies stacks keeps the hash of its copy (the copy
    goes to the reader when the span begins): an aggregation key, not a print field,
    which would need the 16 KiB copy kept in the span's map."""
    if stack.unwind == "fp":
        return
    for span in spans.values():
        if _event_of(span.scope.spec.begin, spans) != spec.name:
            continue
        for out in _outputs_of(span.scope.spec.name, outputs):
            for f in out.fields if out.spec.kind == "print" else ():
                typ = f.expr.type
                if (isinstance(typ, StackType) and typ.kind == "user"
                        and any(isinstance(r, CaptureRef) for r in refs(f.expr))):
                    raise ResolveError(
                        f"print '{out.spec.name}' shows the user stack of the begin of "
                        f"span '{span.scope.spec.name}', copied at '{spec.name}' "
                        f"(unwind: {stack.unwind}): a span keeps a copied stack for "
                        "aggregation keys only", f.span,
                        hints=(f"aggregate by it (count: {span.scope.spec.name}, by: "
                               "[begin.ustack]), give the begin probe stack: {unwind: fp}, "
                               "or print `ustack` of the end",))


def _event_of(name: str | None, spans: Mapping[str, _Span]) -> str | None:
    """The probe whose firing is event `name`: itself, or a span's end's event."""
    seen: set[str] = set()
    while name is not None and name in spans and name not in seen:
        seen.add(name)
        name = spans[name].scope.spec.end
    return name


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


def _profile_sites(loc: Located, slots: list[ArgSlot]) -> list[ResolvedSite]:
    spec = loc.spec
    return [ResolvedSite(PERF_SITE.name, spec.name, 0, sample_hz=spec.hz or 0, func=spec.name)]


def _interval_sites(loc: Located, slots: list[ArgSlot]) -> list[ResolvedSite]:
    spec = loc.spec
    return [ResolvedSite(PERF_SITE.name, spec.name, 0, sample_period_ns=spec.period_ns or 0,
                         func=spec.name)]


def _tracepoint_sites(loc: Located, slots: list[ArgSlot]) -> list[ResolvedSite]:
    """One site per event (a set: each event it matched)."""
    return [ResolvedSite(TRACEPOINT_SITE.name, loc.spec.name, n, category=category, event=event,
                         func=func)
            for n, ((category, event), func) in enumerate(zip(loc.tp_events, loc.funcs,
                                                              strict=True))]


def _function_sites(loc: Located, slots: list[ArgSlot]) -> list[ResolvedSite]:
    """uprobe, uretprobe: a site per location, its arguments in the ABI's registers."""
    spec = loc.spec
    assert loc.binary is not None
    machine = loc.binary.machine
    args: list[ArgOperand | None] = [None] * (max([s.index for s in slots], default=0) + 1)
    for slot in slots:
        size_bytes = slot.bits // 8 if slot.kind == "int" else 8
        args[slot.index] = (S.return_value(size_bytes, slot.signed, machine)
                            if slot.index == 0 else
                            S.register_arg(slot.index, size_bytes, slot.signed, machine,
                                           loc.abi))
    # a Go function returns where its RETs are probed (resolve/sites.py)
    site = kind(spec.kind).site
    assert site is not None
    site_name = (UPROBE_SITE if loc.abi != "c" else site).name
    return [ResolvedSite(site_name, spec.name, n, loc.binary, pc, offset, args=tuple(args),
                         func=func)
            for n, ((pc, offset), func) in enumerate(zip(loc.locations, loc.funcs,
                                                         strict=True))]


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
        out.append(ResolvedSite(UPROBE_SITE.name, spec.name, n, binary, site.pc, site.file_offset,
                                site.semaphore_offset, site.semaphore, tuple(args),
                                func=loc.funcs[n]))
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



# The sites of a located probe of each kind (a span has none of its own).
SITE_MAKERS: dict[Kind, Callable[[Located, list[ArgSlot]], list[ResolvedSite]]] = {
    USDT: _usdt_sites,
    UPROBE: _function_sites,
    URETPROBE: _function_sites,
    TRACEPOINT: _tracepoint_sites,
    PROFILE: _profile_sites,
    INTERVAL: _interval_sites,
}
