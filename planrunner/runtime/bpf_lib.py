"""The libbcc map calls runtime/tracers.py makes (`bcc_create_map`, `bpf_obj_pin`,
`bpf_obj_get`, `bpf_lookup_elem`, `bpf_update_elem`), by raw bpf() syscalls, with
libbcc's signatures and errno reporting (ctypes' errno).

Why: a run registers in the tracer registry before it compiles, and a run whose program
comes from the compiled-program cache (runtime/compile_cache.py) never imports bcc:
dlopen of libbcc with LLVM costs more than bpftrace's whole start-up. No bcc here.
"""

from __future__ import annotations

import ctypes as ct
from typing import Any

from planrunner.runtime import compile_cache as cc
from planrunner.runtime.uprobe_links import bpf_syscall

BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM = 1, 2


class _Call:
    """A callable that accepts restype/argtypes like a ctypes function (tracers.py
    declares them on libbcc's handle; here they are fixed)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.restype: Any = None
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> int:
        ret, err = self.fn(*args)
        ct.set_errno(err)
        return int(ret)


def _address(obj: Any) -> int:
    """A ctypes object or a byref() of one -> its address."""
    if isinstance(obj, int):
        return obj
    return ct.cast(obj, ct.c_void_p).value or 0


def _elem(cmd: int, fd: int, key: Any, value: Any, flags: int) -> tuple[int, int]:
    return bpf_syscall(cmd, cc.MapElem(map_fd=fd, key=_address(key), value=_address(value),
                                       flags=flags))


class SyscallLib:
    def __init__(self) -> None:
        self.bcc_create_map = _Call(self._create)
        self.bpf_obj_pin = _Call(lambda fd, path: cc.obj_pin(fd, path.decode()))
        self.bpf_obj_get = _Call(lambda path: cc.obj_get(path.decode()))
        self.bpf_lookup_elem = _Call(
            lambda fd, key, value: _elem(BPF_MAP_LOOKUP_ELEM, fd, key, value, 0))
        self.bpf_update_elem = _Call(
            lambda fd, key, value, flags: _elem(BPF_MAP_UPDATE_ELEM, fd, key, value, flags))

    @staticmethod
    def _create(map_type: int, name: bytes, key_size: int, value_size: int,
                max_entries: int, flags: int) -> tuple[int, int]:
        m = cc.MapDef(name.decode(), map_type, key_size, value_size, max_entries, flags,
                      "", "")
        try:
            return cc.create_map(m), 0
        except cc.CacheLoadError as exc:
            return -1, exc.errno
