"""runtime/tracers.py on a real map: the registry of planrunner runs is created and
pinned by the first run, takes a free slot, frees the slots of runs that are gone or
whose pid was reused, keeps live ones, and says when every slot holds a live run (issue
15 item 6). Each test pins its own registry under /sys/fs/bpf (root only); the
registry of a real run is exercised by tests/e2e/test_scope_e2e.py."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from planrunner.render.model import MAX_TRACERS
from planrunner.runtime.kernel import bpf
from planrunner.runtime.registry_pin import BPF_FS
from planrunner.runtime.semaphores import start_time
from planrunner.runtime.tracers import TracerRegistry, TracerTable

_VALUE_SIZE = len(bytes(TracerTable()))
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir(BPF_FS),
                                reason="a pinned BPF map needs root and bpffs")


class Pinned:
    """The registry's map as another run sees it: opened at its pin."""

    def __init__(self, pin: str) -> None:
        self.pin = pin

    @property
    def element(self) -> TracerTable:
        fd = bpf.obj_get(self.pin)
        try:
            raw = bpf.map_lookup_elem(fd, bytes(4), _VALUE_SIZE)
        finally:
            os.close(fd)
        assert raw is not None
        return TracerTable.from_buffer_copy(raw)

    def write(self, table: TracerTable) -> None:
        fd = bpf.obj_get(self.pin)
        try:
            bpf.map_update_elem(fd, bytes(4), bytes(table))
        finally:
            os.close(fd)





@pytest.fixture
def registry(tmp_path: Path) -> Iterator[tuple[Pinned, TracerRegistry]]:
    pin = os.path.join(BPF_FS, f"planrunner-test-{uuid.uuid4().hex[:12]}")
    reg = TracerRegistry(pin, lock=str(tmp_path / "lock"))
    try:
        yield Pinned(pin), reg
    finally:
        reg.close()
        os.unlink(pin)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_first_run_creates_pins_and_takes_slot_0(registry: tuple[Pinned, TracerRegistry]
                                                      ) -> None:
    pinned, reg = registry
    assert os.path.exists(pinned.pin)
    assert list(pinned.element.tgid) == [0] * MAX_TRACERS
    me = os.getpid()
    assert reg.register(me, start_time(me) or 0)
    table = pinned.element
    assert table.tgid[0] == me and table.start[0] == start_time(me)
    again = TracerRegistry(pinned.pin, lock=reg._lock)  # the next run opens the same map
    try:
        assert list(again.table().tgid[:1]) == [me]
    finally:
        again.close()


def test_gone_and_reused_slots_are_freed_live_ones_kept(
        registry: tuple[Pinned, TracerRegistry]) -> None:
    pinned, reg = registry
    me, parent = os.getpid(), os.getppid()
    dead = _dead_pid()
    table = TracerTable()
    table.tgid[0], table.start[0] = dead, 12345  # died without a run attached
    table.tgid[1], table.start[1] = parent, (start_time(parent) or 0) + 1  # reused
    table.tgid[2], table.start[2] = parent, start_time(parent) or 0  # alive
    pinned.write(table)
    assert reg.register(me, start_time(me) or 0)
    assert list(pinned.element.tgid[:3]) == [me, 0, parent]


def test_a_full_registry_says_so(registry: tuple[Pinned, TracerRegistry]) -> None:
    pinned, reg = registry
    parent = os.getppid()
    table = TracerTable()
    for i in range(MAX_TRACERS):
        table.tgid[i], table.start[i] = parent, start_time(parent) or 0
    pinned.write(table)
    assert not reg.register(os.getpid(), 1)
    assert os.getpid() not in list(pinned.element.tgid)
