"""What a compile read, declared by the code that reads it, as a build system's rules
declare their inputs: the run cache (run_cache.py) stores this list beside what the
compile made, and a warm run checks exactly that list again before using it.

Every place that load/resolve/render lets look at the file system or the environment
goes through one of the functions below, which does the real operation and, while a
`recording()` is active, notes what it looked at and what it found:

    stat / isfile / isdir / exists / access   ("stat", path): absent, a directory, or
                                              the file's mode, owner, device, inode,
                                              size, mtime and ctime
    opened(path, st) / read_bytes(path)       a file read, fingerprinted by the fstat of
                                              the descriptor read (before the compile
                                              goes on: a change during it is a miss);
                                              /proc and /sys files by their bytes
    listdir(path)                             ("dir", path): the sorted names
    realpath(path) / readlink(path)           the path each resolves to (each link
                                              followed: a retargeted symlink is a miss)
    getenv(name)                              ("env", name): the value, or unset
    which(name)                               a tool found on PATH
    cpu()                                     ("cpu", "/proc/cpuinfo"): the CPU's
                                              vendor, model and feature flags (what an
                                              IFUNC resolver reads), not its clock
    unkeyable(why)                            the compile used what cannot be named
                                              (it is then never stored)

A probe for an absence is an input like any other: a missing optional target, each PATH
directory before the one a program was found in, a library not in a directory. The first
observation of an input is kept; a second that differs (the file changed while the
compile read it) marks the log `moved`, and such a compile is not stored.
Outside `recording()` these are the plain operations, with one test of a global.
"""

from __future__ import annotations

import os
import stat as _stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from planrunner.sha256 import sha256

Input = tuple[str, str, str]  # (kind, path or name, what was found)

ABSENT = "-"
UNSET = "\0unset"


class InputLog:
    """The inputs one compile declared, in the order first seen."""

    __slots__ = ("seen", "moved", "unkeyable_why")

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], str] = {}
        self.moved: str | None = None
        self.unkeyable_why: str | None = None

    def add(self, kind: str, what: str, found: str) -> None:
        first = self.seen.setdefault((kind, what), found)
        if first != found and self.moved is None:
            self.moved = f"{what} changed while the compile read it"

    def inputs(self) -> tuple[Input, ...]:
        return tuple((kind, what, found) for (kind, what), found in self.seen.items())


_log: InputLog | None = None


@contextmanager
def recording() -> Iterator[InputLog]:
    """Record the inputs declared until the block ends (one compile)."""
    global _log
    outer, log = _log, InputLog()
    _log = log
    try:
        yield log
    finally:
        _log = outer


def unkeyable(why: str) -> None:
    if _log is not None and _log.unkeyable_why is None:
        _log.unkeyable_why = why


# --- fingerprints: the same functions record and check ---------------------------------

def stat_fingerprint(st: os.stat_result | None) -> str:
    """Absent, a directory (its listing is an input of its own when it matters), or a
    file's identity: ctime moves with any write or chmod, even with mtime restored."""
    if st is None:
        return ABSENT
    if _stat.S_ISDIR(st.st_mode):
        return "d"
    return (f"{st.st_mode:o}:{st.st_uid}:{st.st_dev}:{st.st_ino}:{st.st_size}:"
            f"{st.st_mtime_ns}:{st.st_ctime_ns}")


def _path_fingerprint(path: str, st: os.stat_result | None) -> str:
    """/proc and /sys: only what the path is (their inodes come and go with the kernel's
    caches; what they hold is read and compared by content)."""
    if st is not None and _by_content(path):
        return "d" if _stat.S_ISDIR(st.st_mode) else "f" if _stat.S_ISREG(st.st_mode) else "o"
    return stat_fingerprint(st)


def _stat_now(path: str) -> str:
    try:
        return _path_fingerprint(path, os.stat(path))
    except (OSError, ValueError):
        return ABSENT


def _is_pid_dir(parts: list[str]) -> bool:
    return len(parts) > 3 and parts[1] == "proc" and parts[2].isdigit()


def _by_content(path: str) -> bool:
    """/proc and /sys files have no useful mtime: their bytes are the fingerprint (not a
    traced process's files under /proc/PID/root, which are files like any other)."""
    parts = path.split("/")
    if parts[1:2] == ["sys"]:
        return True
    return parts[1:2] == ["proc"] and not (_is_pid_dir(parts)
                                           and parts[3] in ("root", "exe", "map_files"))


def _sha256(data: bytes) -> str:
    return sha256(data).hexdigest()


def content_fingerprint(path: str, data: bytes) -> str:
    """The bytes by hash; /proc/PID/stat by the process's start time (the process's
    identity: the other fields are counters that move every tick)."""
    parts = path.split("/")
    if _is_pid_dir(parts) and len(parts) == 4 and parts[3] == "stat":
        fields = data.rsplit(b")", 1)[-1].split()
        return "start:" + (fields[19].decode() if len(fields) > 19 else "?")
    return _sha256(data)


def _content_now(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return content_fingerprint(path, fh.read())
    except OSError:
        return ABSENT


def listing_fingerprint(names: Sequence[str]) -> str:
    return _sha256("\0".join(sorted(names)).encode("utf-8", "surrogateescape"))


def _listing_now(path: str) -> str:
    try:
        return listing_fingerprint(os.listdir(path))
    except OSError:
        return ABSENT


def _readlink_now(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ABSENT


def _which_now(name: str) -> str:
    import shutil  # noqa: PLC0415 - only plans that demangle C++ names

    return shutil.which(name) or ABSENT


# The lines of /proc/cpuinfo's first processor that name the CPU and its features; the
# others (MHz, bogomips, core ids) differ from read to read or CPU to CPU.
_CPU_KEYS = (b"vendor_id", b"cpu family", b"model", b"model name", b"stepping", b"flags")


def _cpu_now(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            first = fh.read(65536).split(b"\n\n", 1)[0]  # one processor's block
    except OSError:
        return ABSENT
    lines = [line for line in first.splitlines()
             if line.split(b":", 1)[0].strip() in _CPU_KEYS]
    return _sha256(b"\n".join(lines))


_CHECKS: dict[str, Callable[[str], str]] = {
    "stat": _stat_now, "content": _content_now, "dir": _listing_now,
    "realpath": os.path.realpath, "link": _readlink_now,
    "env": lambda name: os.environ.get(name, UNSET), "which": _which_now,
    "cpu": _cpu_now}


def changed(inputs: Sequence[Input]) -> str | None:
    """None when every input is found as recorded; else what is not (the first)."""
    for kind, what, found in inputs:
        check = _CHECKS.get(kind)
        if check is None:
            return f"unknown input kind {kind!r}"
        if check(what) != found:
            return {"env": f"${what} changed", "cpu": "the CPU changed"}.get(
                kind, f"{what} changed")
    return None


# --- the operations ----------------------------------------------------------------------

def _note_process(path: str) -> None:
    """A file of /proc/PID: also that process's identity (a pid reused is a miss)."""
    parts = path.split("/")
    if _log is not None and _is_pid_dir(parts) and parts[3] != "stat":
        stat_path = "/".join(parts[:3] + ["stat"])
        if ("content", stat_path) not in _log.seen:
            _log.add("content", stat_path, _content_now(stat_path))


def stat(path: str) -> os.stat_result | None:
    """os.stat (links followed), None when it fails."""
    try:
        st: os.stat_result | None = os.stat(path)
    except (OSError, ValueError):
        st = None
    if _log is not None:
        _log.add("stat", path, _path_fingerprint(path, st))
        _note_process(path)
    return st


def isfile(path: str) -> bool:
    st = stat(path)
    return st is not None and _stat.S_ISREG(st.st_mode)


def isdir(path: str) -> bool:
    st = stat(path)
    return st is not None and _stat.S_ISDIR(st.st_mode)


def exists(path: str) -> bool:
    return stat(path) is not None


def access(path: str, mode: int) -> bool:
    """os.access; the file's mode and owner are recorded (the uid is in the key)."""
    stat(path)
    return os.access(path, mode)


def opened(path: str, st: os.stat_result) -> None:
    """A file opened and read as `path`, `st` the fstat of that descriptor."""
    if _log is not None:
        _log.add("stat", path, _path_fingerprint(path, st))
        _note_process(path)


def opened_fd(path: str, fd: int) -> None:
    """opened() with the fstat of `fd`, taken only while recording."""
    if _log is not None:
        opened(path, os.fstat(fd))


def read_bytes(path: str, limit: int = -1) -> bytes:
    """The bytes of `path` (at most `limit`); OSError passes through, an absence noted."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit)
            st = os.fstat(fh.fileno()) if _log is not None else None
    except OSError:
        if _log is not None and _by_content(path):
            _log.add("content", path, ABSENT)
            _note_process(path)
        elif _log is not None:
            stat(path)  # absent, or there and unreadable: what a check will find
        raise
    if _log is not None and st is not None:
        if _by_content(path):
            _log.add("content", path, content_fingerprint(path, data) if limit < 0
                     else _content_now(path))
            _note_process(path)
        else:
            opened(path, st)
    return data


def listdir(path: str) -> list[str]:
    """os.listdir; OSError passes through, noted as an absence."""
    try:
        names = os.listdir(path)
    except OSError:
        if _log is not None:
            _log.add("dir", path, ABSENT)
        raise
    if _log is not None:
        _log.add("dir", path, listing_fingerprint(names))
    return names


def realpath(path: str) -> str:
    """os.path.realpath: every link followed on the way is behind the one result."""
    real = os.path.realpath(path)
    if _log is not None:
        _log.add("realpath", path, real)
    return real


def readlink(path: str) -> str | None:
    try:
        target: str | None = os.readlink(path)
    except OSError:
        target = None
    if _log is not None:
        _log.add("link", path, ABSENT if target is None else target)
        _note_process(path)
    return target


def getenv(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if _log is not None:
        _log.add("env", name, UNSET if value is None else value)
    return default if value is None else value


def which(name: str) -> str | None:
    """shutil.which, and the tool found is an input too."""
    import shutil  # noqa: PLC0415

    found = shutil.which(name)
    if _log is not None:
        _log.add("which", name, found or ABSENT)
        if found:
            stat(found)
    return found


def cpu() -> None:
    """Note that what the compile found depends on this CPU (an IFUNC's choice): a cache
    entry moved to another CPU model, as a VM migrated between hosts is, is a miss."""
    if _log is not None:
        _log.add("cpu", "/proc/cpuinfo", _cpu_now("/proc/cpuinfo"))
