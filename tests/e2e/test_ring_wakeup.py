"""The ring buffer's wakeup watermark scales with the CPU count (issue 15 item 9): the
C is the same on every host and reads the count from pr_config, which the runtime fills.
Checked in the kernel: the running tracer's config map, read through a copy of its fd
(pidfd_getfd), holds this machine's possible CPUs."""

from __future__ import annotations

import ctypes as ct
import os
from pathlib import Path

from planrunner.render.model import ConfigSlot
from tests.e2e.executor_helpers import simple_plan, start_tracer, stop_tracer

SYS_PIDFD_GETFD = 438  # x86-64 and aarch64 alike (the generic table)
BPF_MAP_TYPE_ARRAY = 2
NR_CPUS_SLOT = int(ConfigSlot.NR_CPUS)
CONFIG_ENTRIES = len(ConfigSlot)  # pr_config's size (templates/runtime_helpers.h)


def _fdinfo(pid: int, fd: str) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _config_maps(pid: int) -> list[int]:
    """The tracer's fds of u32 -> u32 arrays of pr_config's size: its shape."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        info = {k: v.strip() for k, v in _fdinfo(pid, fd).items()}
        if (info.get("map_type"), info.get("key_size"), info.get("value_size"),
                info.get("max_entries")) == (str(BPF_MAP_TYPE_ARRAY), "4", "4",
                                          str(CONFIG_ENTRIES)):
            out.append(int(fd))
    return out


def _lookup_u32(pid: int, target_fd: int, key: int) -> int:
    libc = ct.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, target_fd, 0)
        assert fd >= 0, os.strerror(ct.get_errno())
    finally:
        os.close(pidfd)
    try:
        lib = ct.CDLL("libbcc.so.0", use_errno=True)
        k, v = ct.c_uint32(key), ct.c_uint32(0)
        assert lib.bpf_lookup_elem(fd, ct.byref(k), ct.byref(v)) == 0
        return v.value
    finally:
        os.close(fd)


def test_the_runtime_gives_the_program_the_cpu_count(fixtures_built, tmp_path):
    tracer = start_tracer(simple_plan(tmp_path, fixtures_built / "simple_pie"), "-d", "20s")
    try:
        maps = _config_maps(tracer.pid)
        assert len(maps) == 1, maps
        from bcc.utils import get_possible_cpus  # an independent count: bcc's

        assert _lookup_u32(tracer.pid, maps[0], NR_CPUS_SLOT) == len(get_possible_cpus())
    finally:
        stop_tracer(tracer)
