"""aarch64 operand decoding (features.md section 3.2, rows A1-A11). Runs on every host:
the parser is chosen by the binary's e_machine, not by the machine running the tests."""

from __future__ import annotations

import pytest

from planrunner.registers import Arm64Reg, arm64_x
from planrunner.usdt.model import Const, Mem, Reg, Undecodable, Unreadable
from planrunner.usdt.operands import describe_operand, parse_args, parse_operand

A = "EM_AARCH64"


def x(n: int) -> Reg:
    return Reg(arm64_x(n), f"x{n}")


def w(n: int) -> Reg:
    return Reg(arm64_x(n), f"w{n}")


SP = Reg(Arm64Reg.SP, "sp")

READABLE = [
    # A1 x registers
    ("8@x0", 8, False, False, x(0)),
    ("-4@x1", 4, True, False, x(1)),
    ("-8@x30", 8, True, False, x(30)),
    ("8@x19", 8, False, False, x(19)),
    # A2 w view: the same regs[N]; SIZE governs
    ("-4@w1", 4, True, False, w(1)),
    ("4@w30", 4, False, False, w(30)),
    # A3 stack pointer
    ("8@sp", 8, False, False, SP),
    ("8@x31", 8, False, False, Reg(Arm64Reg.SP, "x31")),
    # A4 constants, with or without '#'
    ("4@5", 4, False, False, Const(5)),
    ("-4@-1", 4, True, False, Const(-1)),
    ("4@#5", 4, False, False, Const(5)),
    ("-8@#-16", 8, True, False, Const(-16)),
    ("8@0x20", 8, False, False, Const(32)),
    ("8@xzr", 8, False, False, Const(0)),
    # A5 sp + offset (the space inside the brackets)
    ("-4@[sp, 8]", 4, True, False, Mem(SP, 8)),
    ("8@[sp, 120]", 8, False, False, Mem(SP, 120)),
    ("-4@[sp,136]", 4, True, False, Mem(SP, 136)),
    # A6 negative offsets
    ("8@[x19, -16]", 8, False, False, Mem(x(19), -16)),
    ("-4@[x30, -40]", 4, True, False, Mem(x(30), -40)),
    # A7 no offset
    ("8@[x0]", 8, False, False, Mem(x(0))),
    ("-4@[sp]", 4, True, False, Mem(SP)),
    # A8 index register (scale 1), and an lsl-scaled one
    ("-1@[x0, x1]", 1, True, False, Mem(x(0), 0, x(1), 1)),
    ("8@[x2, x3, lsl #3]", 8, False, False, Mem(x(2), 0, x(3), 8)),
    # A11 '#'-prefixed offset
    ("8@[x29, #16]", 8, False, False, Mem(x(29), 16)),
    # size omitted
    ("x5", 8, False, False, x(5)),
    ("w5", 4, False, False, w(5)),
    # float-typed memory stays readable (raw bits)
    ("8f@[sp, 16]", 8, False, True, Mem(SP, 16)),
]

UNREADABLE = ["-8@v0", "8@d0", "4@s0", "16@q0", "8f@v0", "8f@d0", "8@v31", "4f@s7"]

UNDECODABLE = [
    ("8@foo", "unknown register or constant 'foo'", 2),
    ("8@x32", "unknown register or constant 'x32'", 2),
    ("8@[x0", "expected ']'", 5),
    ("8@[foo, 8]", "expected a base register", 3),
    ("8@[w0, 8]", "expected a base register", 3),
    ("8@[x0, w1, sxtw]", "extended 32-bit index registers", 7),
    ("8@[x0, x1, asr #2]", "only 'lsl #N'", 11),
    ("8@[x0, bar]", "expected an offset or an index register", 7),
    ("8@[x0, sp]", "expected an offset or an index register", 7),
    ("12@x0", "unsupported argument size 12", 0),
    ("8@", "empty operand", 2),
]


@pytest.mark.parametrize(("text", "size", "signed", "is_float", "operand"), READABLE)
def test_readable(text: str, size: int, signed: bool, is_float: bool, operand: object) -> None:
    arg = parse_operand(text, A)
    assert (arg.text, arg.size, arg.signed, arg.is_float, arg.operand) == (
        text, size, signed, is_float, operand)


@pytest.mark.parametrize(("text", "reason"), [
    ("-4@[x0, #:tprel_lo12_nc:tv]", "thread-local variable 'tv' (:tprel_lo12_nc: offset "
                                    "from the thread pointer tpidr_el0)"),
    ("-4@[x1, :tprel_lo12:tv]", "thread-local variable 'tv'"),
    ("-8@[x2, #:dtprel_lo12_nc:sarr]", "thread-local variable 'sarr'"),
    ("8@[x3, #:lo12:counter]", "symbol-relative offset (:lo12:counter)"),
])
def test_relocated_offsets_are_unreadable_with_a_reason(text: str, reason: str) -> None:
    op = parse_operand(text, A).operand
    assert isinstance(op, Unreadable)
    assert reason in op.reason


@pytest.mark.parametrize("text", UNREADABLE)
def test_simd_registers_are_unreadable(text: str) -> None:
    op = parse_operand(text, A).operand
    if text.startswith("16@"):  # q registers are also too wide
        assert isinstance(op, Undecodable)
    else:
        assert op == Unreadable("SIMD/FP register")


@pytest.mark.parametrize(("text", "reason", "column"), UNDECODABLE)
def test_undecodable(text: str, reason: str, column: int) -> None:
    op = parse_operand(text, A).operand
    assert isinstance(op, Undecodable)
    assert reason in op.reason
    assert op.column == column


def test_bracket_aware_split() -> None:
    args = parse_args("-4@[sp, 136]  8@x0 -1@[x0, x1] -4@w1 ", A)
    assert [a.text for a in args] == ["-4@[sp, 136]", "8@x0", "-1@[x0, x1]", "-4@w1"]
    assert args[0].operand == Mem(SP, 136)


def test_bcc_argument_strings() -> None:
    """aarch64 argument strings of bcc's usdt args test."""
    args = parse_args("-1@x0 4@5 8@x12 -4@x30 8@[x19, -16] 8@[sp, 64] -4@[x29, 20] "
                      "8@[sp] -1@[x0, x1]", A)
    assert len(args) == 9 and all(a.readable for a in args)
    assert args[6].operand == Mem(x(29), 20)


def test_x86_operands_do_not_decode_as_aarch64() -> None:
    args = parse_args("8@%rax -4@$5", A)
    assert all(isinstance(a.operand, Undecodable) for a in args)


def test_describe() -> None:
    assert describe_operand(parse_operand("-4@[sp, 136]", A)) == "4 signed bytes @ [sp, 136]"
    assert describe_operand(parse_operand("8@d0", A)) == (
        "8 bytes @ d0: not readable (SIMD/FP register)")
    assert describe_operand(parse_operand("4@#5", A)) == "4 unsigned bytes = 5"
