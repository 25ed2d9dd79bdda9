"""What this kernel offers a tracing session, detected once into a frozen value.

- `uprobe_multi`: uprobes as BPF links (BPF_TRACE_UPROBE_MULTI, Linux 6.6+); without
  them, uprobes go through perf events (runtime/attach.py has both).
- `ringbuf_mmap`: a BPF ring buffer map can be mmapped and read directly
  (runtime/ringbuf.py); without it, records come through bcc's per-record callback.
- `ref_ctr`: uprobes carry a USDT semaphore's reference counter (Linux 4.20+); without
  it, semaphores are raised by hand (runtime/semaphores.py, poke mode).
- `sleepable`: uprobe programs may be loaded sleepable (BPF_F_SLEEPABLE); nothing uses
  it yet, it is here so that a sleepable string read can ask.

Detection is cheap and needs no compiler: a sysfs file for ref_ctr; for the rest, raw
bpf() calls on a two-instruction program and a one-page ring buffer, closed at once.
A BPF_LINK_CREATE of that program on a path that does not exist tells the link type
apart: ENOENT means the kernel looked for the file, so it knows uprobe_multi links;
EINVAL (or anything else) means it does not. Without root every bpf() call fails, so
everything but ref_ctr reads False; only the bcc backend asks, and it needs root anyway.

Override for tests: PLANRUNNER_UPROBE_ATTACH=perf forces perf-event uprobes.

Imports only the stdlib and runtime/uprobe_links.py (raw syscalls); no bcc.
"""

from __future__ import annotations

import ctypes as ct
import errno
import mmap
import os
from dataclasses import dataclass
from functools import cache

from planrunner.runtime.uprobe_links import BPF_TRACE_UPROBE_MULTI, bpf_syscall, create_link

REF_CTR_FORMAT = "/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset"
ATTACH_ENV = "PLANRUNNER_UPROBE_ATTACH"

BPF_MAP_CREATE = 0
BPF_PROG_LOAD = 5
BPF_PROG_TYPE_KPROBE = 2
BPF_MAP_TYPE_RINGBUF = 27
BPF_F_SLEEPABLE = 1 << 4
# r0 = 0; exit
_NOP_PROGRAM = bytes.fromhex("b700000000000000" "9500000000000000")
_MISSING_PATH = "/nonexistent/planrunner-feature-probe"


@dataclass(frozen=True, slots=True)
class KernelFeatures:
    uprobe_multi: bool
    ringbuf_mmap: bool
    ref_ctr: bool
    sleepable: bool


class _ProgLoad(ct.Structure):
    """union bpf_attr for BPF_PROG_LOAD, up to expected_attach_type."""

    _fields_ = [("prog_type", ct.c_uint32), ("insn_cnt", ct.c_uint32),
                ("insns", ct.c_uint64), ("license", ct.c_uint64),
                ("log_level", ct.c_uint32), ("log_size", ct.c_uint32),
                ("log_buf", ct.c_uint64), ("kern_version", ct.c_uint32),
                ("prog_flags", ct.c_uint32), ("prog_name", ct.c_char * 16),
                ("prog_ifindex", ct.c_uint32), ("expected_attach_type", ct.c_uint32)]


class _MapCreate(ct.Structure):
    """union bpf_attr for BPF_MAP_CREATE, up to map_flags."""

    _fields_ = [("map_type", ct.c_uint32), ("key_size", ct.c_uint32),
                ("value_size", ct.c_uint32), ("max_entries", ct.c_uint32),
                ("map_flags", ct.c_uint32)]


def kernel_has_ref_ctr() -> bool:
    return os.path.exists(REF_CTR_FORMAT)


def _load_nop(flags: int) -> int:
    """A do-nothing uprobe_multi program's fd, or -1."""
    insns = ct.create_string_buffer(_NOP_PROGRAM, len(_NOP_PROGRAM))
    license_ = ct.create_string_buffer(b"GPL")
    attr = _ProgLoad(prog_type=BPF_PROG_TYPE_KPROBE, insn_cnt=len(_NOP_PROGRAM) // 8,
                     insns=ct.addressof(insns), license=ct.addressof(license_),
                     prog_flags=flags, expected_attach_type=BPF_TRACE_UPROBE_MULTI)
    fd, _err = bpf_syscall(BPF_PROG_LOAD, attr)
    return fd


def _has_uprobe_multi() -> bool:
    prog = _load_nop(0)
    if prog < 0:
        return False
    try:
        link, err = create_link(prog, _MISSING_PATH, 0, 0, retprobe=False, pid=None)
        if link >= 0:  # cannot happen for a missing file; never leave it open
            os.close(link)
            return True
        return err == errno.ENOENT
    finally:
        os.close(prog)


def _has_sleepable() -> bool:
    prog = _load_nop(BPF_F_SLEEPABLE)
    if prog < 0:
        return False
    os.close(prog)
    return True


def _has_ringbuf_mmap() -> bool:
    page = mmap.PAGESIZE
    fd, _err = bpf_syscall(BPF_MAP_CREATE, _MapCreate(map_type=BPF_MAP_TYPE_RINGBUF,
                                                      max_entries=page))
    if fd < 0:
        return False
    try:
        # the same two mappings RingReader makes
        with mmap.mmap(fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                       offset=0), \
             mmap.mmap(fd, 3 * page, mmap.MAP_SHARED, mmap.PROT_READ, offset=page):
            return True
    except OSError:
        return False
    finally:
        os.close(fd)


@cache
def detect() -> KernelFeatures:
    """This kernel's features (probed on the first call only), with the env override."""
    multi = os.environ.get(ATTACH_ENV, "").strip().lower() != "perf" and _has_uprobe_multi()
    return KernelFeatures(uprobe_multi=multi, ringbuf_mmap=_has_ringbuf_mmap(),
                          ref_ctr=kernel_has_ref_ctr(), sleepable=_has_sleepable())
