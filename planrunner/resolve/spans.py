"""The expression scope of a span: `latency`, `begin.X`, `end.X`, and the end event's
builtins (pid, tid, comm... of the thread that ended the span).

`begin.X` means X as the begin probe saw it: a `CaptureRef` holding X checked in the
begin probe's scope (a param is the same on both sides and stays a constant). Which
values a span captures, and in what order, is read off the checked trees afterwards
(resolve/usage.py). Lookups have no side effects.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from planrunner.errors import PlanError, ResolveError, raise_collected
from planrunner.expr.check import STACKS, Symbol, check, check_condition
from planrunner.expr.parser import parse_expression
from planrunner.expr.typed import CaptureRef, DepthRef, LatencyRef, TExpr, TRef
from planrunner.expr.types import DURATION, StackType, StrType
from planrunner.plan.model import ProbeSpec
from planrunner.resolve.scope import BUILTINS, DEPTH_TYPE, ProbeScope


@dataclass(frozen=True, slots=True)
class SpanScope:
    """The names a span's expressions may use: its begin's and end's."""

    spec: ProbeSpec
    begin: ProbeScope
    end: ProbeScope

    def lookup(self, name: str) -> Symbol | None:
        if name == "latency":
            return Symbol(DURATION, LatencyRef())
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
        return Symbol(sym.type, CaptureRef(name, value))

    def check_keys(self, size: int) -> tuple[TExpr | None, TExpr | None]:
        """The key expression checked on each side (None: the default, the thread; but
        between two Go functions, the goroutine: goroutines share and change threads)."""
        key = self.spec.key
        if key is None:
            if not all("goroutine" in s.args for s in (self.begin, self.end)):
                return None, None
            key = parse_expression("goroutine", self.spec.spec_span)
        errs: list[PlanError] = []
        sides = []
        for scope in (self.begin, self.end):
            try:
                texpr = check(key, scope, string_size=size)
                if isinstance(texpr.type, StrType | StackType):
                    raise ResolveError(f"a span key must be an integer, not a {texpr.type}",
                                       key.span)
                sides.append(texpr)
            except PlanError as err:
                errs.append(err)
        raise_collected(errs)
        return sides[0], sides[1]

    def check_where(self, size: int) -> TExpr | None:
        if self.spec.where is None:
            return None
        return check_condition(self.spec.where, self, string_size=size)
