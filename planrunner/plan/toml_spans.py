"""Positions for a TOML plan: a small scanner over text that tomllib already accepted.

tomllib keeps no positions, so this walks the same text and records, for every JSON
path, the key's span, the value's span and where a string's characters start. It knows
`[table]` and `[[array]]` headers (dotted, quoted), `a.b = value` lines, strings of the
four kinds, arrays (over several lines, with comments) and inline tables. It trusts the
text to be valid TOML; if it meets something it does not understand it stops, and the
SourceMap's ancestor fallback (ultimately line 1) takes over for the paths it missed.
"""

from __future__ import annotations

import bisect
import re

from planrunner.diagnostics import Span
from planrunner.plan.source import JsonPath, SourceMap

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_WS = " \t"


class _Stop(Exception):
    """The scanner met text it does not model; positions found so far are kept."""


class _Scanner:
    def __init__(self, path: str, text: str, spans: SourceMap) -> None:
        self.path, self.text, self.spans = path, text, spans
        self.pos = 0
        self.starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        self.aot: dict[JsonPath, int] = {}

    # -- positions ---------------------------------------------------------------------
    def span(self, start: int, end: int | None = None) -> Span:
        line = bisect.bisect_right(self.starts, start)
        col = start - self.starts[line - 1] + 1
        if end is None:
            return Span(self.path, line, col)
        eline = bisect.bisect_right(self.starts, end)
        return Span(self.path, line, col, eline, end - self.starts[eline - 1] + 1)

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def skip_ws(self, newlines: bool = False) -> None:
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in _WS or (newlines and ch in "\r\n"):
                self.pos += 1
            elif ch == "#" and newlines:
                while self.pos < len(self.text) and self.text[self.pos] != "\n":
                    self.pos += 1
            else:
                return

    def expect(self, s: str) -> None:
        if not self.text.startswith(s, self.pos):
            raise _Stop
        self.pos += len(s)

    # -- document ----------------------------------------------------------------------
    def document(self) -> None:
        table: JsonPath = ()
        while True:
            self.skip_ws(newlines=True)
            if self.pos >= len(self.text):
                return
            if self.peek(2) == "[[":
                table = self.header(double=True)
            elif self.peek() == "[":
                table = self.header(double=False)
            else:
                self.keyval(table)

    def header(self, double: bool) -> JsonPath:
        start = self.pos
        self.expect("[[" if double else "[")
        keys = self.dotted_key()
        self.skip_ws()
        self.expect("]]" if double else "]")
        resolved: JsonPath = ()
        for i, (name, kspan) in enumerate(keys):
            resolved += (name,)
            if i < len(keys) - 1 and resolved in self.aot:
                resolved += (self.aot[resolved],)
            if resolved not in self.spans.values:
                self.spans.record(resolved, kspan, kspan)
        if double:
            idx = self.aot.get(resolved, -1) + 1
            self.aot[resolved] = idx
            resolved += (idx,)
            self.spans.record(resolved, self.span(start, self.pos))
        else:
            self.spans.record(resolved, keys[-1][1], keys[-1][1])
        return resolved

    def dotted_key(self) -> list[tuple[str, Span]]:
        keys = []
        while True:
            self.skip_ws()
            keys.append(self.simple_key())
            self.skip_ws()
            if self.peek() != ".":
                return keys
            self.pos += 1

    def simple_key(self) -> tuple[str, Span]:
        start = self.pos
        if self.peek() in ('"', "'"):
            value, _ = self.string()
            return value, self.span(start, self.pos)
        m = _BARE.match(self.text, self.pos)
        if not m:
            raise _Stop
        self.pos = m.end()
        return m.group(), self.span(start, self.pos)

    def keyval(self, table: JsonPath) -> None:
        keys = self.dotted_key()
        self.expect("=")
        self.skip_ws()
        jpath = table
        for name, kspan in keys[:-1]:
            jpath += (name,)
            if jpath not in self.spans.values:
                self.spans.record(jpath, kspan, kspan)
        jpath += (keys[-1][0],)
        self.value(jpath, keys[-1][1])

    # -- values ------------------------------------------------------------------------
    def value(self, jpath: JsonPath, key: Span | None) -> None:
        start = self.pos
        ch = self.peek()
        text_at: Span | None = None
        if ch in ('"', "'"):
            raw, content_start = self.string()
            text_at = self.span(content_start, content_start + len(raw))
        elif ch == "[":
            self.array(jpath)
        elif ch == "{":
            self.inline_table(jpath)
        else:
            while self.pos < len(self.text) and self.text[self.pos] not in ",]}#\r\n":
                self.pos += 1
            end = self.pos
            while end > start and self.text[end - 1] in _WS:
                end -= 1
            self.spans.record(jpath, self.span(start, end), key)
            return
        self.spans.record(jpath, self.span(start, self.pos), key, text_at)

    def array(self, jpath: JsonPath) -> None:
        self.expect("[")
        index = 0
        while True:
            self.skip_ws(newlines=True)
            if self.peek() == "]":
                self.pos += 1
                return
            self.value(jpath + (index,), None)
            index += 1
            self.skip_ws(newlines=True)
            if self.peek() == ",":
                self.pos += 1

    def inline_table(self, jpath: JsonPath) -> None:
        self.expect("{")
        while True:
            self.skip_ws()
            if self.peek() == "}":
                self.pos += 1
                return
            self.keyval(jpath)
            self.skip_ws()
            if self.peek() == ",":
                self.pos += 1

    def string(self) -> tuple[str, int]:
        """Skip a string; return its raw content and where that content starts."""
        quote = self.peek()
        multi = self.peek(3) == quote * 3
        delim = quote * 3 if multi else quote
        self.pos += len(delim)
        if multi and self.peek() == "\n":
            self.pos += 1
        elif multi and self.peek(2) == "\r\n":
            self.pos += 2
        content = self.pos
        while self.pos < len(self.text):
            if quote == '"' and self.text[self.pos] == "\\":
                self.pos += 2
                continue
            if self.text.startswith(delim, self.pos):
                # A multi-line string may end with up to two extra quotes before the delimiter.
                while multi and self.text.startswith(delim + quote, self.pos):
                    self.pos += 1
                raw = self.text[content:self.pos]
                self.pos += len(delim)
                return raw, content
            self.pos += 1
        raise _Stop


def toml_spans(path: str, text: str) -> SourceMap:
    """Positions of every key and value of a valid TOML document (best effort)."""
    spans = SourceMap(path)
    spans.record((), Span(path, 1, 1))
    scanner = _Scanner(path, text, spans)
    try:
        scanner.document()
    except (_Stop, IndexError):
        pass
    return spans
