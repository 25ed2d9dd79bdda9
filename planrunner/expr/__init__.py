"""The expression language of plans (`where:`, computed `fields:`, aggregation `value:`/`by:`,
span `key:`, string `length:`): parse -> check -> lower to C.

    expr = parse_expression(text, span)                       # parser.py, ast.py
    texpr = check_condition(expr, scope, string_size=128)     # check.py, typed.py, types.py
    lowered = lower(texpr, alloc)                    # lower_c.py, templates/expr_helpers.h
"""

from __future__ import annotations

from planrunner.expr.check import Scope, Symbol, check, check_condition, check_value
from planrunner.expr.lower_c import (
    Lowered,
    StringAllocator,
    c_int_literal,
    c_string_literal,
    lower,
)
from planrunner.expr.parser import parse_expression

__all__ = [
    "Lowered", "Scope", "StringAllocator", "Symbol", "c_int_literal", "c_string_literal",
    "check", "check_condition", "check_value", "lower", "parse_expression",
]
