"""Operand parsers in a registry keyed by the binary's ELF e_machine.

Contract:
- `parse_args(text, machine)` splits a note's argument string (bracket-aware: aarch64
  `-4@[sp, 136]` holds a space) and decodes each operand. It never raises: an operand
  that cannot be decoded becomes `Undecodable(reason, column)` in place, so argument
  indexes never shift; an unknown machine gives `Undecodable` for every operand.
- `parse_operand(text, machine)` decodes one operand token.
- `describe_operand(arg)` is the one-line text for listings.
- `operand_error(arg, probe, location_pc)` is the message (with a caret line) the plan
  validator shows when a plan reads an argument that is not readable.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from planrunner.usdt.model import ArgOperand, Const, Undecodable, Unreadable
from planrunner.usdt.operands.common import effective_const, split_args

# e_machine -> its parser's module in this package, imported on first use: a run reads
# the notes of one architecture, and each parser's regexes cost start-up (validate,
# issue 17).
PARSER_MODULES: dict[str, str] = {
    "EM_X86_64": "x86_64",
    "EM_AARCH64": "aarch64",
}
_PARSERS: dict[str, Callable[[str], ArgOperand]] = {}

__all__ = ["PARSER_MODULES", "describe_operand", "operand_error", "parse_args", "parse_operand",
           "const_value"]


def parse_operand(text: str, machine: str) -> ArgOperand:
    parser = _PARSERS.get(machine)
    if parser is None:
        module = PARSER_MODULES.get(machine)
        if module is None:
            return ArgOperand(text, 8, False, False,
                              Undecodable(f"no operand parser for {machine}", 0))
        parser = _PARSERS[machine] = importlib.import_module(
            f"planrunner.usdt.operands.{module}").parse_operand
    return parser(text)


def parse_args(text: str, machine: str) -> tuple[ArgOperand, ...]:
    return tuple(parse_operand(token, machine) for token, _ in split_args(text))


def const_value(arg: ArgOperand) -> int:
    """The value a constant argument carries: truncated to SIZE, extended by its sign."""
    if not isinstance(arg.operand, Const):
        raise ValueError(f"{arg.text!r} is not a constant")
    return effective_const(arg.operand.value, arg.size, arg.signed)


def _printable(text: str) -> str:
    # Note text comes from a binary: keep terminal control characters out of listings.
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _operand_text(arg: ArgOperand) -> str:
    head, sep, tail = arg.text.partition("@")
    body = tail if sep and (head.lstrip("-").rstrip("f").isdigit()) else arg.text
    return _printable(body)


def describe_operand(arg: ArgOperand) -> str:
    """`8 signed bytes @ %rbx`, `8 signed bytes = 5`, `8 bytes @ %xmm0: not readable (...)`."""
    where = _operand_text(arg)
    op = arg.operand
    if isinstance(op, Unreadable):
        return f"{arg.size} bytes @ {where}: not readable ({op.reason})"
    if isinstance(op, Undecodable):
        return f"{arg.size} bytes @ {where}: cannot decode ({op.reason})"
    kind = "float" if arg.is_float else ("signed" if arg.signed else "unsigned")
    unit = "byte" if arg.size == 1 else "bytes"
    if isinstance(op, Const):
        return f"{arg.size} {kind} {unit} = {const_value(arg)}"
    return f"{arg.size} {kind} {unit} @ {where}"


def operand_error(arg: ArgOperand, probe: str, location_pc: int) -> str:
    """`probe P at 0xPC: argument `TEXT` is not readable: REASON` + operand + caret."""
    op = arg.operand
    if isinstance(op, Undecodable):
        what, column = f"cannot be decoded: {op.reason}", op.column
    elif isinstance(op, Unreadable):
        what, column = f"is not readable: {op.reason}", _operand_column(arg)
    else:
        raise ValueError(f"{arg.text!r} is readable")
    text = _printable(arg.text)
    column = max(0, min(column, len(text)))
    return (f"probe {probe} at {location_pc:#x}: argument '{text}' {what}\n"
            f"    {text}\n"
            f"    {' ' * column}^")


def _operand_column(arg: ArgOperand) -> int:
    head, sep, _ = arg.text.partition("@")
    return len(head) + 1 if sep and head.lstrip("-").rstrip("f").isdigit() else 0
