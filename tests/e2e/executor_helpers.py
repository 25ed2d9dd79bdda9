"""Helpers for the executor's end-to-end tests: look into a traced process from outside.

Independent of planrunner's runtime: addresses come from the ELF notes and the target's
/proc/PID/maps, values from /proc/PID/mem, leftovers from tracefs.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from planrunner.usdt.probes import read_probes
from tests.e2e.conftest import PLANRUNNER, ROOT, write_plan

UPROBE_EVENTS = "/sys/kernel/tracing/uprobe_events"


def uprobe_events() -> str:
    try:
        return Path(UPROBE_EVENTS).read_text()
    except OSError:
        return ""


def site(binary: Path, qualified: str):  # type: ignore[no-untyped-def]
    """The first site of USDT probe provider:name in binary."""
    probe = next(p for p in read_probes(str(binary)) if p.qualified == qualified)
    return probe.sites[0]


def runtime_address(pid: int, binary: Path, file_offset: int) -> int:
    """Where `file_offset` of `binary` is mapped in `pid` (the maps line of its inode)."""
    st = os.stat(binary)
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) < 6 or int(fields[4]) != st.st_ino:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        offset = int(fields[2], 16)
        if offset <= file_offset < offset + end - start:
            return start + file_offset - offset
    raise AssertionError(f"{binary} offset {file_offset:#x} not mapped in {pid}")


def read_mem(pid: int, addr: int, size: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(addr)
        return mem.read(size)


def semaphore_value(pid: int, binary: Path, qualified: str) -> int:
    s = site(binary, qualified)
    addr = runtime_address(pid, binary, s.semaphore_offset)
    return struct.unpack("<H", read_mem(pid, addr, 2))[0]


def probe_byte(pid: int, binary: Path, qualified: str) -> int:
    """The first byte of the probe's instruction: 0x90 (nop), 0xcc while a uprobe is on."""
    s = site(binary, qualified)
    return read_mem(pid, runtime_address(pid, binary, s.file_offset), 1)[0]


def start_tracer(plan: str, *extra: str, env: dict[str, str] | None = None,
                 stdout: int | None = subprocess.PIPE,
                 entry: list[str] = PLANRUNNER) -> subprocess.Popen:
    """Start `planrunner run` (through `entry`: the CLI, or a test wrapper of it) and
    wait until it says everything is attached."""
    proc = subprocess.Popen([*entry, "run", plan, *extra], cwd=ROOT, stdout=stdout,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stderr is not None
    before = ""  # warnings (a declared type, a runtime started without its flag) come first
    line = proc.stderr.readline()
    while line and not line.startswith("Tracing") and proc.poll() is None:
        before += line
        line = proc.stderr.readline()
    if not line.startswith("Tracing"):
        proc.kill()
        _out, err = proc.communicate()
        pytest.fail(f"tracer did not start: {before}{line}{err}")
    return proc


def stop_tracer(proc: subprocess.Popen, sig: int = signal.SIGINT) -> tuple[str, str]:
    """Signal a tracer the test started and collect what it printed."""
    proc.send_signal(sig)
    return proc.communicate(timeout=30)


def simple_plan(tmp_path: Path, binary: Path, *targets: str) -> str:
    """A plan printing `i` of simple:hit (simple.c) in `binary`, or in each of `targets`."""
    names = targets or (str(binary),)
    tlines = "".join(f"  s{i}: {{binary: {t}}}\n" for i, t in enumerate(names))
    plines = "".join(f"  hit{i}: {{usdt: s{i}:simple:hit, args: [{{name: i}}]}}\n"
                     for i in range(len(names)))
    olines = "".join(f"  - {{print: hit{i}, fields: [i]}}\n" for i in range(len(names)))
    return write_plan(tmp_path, f"planrunner: 1\nname: simple\ntargets:\n{tlines}"
                      f"probes:\n{plines}outputs:\n{olines}")


def libc_path() -> str:
    """The glibc libc.so.6 this process maps (skips the test where there is none)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith("/libc.so.6"):
            return line.split()[-1]
    pytest.skip("this process has no glibc libc.so.6 mapped")


def wait_for(predicate, timeout: float = 10.0, step: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    """Signal a process the test started; SIGKILL it, by its pid, if it lingers 15 s."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def kill(proc: subprocess.Popen) -> None:
    """End a process the test started, by its pid."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
