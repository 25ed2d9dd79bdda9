"""runtime/tracers.py without a kernel: the registry of planrunner runs takes a free
slot, frees the slots of runs that are gone or whose pid was reused, keeps live ones,
and says when every slot holds a live run (issue 15 item 6). A fake libbcc keeps the one
array element in memory; the real map is exercised by tests/e2e/test_scope_e2e.py."""

from __future__ import annotations

import ctypes as ct
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planrunner.render.model import MAX_TRACERS
from planrunner.runtime import tracers
from planrunner.runtime.semaphores import start_time
from planrunner.runtime.tracers import TracerRegistry, TracerTable


class _Fn:
    """A callable that accepts restype/argtypes, as ctypes functions do."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.restype: Any = None
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


class FakeLib:
    def __init__(self) -> None:
        self.element = TracerTable()
        self.pinned = False
        self.bcc_create_map = _Fn(lambda *_a: os.open(os.devnull, os.O_RDONLY))
        self.bpf_obj_pin = _Fn(self._pin)
        self.bpf_obj_get = _Fn(self._get)
        self.bpf_lookup_elem = _Fn(self._lookup)
        self.bpf_update_elem = _Fn(self._update)

    def _pin(self, _fd: int, _path: bytes) -> int:
        self.pinned = True
        return 0

    def _get(self, _path: bytes) -> int:
        return os.open(os.devnull, os.O_RDONLY) if self.pinned else -1

    def _lookup(self, _fd: int, _key: Any, value: Any) -> int:
        ct.memmove(value, ct.byref(self.element), ct.sizeof(TracerTable))
        return 0

    def _update(self, _fd: int, _key: Any, value: Any, _flags: int) -> int:
        ct.memmove(ct.byref(self.element), value, ct.sizeof(TracerTable))
        return 0


@pytest.fixture
def registry(tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeLib, TracerRegistry]]:
    monkeypatch.setattr(tracers, "ensure_bpffs", lambda _dir: None)
    lib = FakeLib()
    reg = TracerRegistry(lib, "/sys/fs/bpf/x", lock=str(tmp_path / "lock"))
    yield lib, reg
    reg.close()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_first_run_creates_pins_and_takes_slot_0(registry: tuple[FakeLib, TracerRegistry]
                                                      ) -> None:
    lib, reg = registry
    assert lib.pinned
    me = os.getpid()
    assert reg.register(me, start_time(me) or 0)
    assert lib.element.tgid[0] == me and lib.element.start[0] == start_time(me)


def test_gone_and_reused_slots_are_freed_live_ones_kept(
        registry: tuple[FakeLib, TracerRegistry]) -> None:
    lib, reg = registry
    me, parent = os.getpid(), os.getppid()
    dead = _dead_pid()
    lib.element.tgid[0], lib.element.start[0] = dead, 12345  # died without a run attached
    lib.element.tgid[1], lib.element.start[1] = parent, (start_time(parent) or 0) + 1  # reused
    lib.element.tgid[2], lib.element.start[2] = parent, start_time(parent) or 0  # alive
    assert reg.register(me, start_time(me) or 0)
    assert list(lib.element.tgid[:3]) == [me, 0, parent]


def test_a_full_registry_says_so(registry: tuple[FakeLib, TracerRegistry]) -> None:
    lib, reg = registry
    parent = os.getppid()
    for i in range(MAX_TRACERS):
        lib.element.tgid[i], lib.element.start[i] = parent, start_time(parent) or 0
    assert not reg.register(os.getpid(), 1)
    assert os.getpid() not in list(lib.element.tgid)
