"""Uprobes as BPF links (BPF_TRACE_UPROBE_MULTI, Linux 6.6+), with a fallback.

Why not perf events only: closing a perf-event uprobe runs the trace event teardown
under the kernel's event_mutex with an RCU synchronisation each, ~100 ms per site
measured on Linux 6.18, one after the other: a plan with 100 sites took 10 s to end,
and during each teardown the site's semaphore stayed raised while its BPF program
was already gone (hits counted by the target, never traced). A uprobe_multi link
removes its breakpoint and reference count at once, then waits for one grace period;
links closed from several threads share the wait (13 sites: 1.1 s -> 0.09 s).

The link carries the site's ref_ctr_offset like bpf_attach_uprobe does, so semaphores
behave the same: raised in every process mapping the file, dropped on close or death.
Whether the kernel has the link type is decided once, up front (runtime/features.py
probes it with `create_link`); runtime/attach.py uses libbcc's bpf_attach_uprobe (perf
events) where it has not. Raw syscalls through ctypes; no bcc.
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

BPF_LINK_CREATE = 28
BPF_TRACE_UPROBE_MULTI = 48
BPF_F_UPROBE_MULTI_RETURN = 1
_SYS_BPF = {"x86_64": 321, "aarch64": 280}


class _LinkCreate(ct.Structure):
    """union bpf_attr for BPF_LINK_CREATE with its uprobe_multi member."""

    _fields_ = [("prog_fd", ct.c_uint32), ("target_fd", ct.c_uint32),
                ("attach_type", ct.c_uint32), ("flags", ct.c_uint32),
                ("path", ct.c_uint64), ("offsets", ct.c_uint64),
                ("ref_ctr_offsets", ct.c_uint64), ("cookies", ct.c_uint64),
                ("cnt", ct.c_uint32), ("multi_flags", ct.c_uint32), ("pid", ct.c_uint32),
                ("_pad", ct.c_uint32 * 17)]


_libc = ct.CDLL(None, use_errno=True)
_libc.syscall.restype = ct.c_long


@cache
def _bpf_nr() -> int | None:
    """bpf(2)'s number on this machine (asked once: a stop makes thousands of calls)."""
    return _SYS_BPF.get(os.uname().machine)


def bpf_syscall(cmd: int, attr: Any) -> tuple[int, int]:
    """bpf(cmd, &attr, sizeof attr) for a ctypes structure: (fd or 0, 0) or (-1, errno)."""
    nr = _bpf_nr()
    if nr is None:
        return -1, errno.ENOSYS
    ret = _libc.syscall(nr, cmd, ct.byref(attr), ct.sizeof(attr))
    if ret < 0:
        return -1, ct.get_errno()
    return int(ret), 0


BPF_RAW_TRACEPOINT_OPEN = 17


class _RawTracepointOpen(ct.Structure):
    """union bpf_attr for BPF_RAW_TRACEPOINT_OPEN."""

    _fields_ = [("name", ct.c_uint64), ("prog_fd", ct.c_uint32), ("_pad", ct.c_uint32)]


def raw_tracepoint_open(prog_fd: int, event: str) -> tuple[int, int]:
    """Attach `prog_fd` (a BPF_PROG_TYPE_RAW_TRACEPOINT program) to kernel event `event`
    (its name alone: sched_process_exit): (fd, 0), attached until the fd is closed, or
    (-1, errno). Never raises."""
    name = ct.create_string_buffer(event.encode())
    return bpf_syscall(BPF_RAW_TRACEPOINT_OPEN,
                       _RawTracepointOpen(name=ct.addressof(name), prog_fd=prog_fd))


def create_link(prog_fd: int, path: str, offset: int, ref_ctr_offset: int,
                retprobe: bool, pid: int | None) -> tuple[int, int]:
    """Attach BPF program `prog_fd` (loaded with attach type BPF_TRACE_UPROBE_MULTI) at
    file `offset` of `path` as a one-site uprobe_multi link, a uretprobe when `retprobe`;
    `ref_ctr_offset` (0: none) is the site's semaphore, raised by the kernel while the
    link lives; `pid` limits it to one process (None: every process mapping the file).

    Returns (link fd, 0), the link lasting until the fd is closed, or (-1, errno): never
    raises. ENOSYS on a machine with no known bpf(2) number."""
    return create_multi_link(prog_fd, path, (offset,), (ref_ctr_offset,), None,
                             retprobe, pid)


def create_multi_link(prog_fd: int, path: str, offsets: Sequence[int],
                      ref_ctr_offsets: Sequence[int], cookies: Sequence[int] | None,
                      retprobe: bool, pid: int | None) -> tuple[int, int]:
    """One uprobe_multi link putting `prog_fd` on every file offset of `offsets` in
    `path` at once (all uprobes, or all uretprobes when `retprobe`): `ref_ctr_offsets[i]`
    is offset i's semaphore (0: none) and `cookies[i]` (None: all 0) the value
    bpf_get_attach_cookie() returns when offset i fires. Closing the link removes every
    site together, with one RCU grace period for all. Same returns as `create_link`."""
    count = len(offsets)
    if count == 0 or len(ref_ctr_offsets) != count or (
            cookies is not None and len(cookies) != count):
        return -1, errno.EINVAL
    cpath = ct.create_string_buffer(os.fsencode(path))
    offs = (ct.c_uint64 * count)(*offsets)
    refs = (ct.c_uint64 * count)(*ref_ctr_offsets)
    cooks = (ct.c_uint64 * count)(*cookies) if cookies is not None else None
    attr = _LinkCreate(prog_fd=prog_fd, attach_type=BPF_TRACE_UPROBE_MULTI,
                       path=ct.addressof(cpath), offsets=ct.addressof(offs),
                       ref_ctr_offsets=ct.addressof(refs),
                       cookies=ct.addressof(cooks) if cooks is not None else 0,
                       cnt=count,
                       multi_flags=BPF_F_UPROBE_MULTI_RETURN if retprobe else 0,
                       pid=pid or 0)
    return bpf_syscall(BPF_LINK_CREATE, attr)


# Closers at most, and the stack each gets: every close of a link waits for its own
# grace periods (~70 ms here), and only closes in flight at once share them: 3000 links
# took 3.1 s with 64 closers, 0.9 s with 256, 0.4-0.6 s with 1024 (BENCHMARKS.md). A
# closer only calls close(2): a small stack keeps a thousand of them cheap.
MAX_CLOSERS = 1024
CLOSER_STACK = 256 * 1024


def close_all(fds: Iterable[int], workers: int = MAX_CLOSERS,
              close: Callable[[int], object] = os.close) -> None:
    """Close link fds (or perf-event fds, with libbcc's `close`) from up to `workers`
    threads at once, so that their RCU grace periods overlap; returns when every one is
    closed (every probe is gone)."""
    pending = list(fds)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                fd = pending.pop()
            try:
                close(fd)
            except OSError:
                pass

    count = min(workers, len(pending))
    if count <= 1:
        worker()
        return
    threads: list[threading.Thread] = []
    with _small_stacks():
        for _ in range(count):
            t = threading.Thread(target=worker, daemon=True)
            try:
                t.start()
            except RuntimeError:  # no more threads here (a pids limit): those started do
                break
            threads.append(t)
    worker()  # and this one, as one of them (all of it when none could start)
    for t in threads:
        t.join()


@contextmanager
def _small_stacks() -> Iterator[None]:
    """Threads started inside get CLOSER_STACK (the setting is the process's: put back
    after)."""
    try:
        old = threading.stack_size(CLOSER_STACK)
    except (ValueError, RuntimeError):  # not settable here: the default stack then
        yield
        return
    try:
        yield
    finally:
        threading.stack_size(old)
