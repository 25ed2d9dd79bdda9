"""The ring buffer's wakeup watermark scales with the CPU count (issue 15 item 9): the
C is the same on every host and reads the count from pr_config, which the runtime fills.
Checked in the kernel: the running tracer's config map, read through a copy of its fd
(pidfd_getfd), holds this machine's possible CPUs."""

from __future__ import annotations

import ctypes as ct
import os
import subprocess
from pathlib import Path

from planrunner.render.contracts import COUNTER_SLOTS, WAKE_AT
from planrunner.render.model import ConfigSlot, Counter
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


def _lookup(pid: int, target_fd: int, key: int, value: ct.Array | ct.c_uint32) -> None:
    """Look `key` up, into `value`, in the map process `pid` holds as fd `target_fd`
    (taken with pidfd_getfd)."""
    libc = ct.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, target_fd, 0)
        assert fd >= 0, os.strerror(ct.get_errno())
    finally:
        os.close(pidfd)
    try:
        lib = ct.CDLL("libbcc.so.0", use_errno=True)
        assert lib.bpf_lookup_elem(fd, ct.byref(ct.c_uint32(key)), ct.byref(value)) == 0
    finally:
        os.close(fd)


def _lookup_u32(pid: int, target_fd: int, key: int) -> int:
    v = ct.c_uint32(0)
    _lookup(pid, target_fd, key, v)
    return v.value


def test_the_runtime_gives_the_program_the_cpu_count(fixtures_built, tmp_path):
    tracer = start_tracer(simple_plan(tmp_path, fixtures_built / "simple_pie"), "-d", "20s")
    try:
        maps = _config_maps(tracer.pid)
        assert len(maps) == 1, maps
        from bcc.utils import get_possible_cpus  # an independent count: bcc's

        assert _lookup_u32(tracer.pid, maps[0], NR_CPUS_SLOT) == len(get_possible_cpus())
    finally:
        stop_tracer(tracer)


BPF_MAP_TYPE_PERCPU_ARRAY = 6
BPF_MAP_TYPE_RINGBUF = 27


def _maps_of_type(pid: int, map_type: int) -> list[tuple[int, dict[str, str]]]:
    """One fd of each map of `map_type` the process holds (a map may have several)."""
    out: dict[str, tuple[int, dict[str, str]]] = {}
    for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
        info = {k: v.strip() for k, v in _fdinfo(pid, fd).items()}
        if info.get("map_type") == str(map_type):
            out.setdefault(info.get("map_id", fd), (int(fd), info))
    return list(out.values())


def _lookup_percpu_u64(pid: int, target_fd: int, key: int, ncpus: int) -> list[int]:
    v = (ct.c_uint64 * ncpus)()
    _lookup(pid, target_fd, key, v)
    return list(v)


def test_each_cpu_keeps_its_wakeup_threshold_beside_its_byte_count(fixtures_built, tmp_path):
    """pr_wakeup_flags works the threshold out on a CPU's first record and keeps it in
    pr_counters[PR_WAKE_AT]: a CPU that submitted holds 1/16 of the ring (this host has
    at most 8 CPUs, else 1/(2 * CPUs)), one that did not holds 0."""
    from bcc.utils import get_possible_cpus

    ncpus = len(get_possible_cpus())
    binary = fixtures_built / "simple_pie"
    tracer = start_tracer(simple_plan(tmp_path, binary), "-d", "20s")
    try:
        subprocess.run([str(binary), "50"], check=True, timeout=30)
        rings = _maps_of_type(tracer.pid, BPF_MAP_TYPE_RINGBUF)
        assert len(rings) == 1, rings
        ring_bytes = int(rings[0][1]["max_entries"])
        share = 16 if ncpus <= 8 else 2 * ncpus
        counters = [fd for fd, info in _maps_of_type(tracer.pid, BPF_MAP_TYPE_PERCPU_ARRAY)
                    if (info.get("key_size"), info.get("value_size"),
                        info.get("max_entries")) == ("4", "8", str(COUNTER_SLOTS))]
        assert len(counters) == 1, counters
        at = _lookup_percpu_u64(tracer.pid, counters[0], WAKE_AT, ncpus)
        assert set(at) <= {0, ring_bytes // share} and any(at), at
        submitted = _lookup_percpu_u64(tracer.pid, counters[0], int(Counter.SUBMITS), ncpus)
        assert sum(submitted) > 0 and all(n < ring_bytes // share for n in submitted)
    finally:
        out, _ = stop_tracer(tracer)
    assert out.count("\n") >= 50  # every record printed
