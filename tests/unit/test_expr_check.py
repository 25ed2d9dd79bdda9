"""The expression type checker: result types, constants, and every error class with its
exact column, message and hint; several errors in one expression are all reported."""

from __future__ import annotations

import pytest

from planrunner.diagnostics import Span
from planrunner.errors import ExpressionError
from planrunner.expr import typed as T
from planrunner.expr.check import Symbol, check, check_condition, check_value
from planrunner.expr.parser import parse_expression
from planrunner.expr.types import (
    BOOL,
    DURATION,
    INT8,
    INT32,
    INT64,
    UINT16,
    UINT32,
    UINT64,
    IntType,
    StrType,
)
from tests.unit.dict_scope import DictScope

BASE = Span("plan.yaml", 3, 10)
QUERY = T.CaptureRef("query", T.TRef("query", T.ArgRef(2), StrType(129), BASE))


SCOPE = DictScope({
    "arg1": Symbol(UINT64, T.ArgRef(1)),
    "arg2": Symbol(INT32, T.ArgRef(2)),
    "arg3": Symbol(UINT32, T.ArgRef(3)),
    "small": Symbol(INT8, T.ArgRef(4)),
    "port": Symbol(UINT16, T.ArgRef(5)),
    "latency": Symbol(DURATION, T.LatencyRef()),
    "comm": Symbol(StrType(16), T.BuiltinRef("comm")),
    "begin.query": Symbol(StrType(129), QUERY),
    "flag": Symbol(BOOL, T.ArgRef(6)),
    "threshold": Symbol(UINT64, None, 10_000_000),
    "limit": Symbol(INT32, None, -3),
    "name": Symbol(StrType(5), None, "bash"),
    "verbose": Symbol(BOOL, None, True),
    "ratio": Symbol(INT64, None, 0.5),
})


def typed(text: str, string_size: int = 128) -> T.TExpr:
    return check(parse_expression(text, BASE), SCOPE, string_size=string_size)


def errors(text: str, fn=check) -> list[tuple[str, int, tuple[str, ...]]]:
    with pytest.raises(ExpressionError) as info:
        fn(parse_expression(text, BASE), SCOPE, string_size=128)
    out = []
    for d in info.value.diagnostics:
        assert d.span is not None and d.span.line == 3
        out.append((d.message, d.span.column - BASE.column, d.hints))
    return out


TYPE_CASES = [
    ("1", INT64), ("0xffffffffffffffff", UINT64), ("9223372036854775808", UINT64),
    ("5ms", UINT64), ('"x"', StrType(2)), ("true", BOOL),
    ("arg2", INT32), ("arg2 + arg3", INT64), ("arg2 + arg1", UINT64), ("small * port", INT64),
    ("-arg3", INT64), ("-arg1", UINT64), ("~small", INT64), ("!arg2", BOOL),
    ("arg3 << 2", INT64), ("arg1 >> arg2", UINT64), ("arg2 / 3", INT64), ("arg1 % 3", UINT64),
    ("arg2 & 0xff", INT64), ("flag & verbose", BOOL), ("flag | (arg2 > 0)", BOOL),
    ("arg2 < arg3", BOOL), ("arg2 == arg1", BOOL), ("flag == verbose", BOOL),
    ("comm == \"bash\"", BOOL), ("comm != begin.query", BOOL), ("arg2 && comm == name", BOOL),
    ("str(arg1)", StrType(129)), ("str(arg1, 16)", StrType(17)), ("str(arg1, arg2)", StrType(129)),
    ("str(arg1, 4096)", StrType(4097)),
    ('contains(begin.query, "SELECT")', BOOL), ('startswith(str(arg1), "/usr")', BOOL),
    ("latency >= threshold", BOOL), ("limit", INT32), ("name", StrType(5)), ("verbose", BOOL),
]


@pytest.mark.parametrize(("text", "expected"), TYPE_CASES)
def test_result_types(text: str, expected: object) -> None:
    assert typed(text).type == expected


def test_string_size_sets_the_capacity_of_str() -> None:
    assert typed("str(arg1)", string_size=64).type == StrType(65)
    node = typed("str(arg1, arg3)", string_size=64)
    assert isinstance(node, T.TStrRead) and node.cap == 64 and node.length is not None


def test_constants_become_constant_nodes() -> None:
    assert typed("threshold") == T.TIntConst(10_000_000, UINT64, BASE)
    assert typed("-1") == T.TIntConst(-1, INT64, BASE)
    assert typed("~0") == T.TIntConst(-1, INT64, BASE)
    assert typed("-0xffffffffffffffff") == T.TIntConst(1, UINT64, BASE)
    assert typed("name") == T.TStrConst(b"bash", BASE)
    assert typed("verbose") == T.TBoolConst(True, BASE)
    node = typed("arg2 < limit")
    assert isinstance(node, T.TBinary) and node.right == T.TIntConst(-3, INT32, BASE)


def test_names_resolve_to_the_scope_reference() -> None:
    node = typed("begin.query")
    assert node == T.TRef("begin.query", QUERY, StrType(129), BASE)


def test_string_literal_moves_to_the_right_of_a_comparison() -> None:
    node = typed('"bash" == comm')
    assert isinstance(node, T.TStrEq)
    assert node.left == T.TRef("comm", T.BuiltinRef("comm"), StrType(16), BASE)
    assert node.right == T.TStrConst(b"bash", BASE)


def test_condition_accepts_bools_and_ints_but_not_strings() -> None:
    assert check_condition(parse_expression("arg2", BASE), SCOPE, string_size=8).type == INT32
    assert check_condition(parse_expression("flag", BASE), SCOPE, string_size=8).type == BOOL
    assert errors("comm", check_condition) == [
        ("a condition must be a bool or an integer, got string (up to 15 bytes)", 0,
         ('compare the string (== "...") or test it with contains()/startswith()',))]


def test_value_requires_an_integer() -> None:
    assert check_value(parse_expression("latency / 1000", BASE), SCOPE,
                       string_size=8).type == UINT64
    assert errors("flag", check_value) == [
        ("an aggregation value must be an integer, got bool", 0, ())]
    assert errors("begin.query", check_value)[0][0] == (
        "an aggregation value must be an integer, got string (up to 128 bytes)")


ERROR_CASES = [
    # text, message, column, a hint fragment (or None)
    ("latncy > 1", "unknown name 'latncy'", 0, "did you mean 'latency'?"),
    ("begin.qury", "unknown name 'begin.qury'", 0, "did you mean 'begin.query'?"),
    ("str", "unknown name 'str'", 0, "str is a function: write str(...)"),
    ("strr(arg1)", "unknown function 'strr'", 0, "did you mean 'str'?"),
    ("arg1.len(3)", "unknown function 'arg1.len'", 0, "functions: str(), contains()"),
    ("str()", "str() takes 1 or 2 arguments, got 0", 0, "str(ADDRESS)"),
    ("str(1, 2, 3)", "str() takes 1 or 2 arguments, got 3", 0, None),
    ('contains(comm)', "contains() takes 2 arguments, got 1", 0, None),
    ("arg2 + comm", "operator '+' needs integers, got int32 and string (up to 15 bytes)", 7,
     None),
    ('1 + "x"', "operator '+' needs integers, got int64 and string literal", 4, None),
    ("flag * 2", "operator '*' needs integers, got bool and int64", 0, None),
    ("comm < \"b\"", "operator '<' needs integers, got string (up to 15 bytes) and string "
     "literal", 0, "strings can only be compared with == and !="),
    ("arg2 < arg2 < 3", "operator '<' needs integers, got bool and int64", 0,
     "comparisons do not chain"),
    ("arg1 == \"foo\"", "cannot compare uint64 with string literal", 0,
     "read it first: str(arg1)"),
    # a string literal that spells a number, compared with one: the number unquoted
    ('arg2 == "10"', "cannot compare int32 with string literal", 0,
     "a string literal compared with a number: write the number without quotes, "
     "`arg2 == 10`"),
    ('" 0x1f" != arg1', "cannot compare string literal with uint64", 0, "`arg1 != 0x1f`"),
    # a 32-bit value holds no address: no str() of it
    ('arg2 == "foo"', "cannot compare int32 with string literal", 0,
     "this 32-bit value is never the address of a string; compare it with a number"),
    ("flag == 1", "cannot compare bool with int64", 0, None),
    ("arg2 / 0", "division by zero", 7, None),
    ("arg2 % (0)", "modulo by zero", 8, None),
    ("arg2 / -0", "division by zero", 7, None),
    ("arg2 << 64", "shift count 64 is outside 0..63", 8, None),
    ("arg2 >> -1", "shift count -1 is outside 0..63", 8, None),
    ("arg1 < -1", "comparing the unsigned uint64 with the negative constant -1", 7,
     "converted to uint64"),
    ("-1 == latency", "comparing the unsigned uint64 with the negative constant -1", 0, None),
    ("!comm", "operator '!' needs a bool or an integer, got string (up to 15 bytes)", 1, None),
    ("-comm", "operator '-' needs an integer, got string (up to 15 bytes)", 1, None),
    ("comm && 1", "operator '&&' needs bools or integers, but its left operand is a string", 0,
     None),
    ("str(comm)", "str() needs an address (an integer), got string (up to 15 bytes)", 4,
     "already a string"),
    ("str(flag)", "str() needs an address (an integer), got bool", 4, None),
    ("str(arg1, comm)", "the length of str() must be an integer, got string", 10, None),
    ("str(arg1, 0)", "str() size 0 is outside 1..4096", 10, None),
    ("str(arg1, 4097)", "str() size 4097 is outside 1..4096", 10, None),
    ('contains(arg1, "x")', "the first argument of contains() must be a string, got uint64",
     9, "contains(str(...), ...)"),
    ("contains(comm, begin.query)", "the second argument of contains() must be a string "
     "literal, got a string value", 15, 'contains(STRING, "literal")'),
    ("startswith(comm, 1)", "the second argument of startswith() must be a string literal, "
     "got an integer value", 17, None),
    ('comm == "0123456789abcdef"', "this 16-byte literal can never equal a string of at most "
     "15 bytes", 8, "startswith()"),
    ('contains(str(arg1, 3), "abcd")', "this 4-byte literal can never be found in a string "
     "of at most 3 bytes", 23, None),
    (f'contains(str(arg1, 256), "{"a" * 64}")', "contains() of a 64-byte literal in a "
     "string of up to 256 bytes makes 12352 comparisons, more than the kernel's verifier "
     "follows", 0, "use a shorter literal"),
    ('contains(str(arg1, 4096), "abc")', "contains() of a 3-byte literal in a string of up "
     "to 4096 bytes makes 12282 comparisons", 0, "lower the string's size"),
    ("ratio > 1", "'ratio' is a float; expressions use only integers, durations, strings and "
     "bools", 0, None),
]


@pytest.mark.parametrize(("text", "message", "column", "hint"), ERROR_CASES)
def test_errors(text: str, message: str, column: int, hint: str | None) -> None:
    (err,) = errors(text)
    msg, col, hints = err
    assert msg.startswith(message), msg
    assert col == column
    if hint is not None:
        assert any(hint in h for h in hints), hints


def test_contains_within_what_the_verifier_follows_is_accepted() -> None:
    """The measured loads (expr/check.py CONTAINS_MAX_STEPS): 2048 bytes with a 3-byte
    literal and 256 with a 32-byte one load on Linux 6.18."""
    for text in ('contains(str(arg1, 2048), "abc")', f'contains(str(arg1, 256), "{"a" * 32}")'):
        assert check(parse_expression(text, BASE), SCOPE, string_size=128).type == BOOL


def test_unknown_name_without_close_match_lists_names() -> None:
    small = DictScope({"pid": Symbol(UINT32, T.BuiltinRef("pid")),
                       "tid": Symbol(UINT32, T.BuiltinRef("tid"))})
    with pytest.raises(ExpressionError) as info:
        check(parse_expression("zzz", BASE), small, string_size=8)
    assert info.value.diagnostics[0].hints == ("names available here: pid, tid",)


def test_all_errors_of_one_expression_are_collected() -> None:
    found = errors('lattency > 1 && arg2 / 0 == 1 || strr(x) || comm + 1')
    assert [(m, c) for m, c, _ in found] == [
        ("unknown name 'lattency'", 0),
        ("division by zero", 23),
        ("unknown function 'strr'", 33),
        ("unknown name 'x'", 38),
        ("operator '+' needs integers, got string (up to 15 bytes) and int64", 44),
    ]


def test_a_failed_operand_does_not_cascade() -> None:
    # only the unknown name, not also "cannot compare" or "condition must be bool"
    assert [m for m, _, _ in errors("nope + 1 == comm", check_condition)] == [
        "unknown name 'nope'"]


def test_nul_in_a_string_parameter_is_an_error() -> None:
    scope = DictScope({"p": Symbol(StrType(4), None, "a\0b")})
    with pytest.raises(ExpressionError, match="parameter 'p' contains a NUL byte"):
        check(parse_expression("p", BASE), scope, string_size=8)


def test_internal_misuse_is_not_a_plan_error() -> None:
    bad = DictScope({"p": Symbol(IntType(8, False), None, 300), "q": Symbol(INT64, None)})
    with pytest.raises(ValueError, match="does not fit"):
        check(parse_expression("p", BASE), bad, string_size=8)
    with pytest.raises(ValueError, match="neither"):
        check(parse_expression("q", BASE), bad, string_size=8)


def test_durations_keep_their_unit_through_sums_only() -> None:
    assert typed("latency").type.unit == "ns"
    assert typed("latency + 5ms").type.unit == "ns"
    assert typed("latency - latency").type.unit == "ns"
    assert typed("latency / 1000").type.unit is None
    assert typed("latency * 2").type.unit is None
    assert typed("arg1 + latency").type.unit is None
    assert typed("latency / 1000").type == UINT64  # the unit is a note, not the type


def test_refs_lists_references_in_source_order() -> None:
    node = typed('arg1 + arg3 > 2 && comm == "x" || startswith(str(arg1), "a")')
    assert T.refs(node) == [T.ArgRef(1), T.ArgRef(3), T.BuiltinRef("comm"), T.ArgRef(1)]


def test_str_of_a_value_too_narrow_for_a_pointer_is_an_error() -> None:
    (err,) = errors("str(arg2)")  # arg2 is an int32
    assert err[0] == "str() needs an address, but 'arg2' is a 4-byte int32: it cannot be a pointer"
    assert err[1] == 4
    assert typed("str(arg1)").type == StrType(129)  # uint64: may be
    assert typed("str(arg2 + 0)").type == StrType(129)  # arithmetic is 64-bit: the user's call
