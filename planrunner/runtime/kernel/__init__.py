"""Every call planrunner makes into the kernel's BPF and perf interfaces, in one place:
bpf(2) (`kernel/bpf.py`: maps, BTF, pins, program loads, links) and perf_event_open(2)
with its ioctls (`kernel/perf.py`), each command with its attr layout (ctypes
structures or packed bytes) and constants. No other module of planrunner issues these
calls or spells their attrs (tests/unit/test_kernel_calls.py).

Two files, not one: the two system calls share nothing but libc's `syscall` (here) and
the convention. The convention: a call returns what it made (an fd, the bytes read, a
typed value; an absence the caller expects, such as a missing key, is None) and raises
OSError, its `errno` the kernel's, on every failure. Callers that report a refusal
read `exc.errno`; none sees a -1.

Raw syscalls through ctypes, never libbcc: a run whose program comes from the
compiled-program cache (runtime/compile_cache.py) never loads bcc or LLVM. No bcc here.
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
from functools import cache

# syscall numbers per machine (asm-generic for aarch64)
_NUMBERS = {"bpf": {"x86_64": 321, "aarch64": 280},
            "perf_event_open": {"x86_64": 298, "aarch64": 241}}

LIBC = ct.CDLL(None, use_errno=True)
LIBC.syscall.restype = ct.c_long
LIBC.ioctl.restype = ct.c_int
LIBC.ioctl.argtypes = [ct.c_int, ct.c_ulong, ct.c_ulong]


@cache
def _number(name: str) -> int | None:
    """`name`'s number on this machine (asked once: a stop makes thousands of calls)."""
    return _NUMBERS[name].get(os.uname().machine)


def fail(err: int) -> OSError:
    """The OSError of errno `err` (EIO when the kernel gave none)."""
    err = err or errno.EIO
    return OSError(err, os.strerror(err))


def syscall(name: str, *args: object) -> int:
    """syscall(2) `name` with `args` (ctypes values): its result, or OSError."""
    ret, err = syscall_status(name, *args)
    if ret < 0:
        raise fail(err)
    return ret


def syscall_status(name: str, *args: object) -> tuple[int, int]:
    """(result, 0) or (-1, errno): for the calls whose failure is a result a caller
    expects every time (the end of a map read), so that no exception is made for it."""
    nr = _number(name)
    if nr is None:
        return -1, errno.ENOSYS
    ret = int(LIBC.syscall(nr, *args))
    return (ret, 0) if ret >= 0 else (-1, ct.get_errno() or errno.EIO)
