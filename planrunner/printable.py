"""Text from binaries, tracefs or traced programs, made safe for a terminal: every
non-printable character (control characters, escape sequences) becomes `\\xNN`
(`\\uNNNN` above 0xff), so a string read from a process cannot move the cursor,
clear the screen or forge a line of output."""

from __future__ import annotations


def printable(text: str) -> str:
    if text.isprintable():  # the usual case, checked in C: listings print thousands
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code <= 0xff else f"\\u{code:04x}"
