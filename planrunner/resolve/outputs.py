"""Checking outputs: each output's fields, keys, value and filter, typed in the scope of
the probe or span it reads. Apart from locating probes: an output sees only a scope."""

from __future__ import annotations

from collections.abc import Mapping

from planrunner.errors import PlanError, attempt
from planrunner.expr.ast import Name
from planrunner.expr.check import Scope, check, check_condition, check_value
from planrunner.plan.model import FieldSpec, OutputSpec
from planrunner.resolve.model import CheckedField, ResolvedOutput

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
