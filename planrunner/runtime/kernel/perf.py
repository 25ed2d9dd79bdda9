"""perf_event_open(2) and its ioctls: the events planrunner opens, with their
struct perf_event_attr as packed bytes.

    tracepoint_attr(tp_id), mapping_records_attr()   the two kinds of event it opens
    open_event(attr, pid, cpu)                       -> fd (perf_event_open)
    perf_ioctl(fd, request, arg)                     PERF_EVENT_IOC_*
    attach_tracepoint(prog_fd, tp_id), close_event   what libbcc's bpf_attach_tracepoint
                                                     and bpf_close_perf_event_fd do

Why not through libbcc: every run attaches a tracepoint (the exit program that frees
the tracer registry's slots), and dlopen of libbcc.so with its LLVM costs a warm run
more than bpftrace's whole start-up; bcc has no interface for side-band events
(runtime/task_events.py). Errors follow runtime/kernel/__init__.py: OSError.
"""

from __future__ import annotations

import ctypes as ct
import os
import struct

from planrunner.runtime.kernel import LIBC, fail, syscall

PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT = 1, 2
PERF_COUNT_SW_DUMMY = 9
PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_RAW = 1 << 1, 1 << 2, 1 << 10
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE = 0x2400, 0x2401
PERF_EVENT_IOC_SET_BPF = 0x40042408  # _IOW('$', 8, __u32)
CLOCK_MONOTONIC = 1

TRACEPOINT_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7; the fields after wakeup_events stay zero
MAPPING_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5: enough for clockid
# attr flag bits of the side-band event (linux/perf_event.h)
MAPPING_ATTR_BITS = {"disabled": 0, "mmap": 8, "comm": 9, "task": 13, "sample_id_all": 18,
                     "mmap2": 23, "comm_exec": 24, "use_clockid": 25}
# type size config sample_period sample_type read_format flags wakeup_events bp_type
# bp_addr bp_len branch_sample_type sample_regs_user sample_stack_user clockid
# sample_regs_intr aux_watermark sample_max_stack reserved
_ATTR_VER5 = struct.Struct("<IIQQQQQIIQQQQIiQIHH")


def tracepoint_attr(tp_id: int) -> bytes:
    """struct perf_event_attr of tracepoint `tp_id` (its tracefs id), as libbcc fills
    it."""
    attr = bytearray(TRACEPOINT_ATTR_SIZE)
    # type, size, config, sample_period, sample_type; wakeup_events at byte 48
    struct.pack_into("<IIQQQ", attr, 0, PERF_TYPE_TRACEPOINT, TRACEPOINT_ATTR_SIZE, tp_id, 1,
                     PERF_SAMPLE_RAW)
    struct.pack_into("<I", attr, 48, 1)
    return bytes(attr)


def mapping_records_attr() -> bytes:
    """struct perf_event_attr of a software dummy event whose ring receives the
    kernel's mmap2, comm (exec), fork and exit records, each with its pid, tid and
    CLOCK_MONOTONIC time (runtime/task_events.py reads them); opened disabled."""
    flags = sum(1 << bit for bit in MAPPING_ATTR_BITS.values())
    return _ATTR_VER5.pack(PERF_TYPE_SOFTWARE, MAPPING_ATTR_SIZE, PERF_COUNT_SW_DUMMY, 0,
                           PERF_SAMPLE_TID | PERF_SAMPLE_TIME, 0, flags, 0, 0, 0, 0, 0, 0,
                           0, CLOCK_MONOTONIC, 0, 0, 0, 0)


def open_event(attr: bytes, pid: int, cpu: int) -> int:
    """perf_event_open(2) of `attr` (close-on-exec, no group): the event's fd."""
    buf = ct.create_string_buffer(attr, len(attr))
    return syscall("perf_event_open", buf, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)


def perf_ioctl(fd: int, request: int, arg: int = 0) -> None:
    """A perf event ioctl (PERF_EVENT_IOC_*)."""
    if LIBC.ioctl(fd, request, arg) != 0:
        raise fail(ct.get_errno())


def attach_tracepoint(prog_fd: int, tp_id: int) -> int:
    """A perf event of tracepoint `tp_id` on CPU 0 for every process (it runs the
    program for the tracepoint on every CPU, as with bcc) with program `prog_fd`
    attached and the event enabled: its fd."""
    fd = open_event(tracepoint_attr(tp_id), -1, 0)
    try:
        perf_ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog_fd)
        perf_ioctl(fd, PERF_EVENT_IOC_ENABLE)
    except OSError:
        os.close(fd)
        raise
    return fd


def close_event(fd: int) -> None:
    """Disable, then close (the program is detached with the last reference)."""
    try:
        perf_ioctl(fd, PERF_EVENT_IOC_DISABLE)
    except OSError:
        pass
    os.close(fd)
