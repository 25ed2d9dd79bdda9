"""The expression scope of a span: `latency`, `begin.X`, `end.X`, and the end event's
builtins (pid, tid, comm... of the thread that ended the span).

`begin.X` means X as the begin probe saw it: a `CaptureRef` holding X checked in the
begin probe's scope (a param is the same on both sides and stays a constant). Which
values a span captures, and in what order, is read off the checked trees afterwards
(resolve/usage.py). Lookups have no side effects.

A nested span's `match:` values are checked in each probe's own scope (each side reads
its own value; render/spans.py compares them), not as `begin.X`.

A side may be another span (a span on a span): its scope is then that span's, so that
`begin.begin.size` is malloc's argument when `begin:` is a span of malloc's entry and
return, `begin.retval` its return value (that span's end event's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from planrunner.diagnostics import did_you_mean
from planrunner.errors import PlanError, ResolveError, raise_collected
from planrunner.expr import ast as A
from planrunner.expr.check import STACKS, Symbol, check, check_condition
from planrunner.expr.parser import parse_expression
from planrunner.expr.typed import CaptureRef, DepthRef, LatencyRef, TExpr, TRef, refs
from planrunner.expr.types import DURATION, StackType, StrType, SymType
from planrunner.plan.model import ProbeSpec
from planrunner.resolve.scope import BUILTINS, DEPTH_TYPE, Constants, ProbeScope


@dataclass(frozen=True, slots=True)
class SpanScope:
    """The names a span's expressions may use: its begin's and end's (each a probe's, or
    another span's when the span is on a span)."""

    spec: ProbeSpec
    begin: ProbeScope | SpanScope
    end: ProbeScope | SpanScope

    @property
    def args(self) -> Mapping[str, object]:
        """The prefixed names of both sides, as a side of a span on this one sees them
        (`begin.size` here is `begin.begin.size` there)."""
        return {name: None for name in self.names() if "." in name}

    @property
    def constants(self) -> Constants:
        return self.end.constants

    def lookup(self, name: str) -> Symbol | None:
        if name == "latency":
            return Symbol(DURATION, LatencyRef(self.spec.name))
        if name.startswith("begin."):
            return self._capture(name[len("begin."):])
        if name.startswith("end."):
            return self.end.lookup(name[len("end."):])
        if name in BUILTINS or name in STACKS:  # the end event's (a tracepoint field of
            return self.end.lookup(name)          # that name first)
        if name == "depth":
            return Symbol(DEPTH_TYPE, DepthRef(self.spec.name)) if self.spec.nested else None
        return self.end.constants.lookup(name)

    def names(self) -> Iterable[str]:
        begin = [f"begin.{n}" for n in self.begin.args]
        end = [f"end.{n}" for n in self.end.args]
        depth = ["depth"] if self.spec.nested else []
        return ["latency", *begin, *end, *BUILTINS, *STACKS, *depth,
                *self.end.constants.values]

    def explain_unknown(self, name: str) -> str | None:
        if name == "depth" and not self.spec.nested:
            return (f"'depth' exists only in a nested span: declare `nested: true` on span "
                    f"'{self.spec.name}' if its calls nest")
        return None

    def _capture(self, name: str) -> Symbol | None:
        sym = self.begin.lookup(name)
        if sym is None or sym.ref is None:  # unknown, or a param: the same on both sides
            return sym
        value = TRef(name, sym.ref, sym.type, self.spec.span)
        return Symbol(sym.type, CaptureRef(name, value, self.spec.name))

    def check_keys(self, size: int) -> tuple[TExpr | None, TExpr | None]:
        """The key expression checked on each side (None: the default, the thread; but
        between two Go functions, the goroutine: goroutines share and change threads).
        A key per side is its begin expression checked at the begin, its end one at the
        end."""
        key, key_end = self.spec.key, self.spec.key_end
        if key is None:
            if not all("goroutine" in s.args for s in (self.begin, self.end)):
                return None, None
            key = parse_expression("goroutine", self.spec.spec_span)
        errs: list[PlanError] = []
        sides = []
        per_side = key_end is not None
        for side, expr, scope in (("begin", key, self.begin),
                                  ("end", key_end or key, self.end)):
            try:
                texpr = self._check_key(side, expr, scope, size, per_side)
                sides.append(texpr)
            except PlanError as err:
                errs.append(err)
        raise_collected(errs)
        return sides[0], sides[1]

    def _check_key(self, side: str, key: A.Expr, scope: ProbeScope | SpanScope,
                   size: int, per_side: bool) -> TExpr:
        probe = self.spec.begin if side == "begin" else self.spec.end
        try:
            texpr = check(key, scope, string_size=size)
        except PlanError as err:
            if not per_side:
                raise
            # say which side's probe the expression was checked in
            d = err.diagnostics[0]
            raise ResolveError(
                f"span '{self.spec.name}': the {side} key '{A.to_source(key)}' does not "
                f"fit its {side} '{probe}': {d.message}", d.span,
                hints=(*d.hints, f"the {side} key is read when '{probe}' fires: use a "
                       "value it has")) from None
        if isinstance(texpr.type, StrType | StackType):
            raise ResolveError(f"a span key must be an integer, not a {texpr.type}",
                               key.span)
        return texpr

    def check_match(self, size: int) -> tuple[tuple[TExpr, TExpr], ...]:
        """Each `match:` value checked on the begin side and on the end side."""
        errs: list[PlanError] = []
        pairs = []
        for expr in self.spec.match:
            try:
                pairs.append(self._match_pair(expr, size))
            except PlanError as err:
                errs.append(err)
        raise_collected(errs)
        return tuple(pairs)

    def _match_pair(self, expr: A.Expr, size: int) -> tuple[TExpr, TExpr]:
        span = self.spec.name
        no_depth = ResolveError(f"span '{span}' cannot match on `depth`: the match is "
                                "what finds the depth of an end", expr.span)
        if isinstance(expr, A.Name) and expr.ident == "depth":
            raise no_depth
        sides = (("begin", self.spec.begin, self.begin), ("end", self.spec.end, self.end))
        if isinstance(expr, A.Name):
            self._match_name(expr, [s for s in sides if s[2].lookup(expr.ident) is None])
        checked = []
        errs: list[PlanError] = []
        for _side, _probe, scope in sides:
            try:
                checked.append(check(expr, scope, string_size=size))
            except PlanError as err:
                errs.append(err)
        raise_collected(errs)
        begin, end = checked
        for texpr in checked:
            if any(isinstance(r, DepthRef) for r in refs(texpr)):
                raise no_depth
            if isinstance(texpr.type, StackType | SymType):
                raise ResolveError(f"span '{span}' cannot match on a {texpr.type}",
                                   expr.span, hints=("match on strings or integers, "
                                                     "e.g. match: [file, func]",))
        if not refs(begin) and not refs(end):
            raise ResolveError(f"span '{span}' matches on a constant: it is the same at "
                               "every event", expr.span,
                               hints=("match on arguments of both probes, e.g. "
                                      "match: [file, func]",))
        if isinstance(begin.type, StrType) != isinstance(end.type, StrType):
            raise ResolveError(
                f"span '{span}' matches on '{A.to_source(expr)}', of type {begin.type} at "
                f"its begin probe '{self.spec.begin}' but {end.type} at its end probe "
                f"'{self.spec.end}'", expr.span,
                hints=("declare the argument with the same type on both probes",))
        return begin, end

    def _match_name(self, expr: A.Name,
                    missing: list[tuple[str, str | None, ProbeScope | SpanScope]]
                    ) -> None:
        """A `match` name one side or both lack: said of that side, or of both."""
        if not missing:
            return
        span, name = self.spec.name, expr.ident
        if len(missing) == 2:
            raise ResolveError(
                f"span '{span}' matches on '{name}', which neither its begin probe "
                f"'{self.spec.begin}' nor its end probe '{self.spec.end}' has", expr.span,
                hints=(f"match names a value both probes have: declare '{name}' in the "
                       "args of both",))
        side, probe, scope = missing[0]
        guess = did_you_mean(name, list(scope.args))
        raise ResolveError(
            f"span '{span}' matches on '{name}', which its {side} probe '{probe}' does "
            "not have", expr.span,
            hints=(f"did you mean '{guess}'?" if guess else
                   f"match names a value both probes have: declare '{name}' in the args "
                   f"of '{probe}'",))

    def check_where(self, size: int) -> TExpr | None:
        if self.spec.where is None:
            return None
        return check_condition(self.spec.where, self, string_size=size)


@dataclass(frozen=True, slots=True)
class OpenScope:
    """The names of an `open: true` output of a span: its begins have not ended, so only
    their values (`begin.X`, stored when they began) and params are known."""

    span: SpanScope

    def lookup(self, name: str) -> Symbol | None:
        if name.startswith("begin."):
            return self.span.lookup(name)
        if name in self.span.constants.values:
            return self.span.constants.lookup(name)
        return None

    def names(self) -> Iterable[str]:
        return [n for n in self.span.names() if n.startswith("begin.")]

    def explain_unknown(self, name: str) -> str | None:
        if name.startswith("end.") or name in ("latency", "depth") or name in BUILTINS \
                or name in STACKS or self.span.lookup(name) is not None:
            return (f"'{name}' is not known in an open-span output: a begin still open "
                    f"has no end yet; use the begin's values, e.g. begin.{name.split('.')[-1]}")
        return None
