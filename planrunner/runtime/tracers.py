"""The machine's registry of running planrunner processes: a BPF array of one element
pinned at `RenderedProgram.tracers_pin`, holding MAX_TRACERS slots of (init-namespace
tgid, start time), which every program's `pr_skip` scans, so that no run records
another run's events (two system-wide runs of a Python plan would trace each other's
interpreter). One element scanned in registers costs less per event than a hash lookup
(BENCHMARKS.md, "Scope filters").

Where it is pinned: runtime/registry_pin.py (the default, unless another user put
something there first).

A run registers before it compiles (from then on, a run already attached ignores it),
creating and pinning the map when it is the first; registrations take a lock file, as
they rewrite the whole element. Its slot is freed when its process exits, by the exit
program of any run attached then (`pr_on_exit`): not earlier, since the interpreter
keeps running Python after the probes are gone, and an attached run would record that.
A registering run frees the slots of runs that ended while none was attached, or whose
pid now belongs to another process (start time). The BPF program opens the same pin
(BPF_TABLE_PINNED in templates/runtime_helpers.h, same layout as here).

The map is made, pinned, read and written by raw bpf() calls (runtime/kernel/bpf.py),
so that registering never imports bcc (a run whose program comes from the cache never
does).
"""

from __future__ import annotations

import ctypes as ct
import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from planrunner.errors import BackendError
from planrunner.render.contracts import MAX_TRACERS, TRACER_TABLE, TRACERS_MAP
from planrunner.runtime.kernel.bpf import (
    BPF_MAP_TYPE_ARRAY,
    map_create,
    map_lookup_elem,
    map_update_elem,
    obj_get,
    obj_pin,
)
from planrunner.runtime.registry_pin import BPF_FS, ensure_bpffs, foreign
from planrunner.runtime.scope import tracer_alive

_KEY = bytes(4)  # the array's one element: u32 0
LOCK = "/run/planrunner/tracers.lock"


class TracerTable(ct.Structure):
    """struct pr_tracer_table, laid out as render/contracts.py defines it for the C."""

    _fields_ = TRACER_TABLE.ctypes_fields()


class TracerRegistry:
    def __init__(self, pin: str, lock: str = LOCK) -> None:
        self._lock = lock
        self._fd = self._open(pin)

    def _open(self, pin: str) -> int:
        ensure_bpffs(BPF_FS)
        for _attempt in range(3):  # another run may pin it between our get and pin
            try:
                return obj_get(pin)
            except OSError:
                pass
            try:
                fd = map_create(BPF_MAP_TYPE_ARRAY, 4, ct.sizeof(TracerTable), 1,
                                name=TRACERS_MAP)
            except OSError:
                break
            try:
                obj_pin(fd, pin)
                return fd
            except OSError as exc:
                err = exc.errno
            os.close(fd)
            if err != errno.EEXIST:
                break
        found = foreign(pin)
        raise BackendError(f"cannot open or create the registry of planrunner runs {pin}"
                           + (f": it is {found}" if found else ""),
                           hints=(f"`ls -l {pin}`; it is a BPF map pinned by the first "
                                  "run, safe to remove when no run is active",))

    def table(self) -> TracerTable:
        try:
            raw = map_lookup_elem(self._fd, _KEY, ct.sizeof(TracerTable))
        except OSError as exc:
            raise BackendError("cannot read the registry of planrunner runs "
                               f"({exc.strerror})") from None
        if raw is None:  # an array always has its element
            raise BackendError("cannot read the registry of planrunner runs "
                               f"({os.strerror(errno.ENOENT)})")
        return TracerTable.from_buffer_copy(raw)

    @contextmanager
    def _rewriting(self, what: str) -> Iterator[TracerTable]:
        """The table, under the lock file, written back once the caller has changed it
        (registrations rewrite the whole element). `what`: said if the write fails."""
        os.makedirs(os.path.dirname(self._lock), mode=0o700, exist_ok=True)
        with open(self._lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            table = self.table()
            yield table
            try:
                map_update_elem(self._fd, _KEY, bytes(table))
            except OSError as exc:
                raise BackendError(f"cannot {what} the registry of planrunner runs "
                                   f"({exc.strerror})") from None

    def register(self, tgid: int, start: int) -> bool:
        """Take a slot for `tgid`; False when every slot holds a live run (the table is
        then written back as it was: no slot was dead)."""
        with self._rewriting("add this run to") as table:
            free = None
            for i in range(MAX_TRACERS):
                pid = table.tgid[i]
                if pid and (pid == tgid or not tracer_alive(pid, table.start[i])):
                    table.tgid[i], table.start[i] = 0, 0
                if not table.tgid[i] and free is None:
                    free = i
            if free is None:
                return False
            table.tgid[free], table.start[free] = tgid, start
        return True

    def unregister(self, tgid: int) -> None:
        """Free `tgid`'s slot now: a process of this run that has ended (the compile
        worker) before any exit program could see it go, so that its pid, reused by
        another process, is not skipped until the next run registers."""
        with self._rewriting("free a slot of") as table:
            for i in range(MAX_TRACERS):
                if table.tgid[i] == tgid:
                    table.tgid[i], table.start[i] = 0, 0

    def close(self) -> None:
        """Close the map; this run's slot stays until its process exits (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
