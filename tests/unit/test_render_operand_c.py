"""Operand -> BPF C lowering: exact text for each form, refusals, and a gcc syntax check of
every lowered form inside a stub harness (fake pt_regs, stub bpf_probe_read_user)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from planrunner.elf.btf import THREAD_POINTER
from planrunner.registers import Arm64Reg, X86Reg
from planrunner.render.operand_c import (
    TASK_FSBASE_OFFSET,
    dest_type,
    lower_operand,
    runtime_constants,
)
from planrunner.usdt.model import ArgOperand, Mem, Reg, RipRel, SymMem, TlsMem
from planrunner.usdt.operands import parse_operand

X, A = "EM_X86_64", "EM_AARCH64"


def resolved(arg: ArgOperand, value: int) -> ArgOperand:
    """`arg` with its symbol resolved to `value`, as resolve/ does."""
    op = arg.operand
    if isinstance(op, RipRel):
        return dataclasses.replace(arg, operand=dataclasses.replace(op, address=value))
    if isinstance(op, SymMem):
        return dataclasses.replace(arg, operand=dataclasses.replace(op, value=value))
    assert isinstance(op, TlsMem)
    return dataclasses.replace(arg, operand=dataclasses.replace(op, tpoff=value))


def lower(text: str, machine: str = X, *, address: int | None = None, pc: int = 0x1139,
          dest: str = "v") -> list[str]:
    arg = parse_operand(text, machine)
    if address is not None:
        arg = resolved(arg, address)
    return lower_operand(arg, pc, machine, dest)


def load(ctype: str, address: str, cast: str = "__s64", dest: str = "v") -> list[str]:
    return ["{", f"    {ctype} _pr_v = 0;",
            f"    bpf_probe_read_user(&_pr_v, sizeof(_pr_v), (void *)({address}));",
            f"    {dest} = ({cast})_pr_v;", "}"]


@pytest.mark.parametrize(("text", "expected"), [
    ("-8@%rbx", "v = (__s64)ctx->bx;"),
    ("8@%r12", "v = (__u64)ctx->r12;"),
    ("-4@%eax", "v = (__s64)(__s32)ctx->ax;"),
    ("4@%r8d", "v = (__u64)(__u32)ctx->r8;"),
    ("-2@%cx", "v = (__s64)(__s16)ctx->cx;"),
    ("-1@%sil", "v = (__s64)(__s8)ctx->si;"),
    ("1@%r9b", "v = (__u64)(__u8)ctx->r9;"),
    ("1@%ah", "v = (__u64)(__u8)(ctx->ax >> 8);"),
    ("-1@%dh", "v = (__s64)(__s8)(ctx->dx >> 8);"),
    ("8@%eax", "v = (__u64)ctx->ax;"),  # SIZE governs, not the register's width
    ("%rdi", "v = (__u64)ctx->di;"),
    ("-4@$5", "v = 5LL;"),
    ("-8@$-1", "v = -1LL;"),
    ("4@$-1", "v = 4294967295ULL;"),
    ("8@$18446744073709551614", "v = 18446744073709551614ULL;"),
    ("8@$-2", "v = 18446744073709551614ULL;"),
    ("-8@$18446744073709551614", "v = -2LL;"),
    ("-8@$-9223372036854775808", "v = (-9223372036854775807LL - 1);"),
])
def test_register_and_constant(text: str, expected: str) -> None:
    assert lower(text) == [expected]


@pytest.mark.parametrize(("text", "expected"), [
    ("-4@-20(%rbp)", load("__s32", "(__u64)ctx->bp - 20ULL")),
    ("8@(%rsp)", load("__u64", "(__u64)ctx->sp", "__u64")),
    ("2@0x10(%rax)", load("__u16", "(__u64)ctx->ax + 16ULL", "__u64")),
    ("-8@(%rdx,%rax,8)", load("__s64", "(__u64)ctx->dx + (__u64)ctx->ax * 8")),
    ("4@(%rbx,%rcx)", load("__u32", "(__u64)ctx->bx + (__u64)ctx->cx", "__u64")),
    ("-1@-96(%rbp,%rax,8)", load("__s8", "(__u64)ctx->bp + (__u64)ctx->ax * 8 - 96ULL")),
    ("8@(,%rax,8)", load("__u64", "(__u64)ctx->ax * 8", "__u64")),
    ("8f@-8(%rbp)", load("__u64", "(__u64)ctx->bp - 8ULL", "__u64")),
    ("4f@-12(%rbp)", load("__u32", "(__u64)ctx->bp - 12ULL", "__u64")),
])
def test_memory(text: str, expected: list[str]) -> None:
    assert lower(text) == expected


def test_rip_relative_is_rebased_on_the_probe_address() -> None:
    lines = lower("-4@counter(%rip)", address=0x4010, pc=0x1340, dest="rec->arg1")
    assert lines == load("__s32", "(__u64)ctx->ip - 0x1340ULL + 0x4010ULL", dest="rec->arg1")


@pytest.mark.parametrize(("text", "address", "expected"), [
    # a global without %rip is rebased like one with it (0 in non-PIE code)
    ("-4@table(,%rax,4)", 0x404040,
     load("__s32", "(__u64)ctx->ip - 0x1139ULL + 0x404040ULL + (__u64)ctx->ax * 4")),
    ("-8@stab+16(,%rcx,8)", 0x404070,  # the value already holds the +16
     load("__s64", "(__u64)ctx->ip - 0x1139ULL + 0x404070ULL + (__u64)ctx->cx * 8")),
    ("-2@htab(%rdi,%rdi)", 0x404100, load(
        "__s16", "(__u64)ctx->ip - 0x1139ULL + 0x404100ULL + (__u64)ctx->di + (__u64)ctx->di")),
    ("-4@global_var", 0x404010, load("__s32", "(__u64)ctx->ip - 0x1139ULL + 0x404010ULL")),
    # local-dynamic: an offset in the TLS block a register points at, not rebased
    ("-8@sarr@dtpoff(%rax,%rbx,8)", 0x20,
     load("__s64", "(__u64)ctx->ax + (__u64)ctx->bx * 8 + 32ULL")),
])
def test_symbolic_memory(text: str, address: int, expected: list[str]) -> None:
    assert lower(text, address=address) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("-4@0x404040(,%rcx,4)", load("__s32", "(__u64)ctx->cx * 4 + 4210752ULL")),
    ("4@1234", load("__u32", "1234ULL", "__u64")),
])
def test_literal_absolute_address_is_not_rebased(text: str, expected: list[str]) -> None:
    assert lower(text) == expected


def tls(address: str, ctype: str = "__s32", cast: str = "__s64") -> list[str]:
    return ["{",
            "    __u64 _pr_tp = 0;  /* the thread pointer: current->thread.fsbase */",
            "    bpf_probe_read_kernel(&_pr_tp, sizeof(_pr_tp),",
            "                          (void *)(bpf_get_current_task() + "
            "PR_TASK_FSBASE_OFFSET));",
            *["    " + line for line in load(ctype, address, cast)], "}"]


@pytest.mark.parametrize(("text", "tpoff", "expected"), [
    ("-4@%fs:tv@tpoff", -64, tls("_pr_tp - 64ULL")),
    ("-8@%fs:tl@tpoff+16", -32, tls("_pr_tp - 16ULL", "__s64")),
    ("-8@%fs:tl@tpoff(,%rdi,8)", -32, tls("_pr_tp + (__u64)ctx->di * 8 - 32ULL", "__s64")),
    ("-1@%fs:tc@tpoff(%rdi)", -48, tls("_pr_tp + (__u64)ctx->di - 48ULL", "__s8")),
    ("-4@%fs:0xfffffffffffffffc", None, tls("_pr_tp - 4ULL")),
    ("8@%fs:0", None, tls("_pr_tp", "__u64", "__u64")),
    ("-8@%fs:16(%rax)", None, tls("_pr_tp + (__u64)ctx->ax + 16ULL", "__s64")),
    ("-8@%fs:(%rdx,%rbx,8)", None,
     tls("_pr_tp + (__u64)ctx->dx + (__u64)ctx->bx * 8", "__s64")),
])
def test_thread_local(text: str, tpoff: int | None, expected: list[str]) -> None:
    assert lower(text, address=tpoff) == expected
    assert runtime_constants(parse_operand(text, X)) == (TASK_FSBASE_OFFSET,)


def test_runtime_constants_are_known_to_the_btf_reader() -> None:
    assert TASK_FSBASE_OFFSET == ("PR_TASK_FSBASE_OFFSET", THREAD_POINTER)
    assert runtime_constants(parse_operand("-4@table(,%rax,4)", X)) == ()
    assert runtime_constants(parse_operand("8@%rax", X)) == ()


def test_thread_local_is_x86_64_only() -> None:
    arg = ArgOperand("8@x", 8, False, False, TlsMem(0))
    with pytest.raises(ValueError, match="thread-pointer"):
        lower_operand(arg, 0, A, "v")


@pytest.mark.parametrize(("text", "expected"), [
    ("8@x0", ["v = (__u64)ctx->regs[0];"]),
    ("-4@w1", ["v = (__s64)(__s32)ctx->regs[1];"]),
    ("8@x31", ["v = (__u64)ctx->sp;"]),
    ("-4@-1", ["v = -1LL;"]),
    ("-4@[sp, 136]", load("__s32", "(__u64)ctx->sp + 136ULL")),
    ("8@[x19, -16]", load("__u64", "(__u64)ctx->regs[19] - 16ULL", "__u64")),
    ("-1@[x0, x1]", load("__s8", "(__u64)ctx->regs[0] + (__u64)ctx->regs[1]")),
])
def test_aarch64(text: str, expected: list[str]) -> None:
    assert lower(text, A) == expected


def test_dest_type() -> None:
    assert dest_type(parse_operand("-4@%eax", X)) == "__s64"
    assert dest_type(parse_operand("4@%eax", X)) == "__u64"
    assert dest_type(parse_operand("8f@-8(%rbp)", X)) == "__u64"


@pytest.mark.parametrize("text", ["8@%xmm0", "8@%gs:40", "4@%foo", "24@%rax",
                                  "-4@counter(%rip)", "-4@table(,%rax,4)",
                                  "-4@%fs:tv@tpoff", "-8@sarr@dtpoff(%rax)"])
def test_refuses_what_the_resolver_must_have_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        lower(text)


def test_refuses_foreign_register_fields_and_destinations() -> None:
    forged = ArgOperand("8@%rax", 8, False, False,
                        Reg("ax; system()", "rax"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pt_regs table"):
        lower_operand(forged, 0, X, "v")
    x86_in_arm = ArgOperand("8@x", 8, False, False, Mem(Reg(X86Reg.RAX, "rax")))
    with pytest.raises(ValueError, match="pt_regs table"):
        lower_operand(x86_in_arm, 0, A, "v")
    arm_in_x86 = ArgOperand("8@x0", 8, False, False, Reg(Arm64Reg.X0, "x0"))
    with pytest.raises(ValueError, match="pt_regs table"):
        lower_operand(arm_in_x86, 0, X, "v")
    with pytest.raises(ValueError, match="destination"):
        lower_operand(parse_operand("8@%rax", X), 0, X, "v; evil()")
    with pytest.raises(ValueError, match="no operand lowering"):
        lower_operand(parse_operand("8@%rax", X), 0, "EM_PPC64", "v")


# --- gcc syntax check ------------------------------------------------------------------

HARNESS = """\
typedef signed char __s8; typedef unsigned char __u8;
typedef short __s16; typedef unsigned short __u16;
typedef int __s32; typedef unsigned int __u32;
typedef long long __s64; typedef unsigned long long __u64;
struct pt_regs {
    unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di,
        orig_ax, ip, cs, flags, sp, ss;
};
struct arm_pt_regs { __u64 regs[31]; __u64 sp; __u64 pc; __u64 pstate; };
static long bpf_probe_read_user(void *dst, __u32 size, const void *src)
{ (void)dst; (void)size; (void)src; return 0; }
static long bpf_probe_read_kernel(void *dst, __u32 size, const void *src)
{ (void)dst; (void)size; (void)src; return 0; }
static __u64 bpf_get_current_task(void) { return 0; }
#define PR_TASK_FSBASE_OFFSET 3128
struct rec { __s64 s; __u64 u; };
"""

FORMS = ["-8@%rbx", "1@%ah", "-2@%cx", "4@%r8d", "%rdi", "-4@$5", "8@$18446744073709551614",
         "-8@$-9223372036854775808", "-4@-20(%rbp)", "8@(%rsp)", "-8@(%rdx,%rax,8)",
         "8@(,%rax,8)", "1@-96(%rbp,%rax,8)", "4f@-12(%rbp)", "-4@counter(%rip)",
         "-4@table(,%rax,4)", "-8@stab+16(,%rcx,8)", "-2@htab(%rdi,%rdi)", "-4@global_var",
         "-4@0x404040(,%rcx,4)", "4@1234", "-8@sarr@dtpoff(%rax,%rbx,8)",
         "-4@%fs:tv@tpoff", "-8@%fs:tl@tpoff(,%rdi,8)", "-4@%fs:0xfffffffffffffffc",
         "8@%fs:0", "-8@%fs:16(%rax)", "-8@%fs:(%rdx,%rbx,8)"]
ARM_FORMS = ["8@x0", "-4@w1", "8@sp", "-4@[sp, 136]", "-1@[x0, x1]", "8@[x2, x3, lsl #3]"]


def _function(name: str, regs: str, machine: str, forms: list[str]) -> list[str]:
    body = [f"int {name}(struct {regs} *ctx, struct rec *r)", "{"]
    for text in forms:
        arg = parse_operand(text, machine)
        if isinstance(arg.operand, RipRel | SymMem):
            arg = resolved(arg, 0x4010)
        elif isinstance(arg.operand, TlsMem) and arg.operand.symbol is not None:
            arg = resolved(arg, -64)
        dest = "r->s" if dest_type(arg) == "__s64" else "r->u"
        body += ["    " + line for line in lower_operand(arg, 0x1139, machine, dest)]
    return [*body, "    return 0;", "}"]


def test_lowered_c_compiles(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    src = [HARNESS, *_function("x86", "pt_regs", X, FORMS),
           *_function("arm", "arm_pt_regs", A, ARM_FORMS)]
    path = tmp_path / "lowered.c"
    path.write_text("\n".join(src) + "\n")
    done = subprocess.run(["gcc", "-fsyntax-only", "-std=gnu11", "-Wall", "-Wextra",
                           "-Werror", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
