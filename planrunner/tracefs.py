"""Kernel tracepoints as tracefs describes them: where tracefs is, which events exist,
and each event's fields with their C types (parsed from `events/CAT/EVENT/format`).

    find_root()                       -> "/sys/kernel/tracing" | ... | None
    event_names(root, pattern)        -> [(category, event)], sorted
    read_format(root, category, event) -> EventFormat
    parse_format(text)                -> EventFormat
    has_kprobes(root)                 -> bool

tracefs is looked for at /sys/kernel/tracing, then /sys/kernel/debug/tracing, then at
any `tracefs` mount point in /proc/mounts (and `tracing/` under a debugfs mount). A
pattern is an fnmatch glob on `CATEGORY:EVENT` (`syscalls:sys_enter_open*`, `sched:*`);
a glob without ':' matches the event name alone. Pure file reading; no bcc.
resolve/sites.py has its own copy of the format parsing today; it can use this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from planrunner import inputs

CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
MOUNT_HINT = "mount it: mount -t tracefs nodev /sys/kernel/tracing"


@dataclass(frozen=True, slots=True)
class FormatField:
    """One field of a tracepoint's record, as its format file declares it."""

    decl: str  # the declaration as written: `const char * filename`, `char comm[16]`
    name: str
    ctype: str  # the C type without the name: `const char *`, `char[16]`
    offset: int
    size: int
    signed: bool
    common: bool  # common_type, common_pid...: in every event's header
    is_string: bool  # `__data_loc char[]` or `char[N]`
    array_len: int  # char[N]: N; otherwise 0


@dataclass(frozen=True, slots=True)
class EventFormat:
    name: str
    id: int | None
    fields: tuple[FormatField, ...]

    @property
    def own_fields(self) -> tuple[FormatField, ...]:
        """The event's fields, without the common_ header every event shares."""
        return tuple(f for f in self.fields if not f.common)


def find_root(mounts: str = "/proc/mounts", candidates: tuple[str, ...] = CANDIDATES
              ) -> str | None:
    """The directory tracefs is mounted on (one holding `events/`), or None."""
    for root in candidates:
        if inputs.isdir(f"{root}/events"):
            return root
    try:
        entries = [line.split() for line in
                   inputs.read_bytes(mounts).decode("utf-8", "replace").splitlines()]
    except OSError:
        return None
    for parts in entries:
        if len(parts) >= 3 and parts[2] == "tracefs" and inputs.isdir(f"{parts[1]}/events"):
            return parts[1]
    for parts in entries:
        if len(parts) >= 3 and parts[2] == "debugfs":
            root = f"{parts[1]}/tracing"
            if inputs.isdir(f"{root}/events"):
                return root
    return None


def matches(pattern: str | None, category: str, event: str) -> bool:
    if not pattern:
        return True
    if fnmatchcase(f"{category}:{event}", pattern):
        return True
    return ":" not in pattern and fnmatchcase(event, pattern)


def event_names(root: str, pattern: str | None = None) -> list[tuple[str, str]]:
    """(category, event) of every tracepoint matching `pattern`, sorted."""
    names: set[tuple[str, str]] = set()
    try:
        text = inputs.read_bytes(f"{root}/available_events").decode("utf-8", "replace")
        for line in text.splitlines():
            category, sep, event = line.strip().partition(":")
            if sep:
                names.add((category, event))
    except OSError:
        names = set(_walk_events(root))
    return sorted(n for n in names if matches(pattern, *n))


def _walk_events(root: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    events = f"{root}/events"
    for category in inputs.listdir(events):
        path = f"{events}/{category}"
        if not inputs.isdir(path):
            continue
        out.extend((category, e) for e in inputs.listdir(path)
                   if inputs.isfile(f"{path}/{e}/format"))
    return out


def categories(root: str) -> list[str]:
    return sorted({c for c, _ in event_names(root)})


def read_format(root: str, category: str, event: str) -> EventFormat:
    """Parse `events/CATEGORY/EVENT/format`; OSError when the event does not exist."""
    path = f"{root}/events/{category}/{event}/format"
    return parse_format(inputs.read_bytes(path).decode("utf-8", "replace"))


def has_kprobes(root: str | None) -> bool:
    """Whether this kernel offers kprobe events (CONFIG_KPROBE_EVENTS)."""
    return root is not None and inputs.exists(f"{root}/kprobe_events")


_FIELD = re.compile(r"^\s*field:(?P<decl>[^;]*);\s*(?P<rest>.*)$")
_ARRAY = re.compile(r"\[[^\]]*\]")


def parse_format(text: str) -> EventFormat:
    """An event's name, id and fields (common_ ones included, marked `common`)."""
    name, ident, fields = "", None, []
    for line in text.splitlines():
        if line.startswith("name:"):
            name = line[5:].strip()
        elif line.startswith("ID:"):
            ident = int(line[3:].strip() or 0)
        m = _FIELD.match(line)
        if m:
            fields.append(_field(m.group("decl").strip(), m.group("rest")))
    return EventFormat(name, ident, tuple(fields))


def _field(decl: str, rest: str) -> FormatField:
    attrs = dict(p.strip().split(":", 1) for p in rest.split(";") if ":" in p)
    offset, size = int(attrs.get("offset", 0)), int(attrs.get("size", 0))
    signed = attrs.get("signed", "0").strip() == "1"
    # The name is the last word once array brackets are gone: `char comm[16]`,
    # `__data_loc char[] filename`, `const char * filename`, `u8 data[0]`.
    words = _ARRAY.sub(" ", decl).split()
    name = words[-1].lstrip("*") if words else decl
    ctype = _ctype(decl, name)
    is_loc = decl.startswith("__data_loc")
    is_char_array = "char" in decl and "[" in decl and not is_loc
    return FormatField(decl=decl, name=name, ctype=ctype, offset=offset, size=size,
                       signed=signed, common=name.startswith("common_"),
                       is_string=is_loc or is_char_array,
                       array_len=size if is_char_array else 0)


def _ctype(decl: str, name: str) -> str:
    """`const char * filename` -> `const char *`; `char comm[16]` -> `char[16]`."""
    m = re.search(rf"\b{re.escape(name)}\b(?P<dims>(?:\s*\[[^\]]*\])*)\s*$", decl)
    if not m:
        return decl
    return (decl[:m.start()].rstrip() + m.group("dims").replace(" ", "")).strip()
