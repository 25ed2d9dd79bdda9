"""A stack value as lines of text, for the `text` view's records (text.py) and its
aggregation tables (text_agg.py): the frames, one line each, indented like bcc's
`trace -U` (``    inner+0x12 [fx_stack]``), innermost first; a stack that could not be
captured, or not be unwound past the probe's frame, ends with ``    [stack lost]``.
Control characters of a frame (a traced program's symbol text) are escaped
(printable.py)."""

from __future__ import annotations

from planrunner.printable import printable
from planrunner.records import Stack
from planrunner.stacks.formats import text_lines


def stack_text(stack: object, indent: int = 4) -> list[str]:
    """The frames of a stack value, one line each; nothing for any other value."""
    if not isinstance(stack, Stack):
        return []
    lines = [printable(t) if not t.isprintable() else t
             for t in text_lines(stack.frames, indent)]
    if stack.lost:  # after the frames it has: a stack not unwound keeps the probe's
        lines.append(" " * indent + "[stack lost]")
    return lines
