"""`planrunner doctor`: does this machine have what `planrunner run` needs?

One line per check, `OK` or `MISSING` with what to do. Exit 0 when everything is there,
3 otherwise (the exit code of BackendUnavailable). bcc is probed in a child interpreter:
only runtime/bcc_backend.py may import it, and a broken libbcc must not take us down.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

EXIT_MISSING = 3


@dataclass(frozen=True, slots=True)
class Check:
    """One line of `doctor`: what was checked, whether it passed, and the detail."""

    name: str
    ok: bool
    detail: str  # what was found, or what to do when missing


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    p = subparsers.add_parser(name, help="check that this machine can run plans",
                              description="Check root, bcc, kernel headers, tracefs, BTF, "
                                          "uprobe semaphore support and the ring buffer reader.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    results = [check() for check in CHECKS]
    width = max(len(r.name) for r in results)
    for r in results:
        status = "OK     " if r.ok else "MISSING"
        print(f"{status}  {r.name.ljust(width)}  {r.detail}", file=stdout)
    return 0 if all(r.ok for r in results) else EXIT_MISSING


def check_root() -> Check:
    if os.geteuid() == 0:
        return Check("root", True, "running as root")
    return Check("root", False, "attaching BPF needs root: run `sudo planrunner run ...`")


def check_bcc(python: str = sys.executable) -> Check:
    import subprocess  # here, not at the top: every command's startup imports this module

    code = "import bcc, sys; sys.stdout.write(getattr(bcc, '__version__', '?'))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("bcc", False, f"cannot start {python}: {exc}")
    if proc.returncode == 0:
        return Check("bcc", True, f"python bcc {proc.stdout.strip()} importable")
    last = (proc.stderr.strip().splitlines() or ["import failed"])[-1]
    return Check("bcc", False,
                 f"{last}; install the distro package (Debian/Ubuntu: python3-bpfcc, Fedora: "
                 "python3-bcc) and make the venv with --system-site-packages")


def check_kernel_headers(release: str | None = None, root: str = "/") -> Check:
    """The same decision `run` makes (runtime/headers.py follows bcc's own)."""
    from planrunner.runtime.headers import find_headers

    headers = find_headers(release, root)
    return Check("kernel headers", headers.found is not None, headers.detail)


def check_tracefs(mounts: str = "/proc/mounts") -> Check:
    try:
        with open(mounts, encoding="utf-8") as fh:
            points = [line.split()[1] for line in fh if line.split()[2:3] == ["tracefs"]]
    except OSError:
        points = []
    if points:
        return Check("tracefs", True, f"mounted at {points[0]}")
    return Check("tracefs", False,
                 "not mounted: `mount -t tracefs nodev /sys/kernel/tracing`")


def check_btf(path: str = "/sys/kernel/btf/vmlinux") -> Check:
    if os.path.exists(path):
        return Check("BTF", True, path)
    return Check("BTF", False,
                 f"{path} missing: use a kernel built with CONFIG_DEBUG_INFO_BTF=y")


def check_ref_ctr(path: str = "/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset"
                  ) -> Check:
    if os.path.exists(path):
        return Check("uprobe semaphores", True, f"kernel ref_ctr_offset supported ({path})")
    return Check("uprobe semaphores", False,
                 "no kernel ref_ctr_offset support (needs Linux >= 4.20): probes gated by "
                 "a semaphore cannot be enabled system-wide")


def check_ring_reader(machine: str | None = None, library: str | None = None) -> Check:
    """Which reader takes the ring buffer's records here: planrunner's own (plain loads,
    x86-64's store order) or libbpf's consumer, which must then load (ring_libbpf.py)."""
    import ctypes  # here, not at the top: every command's startup imports this module

    from planrunner.runtime.ring_libbpf import LIBRARY, wants_libbpf
    from planrunner.runtime.ringbuf import ordered_host

    if ordered_host(machine) and not wants_libbpf():
        return Check("ring buffer reader", True, "planrunner's own (this CPU orders stores)")
    try:
        ctypes.CDLL(library or LIBRARY)
    except OSError as exc:
        return Check("ring buffer reader", False,
                     f"records are read through libbpf here and {library or LIBRARY} did "
                     f"not load ({exc}): install Debian's libbpfcc (python3-bpfcc depends "
                     "on it)")
    return Check("ring buffer reader", True, f"libbpf's consumer ({library or LIBRARY})")


CHECKS: tuple[Callable[[], Check], ...] = (
    check_root, check_bcc, check_kernel_headers, check_tracefs, check_btf, check_ref_ctr,
    check_ring_reader)
