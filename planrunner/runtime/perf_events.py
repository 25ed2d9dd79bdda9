"""Tracepoint perf events by raw syscalls: what libbcc's `bpf_attach_tracepoint` and
`bpf_close_perf_event_fd` do (perf_event_open of the event's tracefs id, pid -1, CPU 0,
then PERF_EVENT_IOC_SET_BPF and PERF_EVENT_IOC_ENABLE; on close, DISABLE then close).

Why not through libbcc: every run attaches a tracepoint (the exit program that frees
the tracer registry's slots), and dlopen of libbcc.so with its LLVM costs a warm run
(whose program comes from the cache, runtime/compile_cache.py) more than bpftrace's
whole start-up. One perf event on CPU 0 runs the program for the tracepoint on every
CPU, as with bcc. No bcc.
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
import struct
from functools import cache

PERF_TYPE_TRACEPOINT = 2
PERF_SAMPLE_RAW = 1 << 10
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7; the fields after wakeup_events stay zero
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE = 0x2400, 0x2401
PERF_EVENT_IOC_SET_BPF = 0x40042408  # _IOW('$', 8, __u32)
DEFAULT_TRACEFS = "/sys/kernel/tracing"
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}

_libc = ct.CDLL(None, use_errno=True)
_libc.syscall.restype = ct.c_long
_libc.ioctl.restype = ct.c_int
_libc.ioctl.argtypes = [ct.c_int, ct.c_ulong, ct.c_ulong]


@cache
def _tracefs() -> str | None:
    from planrunner.tracefs import find_root  # noqa: PLC0415 - once, at the first attach

    return find_root()


def tracepoint_id(category: str, event: str) -> int:
    """The event's id in tracefs; OSError when there is none."""
    try:  # where tracefs is mounted nearly everywhere, before reading /proc/mounts
        with open(os.path.join(DEFAULT_TRACEFS, "events", category, event, "id"),
                  encoding="ascii") as fh:
            return int(fh.read())
    except OSError:
        pass
    root = _tracefs()
    if root is None:
        raise OSError(errno.ENOENT, "tracefs is not mounted")
    with open(os.path.join(root, "events", category, event, "id"), encoding="ascii") as fh:
        return int(fh.read())


def tracepoint_attr(tp_id: int) -> ct.Array[ct.c_char]:
    """struct perf_event_attr of a tracepoint event, as libbcc fills it."""
    attr = ct.create_string_buffer(PERF_ATTR_SIZE)
    # type, size, config, sample_period, sample_type; wakeup_events at byte 48
    struct.pack_into("<IIQQQ", attr, 0, PERF_TYPE_TRACEPOINT, PERF_ATTR_SIZE, tp_id, 1,
                     PERF_SAMPLE_RAW)
    struct.pack_into("<I", attr, 48, 1)
    return attr


def open_event(attr: ct.Array[ct.c_char], pid: int, cpu: int) -> tuple[int, int]:
    """perf_event_open(2) of `attr` (close-on-exec, no group): (fd, 0) or (-1, errno).
    Never raises."""
    nr = _SYS_PERF_EVENT_OPEN.get(os.uname().machine)
    if nr is None:
        return -1, errno.ENOSYS
    fd = int(_libc.syscall(nr, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC))
    return (fd, 0) if fd >= 0 else (-1, ct.get_errno())


def control(fd: int, request: int, arg: int = 0) -> int:
    """A perf event ioctl (PERF_EVENT_IOC_*): 0, or the errno."""
    return 0 if _libc.ioctl(fd, request, arg) == 0 else (ct.get_errno() or errno.EIO)


def attach_tracepoint(prog_fd: int, category: str, event: str) -> tuple[int, int]:
    """(perf event fd, 0) with program `prog_fd` attached and enabled, or (-1, errno).
    Never raises."""
    try:
        tp_id = tracepoint_id(category, event)
    except (OSError, ValueError) as exc:
        return -1, getattr(exc, "errno", None) or errno.ENOENT
    fd, err = open_event(tracepoint_attr(tp_id), -1, 0)
    if fd < 0:
        return -1, err
    for request, arg in ((PERF_EVENT_IOC_SET_BPF, prog_fd), (PERF_EVENT_IOC_ENABLE, 0)):
        err = control(fd, request, arg)
        if err:
            os.close(fd)
            return -1, err
    return fd, 0


def close_event(fd: int) -> None:
    """Disable, then close (the program is detached with the last reference)."""
    control(fd, PERF_EVENT_IOC_DISABLE)
    os.close(fd)

