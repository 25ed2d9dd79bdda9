"""Tokens of the expression language and the lexer.

Contract: `tokenize(text, span)` returns the tokens of `text` ending with an EOF token, or
raises ExpressionError at the exact column of the first bad character. Offsets are indices
into `text`; `span` is where `text` starts in the plan file, and a token's place is
`span.shifted(offset, length)`.

Lexical rules (deliberately small, nothing passes through to C):
- identifiers `[A-Za-z_][A-Za-z0-9_]*`, dotted segments allowed (`begin.query`);
  `true`/`false` are boolean literals
- integers: decimal `42` or hex `0x2a`; durations: an integer with a unit
  `ns us ms s m h` (`5ms`); any other letter glued to a number is an error
- strings: double quotes with escapes `\\"`, `\\\\`, `\\n`, `\\t`, `\\r`, `\\xNN`; control
  characters must be escaped; a NUL byte is rejected (strings end at the first NUL)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from planrunner.diagnostics import Diagnostic, Span
from planrunner.errors import ExpressionError


class Kind(Enum):
    INT = "integer"
    DURATION = "duration"
    STRING = "string"
    NAME = "name"
    TRUE = "true"
    FALSE = "false"
    OP = "operator"
    LPAREN = "'('"
    RPAREN = "')'"
    COMMA = "','"
    EOF = "end of expression"


@dataclass(frozen=True, slots=True)
class Token:
    """One token of an expression, with its offset in the text."""

    kind: Kind
    text: str  # the source text of the token
    offset: int  # index into the expression text
    value: int | bytes | str | None = None  # int: INT/DURATION (ns), bytes: STRING, str: NAME/OP

    @property
    def length(self) -> int:
        return len(self.text)


# Longest first so that `<=` wins over `<`.
OPERATORS = ("<<", ">>", "<=", ">=", "==", "!=", "&&", "||",
             "!", "-", "~", "*", "/", "%", "+", "<", ">", "&", "^", "|")

DURATION_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
                  "m": 60_000_000_000, "h": 3_600_000_000_000}
UINT64_MAX = (1 << 64) - 1
MAX_TEXT = 4096  # longer expressions are surely a mistake (and bound parser recursion work)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_NUMBER = re.compile(r"0[xX][0-9A-Za-z_]*|[0-9][0-9A-Za-z_]*")
_SIMPLE_ESCAPES = {'"': 0x22, "\\": 0x5C, "n": 0x0A, "t": 0x09, "r": 0x0D}


def error(message: str, span: Span, offset: int, length: int = 1,
          hints: tuple[str, ...] = ()) -> ExpressionError:
    """An ExpressionError located `offset` characters into the expression."""
    return ExpressionError([Diagnostic(message, span.shifted(offset, max(1, length)), hints)])


def tokenize(text: str, span: Span) -> list[Token]:
    if len(text) > MAX_TEXT:
        raise error(f"expression is too long ({len(text)} characters, at most {MAX_TEXT})",
                    span, 0, 1)
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch in " \t\r\n":
            pos += 1
            continue
        tok = _one_token(text, pos, span)
        tokens.append(tok)
        pos += tok.length
    tokens.append(Token(Kind.EOF, "", len(text)))
    return tokens


def _one_token(text: str, pos: int, span: Span) -> Token:
    ch = text[pos]
    if ch.isascii() and (ch.isalpha() or ch == "_"):
        m = _NAME.match(text, pos)
        assert m is not None
        word = m.group()
        if word in ("true", "false"):
            return Token(Kind.TRUE if word == "true" else Kind.FALSE, word, pos, word == "true")
        return Token(Kind.NAME, word, pos, word)
    if ch.isascii() and ch.isdigit():
        return _number(text, pos, span)
    if ch == '"':
        return _string(text, pos, span)
    if ch == "(":
        return Token(Kind.LPAREN, ch, pos)
    if ch == ")":
        return Token(Kind.RPAREN, ch, pos)
    if ch == ",":
        return Token(Kind.COMMA, ch, pos)
    for op in OPERATORS:
        if text.startswith(op, pos):
            return Token(Kind.OP, op, pos, op)
    raise _bad_char(text, pos, span)


def _bad_char(text: str, pos: int, span: Span) -> ExpressionError:
    ch = text[pos]
    if ch == "=":
        return error("'=' is not an operator", span, pos, 1, ("use '==' to compare",))
    if ch == "'":
        return error("strings use double quotes", span, pos, 1,
                     ('write "..." (in YAML, quote the whole expression with single quotes '
                      "or write it unquoted)",))
    shown = ch if ch.isprintable() else f"U+{ord(ch):04X}"
    return error(f"unexpected character '{shown}'", span, pos, 1)


def _number(text: str, pos: int, span: Span) -> Token:
    m = _NUMBER.match(text, pos)
    assert m is not None
    word = m.group()
    if word[:2] in ("0x", "0X"):
        digits = word[2:]
        if not digits or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
            raise error(f"invalid hexadecimal number '{word}'", span, pos, len(word),
                        ("hex numbers look like 0x2a",))
        value = int(digits, 16)
        kind, tok_value = Kind.INT, value
    else:
        digits_m = re.match(r"[0-9]+", word)
        assert digits_m is not None
        digits, unit = digits_m.group(), word[digits_m.end():]
        if unit and unit not in DURATION_UNITS:
            units = ", ".join(DURATION_UNITS)
            raise error(f"invalid number '{word}'", span, pos, len(word),
                        (f"a duration ends with one of: {units} (e.g. 5ms)",))
        if len(digits) > 1 and digits.startswith("0"):
            raise error(f"invalid number '{word}': leading zero", span, pos, len(word),
                        ("octal is not supported; write decimal or hex (0x...)",))
        value = int(digits) * DURATION_UNITS.get(unit, 1)
        kind, tok_value = (Kind.DURATION if unit else Kind.INT), value
    if value > UINT64_MAX:
        raise error(f"number '{word}' does not fit in 64 bits", span, pos, len(word))
    return Token(kind, word, pos, tok_value)


def _string(text: str, pos: int, span: Span) -> Token:
    out = bytearray()
    i = pos + 1
    while i < len(text):
        ch = text[i]
        if ch == '"':
            return Token(Kind.STRING, text[pos:i + 1], pos, bytes(out))
        if ch == "\\":
            i = _escape(text, i, span, out)
            continue
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise error("control character in a string literal", span, i, 1,
                        ("write it as an escape such as \\n, \\t or \\xNN",))
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise error("invalid character in a string literal", span, i, 1)
        out += ch.encode("utf-8")
        i += 1
    raise error("unterminated string literal", span, pos, 1, ('close it with "',))


def _escape(text: str, i: int, span: Span, out: bytearray) -> int:
    """Decode the escape at text[i] == '\\' into `out`; return the index after it."""
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if nxt in _SIMPLE_ESCAPES:
        out.append(_SIMPLE_ESCAPES[nxt])
        return i + 2
    if nxt == "x":
        digits = text[i + 2:i + 4]
        if len(digits) != 2 or not re.fullmatch(r"[0-9A-Fa-f]{2}", digits):
            raise error("\\x needs exactly two hex digits", span, i, 2 + len(digits),
                        ("e.g. \\x1b",))
        byte = int(digits, 16)
        if byte == 0:
            raise error("a string literal cannot contain a NUL byte", span, i, 4,
                        ("strings end at the first NUL, so this could never match",))
        out.append(byte)
        return i + 4
    shown = nxt if nxt else "end of text"
    raise error(f"unknown escape '\\{shown}'", span, i, 2,
                ('escapes are \\" \\\\ \\n \\t \\r \\xNN',))
