"""C lowering: exact output per node type, literal emitters, injection safety, and the
emitted C compiled (gcc -fsyntax-only -Wall -Werror) and run against expected values with
templates/expr_helpers.h and stubbed BPF helpers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from planrunner.diagnostics import Span
from planrunner.errors import ExpressionError
from planrunner.expr.check import Symbol, check
from planrunner.expr.parser import parse_expression
from planrunner.expr.typed import ArgRef, Ref
from planrunner.expr.types import BOOL, INT8, INT32, INT64, UINT16, UINT32, UINT64, StrType, Type
from planrunner.render.expr_c import (
    Lowered,
    c_byte,
    c_comment_text,
    c_int_literal,
    lower,
)
from planrunner.render.needs import Helper
from tests.unit.dict_scope import DictScope

BASE = Span("plan.yaml", 1, 1)
HELPERS = Path(__file__).resolve().parents[2] / "templates" / "expr_helpers.h"


# The C each test reference stands for (the renderer's choice in real programs).
C_NAMES: dict[Ref, str] = {}


def sym(typ: Type, c: str) -> Symbol:
    """A run-time symbol whose reference lowers to the C `c`."""
    ref = ArgRef(len(C_NAMES) + 1)
    C_NAMES[ref] = c
    return Symbol(typ, ref)


class Slots:
    """A LoweringContext handing out members of a scratch struct."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.helpers: set[Helper] = set()

    def alloc(self, size: int) -> str:
        self.sizes.append(size)
        return f"sc->s{len(self.sizes) - 1}"

    def c_of(self, ref: Ref) -> str:
        return C_NAMES[ref]

    def need(self, helper: Helper) -> None:
        self.helpers.add(helper)

    def fault(self) -> bool:
        return False


SCOPE = DictScope({
    "a": sym(INT64, "v_a"), "u": sym(UINT64, "v_u"), "i": sym(INT32, "v_i"),
    "w": sym(UINT32, "v_w"), "b": sym(INT8, "v_b"), "p": sym(UINT16, "v_p"),
    "f": sym(BOOL, "v_f"), "s": sym(StrType(16), "v_s"), "t": sym(StrType(8), "v_t"),
    "n": sym(INT32, "v_n"), "q": sym(StrType(64), "v_q"),
    "k": Symbol(UINT64, None, 7), "neg": Symbol(INT32, None, -2),
    "lit": Symbol(StrType(4), None, 'x"*/'), "on": Symbol(BOOL, None, True),
})


def low(text: str, slots: Slots | None = None) -> Lowered:
    texpr = check(parse_expression(text, BASE), SCOPE, string_size=32)
    return lower(texpr, slots or Slots())


@pytest.mark.parametrize(("value", "type_", "expected"), [
    (0, INT64, "0LL"), (42, INT64, "42LL"), (-1, INT64, "(-1LL)"),
    (-(1 << 63), INT64, "(-9223372036854775807LL - 1)"), ((1 << 63) - 1, INT64,
                                                         "9223372036854775807LL"),
    (0, UINT64, "0ULL"), ((1 << 64) - 1, UINT64, "18446744073709551615ULL"),
    (-3, INT32, "((__s32)(-3LL))"), (65535, UINT16, "((__u16)65535LL)"),
])
def test_c_int_literal(value: int, type_, expected: str) -> None:
    assert c_int_literal(value, type_) == expected


def test_c_int_literal_refuses_out_of_range() -> None:
    with pytest.raises(ValueError):
        c_int_literal(1 << 64, UINT64)
    with pytest.raises(ValueError):
        c_int_literal(-1, UINT32)


@pytest.mark.parametrize(("byte", "expected"), [
    (0, "0"), (34, "34"), (127, "127"), (128, "(char)128"), (255, "(char)255"),
])
def test_c_byte(byte: int, expected: str) -> None:
    assert c_byte(byte) == expected


def test_c_byte_refuses_what_is_not_a_byte() -> None:
    for bad in (-1, 256):
        with pytest.raises(ValueError):
            c_byte(bad)


def match(buf: str, data: bytes, shown: str | None = None) -> str:
    """The inline compare expr_c emits: `buf` starts with `data`."""
    text = data.rstrip(b"\0").decode() if shown is None else shown
    return (f'(/* "{text}" */ '
            + " && ".join(f"((const __u8 *)({buf}))[{i}] == {b}" for i, b in enumerate(data))
            + ")")


def test_c_comment_text() -> None:
    assert c_comment_text('a */ b /* c ??/ \n é') == "a * / b / * c ?-?/ ? ?"
    assert c_comment_text("\n??/") == "?-?-?/"


LOWERING_CASES = [
    ("42", "42LL"), ("0xffffffffffffffff", "18446744073709551615ULL"), ("5ms", "5000000ULL"),
    ("true", "1"), ("false", "0"),
    ("a", "((__s64)(v_a))"), ("b", "((__s8)(v_b))"), ("f", "(!!(v_f))"), ("s", "(v_s)"),
    ("k", "7ULL"), ("neg", "((__s32)(-2LL))"), ("on", "1"),
    ("-a", "((__s64)(-((__u64)((__s64)(v_a)))))"), ("-u", "(-((__u64)(v_u)))"),
    ("~i", "(~((__s64)((__s32)(v_i))))"), ("!a", "(!((__s64)(v_a)))"), ("-5", "(-5LL)"),
    ("a + i", "((__s64)(((__u64)((__s64)(v_a))) + ((__u64)((__s32)(v_i)))))"),
    ("u - 1", "(((__u64)(v_u)) - 1ULL)"),
    ("a * 3", "((__s64)(((__u64)((__s64)(v_a))) * 3ULL))"),
    ("a / i", "pr_sdiv(((__s64)(v_a)), ((__s64)((__s32)(v_i))))"),
    ("a % 2", "pr_smod(((__s64)(v_a)), 2LL)"),
    ("u / 10", "(((__u64)(v_u)) / 10ULL)"), ("u % w", "pr_umod(((__u64)(v_u)), "
                                                      "((__u64)((__u32)(v_w))))"),
    ("u / u", "pr_udiv(((__u64)(v_u)), ((__u64)(v_u)))"),
    ("a << 3", "((__s64)(((__u64)((__s64)(v_a))) << 3))"), ("u << 3", "(((__u64)(v_u)) << 3)"),
    ("a >> i", "(((__s64)(v_a)) >> (((__u64)((__s32)(v_i))) & 63))"),
    ("1 << a", "((__s64)(1ULL << (((__u64)((__s64)(v_a))) & 63)))"),
    ("a & 0xff", "(((__s64)(v_a)) & 255LL)"), ("u | 1", "(((__u64)(v_u)) | 1ULL)"),
    ("w ^ p", "(((__s64)((__u32)(v_w))) ^ ((__s64)((__u16)(v_p))))"),
    ("a < u", "(((__u64)((__s64)(v_a))) < ((__u64)(v_u)))"),
    ("i >= -1", "(((__s64)((__s32)(v_i))) >= (-1LL))"),
    ("w == k", "(((__u64)((__u32)(v_w))) == 7ULL)"),
    ("f && a", "((!!(v_f)) && ((__s64)(v_a)))"), ("f || on", "((!!(v_f)) || 1)"),
    ("f == (a > 0)", "((!!(v_f)) == (((__s64)(v_a)) > 0LL))"), ("f ^ on", "((!!(v_f)) ^ 1)"),
    ('s == "bash"', match("(v_s)", b"bash\0")),
    ('"bash" != s', "(!" + match("(v_s)", b"bash\0") + ")"),
    ("s == t", "pr_strbuf_eq((v_s), 16, (v_t), 8)"),
    ("s == lit", match("(v_s)", b'x"*/\0', 'x"* /')),
    ('startswith(t, "/usr")', match("(v_t)", b"/usr")),
    ('s == ""', match("(v_s)", b"\0")), ('startswith(s, "")', "1"),
    ('"ab" == "ab"', "1"), ('"ab" != "ab"', "0"), ('"ab" == "b"', "0"),
    ('contains("abc", "bc")', "1"), ('startswith("abc", "bc")', "0"),
]


@pytest.mark.parametrize(("text", "expected"), LOWERING_CASES)
def test_lowering_output(text: str, expected: str) -> None:
    assert low(text) == Lowered((), expected)


def test_literal_values_are_stored_byte_by_byte() -> None:
    """A literal as a value (or the needle of contains()) is a scratch buffer the prelude
    fills with numbers, once per literal: never a C string literal (expr_c's docstring)."""
    slots = Slots()
    out = low('contains(s, "a\\xe9") && contains(t, "a\\xe9") && contains(s, "0123456789")',
              slots)
    assert slots.sizes == [3, 11]
    assert out.prelude == (
        '/* "a\\xe9" */', "sc->s0[0] = 97; sc->s0[1] = (char)233; sc->s0[2] = 0;",
        '/* "0123456789" */',
        "sc->s1[0] = 48; sc->s1[1] = 49; sc->s1[2] = 50; sc->s1[3] = 51; sc->s1[4] = 52; "
        "sc->s1[5] = 53; sc->s1[6] = 54; sc->s1[7] = 55;",
        "sc->s1[8] = 56; sc->s1[9] = 57; sc->s1[10] = 0;")
    assert out.c == ("((pr_str_contains((v_s), 16, sc->s0, 2) && "
                     "pr_str_contains((v_t), 8, sc->s0, 2)) && "
                     "pr_str_contains((v_s), 16, sc->s1, 10))")
    value = low('"hi"', Slots())
    assert value == Lowered(('/* "hi" */', "sc->s0[0] = 104; sc->s0[1] = 105; sc->s0[2] = 0;"),
                            "sc->s0")


def test_str_reads_into_allocated_buffers() -> None:
    slots = Slots()
    out = low('str(u) == "x" && contains(str(u), "y") && str(a, 8) == str(u, n)', slots)
    assert slots.sizes == [33, 2, 9, 33]
    assert out.prelude == (
        "bpf_probe_read_user_str(sc->s0, 33, (const void *)(unsigned long)((__u64)(v_u)));",
        '/* "y" */', "sc->s1[0] = 121; sc->s1[1] = 0;",
        "bpf_probe_read_user_str(sc->s2, 9, (const void *)(unsigned long)"
        "((__u64)((__s64)(v_a))));",
        "pr_read_user_n(sc->s3, 33, (const void *)(unsigned long)((__u64)(v_u)), "
        "((__s64)((__s32)(v_n))), PR_NOFAULT);",
    )
    assert out.c == ("((" + match("sc->s0", b"x\0") + " && pr_str_contains(sc->s0, 33, sc->s1, 1)) "
                     "&& pr_strbuf_eq(sc->s2, 9, sc->s3, 33))")


def test_str_reads_fault_pages_in_where_the_context_allows() -> None:
    """A user-space probe's context: its reads may fault pages in (render/bodies.py)."""
    slots = Slots()
    slots.fault = lambda: True  # type: ignore[method-assign]
    out = low('str(u) == "x" && str(u, n) == "y"', slots)
    assert out.prelude == (
        "pr_user_str_f(sc->s0, 33, (const void *)(unsigned long)((__u64)(v_u)));",
        "pr_read_user_n(sc->s1, 33, (const void *)(unsigned long)((__u64)(v_u)), "
        "((__s64)((__s32)(v_n))), PR_FAULT);",
    )


@pytest.mark.parametrize(("text", "helper"), [
    ("a / i", True), ("u % w", True), ("u / 10", False), ('s == "x"', False),
    ('contains(s, "x")', True), ("str(u, n) == s", True), ('str(u) == "x"', False),
    ('startswith(s, "x")', False),
    ("a + 1 > u", False), ("s == t", True),
])
def test_helpers_needed_are_reported(text: str, helper: bool) -> None:
    slots = Slots()
    low(text, slots)
    assert (Helper.EXPR in slots.helpers) is helper


def test_str_value_is_the_buffer() -> None:
    assert low("str(0x1000, 4)") == Lowered(
        ("bpf_probe_read_user_str(sc->s0, 5, (const void *)(unsigned long)4096ULL);",), "sc->s0")


# -- injection ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "data"), [
    (r'q == "\"; system(\"x\"); //"', b'"; system("x"); //\0'),
    (r's == "*/ evil(); /*"', b"*/ evil(); /*\0"),
    (r's == "\n#include <x>"', b"\n#include <x>\0"),
    (r's == "\\"', b"\\\0"),
    (r's == "??/"', b"??/\0"),
    (r'startswith(s, "\x22)")', b'")'),
])
def test_plan_strings_lower_to_numbers(text: str, data: bytes) -> None:
    """A literal's bytes reach the C as numbers; its text only in a comment that cannot
    be closed early."""
    out = low(text)
    comment, _, code = out.c[1:-1].partition(" */ ")
    assert comment.startswith("/* ") and "*/" not in comment and "??" not in comment
    buf = "v_q" if text.startswith("q") else "v_s"
    assert code == " && ".join(f"((const __u8 *)(({buf})))[{i}] == {b}"
                               for i, b in enumerate(data))


@pytest.mark.parametrize("text", [
    'a; system("x")', "a /* x */", "a // x", "#include <x>", "a\n#define X", "a ? b : c",
    "a[0]", "a->b", "*a", "&a", "a.b.c(", r'"\x00"', 'name"', "a\\", "{a}", "a@b",
    "a . b", "1.5", "sizeof(a)",
])
def test_c_syntax_in_plans_is_rejected(text: str) -> None:
    with pytest.raises(ExpressionError):
        check(parse_expression(text, BASE), SCOPE, string_size=32)


def test_plan_names_never_reach_the_c() -> None:
    evil = 'system_x'  # a plan name; its C is the renderer's choice
    scope = DictScope({evil: sym(INT64, "ctx_arg3"), "begin.q": sym(StrType(8), "bq")})
    texpr = check(parse_expression(f'{evil} > 1 && begin.q == "z"', BASE), scope,
                  string_size=8)
    out = lower(texpr, Slots())
    assert "system" not in out.c and "begin" not in out.c
    assert out.c == "((((__s64)(ctx_arg3)) > 1LL) && " + match("(bq)", b"z\0") + ")"


# -- compile and run with gcc --------------------------------------------------------------

STUBS = """
#include <string.h>
typedef unsigned char __u8; typedef signed char __s8;
typedef unsigned short __u16; typedef short __s16;
typedef unsigned int __u32; typedef int __s32;
typedef unsigned long long __u64; typedef long long __s64;
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
static long bpf_probe_read_user(void *dst, __u32 size, const void *src)
{ memcpy(dst, src, size); return 0; }
static long bpf_probe_read_user_str(void *dst, __u32 size, const void *src)
{
	__u32 i;
	char *d = dst;
	const char *s = src;
	for (i = 0; i + 1 < size && s[i]; i++)
		d[i] = s[i];
	d[i] = 0;
	return i + 1;
}
#define PR_NOFAULT 0
#define pr_user_bytes_f bpf_probe_read_user
"""

# (expression, expected truth) evaluated with a=-7 u=5 i=-3 w=3000000000 b=-2 p=65535 f=2
# n=5 s="bash" t="ba" and user memory "hello SELECT world" at address u_str.
RUN_CASES = [
    ("a / 2 == -3", True), ("a % 4 == -3", True), ("-a / i == -2", True),
    ("a / (i + 3) == 0", True), ("a % (i + 3) == -7", True),  # run-time x/0 == 0, x%0 == x
    ("u / (u - 5) == 0", True), ("u % (u - 5) == 5", True),
    ("(a << 2) == -28", True), ("a >> 1 == -4", True),
    ("(1 << (a + 10)) == 8", True), ("(1 << (a + 71)) == 1", True),  # count masked to 0..63
    ("a * w == -21000000000", True), ("w + w == 6000000000", True),
    ("b < 0 && p > 0 && p + 1 == 65536", True), ("-u > 0", True), ("a < u", False),
    ("i < w", True), ("~b == 1", True), ("f & (a < 0)", True), ("f == true", True),
    ("!f", False), ("f && !(a > 0)", True),
    ('s == "bash"', True), ('s == "bas"', False), ('s != "bash"', False), ("s == t", False),
    ('startswith(s, "ba") && startswith(t, "ba")', True), ('contains(s, "sh")', True),
    ('contains(t, "sh")', False), ('contains(s, "")', True),
    ('str(addr) == "hello SELECT world"', True), ('contains(str(addr), "SELECT")', True),
    ('startswith(str(addr, 4), "hell") && str(addr, 4) == "hell"', True),
    ('str(addr, n) == "hello"', True), ('str(addr, i) == ""', True),
    ('str(addr, u + 100) == "hello SELECT world"', True),
    ('str(addr) == "hello SELECT worl"', False), ('str(addr) == "hello SELECT world!"', False),
    ('startswith(str(addr), "hello SELECT world")', True), ('startswith(s, "bash!")', False),
    ('contains(str(addr), "SELECT world")', True), ('contains(str(addr), "world!")', False),
    ('s != "bash" || t == "b"', False), ('t == "ba" && t != "b"', True),
    ('"x\\xe9" == "x\\xe9"', True), ('contains(str(addr), "\\xe9")', False),
]

RUN_SCOPE = DictScope({**SCOPE.symbols, "addr": sym(UINT64, "(__u64)(unsigned long)u_str")})


def _program(cases: list[tuple[str, bool]]) -> str:
    slots = Slots()
    lines: list[str] = []
    for idx, (text, _) in enumerate(cases):
        texpr = check(parse_expression(text, BASE), RUN_SCOPE, string_size=32)
        out = lower(texpr, slots)
        lines += [f"\t{stmt}" for stmt in out.prelude]
        lines.append(f"\tprintf(\"%d %d\\n\", {idx}, ({out.c}) ? 1 : 0);")
    members = "".join(f"char s{j}[{size}]; " for j, size in enumerate(slots.sizes))
    return "\n".join([
        "#include <stdio.h>", STUBS, HELPERS.read_text(), f"struct scratch {{ {members}}};",
        "int main(void)", "{",
        "\tstatic struct scratch scratch; struct scratch *sc = &scratch;",
        '\tstatic const char u_str[64] = "hello SELECT world";',
        "\t__s64 v_a = -7; __u64 v_u = 5; __s32 v_i = -3; __u32 v_w = 3000000000u;",
        "\t__s8 v_b = -2; __u16 v_p = 65535; int v_f = 2; __s32 v_n = 5;",
        '\tchar v_s[16] = "bash"; char v_t[8] = "ba";',
        *lines, "\treturn 0;", "}", ""])


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_lowered_c_compiles_cleanly_and_computes_the_checked_semantics(tmp_path: Path) -> None:
    src = tmp_path / "expr.c"
    src.write_text(_program(RUN_CASES))
    exe = tmp_path / "expr"
    subprocess.run(["gcc", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function",
                    "-std=gnu11", str(src)], check=True)
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-fsanitize=undefined",
                    "-fno-sanitize-recover", "-o", str(exe), str(src)], check=True)
    run = subprocess.run([str(exe)], check=True, capture_output=True, text=True)
    got = {int(k): v == "1" for k, v in (line.split() for line in run.stdout.splitlines())}
    assert got == {idx: want for idx, (_, want) in enumerate(RUN_CASES)}
