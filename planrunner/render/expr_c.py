"""Lowering of typed expressions to C (for the BPF program), and the C literal emitters.

Contract:
- `lower(texpr, ctx) -> Lowered(prelude, c)`: `c` is one fully parenthesised C
  expression; `prelude` holds C statements that must run before it (string reads into
  buffers obtained from `ctx.alloc(size)`, through readers that fault pages in when
  `ctx.fault()` says so). References (`TRef`) become the C that
  `ctx.c_of(ref)` names; every helper of templates/expr_helpers.h the C calls is
  reported with `ctx.need(Helper.EXPR)`, so the program includes the header only then.
  The same `str(...)` read used twice in one expression is read once. Preludes run
  unconditionally (before any `&&` short-circuit); they only read user memory.
- Integer expressions carry explicit casts so C's conversions equal the checker's types
  (a name is cast to its declared type whatever the C type of its `c_expr`);
  signed `+ - *` and `<<` are done in unsigned arithmetic (no undefined overflow);
  division and modulo go through helpers (run-time x/0 is 0 and x%0 is x, as in the BPF
  ISA; signed division never emits BPF's signed-division instruction); a run-time shift
  count is masked with `& 63`. Bool operands are always 0/1 (`!!` on bool variables).
- User text reaches C only as numbers: `c_int_literal`, and string constants as their
  byte values (`c_byte`), compared byte by byte (`==`, `!=`, startswith) or stored into
  a scratch buffer (`contains` and a literal used as a value). Never as a C string
  literal: clang puts one it cannot fold into .rodata, which bcc does not relocate, so
  the program would read address 0 (a verifier failure, or an empty string).
  Names become the C of their reference, never the name.
The helpers called here live in templates/expr_helpers.h.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from planrunner.expr import typed as T
from planrunner.expr.types import INT64, UINT64, BoolType, IntType, StrType, Type, promoted
from planrunner.render.needs import Helper

_INT64_MIN = -(1 << 63)
NUL = b"\0"


class LoweringContext(Protocol):
    def alloc(self, size: int) -> str:
        """A C lvalue naming a `char[size]` buffer (a per-CPU scratch slot)."""
        ...

    def c_of(self, ref: T.Ref) -> str:
        """The C expression holding the value `ref` refers to."""
        ...

    def need(self, helper: Helper) -> None:
        """The emitted C calls `helper`."""
        ...

    def fault(self) -> bool:
        """A user-memory read is emitted: may it fault pages in (render/bodies.py
        `Body.fault`)? Asking records that it does."""
        ...


def c_type(t: IntType) -> str:
    """The C integer type of exactly `t`: `__s32`, `__u64`..."""
    return f"__{'s' if t.signed else 'u'}{t.bits}"


@dataclass(frozen=True, slots=True)
class Lowered:
    prelude: tuple[str, ...]
    c: str


def c_byte(byte: int) -> str:
    """A C constant a `char` can hold, of value `byte` (0..255): the number, with a cast
    above 127 (so gcc and clang see no overflowing conversion)."""
    if not 0 <= byte <= 255:
        raise ValueError(f"{byte} is not a byte")
    return str(byte) if byte < 0x80 else f"(char){byte}"


def c_literal_comment(data: bytes) -> str:
    """A `/* "..." */` comment showing a string constant next to its bytes."""
    return f'/* "{c_comment_text(data.decode("utf-8", "backslashreplace"))}" */'


def _bytes_match(buf: str, data: bytes, at: str = "") -> list[str]:
    """C tests that the bytes of `buf` from offset `at` (C, default 0) are `data`."""
    return [f"((const __u8 *)({buf}))[{at}{i}] == {byte}" for i, byte in enumerate(data)]


def c_comment_text(text: str) -> str:
    """`text` made safe inside a C `/* ... */` comment on one line (for showing the source
    expression next to its C): non-printable ASCII and non-ASCII become `?`, and comment
    delimiters and trigraph starts are broken up."""
    safe = "".join(ch if 0x20 <= ord(ch) < 0x7F else "?" for ch in text)
    safe = safe.replace("*/", "* /").replace("/*", "/ *")
    while "??" in safe:  # "???" keeps a "??" after one pass
        safe = safe.replace("??", "?-?")
    return safe


def c_int_literal(value: int, type_: IntType) -> str:
    """A C constant of exactly `type_` with `value` (which must be in its range)."""
    if not type_.contains(value):
        raise ValueError(f"{value} does not fit {type_}")
    if type_ == UINT64:
        return f"{value}ULL"
    if type_ == INT64:
        if value == _INT64_MIN:  # -9223372036854775808LL would be unsigned, then negated
            return "(-9223372036854775807LL - 1)"
        return f"{value}LL" if value >= 0 else f"(-{-value}LL)"
    return f"(({c_type(type_)}){c_int_literal(value, INT64)})"


def lower(texpr: T.TExpr, ctx: LoweringContext) -> Lowered:
    lowerer = _Lowerer(ctx)
    c = lowerer.expr(texpr)
    return Lowered(tuple(lowerer.prelude), c)


class _Lowerer:
    def __init__(self, ctx: LoweringContext) -> None:
        self.ctx = ctx
        self.prelude: list[str] = []
        self.reads: dict[T.TStrRead, str] = {}
        self.literals: dict[bytes, str] = {}

    def expr(self, t: T.TExpr) -> str:
        if isinstance(t, T.TIntConst):
            return c_int_literal(t.value, t.type)
        if isinstance(t, T.TBoolConst):
            return "1" if t.value else "0"
        if isinstance(t, T.TStrConst):  # a value: its bytes in a buffer
            return self.literal_buffer(t.value)
        if isinstance(t, T.TRef):
            return self.var(t)
        if isinstance(t, T.TUnary):
            return self.unary(t)
        if isinstance(t, T.TBinary):
            return self.binary(t)
        if isinstance(t, T.TStrEq):
            return self.str_eq(t)
        if isinstance(t, T.TStrRead):
            return self.str_read(t)
        if isinstance(t, T.TUsym):  # the address; the reader names it (runtime/stacks.py)
            return self.as_int(t.addr, UINT64)
        if isinstance(t, T.TStrTest):
            return self.str_test(t)
        if isinstance(t, T.TUserWord):
            return self.user_word(t)
        raise TypeError(f"not a typed expression node: {t!r}")

    def user_word(self, t: T.TUserWord) -> str:
        """8 bytes of user memory into a zeroed scratch buffer (0 if unreadable)."""
        buf = self.ctx.alloc(8)
        addr = self.as_int(t.addr, UINT64)
        self.prelude += [f"__builtin_memset({buf}, 0, 8);",
                         f"bpf_probe_read_user({buf}, 8, (void *){addr});"]
        return f"(*(__u64 *){buf})"

    def var(self, t: T.TRef) -> str:
        # Integers are cast to their declared type: the C holding the value may have
        # another C type (a pt_regs register is an unsigned long).
        c = self.ctx.c_of(t.ref)
        if isinstance(t.type, IntType):
            return f"(({c_type(t.type)})({c}))"
        if isinstance(t.type, BoolType):
            return f"(!!({c}))"
        return f"({c})"

    def as_int(self, t: T.TExpr, to: Type) -> str:
        """`t` converted to the 64-bit integer type `to`, with a cast unless already so."""
        assert isinstance(to, IntType) and isinstance(t.type, IntType)
        if isinstance(t, T.TIntConst):
            return c_int_literal(to.wrap(t.value), to)
        c = self.expr(t)
        return c if t.type == to else f"(({c_type(to)}){c})"

    def unary(self, t: T.TUnary) -> str:
        if t.op == "!":
            return f"(!{self.expr(t.operand)})"
        if t.op == "~":
            return f"(~{self.as_int(t.operand, t.type)})"
        negated = f"(-{self.as_int(t.operand, UINT64)})"  # unsigned: no overflow
        return negated if t.type == UINT64 else f"((__s64){negated})"

    def binary(self, t: T.TBinary) -> str:
        op = t.op
        if t.operand_type is None or isinstance(t.operand_type, BoolType):
            return f"({self.expr(t.left)} {op} {self.expr(t.right)})"
        common = t.operand_type
        if op in ("<<", ">>"):
            return self.shift(t)
        if op in ("/", "%"):
            return self.divide(t)
        if op in ("+", "-", "*") and common == INT64:
            left, right = self.as_int(t.left, UINT64), self.as_int(t.right, UINT64)
            return f"((__s64)({left} {op} {right}))"
        return f"({self.as_int(t.left, common)} {op} {self.as_int(t.right, common)})"

    def shift(self, t: T.TBinary) -> str:
        assert isinstance(t.left.type, IntType)
        result = promoted(t.left.type)
        if isinstance(t.right, T.TIntConst):
            count = str(t.right.value)  # checked to be 0..63
        else:
            count = f"({self.as_int(t.right, UINT64)} & 63)"
        if t.op == ">>":
            return f"({self.as_int(t.left, result)} >> {count})"
        shifted = f"({self.as_int(t.left, UINT64)} << {count})"
        return shifted if result == UINT64 else f"((__s64){shifted})"

    def divide(self, t: T.TBinary) -> str:
        common = t.operand_type
        name = "div" if t.op == "/" else "mod"
        if common == INT64:
            self.ctx.need(Helper.EXPR)
            return f"pr_s{name}({self.as_int(t.left, INT64)}, {self.as_int(t.right, INT64)})"
        left, right = self.as_int(t.left, UINT64), self.as_int(t.right, UINT64)
        if isinstance(t.right, T.TIntConst) and t.right.value != 0:
            return f"({left} {t.op} {right})"
        self.ctx.need(Helper.EXPR)
        return f"pr_u{name}({left}, {right})"

    def string(self, t: T.TExpr) -> tuple[str, int]:
        """A string operand: a C expression usable as `const char *`, and its buffer size."""
        assert isinstance(t.type, StrType)
        return self.expr(t), t.type.size

    def str_eq(self, t: T.TStrEq) -> str:
        if isinstance(t.right, T.TStrConst):
            lit = t.right.value
            if isinstance(t.left, T.TStrConst):
                same = t.left.value == lit
                return "1" if same == (t.op == "==") else "0"
            left, lsize = self.string(t.left)
            assert len(lit) < lsize, "expr/check.py refuses a literal longer than the buffer"
            # the literal's bytes, then its end: the NUL
            call = self.match(left, lit + NUL)
        else:
            left, lsize = self.string(t.left)
            right, rsize = self.string(t.right)
            self.ctx.need(Helper.EXPR)
            call = f"pr_strbuf_eq({left}, {lsize}, {right}, {rsize})"
        return call if t.op == "==" else f"(!{call})"

    def match(self, buf: str, data: bytes) -> str:
        """`buf` starts with `data`: one byte compare each, the constants in the code."""
        shown = c_literal_comment(data.removesuffix(NUL))
        return f"({shown} " + " && ".join(_bytes_match(buf, data)) + ")"

    def str_test(self, t: T.TStrTest) -> str:
        if isinstance(t.subject, T.TStrConst):
            hit = (t.subject.value.startswith(t.needle) if t.func == "startswith"
                   else t.needle in t.subject.value)
            return "1" if hit else "0"
        buf, size = self.string(t.subject)
        assert len(t.needle) < size, "expr/check.py refuses a needle longer than the buffer"
        if not t.needle:
            return "1"
        if t.func == "startswith":
            return self.match(buf, t.needle)
        self.ctx.need(Helper.EXPR)
        needle = self.literal_buffer(t.needle)
        return f"pr_str_contains({buf}, {size}, {needle}, {len(t.needle)})"

    def literal_buffer(self, data: bytes) -> str:
        """A scratch buffer holding `data` and its NUL, stored byte by byte by the
        prelude (once per expression for each literal)."""
        if data in self.literals:
            return self.literals[data]
        buf = self.ctx.alloc(len(data) + 1)
        stores = [f"{buf}[{i}] = {c_byte(b)};" for i, b in enumerate(data + NUL)]
        self.prelude.append(c_literal_comment(data))
        self.prelude.extend(" ".join(stores[i:i + 8]) for i in range(0, len(stores), 8))
        self.literals[data] = buf
        return buf

    def str_read(self, t: T.TStrRead) -> str:
        if t in self.reads:
            return self.reads[t]
        addr = f"(const void *)(unsigned long){self.as_int(t.addr, UINT64)}"
        size = t.type.size
        length = None if t.length is None else self.as_int(t.length, INT64)
        buf = self.ctx.alloc(size)
        fault = self.ctx.fault()
        if length is None:
            read = "pr_user_str_f" if fault else "bpf_probe_read_user_str"
            self.prelude.append(f"{read}({buf}, {size}, {addr});")
        else:
            self.ctx.need(Helper.EXPR)
            self.prelude.append(f"pr_read_user_n({buf}, {size}, {addr}, {length}, "
                                f"{'PR_FAULT' if fault else 'PR_NOFAULT'});")
        self.reads[t] = buf
        return buf
