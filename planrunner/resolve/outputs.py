"""Checking outputs: each output's fields, keys, value and filter, typed in the scope of
the probe or span it reads. Apart from locating probes: an output sees only a scope."""

from __future__ import annotations

from collections.abc import Mapping

from planrunner.errors import PlanError, ResolveError, attempt
from planrunner.expr.ast import Name
from planrunner.expr.check import Scope, check, check_condition, check_value
from planrunner.plan.model import FieldSpec, OutputSpec
from planrunner.resolve.model import CheckedField, ResolvedOutput
from planrunner.resolve.spans import OpenScope, SpanScope

# Record keys that no expression computes: the record head has them for every event.
HEAD_ONLY = frozenset({"time", "ts_ns", "probe"})


def check_outputs(outputs: tuple[OutputSpec, ...], scopes: Mapping[str, Scope],
                  string_size: int, errors: list[PlanError]) -> list[ResolvedOutput]:
    """The outputs whose probe was found, checked; their errors appended to `errors`.
    An output of a probe that was not found is skipped: that probe's own error says it."""
    out = []
    for spec in outputs:
        scope = scopes.get(spec.probe)
        if scope is None:
            continue
        errs: list[PlanError] = []
        if spec.open:
            scope = attempt(errs, _open_scope, spec, scope)
            if scope is None:
                errors.extend(errs)
                continue
        fields = _fields(spec.fields, scope, string_size, errs)
        by = _fields(spec.by, scope, string_size, errs)
        value = where = None
        if spec.value is not None:
            value = attempt(errs, check_value, spec.value, scope, string_size=string_size)
        if spec.where is not None:
            where = attempt(errs, check_condition, spec.where, scope,
                            string_size=string_size)
        if errs:
            errors.extend(errs)
            continue
        out.append(ResolvedOutput(spec, fields, by, value, where))
    return out


def _open_scope(spec: OutputSpec, scope: Scope) -> Scope:
    """The scope of an `open: true` output: only a span has begins that stay open, and
    only a plain span keeps one per key (a nested span's levels come and go)."""
    if not isinstance(scope, SpanScope):
        raise ResolveError(
            f"output '{spec.name}' counts the open spans of '{spec.probe}', which is not a "
            "span: it has no begins to leave open", spec.probe_span,
            hints=("name a span: count: SPAN, open: true (or drop `open`)",))
    if scope.spec.nested:
        raise ResolveError(
            f"output '{spec.name}': `open` applies to a span that is not nested; "
            f"'{spec.probe}' keeps a stack of calls per key", spec.probe_span,
            hints=("count the open calls of a nested span with a span that is not "
                   "nested over the same probes",))
    return OpenScope(scope)


def _fields(items: tuple[FieldSpec, ...], scope: Scope, string_size: int,
            errs: list[PlanError]) -> tuple[CheckedField, ...]:
    got = []
    for f in items:
        if _head_only(f, scope):
            continue  # time, ts_ns, probe: every record carries them already
        texpr = attempt(errs, check, f.expr, scope, string_size=string_size)
        if texpr is not None:
            got.append(CheckedField(f.key, texpr, f.span))
    return tuple(got)


def _head_only(f: FieldSpec, scope: Scope) -> bool:
    """A `fields:` entry naming a head-only key (unless the probe gives it that name)."""
    return (isinstance(f.expr, Name) and f.expr.ident in HEAD_ONLY
            and f.key == f.expr.ident and f.expr.ident not in scope.names())
