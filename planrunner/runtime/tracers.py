"""The machine's registry of running planrunner processes: a BPF hash map pinned at
`RenderedProgram.tracers_pin` (__u32 init-namespace tgid -> __u64 start time), which
every program's `pr_skip` checks, so that no run records another run's events (two
system-wide runs of a Python plan would trace each other's interpreter).

A run registers before it compiles (from then on, a run already attached ignores it),
creating and pinning the map when it is the first. Its entry goes when its process
exits, removed by the exit program of any run attached then (`pr_on_exit`): not
earlier, since the interpreter keeps running Python after the probes are gone, and an
attached run would record that. A registering run removes the entries of runs that
ended while none was attached, or whose pid now belongs to another process (start
time). The BPF program opens the same pin
(BPF_TABLE_PINNED in templates/runtime_helpers.h, same sizes as here).

Takes libbcc's handle from runtime/bcc_backend.py (which alone imports bcc).
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
from typing import Any

from planrunner.errors import BackendError
from planrunner.runtime.scope import ensure_bpffs, tracer_alive

BPF_MAP_TYPE_HASH = 1
MAX_TRACERS = 1024  # runtime_helpers.h pr_tracers


class TracerRegistry:
    def __init__(self, lib: Any, pin: str) -> None:
        lib.bcc_create_map.restype = ct.c_int
        lib.bcc_create_map.argtypes = [ct.c_int, ct.c_char_p, ct.c_int, ct.c_int, ct.c_int,
                                       ct.c_int]
        lib.bpf_obj_pin.restype = ct.c_int
        lib.bpf_obj_pin.argtypes = [ct.c_int, ct.c_char_p]
        lib.bpf_obj_get.restype = ct.c_int
        lib.bpf_obj_get.argtypes = [ct.c_char_p]
        self._lib = lib
        self._fd = self._open(pin)

    def _open(self, pin: str) -> int:
        ensure_bpffs(os.path.dirname(pin))
        for _attempt in range(3):  # another run may pin it between our get and pin
            fd = int(self._lib.bpf_obj_get(pin.encode()))
            if fd >= 0:
                return fd
            fd = int(self._lib.bcc_create_map(BPF_MAP_TYPE_HASH, b"pr_tracers", 4, 8,
                                              MAX_TRACERS, 0))
            if fd < 0:
                break
            if self._lib.bpf_obj_pin(fd, pin.encode()) == 0:
                return fd
            err = ct.get_errno()
            os.close(fd)
            if err not in (0, errno.EEXIST):
                break
        raise BackendError(f"cannot open or create the tracer registry {pin}",
                           hints=(f"`ls -l {pin}`; it is a BPF map pinned by the first "
                                  "run, safe to remove when no run is active",))

    def entries(self) -> dict[int, int]:
        found: dict[int, int] = {}
        key, nxt, value = ct.c_uint32(), ct.c_uint32(), ct.c_uint64()
        prev: Any = None
        while self._lib.bpf_get_next_key(self._fd, prev, ct.byref(nxt)) == 0:
            if self._lib.bpf_lookup_elem(self._fd, ct.byref(nxt), ct.byref(value)) == 0:
                found[nxt.value] = value.value
            key.value = nxt.value
            prev = ct.byref(key)
        return found

    def register(self, tgid: int, start: int) -> None:
        for pid, started in self.entries().items():
            if not tracer_alive(pid, started):
                self._lib.bpf_delete_elem(self._fd, ct.byref(ct.c_uint32(pid)))
        if self._lib.bpf_update_elem(self._fd, ct.byref(ct.c_uint32(tgid)),
                                     ct.byref(ct.c_uint64(start)), 0) != 0:
            raise BackendError(f"cannot add this run to the tracer registry "
                               f"({os.strerror(ct.get_errno())})")

    def close(self) -> None:
        """Close the map; this run's entry stays until its process exits (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
