"""Expression scopes: which names a probe's expressions may use, their types and the
generated C that holds them. Records which names were used so the renderer reads only
what the plan needs (an unused argument is never read, so an unreadable operand that
nobody asks for never blocks attaching).

C names are generated here from fixed patterns; user spellings never reach C.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from planrunner.expr.check import Symbol
from planrunner.expr.types import BoolType, IntType, StrType, Type

COMM_SIZE = 16

# builtin name -> (type, C local computed by the body prologue)
BUILTINS: dict[str, tuple[Type, str]] = {
    "pid": (IntType(32, False), "pr_pid"),
    "tid": (IntType(32, False), "pr_tid"),
    "uid": (IntType(32, False), "pr_uid"),
    "gid": (IntType(32, False), "pr_gid"),
    "cpu": (IntType(32, False), "pr_cpu"),
    "ts": (IntType(64, False), "pr_ts"),
    "comm": (StrType(COMM_SIZE), "pr_comm"),
}


@dataclass
class ProbeScope:
    """Names visible in one probe's expressions (args, builtins, params).

    `args` maps a name (`argN` and declared names) to (slot index, Type); slot index 0
    is `retval`. `used_args` and `used_builtins` grow as expressions are checked.
    """

    args: dict[str, tuple[int, Type]]
    params: dict[str, object]
    extra: dict[str, Symbol] = field(default_factory=dict)  # latency, begin.X ...
    used_args: set[int] = field(default_factory=set)
    used_builtins: set[str] = field(default_factory=set)
    on_lookup: object = None  # callable(name) -> Symbol | None for span sides
    # For messages: what the probe is ("usdt demo:request__start") and how many
    # arguments it really has (None: no fixed count, e.g. tracepoints).
    what: str = ""
    arg_count: int | None = None

    def explain_unknown(self, name: str) -> str | None:
        """A better message than 'unknown name' for an argN past the probe's arguments."""
        match = re.fullmatch(r"arg(\d+)", name)
        if match and self.arg_count == 0 and self.what.startswith("uretprobe"):
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
            self.used_args.add(index)
            return Symbol(typ, arg_c_name(index, typ))
        if name in BUILTINS:
            typ, c_name = BUILTINS[name]
            self.used_builtins.add(name)
            return Symbol(typ, c_name)
        if name in self.extra:
            return self.extra[name]
        if callable(self.on_lookup):
            sym = self.on_lookup(name)
            if sym is not None:
                return sym
        if name in self.params:
            value = self.params[name]
            return Symbol(const_type(value), None, value)
        return None

    def names(self) -> Iterable[str]:
        return [*self.args, *BUILTINS, *self.extra, *self.params]


def arg_c_name(index: int, typ: Type) -> str:
    """The body's C expression for argument slot `index` (0 = retval)."""
    if isinstance(typ, StrType):
        return f"sc->s{index}"
    return f"a->v{index}"


def const_type(value: object) -> Type:
    if isinstance(value, bool):
        return BoolType()
    if isinstance(value, int):
        return IntType(64, value < 0)
    if isinstance(value, str):
        return StrType(len(value.encode()) + 1)
    return IntType(64, True)  # numbers are rejected by the checker where they matter
