"""Tracepoint listings for `planrunner list --tracepoints`: text lines or JSON data.

One line per event, `tracepoint:CATEGORY:EVENT` (the form `list` accepts back);
`-v` adds each field as its C declaration, `-vv` also its offset, size and sign.
The common_ header fields every event shares are left out. Reads tracefs only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from planrunner.diagnostics import did_you_mean
from planrunner.errors import ResolveError
from planrunner.printable import printable
from planrunner.tracefs import MOUNT_HINT, EventFormat, categories, event_names, find_root
from planrunner.tracefs import read_format as _read_format

PREFIX = "tracepoint:"


def root_or_error() -> str:
    root = find_root()
    if root is None:
        raise ResolveError("tracefs is not mounted, so kernel tracepoints cannot be listed",
                           hints=(MOUNT_HINT,))
    return root


def names(root: str, patterns: Sequence[str | None]) -> list[tuple[str, str]]:
    """(category, event) matching any of `patterns` (None: all), sorted, once each."""
    found: set[tuple[str, str]] = set()
    for pattern in patterns or [None]:
        found.update(event_names(root, pattern))
    return sorted(found)


def formats(root: str, events: Sequence[tuple[str, str]]
            ) -> Iterator[tuple[str, str, EventFormat | None]]:
    for category, event in events:
        try:
            yield category, event, _read_format(root, category, event)
        except OSError:  # listed in available_events but no format (or not readable)
            yield category, event, None


def text_lines(root: str, events: Sequence[tuple[str, str]], verbosity: int
               ) -> Iterator[str]:
    if not verbosity:
        for category, event in events:
            yield f"{PREFIX}{printable(category)}:{printable(event)}"
        return
    for category, event, fmt in formats(root, events):
        yield f"{PREFIX}{printable(category)}:{printable(event)}"
        if fmt is None:
            yield "    (format not readable)"
            continue
        for f in fmt.own_fields:
            line = f"    {printable(f.decl)};"
            if verbosity >= 2:
                sign = "signed" if f.signed else "unsigned"
                line += f"  offset {f.offset}, size {f.size}, {sign}"
                if f.is_string:
                    line += ", string"
            yield line


def json_items(root: str, events: Sequence[tuple[str, str]]) -> list[dict[str, object]]:
    return [{
        "category": category,
        "event": event,
        "id": fmt.id if fmt else None,
        "fields": [{
            "name": f.name, "type": f.ctype, "declaration": f.decl, "offset": f.offset,
            "size": f.size, "signed": f.signed, "string": f.is_string,
        } for f in (fmt.own_fields if fmt else ())],
    } for category, event, fmt in formats(root, events)]


def nothing_found(root: str, patterns: Sequence[str | None]) -> tuple[str, tuple[str, ...]]:
    """(message, hints) when no event matches: the patterns, and a guess."""
    shown = ", ".join(f"'{p}'" for p in patterns if p)
    message = f"no tracepoints matching {shown}" if shown else "no tracepoints"
    hints = []
    for pattern in patterns:
        if pattern and ":" in pattern:
            category = pattern.split(":", 1)[0]
            if not any(c in category for c in "*?["):
                known = categories(root)
                if category not in known:
                    guess = did_you_mean(category, known)
                    hints.append(f"no category '{category}'"
                                 + (f": did you mean '{guess}'?" if guess else
                                    "; `planrunner list --tracepoints` lists them all"))
    return message, tuple(hints)
