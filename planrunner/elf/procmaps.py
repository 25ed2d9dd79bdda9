"""`/proc/PID/maps`: a pure parser, plus the executable ELF objects a process has mapped.

`parse_maps(text)` -> one MappedObject per line (anonymous mappings have path "");
`executable_objects(pid)` -> paths of the ELF files with an executable mapping in `pid`,
in address order, each readable from this process: when the target lives in another mount
namespace (a container) its paths are reached through `/proc/PID/root`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from planrunner import inputs
from planrunner.errors import ResolveError

_DELETED = " (deleted)"


@dataclass(frozen=True, slots=True)
class MappedObject:
    """One line of /proc/PID/maps."""

    path: str  # as the kernel shows it; "" for anonymous, "[heap]" etc. for pseudo-files
    start: int
    end: int
    offset: int
    perms: str  # e.g. "r-xp"
    dev: str  # "major:minor" in hex, as printed
    inode: int
    deleted: bool = False

    @property
    def executable(self) -> bool:
        return "x" in self.perms


def parse_maps(text: str) -> tuple[MappedObject, ...]:
    """Parse the text of /proc/PID/maps. Raises ValueError on a malformed line."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        # 5 fixed fields, then the path, which may contain spaces.
        fields = line.split(None, 5)
        if len(fields) < 5:
            raise ValueError(f"malformed maps line: {line!r}")
        addr, perms, offset, dev, inode = fields[:5]
        path = fields[5].strip() if len(fields) == 6 else ""
        deleted = path.endswith(_DELETED)
        if deleted:
            path = path[: -len(_DELETED)]
        start, _, end = addr.partition("-")
        out.append(MappedObject(path, int(start, 16), int(end, 16), int(offset, 16), perms,
                                dev, int(inode), deleted))
    return tuple(out)


def read_maps(pid: int) -> tuple[MappedObject, ...]:
    try:
        return parse_maps(inputs.read_bytes(f"/proc/{pid}/maps").decode("utf-8", "replace"))
    except FileNotFoundError:
        raise ResolveError(f"no process with pid {pid}",
                           hints=("check the pid with `ps` or `pgrep`",)) from None
    except PermissionError:
        raise ResolveError(f"cannot read /proc/{pid}/maps: permission denied",
                           hints=("run as root, or as the process's owner",)) from None


def executable_objects(pid: int) -> tuple[str, ...]:
    """Host-readable paths of the ELF files mapped executable in `pid`, deduplicated."""
    from planrunner.elf.reader import is_elf  # noqa: PLC0415 - resolve's, not the session's

    prefix = host_prefix(pid)
    seen: set[str] = set()
    out: list[str] = []
    for m in read_maps(pid):
        if not m.executable or not m.path.startswith("/") or m.deleted:
            continue
        path = prefix + m.path
        if path in seen:
            continue
        seen.add(path)
        if is_elf(path):
            out.append(path)
    return tuple(out)


def host_prefix(pid: int) -> str:
    """"" when `pid` shares our mount namespace, else "/proc/PID/root"."""
    theirs = inputs.readlink(f"/proc/{pid}/ns/mnt")
    try:
        ours: str | None = os.readlink("/proc/self/ns/mnt")
    except OSError:
        ours = None
    # cannot tell (no permission): assume the usual case
    same = theirs is None or ours is None or theirs == ours
    return "" if same else f"/proc/{pid}/root"


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after comm (the first is field 3, the state), None
    when there is no such pid."""
    try:
        stat = inputs.read_bytes(f"/proc/{pid}/stat")
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    return stat[stat.rfind(b")") + 2:].split()


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot
    (with the pid, what names one process; a reused pid has another), None when there is
    no such pid."""
    rest = stat_fields(pid)
    return int(rest[19]) if rest is not None and len(rest) > 19 else None
