"""Bounds on what reading a plan file may cost, whatever the file holds.

A plan is a few kilobytes of reviewed text; a hostile or broken one must fail fast, in
bounded memory, with a located error, never a traceback or a machine out of memory:

- MAX_PLAN_BYTES: a larger file is refused before it is parsed, and a path that is no
  regular file (a FIFO would block open(), /dev/zero never ends) is refused unopened
  (plan_file.read_plan_bytes). Each plan is read once: `source_read(path)` gives the
  error printer the text the loader read, so a diagnostic never re-opens the file;
- MAX_DEPTH: lists and mappings nested deeper are refused (YAML: while composing, and
  while expanding aliases; TOML: by `toml_too_deep`, a scan before tomllib, which
  recurses and would raise RecursionError near depth 1000);
- MAX_ALIAS_NODES: YAML aliases may repeat at most this many nodes in all ("billion
  laughs": a few lines whose aliases expand to 10^9 nodes, also through `<<` merges).
"""

from __future__ import annotations

from planrunner.diagnostics import Span
from planrunner.errors import PlanSyntaxError
from planrunner.plan_file import MAX_PLAN_BYTES, NotAPlanFile, PlanTooLarge, read_plan_bytes

__all__ = ["MAX_PLAN_BYTES", "MAX_DEPTH", "MAX_ALIAS_NODES", "read_bounded", "source_read",
           "too_deep", "toml_too_deep"]

MAX_DEPTH = 64
MAX_ALIAS_NODES = 10_000


# path -> the text the loader read (the error printer's source lines); bounded by
# MAX_PLAN_BYTES per plan, and a process loads a handful of plans.
_READ: dict[str, str] = {}


def read_bounded(path: str, data: bytes | None = None) -> str:
    """The UTF-8 text of `path`, or of `data` when its bytes were read already
    (plan_file.read_plan_bytes), remembered for source_read(path); PlanSyntaxError,
    located at path:1:1, when it is over MAX_PLAN_BYTES (only that much plus one byte is
    ever read) or no regular file (a FIFO, a device: not opened). OSError /
    UnicodeDecodeError pass through."""
    try:
        if data is None:
            data = read_plan_bytes(path)
        elif len(data) > MAX_PLAN_BYTES:
            raise PlanTooLarge(path)
    except PlanTooLarge:
        raise PlanSyntaxError(
            f"plan file is larger than {MAX_PLAN_BYTES // (1024 * 1024)} MiB: refused "
            "unread", Span(path, 1, 1),
            ("a plan is a few kilobytes of reviewed text; is this the right file?",)
        ) from None
    except NotAPlanFile as exc:
        raise PlanSyntaxError(
            f"plan file is {exc.args[1]}, not a regular file: refused unread",
            Span(path, 1, 1), ("write the plan to a file and give its path (a pipe or "
                               "device could block or never end)",)) from None
    text = data.decode("utf-8")
    _READ[path] = text
    return text


def source_read(path: str) -> str | None:
    """The text of the plan `path` as the loader read it (None if it read none): what the
    error printer shows source lines from, without opening the file again."""
    return _READ.get(path)


def too_deep(path: str, line: int, column: int) -> PlanSyntaxError:
    return PlanSyntaxError(
        f"lists and mappings nested more than {MAX_DEPTH} levels deep", Span(path, line, column),
        ("a plan needs a few levels; flatten the data",))


def toml_too_deep(path: str, text: str) -> PlanSyntaxError | None:
    """The error for the first `[` or `{` of a TOML value nested deeper than MAX_DEPTH
    (table headers count as one level and close on their line), or None. Strings and
    comments are skipped; a malformed file is left for tomllib to report."""
    depth = 0
    line, col = 1, 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        col += 1
        if ch == "\n":
            line, col = line + 1, 0
        elif ch == "#":
            while i + 1 < n and text[i + 1] != "\n":
                i += 1
        elif ch in "\"'":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else ch
            i += len(quote)
            col += len(quote) - 1
            while i < n and not text.startswith(quote, i):
                if text[i] == "\\" and ch == '"':
                    i += 1
                    col += 1
                if i < n and text[i] == "\n":
                    line, col = line + 1, 0
                i += 1
                col += 1
            i += len(quote) - 1
            col += len(quote) - 1
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return too_deep(path, line, col)
        elif ch in "]}":
            depth = max(0, depth - 1)
        i += 1
    return None
