"""stacks/modules.py and stacks/cfi.py: maps snapshots per (pid, start time), load bias,
refresh after dlopen, refusal of a pid that names another process; lazy CFI."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
from stacks_fixture import missing_toolchain, session_build

from planrunner.elf.symbols import lookup_symbol
from planrunner.stacks.cfi import ModuleCfi
from planrunner.stacks.modules import (
    ProcessRegistry,
    exe_identity,
    modules_from_maps,
    read_start_time,
    snapshot,
)

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def libc_function_address(name: str) -> int:
    return ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value or 0


def test_snapshot_of_this_process_maps_a_libc_function_to_its_symbol() -> None:
    snap = snapshot(os.getpid())
    addr = libc_function_address("getpid")
    mapping = snap.find(addr)
    assert mapping is not None and os.path.basename(mapping.path) == "libc.so.6"
    assert mapping.build_id and mapping.executable
    vaddr = mapping.to_vaddr(addr)
    values = {s.value for s in lookup_symbol(mapping.path, "getpid")}
    assert vaddr in values  # the load bias turns runtime into link-time addresses
    assert snap.start_time == read_start_time(os.getpid())
    assert snap.exe == exe_identity(os.getpid())


def test_anonymous_and_pseudo_mappings_are_not_modules() -> None:
    text = Path("/proc/self/maps").read_text()
    snap = modules_from_maps(text)
    assert all(m.path.startswith("/") and m.inode for m in snap.mappings)
    assert snap.find(0) is None


def test_a_reused_pid_is_never_read() -> None:
    registry = ProcessRegistry()
    me, start = os.getpid(), read_start_time(os.getpid())
    assert start is not None
    assert registry.observe(me, start + 1) is None  # same pid, another process
    assert registry.find(me, start + 1, libc_function_address("getpid")) is None
    assert registry.observe(me, start) is not None


def test_an_address_outside_every_mapping_refreshes_the_snapshot(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    if missing_toolchain():
        pytest.skip(missing_toolchain() or "")
    lib = session_build(tmp_path_factory)["nofp_pie"] / "libfx.so"
    registry = ProcessRegistry()
    me, start = os.getpid(), read_start_time(os.getpid())
    assert start is not None
    before = registry.observe(me, start)
    assert before is not None
    handle = ctypes.CDLL(str(lib))  # mapped after the snapshot, as a dlopen would be
    addr = ctypes.cast(handle.lib_outer, ctypes.c_void_p).value or 0
    assert before.find(addr) is None
    mapping = registry.find(me, start, addr)
    assert mapping is not None and mapping.path == str(lib)
    assert registry.modules(me, start) is not before  # replaced (same exe: no exec)


def test_cfi_is_indexed_by_eh_frame_hdr_and_decoded_lazily() -> None:
    cfi = ModuleCfi(LIBC)
    starts = cfi.function_starts
    assert len(starts) > 1000 and starts == sorted(starts)
    assert cfi.fde_parses == 0
    getpid = next(s.value for s in lookup_symbol(LIBC, "getpid"))
    row = cfi.row_at(getpid)
    assert row is not None and row.ra == 16 and row.cfa_reg == 7 and row.cfa_offset == 8
    assert cfi.fde_parses == 1
    cfi.row_at(getpid + 1)
    assert cfi.fde_parses == 1  # decoded tables are kept
