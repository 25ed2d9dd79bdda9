"""The expression lexer and parser: precedence, literals, exact spans, syntax errors, and
the round trip text -> tree -> text -> tree (a hypothesis property)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planrunner.diagnostics import Span
from planrunner.errors import ExpressionError
from planrunner.expr.ast import (
    BINARY_LEVELS,
    UNARY_OPS,
    Binary,
    BoolLit,
    Call,
    DurationLit,
    IntLit,
    Name,
    StrLit,
    Unary,
    to_parenthesised,
    to_source,
)
from planrunner.expr.parser import parse_expression

BASE = Span("plan.yaml", 7, 12)


def parse(text: str):
    return parse_expression(text, BASE)


def parse_error(text: str) -> tuple[str, int, int | None, tuple[str, ...]]:
    with pytest.raises(ExpressionError) as info:
        parse(text)
    (diag,) = info.value.diagnostics
    assert diag.span is not None and diag.span.line == 7
    return diag.message, diag.span.column - BASE.column, diag.span.end_column, diag.hints


PRECEDENCE_CASES = [
    ("a + b * c", "(a + (b * c))"),
    ("a * b + c", "((a * b) + c)"),
    ("a - b - c", "((a - b) - c)"),
    ("a / b % c", "((a / b) % c)"),
    ("a << 1 + 2", "(a << (1 + 2))"),
    ("a < b << 1", "(a < (b << 1))"),
    ("a == b < c", "(a == (b < c))"),
    ("a & b == c", "(a & (b == c))"),
    ("a ^ b & c", "(a ^ (b & c))"),
    ("a | b ^ c", "(a | (b ^ c))"),
    ("a && b | c", "(a && (b | c))"),
    ("a || b && c", "(a || (b && c))"),
    ("a || b || c", "((a || b) || c)"),
    ("!a && b", "((!a) && b)"),
    ("-a * b", "((-a) * b)"),
    ("~a + 1", "((~a) + 1)"),
    ("- -a", "(-(-a))"),
    ("!!a", "(!(!a))"),
    ("(a + b) * c", "((a + b) * c)"),
    ("a * (b + c)", "(a * (b + c))"),
    ("a >= 1 != b <= 2", "((a >= 1) != (b <= 2))"),
    ("a > b >> 2", "(a > (b >> 2))"),
    ("x & 0xff == 0", "(x & (255 == 0))"),
    ("str(a, b + 1) == \"x\" && !contains(s, \"y\")",
     '((str(a, (b + 1)) == "x") && (!contains(s, "y")))'),
    ("latency >= 5ms || begin.query == \"q\"", '((latency >= 5000000ns) || (begin.query == "q"))'),
]


@pytest.mark.parametrize(("text", "expected"), PRECEDENCE_CASES)
def test_precedence_matches_parenthesised_rendering(text: str, expected: str) -> None:
    tree = parse(text)
    assert to_parenthesised(tree) == expected
    assert parse(expected) == tree


@pytest.mark.parametrize("op", [op for level in BINARY_LEVELS for op in level])
def test_every_binary_operator(op: str) -> None:
    tree = parse(f"x{op}y")  # no spaces needed
    assert tree == Binary(op, Name("x", BASE), Name("y", BASE), BASE)
    assert tree.op_span == BASE.shifted(1, len(op))


@pytest.mark.parametrize("op", UNARY_OPS)
def test_every_unary_operator(op: str) -> None:
    assert parse(f"{op}x") == Unary(op, Name("x", BASE), BASE)


@pytest.mark.parametrize(("text", "node"), [
    ("42", IntLit(42, BASE)),
    ("0", IntLit(0, BASE)),
    ("0x2a", IntLit(42, BASE)),
    ("0XFF", IntLit(255, BASE)),
    ("18446744073709551615", IntLit((1 << 64) - 1, BASE)),
    ("0xffffffffffffffff", IntLit((1 << 64) - 1, BASE)),
    ("100ns", DurationLit(100, BASE)),
    ("500us", DurationLit(500_000, BASE)),
    ("5ms", DurationLit(5_000_000, BASE)),
    ("2s", DurationLit(2_000_000_000, BASE)),
    ("1m", DurationLit(60_000_000_000, BASE)),
    ("1h", DurationLit(3_600_000_000_000, BASE)),
    ("true", BoolLit(True, BASE)),
    ("false", BoolLit(False, BASE)),
    ("arg12", Name("arg12", BASE)),
    ("begin.query", Name("begin.query", BASE)),
    ("_a.b_2.c", Name("_a.b_2.c", BASE)),
    ('"SELECT"', StrLit(b"SELECT", BASE)),
    ('""', StrLit(b"", BASE)),
    (r'"a\"b\\c\n\t\r\x41\xff"', StrLit(b'a"b\\c\n\t\rA\xff', BASE)),
    ('"café"', StrLit("café".encode(), BASE)),
    ("f()", Call("f", (), BASE)),
    ("str(arg2, arg3)", Call("str", (Name("arg2", BASE), Name("arg3", BASE)), BASE)),
])
def test_literals_names_calls(text: str, node: object) -> None:
    assert parse(text) == node


def test_spans_are_exact_columns() -> None:
    tree = parse('(a + bb) * str(c, 0x10) == "x y"')
    assert isinstance(tree, Binary) and tree.op == "=="
    assert tree.span == BASE.shifted(0, 32)
    mul = tree.left
    assert isinstance(mul, Binary)
    assert mul.span == BASE.shifted(0, 23)  # includes the parenthesis
    add = mul.left
    assert isinstance(add, Binary)
    assert add.span == BASE.shifted(1, 6)
    assert add.right.span == BASE.shifted(5, 2)
    call = mul.right
    assert isinstance(call, Call)
    assert call.span == BASE.shifted(11, 12)
    assert call.func_span == BASE.shifted(11, 3)
    assert call.args[1].span == BASE.shifted(18, 4)
    assert tree.right.span == BASE.shifted(27, 5)
    assert tree.op_span == BASE.shifted(24, 2)
    neg = parse("  -  x")
    assert neg.span == BASE.shifted(2, 4)


SYNTAX_ERRORS = [
    # text, message start, column offset, hint fragment
    ("", "empty expression", 0, None),
    ("   ", "empty expression", 0, None),
    ("a +", "expression ends too early", 3, None),
    ("a + * b", "expected a value before '*'", 4, None),
    ("(a + b", "this '(' is never closed", 0, "add a ')'"),
    ("a + b)", "unmatched ')'", 5, None),
    ("a b", "expected an operator, found 'b'", 2, None),
    ("a and b", "expected an operator, found 'and'", 2, "'&&'"),
    ("a or b", "expected an operator, found 'or'", 2, "'||'"),
    ("a = 1", "'=' is not an operator", 2, "'=='"),
    ("comm == 'bash'", "strings use double quotes", 8, None),
    ('x == "abc', "unterminated string literal", 5, None),
    (r'"a\qb"', "unknown escape '\\q'", 2, None),
    ('"a\\', "unknown escape '\\end of text'", 2, None),
    (r'"\x4"', "\\x needs exactly two hex digits", 1, None),
    (r'"ab\x00"', "a string literal cannot contain a NUL byte", 3, None),
    ('"a\tb"', "control character in a string literal", 2, "\\t"),
    ('"a\nb"', "control character in a string literal", 2, None),
    ("x $ y", "unexpected character '$'", 2, None),
    ("x ; y", "unexpected character ';'", 2, None),
    ("x # y", "unexpected character '#'", 2, None),
    ("a\0", "unexpected character 'U+0000'", 1, None),
    ("5xs", "invalid number '5xs'", 0, "5ms"),
    ("5 ms", "expected an operator, found 'ms'", 2, None),
    ("0x", "invalid hexadecimal number '0x'", 0, None),
    ("0x1g", "invalid hexadecimal number '0x1g'", 0, None),
    ("012", "invalid number '012': leading zero", 0, None),
    ("18446744073709551616", "number '18446744073709551616' does not fit in 64 bits", 0, None),
    ("20000000000h", "number '20000000000h' does not fit in 64 bits", 0, None),
    ("f(a, b", "the '(' of f() is never closed", 1, None),
    ("f(a b)", "expected ',' or ')' in the arguments of f(), found 'b'", 4, None),
    ("f(a,)", "expected a value, found ')'", 4, None),
    ("(" * 40 + "a" + ")" * 40, "expression is nested too deeply", 32, None),
    ("-" * 40 + "a", "expression is nested too deeply", 32, None),
    ("+".join(["a"] * 120), "expression is too complex", 0, "split"),
    ("a" * 5000, "expression is too long", 0, None),
]


@pytest.mark.parametrize(("text", "message", "column", "hint"), SYNTAX_ERRORS)
def test_syntax_errors_are_located(text: str, message: str, column: int, hint: str | None) -> None:
    msg, col, _, hints = parse_error(text)
    assert msg.startswith(message)
    assert col == column
    if hint is not None:
        assert any(hint in h for h in hints), hints


def test_error_span_covers_the_bad_token() -> None:
    _, col, end, _ = parse_error("x == 0x1g")
    assert (col, end) == (5, BASE.column + 5 + 4)


# -- round trip ------------------------------------------------------------------------

_idents = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}(\.[A-Za-z_][A-Za-z0-9_]{0,4}){0,2}",
                        fullmatch=True).filter(lambda s: s not in ("true", "false"))
_leaves = st.one_of(
    st.builds(IntLit, st.integers(0, (1 << 64) - 1), st.just(BASE)),
    st.builds(DurationLit, st.integers(0, (1 << 64) - 1), st.just(BASE)),
    st.builds(BoolLit, st.booleans(), st.just(BASE)),
    st.builds(StrLit, st.binary(max_size=8).filter(lambda b: b"\0" not in b), st.just(BASE)),
    st.builds(Name, _idents, st.just(BASE)),
)
_binary_ops = [op for level in BINARY_LEVELS for op in level]


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.builds(Unary, st.sampled_from(UNARY_OPS), children, st.just(BASE)),
        st.builds(Binary, st.sampled_from(_binary_ops), children, children, st.just(BASE)),
        st.builds(Call, st.sampled_from(["str", "contains", "startswith", "f"]),
                  st.lists(children, max_size=3).map(tuple), st.just(BASE)),
    )


_trees = st.recursive(_leaves, _extend, max_leaves=12)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(_trees)
def test_rendered_trees_parse_back_to_the_same_tree(tree) -> None:
    text = to_source(tree)
    assert parse(text) == tree
    assert parse(to_parenthesised(tree)) == tree
