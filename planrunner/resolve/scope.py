"""Expression scopes: which names a probe's expressions may use and what each means.

A name is a symbolic reference (`ArgRef`, `BuiltinRef`; expr/typed.py) with its type, or
a param's constant. Scopes are frozen and lookups have no side effects: which arguments a
probe reads is computed afterwards from the checked trees (resolve/usage.py), and render/
alone decides what C holds each reference.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from planrunner.expr.check import STACKS, Symbol
from planrunner.expr.typed import ArgRef, Builtin, BuiltinRef, DepthRef, ParamRef, StackRef
from planrunner.expr.types import (
    DEFAULT_FRAMES,
    DURATION,
    BoolType,
    IntType,
    StackType,
    StrType,
    Type,
)
from planrunner.param_values import data_class
from planrunner.plan.model import Plan

COMM_SIZE = 16
# `func`: the function, USDT probe or tracepoint that fired, a name of the program's
# table (render/model.py RenderedProgram.func_names) of at most FUNC_SIZE - 1 bytes
FUNC_SIZE = 64

BUILTINS: dict[Builtin, Type] = {
    "pid": IntType(32, False),
    "tid": IntType(32, False),
    "uid": IntType(32, False),
    "gid": IntType(32, False),
    "cpu": IntType(32, False),
    "ts": IntType(64, False),
    "comm": StrType(COMM_SIZE),
    "func": StrType(FUNC_SIZE),
}


@dataclass(frozen=True, slots=True)
class Constants:
    """The plan's params as expression names: name -> (type, value).

    A param is data (T.ParamRef: read from the params map at run time, so that a run
    with another value reuses the compiled program) when it is an int or a duration,
    its value is not negative (an int's type would change with its sign), and no
    `${name}` writes it into the plan's text; the checker pins the ones it needs as
    constants (`pins`). The others are constants, folded into the C."""

    values: Mapping[str, tuple[Type, object]]
    data: frozenset[str] = frozenset()
    # ints and durations not written by `${name}`: data whenever their value allows
    eligible: frozenset[str] = frozenset()
    pins: set[str] = field(default_factory=set, compare=False, hash=False)

    @classmethod
    def of(cls, plan: Plan) -> Constants:
        kinds = {p.name: p.type for p in plan.params}
        values = {name: (DURATION if kinds.get(name) == "duration" and isinstance(
            value, int) and value >= 0 else const_type(value), value)
            for name, value in plan.param_values.items()}
        eligible = frozenset(name for name, kind in kinds.items()
                             if kind in ("int", "duration")
                             and name not in plan.substituted_params)
        data = frozenset(name for name, value in plan.param_values.items()
                         if name in eligible and data_class(kinds[name], value) == "data")
        return cls(values, data, eligible)

    def lookup(self, name: str) -> Symbol | None:
        if name not in self.values:
            return None
        typ, value = self.values[name]
        if name in self.data:
            assert isinstance(value, int)
            return Symbol(typ, ParamRef(name, value, self.pins), value)
        return Symbol(typ, None, value)

    def data_params(self) -> tuple[tuple[str, Type], ...]:
        """The params the program reads as data (after every expression was checked:
        pinned ones are constants), by name."""
        return tuple((name, self.values[name][0]) for name in sorted(self.data - self.pins))

    def value_params(self) -> frozenset[str]:
        """The params whose value, within its data class, never shapes the program (after
        every expression was checked): a run cache key needs only their class."""
        return self.eligible - self.pins


@dataclass(frozen=True, slots=True)
class ProbeScope:
    """Names visible in one probe's expressions: arguments, builtins, params.

    `args` maps a name (`argN` and declared names) to (argument index, Type); index 0 is
    `retval`. `what` and `arg_count` serve messages: what the probe is ("probe 'start'
    (demo:request__start in ...)") and how many arguments it really has (None: no fixed
    count, e.g. tracepoints)."""

    args: Mapping[str, tuple[int, Type]]
    constants: Constants
    what: str = ""
    arg_count: int | None = None
    # The nested spans this probe begins or ends: `depth` is theirs when there is one.
    nested_spans: tuple[str, ...] = ()
    # a function's return that declares no args: `argN` would read what the function
    # left in the registers, so only `retval` is offered
    at_return: bool = False

    def explain_unknown(self, name: str) -> str | None:
        """A better message than 'unknown name' for an argN past the probe's arguments,
        or a `depth` with no nested span to measure it."""
        if name == "depth":
            return depth_unknown(self.nested_spans)
        match = re.fullmatch(r"arg(\d+)", name)
        if match and self.arg_count == 0 and self.at_return:
            return (f"'{name}' does not exist: a {self.what} sees only `retval`; to read "
                    "arguments, pair a uprobe with it in a span and use begin.argN")
        if match and self.arg_count is not None and int(match.group(1)) > self.arg_count:
            n = self.arg_count
            return (f"'{name}' does not exist: {self.what} has {n} "
                    f"argument{'s' if n != 1 else ''}")
        return None

    def lookup(self, name: str) -> Symbol | None:
        if name in self.args:
            index, typ = self.args[name]
            return Symbol(typ, ArgRef(index))
        if name in BUILTINS:
            return builtin_symbol(name)
        if name in STACKS:
            kind = STACKS[name]
            return Symbol(StackType(kind, DEFAULT_FRAMES[kind]), StackRef(kind))
        if name == "depth" and len(self.nested_spans) == 1:
            return Symbol(DEPTH_TYPE, DepthRef(self.nested_spans[0]))
        return self.constants.lookup(name)

    def names(self) -> Iterable[str]:
        depth = ["depth"] if len(self.nested_spans) == 1 else []
        return [*self.args, *BUILTINS, *STACKS, *depth, *self.constants.values]

    def type_of(self, index: int) -> Type:
        """The type of argument `index`."""
        return next(t for i, t in self.args.values() if i == index)


DEPTH_TYPE = IntType(32, False)


def depth_unknown(nested_spans: tuple[str, ...]) -> str:
    if nested_spans:
        return (f"'depth' is ambiguous here: this probe is part of nested spans "
                f"{', '.join(repr(s) for s in nested_spans)}; use it in one span's outputs")
    return ("'depth' is the call depth of a nested span: it exists in the outputs of a "
            "span with `nested: true` and of the probes it begins and ends at")


def builtin_symbol(name: Builtin) -> Symbol:
    return Symbol(BUILTINS[name], BuiltinRef(name))


def const_type(value: object) -> Type:
    if isinstance(value, bool):
        return BoolType()
    if isinstance(value, int):
        return IntType(64, value < 0)
    if isinstance(value, str):
        return StrType(len(value.encode()) + 1)
    return IntType(64, True)  # numbers are rejected by the checker where they matter
