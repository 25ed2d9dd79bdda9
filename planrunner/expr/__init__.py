"""The expression language of plans (`where:`, computed `fields:`, aggregation `value:`/`by:`,
span `key:`, string `length:`): parse, then check into a typed tree of symbolic
references. Lowering to C is render/'s (render/expr_c.py).

    expr = parse_expression(text, span)                       # parser.py, ast.py
    texpr = check_condition(expr, scope, string_size=128)     # check.py, typed.py, types.py
"""

from __future__ import annotations

from planrunner.expr.check import Scope, Symbol, check, check_condition, check_value
from planrunner.expr.parser import parse_expression

__all__ = ["Scope", "Symbol", "check", "check_condition", "check_value", "parse_expression"]
