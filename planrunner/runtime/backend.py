"""The one seam between a tracing session and the kernel: the `Backend` protocol.

A session (runtime/session.py) drives a backend through these steps, in this order:
`load` the rendered program, `set_config` its config slots (and `fill_scope`,
`register_tracer`), `attach` each distinct site, `finish_attach`,
`open_ring`, then `read_ring` and `read_map`/`map_total`/`counter` as often as it likes,
`detach` (every probe gone: what fired is in the ring buffer and maps), read the tail,
and `close`. `detach` and `close` may be called more than once, and at any point after
construction (the session's `finally` does).

Implementations: runtime/bcc_backend.py (the only module that imports bcc) and, for
unit tests, tests/fakes/backend.py (replays recorded ring-buffer bytes and map
snapshots). Every name the backend needs (maps, functions, counter and config slots)
comes from the RenderedProgram; none is spelled here.

Imports render/model.py and runtime/features.py only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from planrunner.render.model import (
    AttachSet,
    AttachSite,
    ConfigSlot,
    Counter,
    RenderedProgram,
)
from planrunner.runtime.features import KernelFeatures

# (key, per-CPU value) pairs of one map, as ctypes objects shaped like the map's C
# key and value structs (render/aggregates.py declares them; runtime/aggregates.py
# reads their fields by name).
MapItems = list[tuple[Any, Any]]


class MapSource(Protocol):
    """What runtime/aggregates.py reads: aggregation maps and the loss counters."""

    def read_map(self, name: str, delete: bool) -> MapItems:
        """Every entry of map `name` now; with `delete`, each returned entry is removed
        together with its read (one batch syscall where the kernel allows)."""
        ...

    def map_total(self, name: str) -> int:
        """The sum over every entry and CPU of per-CPU counter array `name`."""
        ...

    def counter(self, which: Counter) -> int:
        """Slot `which` of the program's counter map, summed over the CPUs."""
        ...


class StackSource(Protocol):
    """What runtime/stacks.py reads: the stack maps of render/stacks.py."""

    def stack_ips(self, map_name: str, stack_id: int) -> list[int] | None:
        """The addresses of a kernel stack id, innermost first (None: no such id)."""
        ...

    def drain_copies(self, map_name: str) -> list[tuple[int, bytes]]:
        """Every (hash, struct pr_ustack bytes) in the copies map, each deleted once read."""
        ...

    def forget_pids(self, map_name: str, pids: list[int]) -> None:
        """Drop pids from the map of processes already announced."""
        ...

    def map_value(self, map_name: str, key: bytes) -> bytes | None:
        """The value at `key` (the C's layout) of a hash map, None when absent (the
        names of a Python code object: render/pyframes.py)."""
        ...

    def update_map(self, map_name: str, key: bytes, value: bytes) -> None:
        """Write one entry of a hash map of the loaded program, as the C lays out its
        key and value (runtime/python_bins.py, runtime/stack_templates.py). Raises
        BackendError."""
        ...

    def delete_key(self, map_name: str, key: bytes) -> None:
        """Remove `key` from a hash map (absent: nothing to do)."""
        ...


class Backend(MapSource, StackSource, Protocol):
    @property
    def features(self) -> KernelFeatures:
        """What the kernel offers (detected once; the attach strategy follows from it)."""
        ...

    def load(self, program: RenderedProgram,
             meanwhile: Callable[[], None] | None = None) -> None:
        """Compile and load `program`; raises BackendError/BackendUnavailable.
        `meanwhile`, if given, is called once while the C compiles elsewhere (work of
        the run that needs no program, off its path to `Tracing`); not at all when
        nothing is compiled or the compile is in this process."""
        ...

    def has_function(self, name: str) -> bool:
        """Whether the loaded program has function `name` (the run's own programs that
        are compiled only with the kernel's struct offsets: render/model.py
        OWN_BTF_PROBES)."""
        ...

    def set_config(self, slot: ConfigSlot, value: int) -> None:
        """Write one slot of the program's config map (before attaching)."""
        ...

    def fill_scope(self, pids: Sequence[int], comms: Sequence[bytes],
                   cgroups: Sequence[str]) -> None:
        """Fill the scope maps (before attaching): tgid keys of the pid map, comms
        (without NUL), cgroup v2 directories (runtime/scope.py says what each means)."""
        ...

    def skip_processes(self, tgids: Sequence[int]) -> None:
        """Before attaching: skip these processes as the program skips a process it saw
        exec planrunner (planrunner processes that started before this run attached and
        may not have registered yet: runtime/scope.py `starting_planrunners`)."""
        ...

    def register_tracer(self, pin: str, tgid: int, start: int) -> bool:
        """Add this run to the machine's registry of tracers pinned at `pin` (their
        events are never recorded), cleaning out entries of tracers that are gone; the
        entry goes when the process exits. Called before `load`: from then on, runs
        already attached ignore this one. False when the registry is full."""
        ...

    def attach(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
        """Attach one site, filtered on `pid` (None: every process); with `ref_ctr`,
        the uprobe carries its semaphore's reference counter. Raises BackendError."""
        ...

    def attach_set(self, probes: AttachSet, pid: int | None) -> list[tuple[str, str]]:
        """Attach a uprobe set's one program at all its functions at once, each with
        its attach cookie (runtime/attach_sets.py); (function, why) of those the kernel
        refused, left out. Raises BackendError when none could be attached."""

    def finish_attach(self) -> None:
        """After the last `attach`: attach what it batched (uprobe sites go on one
        link per file and kind, runtime/attach.py UprobeLinks). Raises BackendError
        naming a site the kernel refused."""
        ...

    def open_ring(self) -> None:
        """Start reading print records from the program's events map."""
        ...

    def read_ring(self, timeout_ms: int) -> list[bytes]:
        """Records waiting now (oldest first, a bounded batch); when there are none,
        wait up to `timeout_ms` for some first (0: do not wait)."""
        ...

    def ring_fd(self) -> int | None:
        """The ring buffer's fd, readable when a record waits (poll(2)), for a loop that
        sleeps on other fds too (runtime/loop_wait.py); None: only `read_ring` waits."""
        ...

    def discard_ring(self) -> int:
        """Release every record waiting in the ring buffer unread; how many there were
        (a stop's tail past its time, counted as lost)."""
        ...

    def detach_probes(self) -> None:
        """Remove the plan's probes (what records events); the run's own tracepoints
        (render/model.py RUN_OWN_SITES) stay until `detach`. Returns when no probe of
        the plan can fire any more."""
        ...

    def detach(self) -> None:
        """Remove every probe; returns when none can fire any more."""
        ...

    def close(self) -> None:
        """Detach, then free the program, its maps and the ring reader."""
        ...
