"""FakeBackend: runtime/backend.py's Backend without a kernel, for unit tests of the
session loop (tests/unit/test_session.py) that run without root.

It replays a script of `Turn`s, one per `read_ring` call while attached: the records
of that turn (ring-buffer record bytes, built by `pack_record` with the real
RecordLayout.struct_format, so they are exactly what the decoder reads), the map
contents and counter values from that turn on, and an optional action run after the
records are handed over (send a signal, raise to simulate a crash). When the script
is used up, a read waits: on a `FakeClock`, by advancing it `timeout_ms` (deterministic
`--duration` and `every:` tests), else by a short real sleep (tests that wait for a
real process). After `detach`, one read returns `tail`: the records that were still in
the ring buffer when the probes went. Map entries are ctypes objects shaped like the
C structs, as bcc hands them back.

Lives in tests/, not in planrunner/: only tests use it, and shipping it would put a
fake kernel in the wheel and in the import graph the boundary tests check.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planrunner.render.layout import STR_OK, STR_TRUNCATED, RecordLayout
from planrunner.render.model import (
    OWN_BTF_PROBES,
    RUN_OWN_SITES,
    AttachSet,
    AttachSite,
    ConfigSlot,
    Counter,
    RenderedProgram,
)
from planrunner.runtime.backend import MapItems
from planrunner.runtime.features import KernelFeatures

HELPER_FUNCTIONS = {site.fn_name for site in RUN_OWN_SITES}
ALL_FEATURES = KernelFeatures(uprobe_multi=True, ringbuf_mmap=True, ref_ctr=True,
                              sleepable=True)


def pack_record(layout: RecordLayout, values: Mapping[str, object], *, ts_ns: int = 1,
                pid: int = 100, tid: int = 101, comm: bytes = b"app",
                truncated: Sequence[str] = ()) -> bytes:
    """One record as the BPF program submits it (struct pr_hdr, then the fields in
    memory order; a variable layout's record only as long as the size the program
    reserves for its last string). Strings are given as str or bytes; `truncated` keys
    get that status."""
    args: list[object] = [ts_ns, layout.output_id, pid, tid, comm]
    for f in layout.in_memory:
        value = values[f.key]
        if f.kind == "str":
            data = value.encode() if isinstance(value, str) else value
            assert isinstance(data, bytes)
            status = STR_TRUNCATED if f.key in truncated else STR_OK
            args += [0x7FFF0000, status, data[: f.size - 1]]
        elif f.kind == "bool":
            args.append(1 if value else 0)
        else:
            assert isinstance(value, int)
            args.append(value)
    whole = struct.Struct(layout.struct_format).pack(*args)
    last = layout.last_string if layout.variable else None
    if last is None:
        return whole
    used = len(args[-1]) + 1  # type: ignore[arg-type]  # the string and its NUL
    size = next(s for s in layout.sizes if s - layout.prefix_size >= min(used, last.size))
    return whole[:size]


class FakeClock:
    """Wall and monotonic time that move only when told (the fake's idle reads)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.t = start

    def wall(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class Turn:
    records: Sequence[bytes] = ()
    maps: Mapping[str, MapItems] | None = None  # replaces these maps' contents
    counters: Mapping[Counter, int] | None = None  # counter values from now on
    then: Callable[[], None] | None = None  # after the records are handed over
    advance_s: float = 0.0  # on a FakeClock: time this turn takes


@dataclass
class FakeBackend:
    turns: Sequence[Turn] = ()
    tail: Sequence[bytes] = ()
    tail_batch: int = 0  # records per read of the tail (0: all in one), as a real ring
    tail_read_s: float = 0.0  # what each read of the tail takes on `clock`
    detach_s: float = 0.0  # what detaching the plan's probes takes on `clock`
    clock: FakeClock | None = None
    feature_set: KernelFeatures = ALL_FEATURES
    idle_sleep_s: float = 0.002
    counters: dict[Counter, int] = field(default_factory=dict)
    maps: dict[str, MapItems] = field(default_factory=dict)
    # what the session did, in order: "load", "attach <probe>#<index>", "open_ring",
    # "read", "detach" (the plan's probes: the run's own go after, `detached_all`),
    # "tail", "discard", "close"
    calls: list[str] = field(default_factory=list)
    config: dict[ConfigSlot, int] = field(default_factory=dict)
    scope_pids: list[int] = field(default_factory=list)
    scope_comms: list[bytes] = field(default_factory=list)
    scope_cgroups: list[str] = field(default_factory=list)
    tracers: dict[int, int] = field(default_factory=dict)
    map_writes: dict[str, dict[bytes, bytes]] = field(default_factory=dict)  # update_map
    # runtime_helpers.h's own programs attached (exit, --follow-children's fork)
    helpers: list[tuple[AttachSite, int | None, bool]] = field(default_factory=list)
    attached: list[tuple[AttachSite, int | None, bool]] = field(default_factory=list)
    map_reads: list[tuple[str, bool]] = field(default_factory=list)
    program: RenderedProgram | None = None
    attach_error: Exception | None = None
    finished_attach: bool = False  # finish_attach was called (after every attach)
    helper_errors: dict[str, Exception] = field(default_factory=dict)  # fn name -> error
    btf: bool = True  # the program has the own programs made with the kernel's offsets
    _next: int = 0
    detached_all: bool = False
    _detached: bool = False
    _tail_read: bool = False

    @property
    def features(self) -> KernelFeatures:
        return self.feature_set

    def load(self, program: RenderedProgram,
             meanwhile: Callable[[], None] | None = None) -> None:
        self.calls.append("load")
        self.program = program

    def has_function(self, name: str) -> bool:
        return self.btf or name not in OWN_BTF_PROBES

    def set_config(self, slot: ConfigSlot, value: int) -> None:
        self.config[slot] = value

    def fill_scope(self, pids: Sequence[int], comms: Sequence[bytes],
                   cgroups: Sequence[str]) -> None:
        self.scope_pids += pids
        self.scope_comms += comms
        self.scope_cgroups += cgroups

    def map_value(self, map_name: str, key: bytes) -> bytes | None:
        return self.map_writes.get(map_name, {}).get(key)

    def update_map(self, map_name: str, key: bytes, value: bytes) -> None:
        self.map_writes.setdefault(map_name, {})[key] = value

    def skip_processes(self, tgids: Sequence[int]) -> None:
        self.skipped = list(tgids)

    def register_tracer(self, pin: str, tgid: int, start: int) -> bool:
        self.tracers[tgid] = start
        return True

    def attach(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
        if site.fn_name in HELPER_FUNCTIONS:  # not the plan's: kept apart
            if site.fn_name in self.helper_errors:
                raise self.helper_errors[site.fn_name]
            self.helpers.append((site, pid, ref_ctr))
            return
        if self.attach_error is not None:
            raise self.attach_error
        self.calls.append(f"attach {site.probe}#{site.index}")
        self.attached.append((site, pid, ref_ctr))

    def attach_set(self, probes: AttachSet, pid: int | None) -> list[tuple[str, str]]:
        if self.attach_error is not None:
            raise self.attach_error
        self.calls.append(f"attach set {probes.probe} ({len(probes.file_offsets)})")
        return []

    def finish_attach(self) -> None:
        self.finished_attach = True

    def open_ring(self) -> None:
        self.calls.append("open_ring")

    def read_ring(self, timeout_ms: int) -> list[bytes]:
        if self._detached:
            if self._tail_read:
                return []
            self.calls.append("tail")
            if self.clock is not None:
                self.clock.advance(self.tail_read_s)
            size = self.tail_batch or len(self.tail)
            batch, self.tail = list(self.tail[:size]), self.tail[size:]
            self._tail_read = not self.tail
            return batch
        self.calls.append("read")
        if self._next < len(self.turns):
            turn = self.turns[self._next]
            self._next += 1
            if turn.maps is not None:
                self.maps.update({k: list(v) for k, v in turn.maps.items()})
            if turn.counters is not None:
                self.counters.update(turn.counters)
            if self.clock is not None:
                self.clock.advance(turn.advance_s)
            if turn.then is not None:
                turn.then()
            return list(turn.records)
        if self.clock is not None:
            self.clock.advance(timeout_ms / 1000)
        else:
            time.sleep(self.idle_sleep_s)
        return []

    def ring_fd(self) -> int | None:
        return None  # the loop turns every POLL_MS, on the fake clock

    def discard_ring(self) -> int:
        self.calls.append("discard")
        count, self.tail = len(self.tail), ()
        self._tail_read = True
        return count

    def detach_probes(self) -> None:
        if not self._detached:
            self.calls.append("detach")
            if self.clock is not None:
                self.clock.advance(self.detach_s)
        self._detached = True

    def detach(self) -> None:
        if not self._detached:
            self.calls.append("detach")
        self._detached = True
        self.detached_all = True  # the run's own tracepoints too

    def close(self) -> None:
        self.detach()
        self.calls.append("close")

    @property
    def turns_left(self) -> int:
        return len(self.turns) - self._next

    # --- MapSource --------------------------------------------------------------------

    def read_map(self, name: str, delete: bool) -> MapItems:
        self.map_reads.append((name, delete))
        items = list(self.maps.get(name, []))
        if delete:
            self.maps[name] = []
        return items

    def map_total(self, name: str) -> int:
        return sum(_cpu_sum(value) for _key, value in self.maps.get(name, []))

    def counter(self, which: Counter) -> int:
        return self.counters.get(which, 0)


    # --- StackSource: recorded plans hold no stack maps -------------------------------

    def stack_ips(self, map_name: str, stack_id: int) -> list[int] | None:
        return None

    def drain_copies(self, map_name: str) -> list[tuple[int, bytes]]:
        return []

    def forget_pids(self, map_name: str, pids: list[int]) -> None:
        pass

    def delete_key(self, map_name: str, key: bytes) -> None:
        self.map_writes.get(map_name, {}).pop(key, None)


def _cpu_sum(value: Any) -> int:
    try:
        return sum(int(v) for v in value)
    except TypeError:
        return int(value)
