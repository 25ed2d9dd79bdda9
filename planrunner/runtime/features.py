"""What this kernel offers a tracing session, detected once into a frozen value.

- `uprobe_multi`: uprobes as BPF links (BPF_TRACE_UPROBE_MULTI, Linux 6.6+); without
  them, uprobes go through perf events (runtime/attach.py has both).
- `ringbuf_mmap`: a BPF ring buffer map can be mmapped and read directly
  (runtime/ringbuf.py); without it, records come through bcc's per-record callback.
- `ref_ctr`: uprobes carry a USDT semaphore's reference counter (Linux 4.20+); without
  it, semaphores are raised by hand (runtime/semaphores.py, poke mode).
- `sleepable`: uprobe programs may be loaded sleepable (BPF_F_SLEEPABLE): probes that
  read user strings then fault in pages the process has not touched yet
  (templates/runtime_helpers.h); without it, what the kernel could not read is re-read
  from /proc/PID/mem by the consumer (marked "reread" in the record).

Detection is cheap and needs no compiler: a sysfs file for ref_ctr; for the rest, raw
bpf() calls on a two-instruction program and a one-page ring buffer, closed at once.
A BPF_LINK_CREATE of that program on a path that does not exist tells the link type
apart: ENOENT means the kernel looked for the file, so it knows uprobe_multi links;
EINVAL (or anything else) means it does not. Without root every bpf() call fails, so
everything but ref_ctr reads False; only the bcc backend asks, and it needs root anyway.

Overrides for tests: PLANRUNNER_UPROBE_ATTACH=perf forces perf-event uprobes;
PLANRUNNER_SLEEPABLE=0 forces non-sleepable programs (the re-read fallback).

Imports only the stdlib and runtime/kernel/ (raw syscalls); no bcc.
"""

from __future__ import annotations

import ctypes as ct
import errno
import mmap
import os
from dataclasses import dataclass
from functools import cache

from planrunner.runtime.kernel.bpf import (
    BPF_F_SLEEPABLE,
    BPF_MAP_TYPE_RINGBUF,
    BPF_PROG_TYPE_KPROBE,
    BPF_TRACE_UPROBE_MULTI,
    map_create,
    prog_load,
    uprobe_multi_link,
)

REF_CTR_FORMAT = "/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset"
ATTACH_ENV = "PLANRUNNER_UPROBE_ATTACH"
SLEEPABLE_ENV = "PLANRUNNER_SLEEPABLE"

# r0 = 0; exit
_NOP_PROGRAM = bytes.fromhex("b700000000000000" "9500000000000000")
_MISSING_PATH = "/nonexistent/planrunner-feature-probe"


@dataclass(frozen=True, slots=True)
class KernelFeatures:
    """What the running kernel supports, probed once (detect())."""

    uprobe_multi: bool
    ringbuf_mmap: bool
    ref_ctr: bool
    sleepable: bool


def kernel_has_ref_ctr() -> bool:
    return os.path.exists(REF_CTR_FORMAT)


def _load_nop(flags: int) -> int:
    """A do-nothing uprobe_multi program's fd, or -1."""
    insns = ct.create_string_buffer(_NOP_PROGRAM, len(_NOP_PROGRAM))
    try:
        return prog_load(ct.addressof(insns), len(_NOP_PROGRAM), b"GPL",
                         BPF_PROG_TYPE_KPROBE, flags, BPF_TRACE_UPROBE_MULTI, "planrunner",
                         log=False)
    except OSError:
        return -1


def _has_uprobe_multi() -> bool:
    prog = _load_nop(0)
    if prog < 0:
        return False
    try:
        link = uprobe_multi_link(prog, _MISSING_PATH, (0,), (0,), None, retprobe=False,
                                 pid=None)
    except OSError as exc:
        return exc.errno == errno.ENOENT
    else:  # cannot happen for a missing file; never leave it open
        os.close(link)
        return True
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
    try:
        fd = map_create(BPF_MAP_TYPE_RINGBUF, 0, 0, page)
    except OSError:
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
    sleepable = (os.environ.get(SLEEPABLE_ENV, "").strip().lower() not in ("0", "no", "off")
                 and _has_sleepable())
    return KernelFeatures(uprobe_multi=multi, ringbuf_mmap=_has_ringbuf_mmap(),
                          ref_ctr=kernel_has_ref_ctr(), sleepable=sleepable)
