"""Recursive-descent parser for the expression language.

Contract: `parse_expression(text, span) -> Expr`. `span` is where `text` starts in the
plan file; each node's span is `span.shifted(offset, length)` over the characters it
covers. A syntax error raises ExpressionError with one located Diagnostic (the parser
stops at the first syntax error; the type checker collects several).

Grammar (C precedence, binary operators left-associative):
    expr    := binary(0)
    binary(i) := binary(i+1) (OP_i binary(i+1))*      levels in ast.BINARY_LEVELS
    unary   := ('!' | '-' | '~') unary | primary
    primary := INT | DURATION | STRING | true | false
             | NAME [ '(' [expr (',' expr)*] ')' ] | '(' expr ')'
"""

from __future__ import annotations

from planrunner.diagnostics import Span
from planrunner.errors import ExpressionError
from planrunner.expr.ast import (
    BINARY_LEVELS,
    UNARY_OPS,
    Binary,
    BoolLit,
    Call,
    DurationLit,
    Expr,
    IntLit,
    Name,
    StrLit,
    Unary,
)
from planrunner.expr.tokens import Kind, Token, error, tokenize

MAX_DEPTH = 32  # nesting (parentheses, unary chains, calls) beyond this is refused
MAX_TREE_DEPTH = 100  # keeps the checker's and lowering's recursion far from Python's limit
_WORD_OPERATORS = {"and": "&&", "or": "||", "not": "!"}


def parse_expression(text: str, span: Span) -> Expr:
    """Parse `text` (found at `span` in the plan file) into an expression tree."""
    return _Parser(text, span).parse()


class _Parser:
    def __init__(self, text: str, span: Span) -> None:
        self.text = text
        self.base = span
        self.tokens = tokenize(text, span)
        self.pos = 0
        self.depth = 0
        # id(node) -> (start offset, end offset, tree depth); the offsets include any
        # parentheses around the node, so an enclosing node's span covers them too.
        self.info: dict[int, tuple[int, int, int]] = {}

    # -- helpers --------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def advance(self) -> Token:
        tok = self.tokens[self.pos]
        if tok.kind is not Kind.EOF:
            self.pos += 1
        return tok

    def span(self, start: int, end: int) -> Span:
        return self.base.shifted(start, max(1, end - start))

    def made(self, node: Expr, start: int, end: int, *children: Expr) -> Expr:
        """Record `node`'s extent and depth; refuse trees too deep to walk recursively."""
        depth = 1 + max((self.info[id(c)][2] for c in children), default=0)
        if depth > MAX_TREE_DEPTH:
            raise error(f"expression is too complex (more than {MAX_TREE_DEPTH} levels)",
                        self.base, start, end - start, ("split it into simpler parts",))
        self.info[id(node)] = (start, end, depth)
        return node

    def fail(self, message: str, tok: Token, hints: tuple[str, ...] = ()) -> ExpressionError:
        return error(message, self.base, tok.offset, max(1, tok.length), hints)

    def describe(self, tok: Token) -> str:
        if tok.kind is Kind.EOF:
            return "the end of the expression"
        return f"'{tok.text}'"

    def enter(self, tok: Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"expression is nested too deeply (more than {MAX_DEPTH} levels)",
                            tok)

    # -- grammar --------------------------------------------------------------------------

    def parse(self) -> Expr:
        if self.at_end():
            raise error("empty expression", self.base, 0, 1)
        expr = self.binary(0)
        if not self.at_end():
            raise self.trailing(self.tok)
        return expr

    def at_end(self) -> bool:
        return self.tok.kind is Kind.EOF

    def trailing(self, tok: Token) -> ExpressionError:
        if tok.kind is Kind.RPAREN:
            return self.fail("unmatched ')'", tok, ("remove it or add the '(' it closes",))
        if tok.kind is Kind.NAME and tok.text in _WORD_OPERATORS:
            return self.fail(f"expected an operator, found '{tok.text}'", tok,
                             (f"write '{_WORD_OPERATORS[tok.text]}'",))
        return self.fail(f"expected an operator, found {self.describe(tok)}", tok)

    def binary(self, level: int) -> Expr:
        if level == len(BINARY_LEVELS):
            return self.unary()
        ops = BINARY_LEVELS[level]
        left = self.binary(level + 1)
        while self.tok.kind is Kind.OP and self.tok.text in ops:
            op_tok = self.advance()
            right = self.binary(level + 1)
            start, end = self.info[id(left)][0], self.info[id(right)][1]
            left = self.made(Binary(op_tok.text, left, right, self.span(start, end),
                                    self.span(op_tok.offset, op_tok.offset + op_tok.length)),
                             start, end, left, right)
        return left

    def unary(self) -> Expr:
        tok = self.tok
        if tok.kind is Kind.OP and tok.text in UNARY_OPS:
            self.advance()
            self.enter(tok)
            operand = self.unary()
            self.depth -= 1
            end = self.info[id(operand)][1]
            return self.made(Unary(tok.text, operand, self.span(tok.offset, end)),
                             tok.offset, end, operand)
        return self.primary()

    def primary(self) -> Expr:
        tok = self.tok
        if tok.kind is Kind.NAME and self.tokens[self.pos + 1].kind is Kind.LPAREN:
            self.advance()
            return self.call(tok)
        if tok.kind is Kind.LPAREN:
            self.advance()
            return self.group(tok)
        node = self.atom(self.advance())
        return self.made(node, tok.offset, tok.offset + tok.length)

    def atom(self, tok: Token) -> Expr:
        sp = self.span(tok.offset, tok.offset + tok.length)
        if tok.kind is Kind.INT:
            assert isinstance(tok.value, int)
            return IntLit(tok.value, sp)
        if tok.kind is Kind.DURATION:
            assert isinstance(tok.value, int)
            return DurationLit(tok.value, sp)
        if tok.kind is Kind.STRING:
            assert isinstance(tok.value, bytes)
            return StrLit(tok.value, sp)
        if tok.kind in (Kind.TRUE, Kind.FALSE):
            return BoolLit(tok.kind is Kind.TRUE, sp)
        if tok.kind is Kind.NAME:
            return Name(tok.text, sp)
        raise self.unexpected(tok)

    def unexpected(self, tok: Token) -> ExpressionError:
        if tok.kind is Kind.EOF:
            return self.fail("expression ends too early: expected a value", tok)
        if tok.kind is Kind.OP:
            return self.fail(f"expected a value before {self.describe(tok)}", tok)
        return self.fail(f"expected a value, found {self.describe(tok)}", tok)

    def group(self, lparen: Token) -> Expr:
        self.enter(lparen)
        inner = self.binary(0)
        self.depth -= 1
        if self.tok.kind is not Kind.RPAREN:
            if self.tok.kind is Kind.EOF:
                raise self.fail("this '(' is never closed", lparen, ("add a ')'",))
            raise self.trailing(self.tok)
        rparen = self.advance()
        # Parentheses leave no node: the inner node keeps its own span, but its recorded
        # extent grows to include them (so `(a + b) * c` spans from the '(').
        _, _, depth = self.info[id(inner)]
        self.info[id(inner)] = (lparen.offset, rparen.offset + 1, depth)
        return inner

    def call(self, name: Token) -> Expr:
        lparen = self.advance()
        self.enter(lparen)
        args: list[Expr] = []
        if self.tok.kind is not Kind.RPAREN:
            while True:
                args.append(self.binary(0))
                if self.tok.kind is Kind.COMMA:
                    self.advance()
                    continue
                break
        self.depth -= 1
        if self.tok.kind is not Kind.RPAREN:
            if self.tok.kind is Kind.EOF:
                raise self.fail(f"the '(' of {name.text}() is never closed", lparen,
                                ("add a ')'",))
            raise self.fail(f"expected ',' or ')' in the arguments of {name.text}(), found "
                            f"{self.describe(self.tok)}", self.tok)
        rparen = self.advance()
        end = rparen.offset + 1
        node = Call(name.text, tuple(args), self.span(name.offset, end),
                    self.span(name.offset, name.offset + name.length))
        return self.made(node, name.offset, end, *args)
