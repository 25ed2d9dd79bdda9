"""The expression scope of a span: `latency`, `begin.X`, `end.X`, and the end event's
builtins (pid, tid, comm... of the thread that ended the span).

A `begin.X` used anywhere in the span's outputs becomes a capture: the begin probe
stores X in the span map's value (member cN) and the end side reads `bg->cN`.
"""

from __future__ import annotations

from collections.abc import Iterable

from planrunner.errors import PlanError, ResolveError, collect
from planrunner.expr.check import Symbol, check, check_condition
from planrunner.expr.typed import TExpr, TVar
from planrunner.expr.types import UINT64, StrType
from planrunner.plan.model import ProbeSpec
from planrunner.resolve.model import SpanCapture
from planrunner.resolve.scope import BUILTINS, ProbeScope, const_type


class SpanScope:
    def __init__(self, spec: ProbeSpec, begin: ProbeScope, end: ProbeScope,
                 params: dict[str, object]) -> None:
        self.spec = spec
        self.begin = begin
        self.end = end
        self.params = params
        self._captures: dict[str, SpanCapture] = {}

    def lookup(self, name: str) -> Symbol | None:
        if name == "latency":
            return Symbol(UINT64, "pr_latency")
        if name.startswith("begin."):
            return self._capture(name[len("begin."):])
        if name.startswith("end."):
            return self.end.lookup(name[len("end."):])
        if name in BUILTINS:
            return self.end.lookup(name)
        if name in self.params:
            value = self.params[name]
            return Symbol(const_type(value), None, value)
        return None

    def names(self) -> Iterable[str]:
        begin = [f"begin.{n}" for n in self.begin.args]
        end = [f"end.{n}" for n in self.end.args]
        return ["latency", *begin, *end, *BUILTINS, *self.params]

    def _capture(self, name: str) -> Symbol | None:
        if name in self._captures:
            cap = self._captures[name]
            return Symbol(cap.expr.type, f"bg->{cap.member}")
        sym = self.begin.lookup(name)
        if sym is None:
            return None
        if sym.c_expr is None:  # a param: the same on both sides
            return sym
        member = f"c{len(self._captures)}"
        texpr = TVar(name, sym.c_expr, sym.type, self.spec.span)
        if isinstance(sym.type, StrType):
            status = ptr = None
            if sym.c_expr.startswith("sc->s"):
                index = sym.c_expr[len("sc->s"):]
                status, ptr = f"sc->st{index}", f"a->v{index}"
            cap = SpanCapture(member, texpr, sym.type.size, status, ptr)
        else:
            cap = SpanCapture(member, texpr)
        self._captures[name] = cap
        return Symbol(sym.type, f"bg->{member}")

    def captures(self) -> tuple[SpanCapture, ...]:
        return tuple(self._captures.values())

    def check_keys(self, size: int) -> tuple[TExpr | None, TExpr | None]:
        """The key expression checked on each side (None: the default, the thread)."""
        key = self.spec.key
        if key is None:
            return None, None
        errs: list[PlanError] = []
        sides = []
        for scope in (self.begin, self.end):
            try:
                texpr = check(key, scope, string_size=size)
                if isinstance(texpr.type, StrType):
                    raise ResolveError("a span key must be an integer, not a string",
                                       self.spec.spec_span)
                sides.append(texpr)
            except PlanError as err:
                errs.append(err)
        if errs:
            raise collect(errs)  # type: ignore[misc]
        return sides[0], sides[1]

    def check_where(self, size: int) -> TExpr | None:
        if self.spec.where is None:
            return None
        return check_condition(self.spec.where, self, string_size=size)
