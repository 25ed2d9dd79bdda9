"""stacks/modules.py and stacks/cfi.py: maps snapshots per (pid, start time), load bias,
refresh after dlopen, refusal of a pid that names another process; lazy CFI."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stacks_fixture import missing_toolchain, session_build

from planrunner.elf.procmaps import start_time as read_start_time
from planrunner.elf.symbols import lookup_symbol
from planrunner.stacks.cfi import ModuleCfi
from planrunner.stacks.modules import (
    ProcessRegistry,
    exe_identity,
    modules_from_maps,
    snapshot,
)
from planrunner.stacks.symbolize import Symbolizer

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


def test_anonymous_and_pseudo_mappings_are_no_modules() -> None:
    snap = modules_from_maps(Path("/proc/self/maps").read_text())
    stack = next(m for m in snap.mappings if m.path == "[stack]")
    assert snap.find(stack.start) == stack and stack.bias is None and not stack.build_id
    assert all(m.bias is not None for m in snap.mappings
               if m.path.endswith("libc.so.6"))
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
    registry = ProcessRegistry(min_refresh_interval=0)
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


def test_refreshes_are_rate_limited() -> None:
    registry = ProcessRegistry(min_refresh_interval=60)
    me, start = os.getpid(), read_start_time(os.getpid())
    assert start is not None and registry.observe(me, start) is not None
    assert registry.find(me, start, 8) is None  # refreshed once: still nothing there
    ctypes.CDLL("libm.so.6")  # may be mapped now, but no second refresh within 60 s
    first = registry.modules(me, start)
    assert registry.find(me, start, 16) is None and registry.modules(me, start) is first


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


def test_an_exec_keeps_the_old_image_for_older_stacks() -> None:
    """Same pid and start time after exec: the new maps are added, the old kept."""
    sleep = shutil.which("sleep")
    if sleep is None:
        pytest.skip("no sleep(1)")
    r, w = os.pipe()
    child = subprocess.Popen([sys.executable, "-c",
                              "import os, sys; os.read(int(sys.argv[1]), 1); "
                              "os.execv(sys.argv[2], [sys.argv[2], '30'])", str(r), sleep],
                             pass_fds=(r,))
    os.close(r)
    try:
        start = read_start_time(child.pid)
        assert start is not None
        registry = ProcessRegistry(min_refresh_interval=0)
        before = registry.observe(child.pid, start)
        assert before is not None
        os.write(w, b"x")
        target = os.path.realpath(sleep)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            after = snapshot(child.pid, start)  # same start time after the exec
            text = next((m for m in after.mappings if m.executable and m.path == target),
                        None)
            if text is not None:
                break
            time.sleep(0.01)
        assert text is not None and after.exe != before.exe
        assert before.find(text.start) is None or before.find(text.start) != text
        found = registry.find(child.pid, start, text.start)
        assert found is not None and found.path == text.path
        old = next(m for m in before.mappings if m.executable)
        history = registry.history(child.pid, start)
        assert len(history) == 2 and history[0] is before
        assert registry.find(child.pid, start, old.start) == old  # older stacks still map
    finally:
        os.close(w)
        child.kill()
        child.wait()


def test_the_vdso_unwinds_and_symbolizes_from_our_own_copy() -> None:
    snap = snapshot(os.getpid())
    vdso = next((m for m in snap.mappings if m.path == "[vdso]"), None)
    if vdso is None:
        pytest.skip("this process has no [vdso]")
    assert vdso.file and vdso.bias is not None
    sym = next(s for s in lookup_symbol(vdso.file, "__vdso_clock_gettime"))
    addr = sym.value + vdso.bias + 4
    frame = Symbolizer().symbolize([addr], snap)[0]
    assert frame.symbol in ("clock_gettime", "__vdso_clock_gettime")
    assert (frame.offset, frame.module) == (4, "[vdso]")
    assert ModuleCfi(vdso.file).row_at(sym.value + 4) is not None
