"""x86-64 operand decoding: tables of operand strings as `readelf -n` prints them
(features.md section 3.1, bcc's test strings from libpthread/PostgreSQL/OpenJDK, what gcc
emits for the fixtures) and every operand found in real USDT binaries on this machine."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planrunner.registers import X86Reg
from planrunner.usdt.model import (
    Const,
    Mem,
    Reg,
    RipRel,
    SymMem,
    TlsMem,
    Undecodable,
    Unreadable,
)
from planrunner.usdt.operands import (
    const_value,
    describe_operand,
    operand_error,
    parse_args,
    parse_operand,
)

X = "EM_X86_64"
BIN = Path(__file__).parents[1] / "fixtures" / "elf" / "bin"


def R(reg: str, name: str, shift: int = 0) -> Reg:
    """The register `name` as written, a view of the 64-bit register `reg`."""
    return Reg(X86Reg(reg), name, shift)


# (text, size, signed, is_float, operand)
READABLE = [
    # X1 constants
    ("-4@$5", 4, True, False, Const(5)),
    ("8@$1234", 8, False, False, Const(1234)),
    ("-8@$-1", 8, True, False, Const(-1)),
    ("-4@$0", 4, True, False, Const(0)),
    ("4@$0x10", 4, False, False, Const(16)),
    # X2 above INT64_MAX: the exact integer is kept
    ("8@$18446744073709551614", 8, False, False, Const(18446744073709551614)),
    # X3 64-bit registers
    ("8@%rax", 8, False, False, R("rax", "rax")),
    ("8@%r12", 8, False, False, R("r12", "r12")),
    ("-8@%rbx", 8, True, False, R("rbx", "rbx")),
    ("8@%rsp", 8, False, False, R("rsp", "rsp")),
    ("8@%rbp", 8, False, False, R("rbp", "rbp")),
    ("8@%rip", 8, False, False, R("rip", "rip")),
    # X4 low parts of registers: every alias maps to the full pt_regs member
    ("-4@%eax", 4, True, False, R("rax", "eax")),
    ("-4@%r8d", 4, True, False, R("r8", "r8d")),
    ("2@%ax", 2, False, False, R("rax", "ax")),
    ("-2@%cx", 2, True, False, R("rcx", "cx")),
    ("-1@%al", 1, True, False, R("rax", "al")),
    ("-1@%sil", 1, True, False, R("rsi", "sil")),
    ("-1@%dil", 1, True, False, R("rdi", "dil")),
    ("1@%bpl", 1, False, False, R("rbp", "bpl")),
    ("1@%spl", 1, False, False, R("rsp", "spl")),
    ("1@%r9b", 1, False, False, R("r9", "r9b")),
    ("2@%r8w", 2, False, False, R("r8", "r8w")),
    ("4@%r15d", 4, False, False, R("r15", "r15d")),
    ("-2@%r11w", 2, True, False, R("r11", "r11w")),
    ("4@%esi", 4, False, False, R("rsi", "esi")),
    ("4@%ebp", 4, False, False, R("rbp", "ebp")),
    ("1@%cl", 1, False, False, R("rcx", "cl")),
    ("1@%dl", 1, False, False, R("rdx", "dl")),
    ("1@%bl", 1, False, False, R("rbx", "bl")),
    # X5 high bytes: bits 8-15
    ("1@%ah", 1, False, False, R("rax", "ah", 8)),
    ("1@%bh", 1, False, False, R("rbx", "bh", 8)),
    ("-1@%ch", 1, True, False, R("rcx", "ch", 8)),
    ("1@%dh", 1, False, False, R("rdx", "dh", 8)),
    # X6 size omitted: the register's width, unsigned; a long otherwise
    ("%rdi", 8, False, False, R("rdi", "rdi")),
    ("%rax", 8, False, False, R("rax", "rax")),
    ("%eax", 4, False, False, R("rax", "eax")),
    ("8(%rsp)", 8, False, False, Mem(R("rsp", "rsp"), 8)),
    # X7 base + displacement
    ("8@-8(%rbp)", 8, False, False, Mem(R("rbp", "rbp"), -8)),
    ("-4@16(%rsp)", 4, True, False, Mem(R("rsp", "rsp"), 16)),
    ("4@-1204(%rbp)", 4, False, False, Mem(R("rbp", "rbp"), -1204)),
    # X8 no displacement
    ("8@(%rsp)", 8, False, False, Mem(R("rsp", "rsp"))),
    ("4@(%rax)", 4, False, False, Mem(R("rax", "rax"))),
    # X9 SIB
    ("-8@(%rdx,%rax,8)", 8, True, False, Mem(R("rdx", "rdx"), 0, R("rax", "rax"), 8)),
    ("4@(%rbx,%rcx)", 4, False, False, Mem(R("rbx", "rbx"), 0, R("rcx", "rcx"), 1)),
    ("1@-96(%rbp,%rax,8)", 1, False, False, Mem(R("rbp", "rbp"), -96, R("rax", "rax"), 8)),
    ("-4@(%rax,%rdi,4)", 4, True, False, Mem(R("rax", "rax"), 0, R("rdi", "rdi"), 4)),
    ("8@(%rax,%r12,8)", 8, False, False, Mem(R("rax", "rax"), 0, R("r12", "r12"), 8)),
    ("8@(,%rax,8)", 8, False, False, Mem(None, 0, R("rax", "rax"), 8)),
    ("8@( %rdx , %rax , 2 )", 8, False, False, Mem(R("rdx", "rdx"), 0, R("rax", "rax"), 2)),
    # X10 / X11 rip-relative globals, offset before or after the symbol
    ("-4@global_max_action(%rip)", 4, True, False, RipRel("global_max_action")),
    ("8@24+mp_(%rip)", 8, False, False, RipRel("mp_", 24)),
    ("-4@CheckpointStats+40(%rip)", 4, True, False, RipRel("CheckpointStats", 40)),
    ("4@glob-2(%rip)", 4, False, False, RipRel("glob", -2)),
    ("4@mp_.1234(%rip)", 4, False, False, RipRel("mp_.1234")),
    ("8@_$sym.1+0x10(%rip)", 8, False, False, RipRel("_$sym.1", 16)),
    ("-8@8+gstats(%rip)", 8, True, False, RipRel("gstats", 8)),
    ("8@.LC0(%rip)", 8, False, False, RipRel(".LC0")),
    # X14 float-typed
    ("4f@-20(%rbp)", 4, False, True, Mem(R("rbp", "rbp"), -20)),
    ("8f@v_d(%rip)", 8, False, True, RipRel("v_d")),
    # X17 hex displacement; also octal as gas reads it
    ("8@0x10(%rax)", 8, False, False, Mem(R("rax", "rax"), 16)),
    ("8@-0x10(%rax)", 8, False, False, Mem(R("rax", "rax"), -16)),
    ("8@010(%rax)", 8, False, False, Mem(R("rax", "rax"), 8)),
    # absolute indexed (non-PIC code: a global plus registers, no %rip), as gcc -O2
    # -fno-PIE writes them (tests/fixtures/elf/indexed.c)
    ("-4@table(,%rax,4)", 4, True, False, SymMem("table", 0, None, R("rax", "rax"), 4)),
    ("-4@table(,%rdi,4)", 4, True, False, SymMem("table", 0, None, R("rdi", "rdi"), 4)),
    ("8@table+16(,%rdx,8)", 8, False, False, SymMem("table", 16, None, R("rdx", "rdx"), 8)),
    ("-8@stab+16(,%rax,8)", 8, True, False, SymMem("stab", 16, None, R("rax", "rax"), 8)),
    ("-1@ctab(%rdi)", 1, True, False, SymMem("ctab", 0, R("rdi", "rdi"))),
    ("-1@ctab+3(%rdi)", 1, True, False, SymMem("ctab", 3, R("rdi", "rdi"))),
    ("-2@htab(%rdi,%rdi)", 2, True, False,
     SymMem("htab", 0, R("rdi", "rdi"), R("rdi", "rdi"), 1)),
    ("-8@big-8(,%rdi,8)", 8, True, False, SymMem("big", -8, None, R("rdi", "rdi"), 8)),
    ("-4@global_var", 4, True, False, SymMem("global_var")),
    # ... with a literal base: an absolute address, never rebased
    ("-4@0x404040(,%rcx,4)", 4, True, False, Mem(None, 0x404040, R("rcx", "rcx"), 4)),
    ("-4@268435456(,%rdi,4)", 4, True, False, Mem(None, 268435456, R("rdi", "rdi"), 4)),
    ("4@1234", 4, False, False, Mem(None, 1234)),
    # local-dynamic thread-local in a shared library: %rax holds the module's TLS block
    ("-8@sarr@dtpoff(%rax,%rbx,8)", 8, True, False,
     SymMem("sarr", 0, R("rax", "rax"), R("rbx", "rbx"), 8, "dtpoff")),
    # thread-local: %fs: is the thread pointer (tests/fixtures/elf/tls.c, libtls.c)
    ("-4@%fs:tv@tpoff", 4, True, False, TlsMem(symbol="tv")),
    ("-4@%fs:var@tpoff", 4, True, False, TlsMem(symbol="var")),
    ("-8@%fs:tl@tpoff+16", 8, True, False, TlsMem(16, symbol="tl")),
    ("-8@%fs:16+tl@tpoff", 8, True, False, TlsMem(16, symbol="tl")),
    ("-8@%fs:tl@tpoff(,%rdi,8)", 8, True, False,
     TlsMem(0, None, R("rdi", "rdi"), 8, symbol="tl")),
    ("-1@%fs:tc@tpoff(%rdi)", 1, True, False, TlsMem(0, R("rdi", "rdi"), symbol="tc")),
    ("-4@%fs:0xfffffffffffffffc", 4, True, False, TlsMem(-4)),
    ("-4@%fs:-4", 4, True, False, TlsMem(-4)),
    ("8@%fs:0", 8, False, False, TlsMem(0)),
    ("8@%fs:40", 8, False, False, TlsMem(40)),
    ("-8@%fs:16(%rax)", 8, True, False, TlsMem(16, R("rax", "rax"))),
    ("-4@%fs:(%rcx)", 4, True, False, TlsMem(0, R("rcx", "rcx"))),
    ("8@%fs:(%rax)", 8, False, False, TlsMem(0, R("rax", "rax"))),
    ("-8@%fs:(%rdx,%rbx,8)", 8, True, False, TlsMem(0, R("rdx", "rdx"), R("rbx", "rbx"), 8)),
]

UNREADABLE = [
    ("8@%xmm0", "SSE register"),
    ("8@%xmm15", "SSE register"),
    ("8f@%xmm1", "SSE register"),
    ("8@%ymm3", "AVX register"),
    ("8@%zmm31", "AVX register"),
    ("8@%st0", "x87 register"),
    ("8@%st", "x87 register"),
    ("8@%st(1)", "x87 register"),
    ("8@%mm0", "MMX register"),
    ("8@%cs", "segment register"),
    ("8@%gs:0x28", "segment-relative memory (%gs:): only %fs:"),
    ("8@%es:(%rax)", "segment-relative memory"),
]

UNDECODABLE = [
    # (text, reason fragment, column)
    ("24@%rax", "unsupported argument size 24", 0),
    ("-16@-32(%rbp)", "unsupported argument size 16", 1),
    ("0@%rax", "unsupported argument size 0", 0),
    ("3@%rax", "unsupported argument size 3", 0),
    ("8x@%rax", "malformed size prefix", 0),
    ("4@%foo", "unknown register %foo", 2),
    ("8@$sym", "symbol's address as an immediate", 2),
    ("8@$", "expected an integer", 3),
    ("8@16(%rip)", "rip-relative operand without a symbol", 2),
    ("8@%fs:tv@dtpoff", "@dtpoff cannot be used with %fs:", 6),
    ("8@%fs:tv", "must be a thread-local offset (var@tpoff)", 6),
    ("8@tv@tpoff(%rax)", "@tpoff is only meaningful after %fs:", 2),
    ("8@tv@dtpoff", "needs the module's TLS block in a base register", 2),
    ("8@tv@gotpoff(%rax)", "malformed displacement", 2),
    ("8@%fs:(%rip)", "%rip cannot be used as an address register", 7),
    ("8@%fs:", "empty operand", 6),
    ("8@%fs:%rax", "expected $CONST", 6),
    ("8@(%rax,%rbx,3)", "scale must be 1, 2, 4 or 8", 13),
    ("8@(%eax)", "%eax cannot be used as an address register", 3),
    ("8@(%rax,%rip)", "%rip cannot be used", 8),
    ("8@(%rax", "expected $CONST", 2),
    ("8@sym-other(%rip)", "malformed displacement", 2),
    ("8@", "empty operand", 2),
]


@pytest.mark.parametrize(("text", "size", "signed", "is_float", "operand"), READABLE)
def test_readable(text: str, size: int, signed: bool, is_float: bool, operand: object) -> None:
    arg = parse_operand(text, X)
    assert (arg.text, arg.size, arg.signed, arg.is_float, arg.operand) == (
        text, size, signed, is_float, operand)
    assert arg.readable


@pytest.mark.parametrize(("text", "reason"), UNREADABLE)
def test_unreadable(text: str, reason: str) -> None:
    arg = parse_operand(text, X)
    assert isinstance(arg.operand, Unreadable)
    assert reason in arg.operand.reason
    assert not arg.readable


@pytest.mark.parametrize(("text", "reason", "column"), UNDECODABLE)
def test_undecodable(text: str, reason: str, column: int) -> None:
    op = parse_operand(text, X).operand
    assert isinstance(op, Undecodable)
    assert reason in op.reason
    assert op.column == column


def test_constant_values_follow_size_and_sign() -> None:
    def value(text: str) -> int:
        return const_value(parse_operand(text, X))

    assert value("4@$-1") == 4294967295  # gcc prints an unsigned 0xffffffff as $-1
    assert value("8@$-2") == 18446744073709551614
    assert value("-8@$18446744073709551614") == -2
    assert value("-2@$-3") == -3
    assert value("1@$256") == 0
    assert value("-8@$-9223372036854775808") == -(2**63)


def test_bcc_argument_strings() -> None:
    """The x86-64 argument strings of bcc's usdt args test (libpthread, PostgreSQL, OpenJDK)."""
    text = ("-4@$0 8@$1234 %rdi %rax %rsi -8@%rbx 4@%r12 8@-8(%rbp) 4@(%rax) "
            "-4@global_max_action(%rip) 8@24+mp_(%rip) -4@CheckpointStats+40(%rip) "
            "4@glob-2(%rip) 8@(%rax,%rdx,8) 4@(%rbx,%rcx)")
    args = parse_args(text, X)
    assert len(args) == 15 and all(a.readable for a in args)
    assert args[6].operand == R("r12", "r12") and args[6].size == 4
    assert args[13].operand == Mem(R("rax", "rax"), 0, R("rdx", "rdx"), 8)


def test_tokenisation_tolerates_runs_of_spaces() -> None:  # X19
    args = parse_args("  -4@%eax   8@-8(%rbp)\t8@$1 ", X)
    assert [a.text for a in args] == ["-4@%eax", "8@-8(%rbp)", "8@$1"]
    assert parse_args("", X) == () and parse_args("   ", X) == ()


def test_bad_operand_keeps_its_place() -> None:
    args = parse_args("-4@%eax 8@%bogus 16@%rdx 8@%xmm0 8@%rbx", X)
    assert [type(a.operand).__name__ for a in args] == [
        "Reg", "Undecodable", "Undecodable", "Unreadable", "Reg"]
    assert args[4].operand == R("rbx", "rbx")


def test_unknown_machine_never_crashes() -> None:
    args = parse_args("8@%rax -4@[sp, 8]", "EM_RISCV")
    assert len(args) == 2
    assert all(a.operand == Undecodable("no operand parser for EM_RISCV", 0) for a in args)


@given(st.text(alphabet="-0123456789f@$%(),+ abcdehilprswx:[]#.\t", max_size=40))
def test_parse_args_never_raises(text: str) -> None:
    for machine in ("EM_X86_64", "EM_AARCH64", "EM_NONE"):
        args = parse_args(text, machine)
        assert len(args) == len(text.split()) or "[" in text or "(" in text


@pytest.mark.parametrize(("text", "expected"), [
    ("-8@%rbx", "8 signed bytes @ %rbx"),
    ("4@-8(%rbp)", "4 unsigned bytes @ -8(%rbp)"),
    ("8@%xmm0", "8 bytes @ %xmm0: not readable (SSE register)"),
    ("-8@$5", "8 signed bytes = 5"),
    ("4@$-1", "4 unsigned bytes = 4294967295"),
    ("-4@global_max+8(%rip)", "4 signed bytes @ global_max+8(%rip)"),
    ("-1@%ah", "1 signed byte @ %ah"),
    ("8f@-8(%rbp)", "8 float bytes @ -8(%rbp)"),
    ("%rdi", "8 unsigned bytes @ %rdi"),
    ("24@%rax", "24 bytes @ %rax: cannot decode (unsupported argument size 24 "
                "(only 1, 2, 4 and 8 bytes can be read))"),
    ("4@%f\x1bo", "4 bytes @ %f\\x1bo: cannot decode (malformed register)"),
])
def test_describe(text: str, expected: str) -> None:
    assert describe_operand(parse_operand(text, X)) == expected


def test_operand_error_points_at_the_column() -> None:
    msg = operand_error(parse_operand("-4@%foo", X), "app:start", 0x1139)
    assert msg == ("probe app:start at 0x1139: argument '-4@%foo' cannot be decoded: "
                   "unknown register %foo\n    -4@%foo\n       ^")
    msg = operand_error(parse_operand("8@%xmm0", X), "app:start", 0x10)
    assert msg.splitlines()[0].endswith("is not readable: SSE register")
    assert msg.splitlines()[2] == "      ^"
    with pytest.raises(ValueError):
        operand_error(parse_operand("8@%rax", X), "app:start", 0)


# --- operands of real binaries ---------------------------------------------------------

def readelf_arguments(path: str) -> list[str]:
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"^\s*Arguments: ?(.*)$", out, re.M)


REAL = ["/usr/lib/postgresql/15/bin/postgres", "/usr/bin/python3.11",
        *sorted(glob.glob("/usr/lib/jvm/*17*/lib/server/libjvm.so"))[:1]]


@pytest.mark.parametrize("path", REAL)
def test_every_operand_of_real_binaries_is_readable(path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")
    args = [a for text in readelf_arguments(path) for a in parse_args(text, X)]
    bad = [a.text for a in args if not a.readable]
    print(f"{path}: {len(args)} operands, {len(bad)} not readable")
    assert args and not bad


@pytest.mark.parametrize("name", ["operands_O0", "operands_O2", "demo", "libprobe.so"])
def test_fixture_operands(name: str) -> None:
    """Every gcc-emitted fixture operand is readable; only `operands:unreadable` arg1 is not."""
    texts = readelf_arguments(str(BIN / name))
    args = [a for text in texts for a in parse_args(text, X)]
    assert len(args) >= 3
    bad = [a.text for a in args if not a.readable]
    assert bad == (["8f@%xmm0"] if name.startswith("operands") else [])
