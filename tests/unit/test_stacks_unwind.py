"""stacks: DWARF CFI, frame-pointer and auto unwinding of the fixture's own dumps.

Ground truth: tests/fixtures/stacks/fx_stack captures its registers four calls deep
(main -> outer -> lib_outer in libfx.so -> middle -> inner) and dumps them with a copy
of its stack and its maps; the frame names must come back exactly, in order, in every
build (frame pointers or not, PIE or not). No BPF.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from stacks_fixture import (
    CHAIN,
    VARIANTS,
    Dump,
    load_dump,
    missing_toolchain,
    run_dump,
    session_build,
)

from planrunner.stacks.capture import StackWindow, parse_ustack_record
from planrunner.stacks.fp_detect import judge
from planrunner.stacks.symbolize import Symbolizer
from planrunner.stacks.unwind import unwind

pytestmark = pytest.mark.skipif(missing_toolchain() is not None,
                                reason=missing_toolchain() or "")
LIBC = "libc.so.6"


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return session_build(tmp_path_factory)


@pytest.fixture(scope="module")
def dumps(builds: dict[str, Path]) -> dict[str, Dump]:
    return {v: load_dump(run_dump(d / "fx_stack", d / "dump")) for v, d in builds.items()}


@pytest.fixture(scope="module")
def qsort_dumps(builds: dict[str, Path]) -> dict[str, Dump]:
    return {v: load_dump(run_dump(d / "fx_stack", d / "q", "16384", "qsort"))
            for v, d in builds.items()}


def names(dump: Dump, mode: str, **kw: int) -> tuple[list[str | None], list[str], str]:
    result = unwind(dump.capture, dump.modules, mode, **kw)
    frames = Symbolizer().symbolize(result.addrs, dump.modules)
    return ([f.symbol for f in frames], [os.path.basename(f.module) for f in frames],
            result.stop)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["dwarf", "auto"])
def test_cfi_unwind_gives_the_exact_chain_then_libc_then_start(
        dumps: dict[str, Dump], variant: str, mode: str) -> None:
    syms, mods, stop = names(dumps[variant], mode)
    assert syms[:5] == CHAIN
    assert mods[:5] == ["fx_stack", "fx_stack", "libfx.so", "fx_stack", "fx_stack"]
    # then __libc_start_call_main and __libc_start_main (names need libc's symbols),
    # then _start, whose CFI marks the outermost frame
    assert mods[5:-1] and set(mods[5:-1]) == {LIBC}
    assert syms[-1] == "_start" and stop == "end"


@pytest.mark.parametrize("variant", ["fp_pie", "fp_nopie"])
def test_frame_pointer_unwind_gives_the_chain_where_frame_pointers_exist(
        dumps: dict[str, Dump], variant: str) -> None:
    syms, _, _ = names(dumps[variant], "fp")
    assert syms[:5] == CHAIN


@pytest.mark.parametrize("variant", ["nofp_pie", "nofp_nopie"])
def test_frame_pointer_unwind_stops_early_without_them(dumps: dict[str, Dump],
                                                       variant: str) -> None:
    syms, _, _ = names(dumps[variant], "fp")
    assert syms[:5] != CHAIN  # why DWARF mode exists


@pytest.mark.parametrize("variant", VARIANTS)
def test_unwinding_through_libc_without_frame_pointers(qsort_dumps: dict[str, Dump],
                                                        variant: str) -> None:
    """inner is called by qsort's comparator: libc (built without frame pointers) sits in
    the middle; the 16 KiB copy ends inside `deep`'s 32 KiB of locals."""
    dump = qsort_dumps[variant]
    assert len(dump.capture.window.data) == 16384
    syms, mods, stop = names(dump, "dwarf")
    assert syms[:2] == ["inner", "cmp"]
    at = syms.index("via_qsort")
    assert at > 2 and set(mods[2:at]) == {LIBC}
    assert syms[at:] == ["via_qsort", "deep"]
    assert stop == "outside-window"


PYTHON = "/usr/bin/python3.11"
PY_CALLER = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
def a(): return b() + 1
def b(): return c() + 1
def c(): return lib.fx_capture(sys.argv[2].encode(), 65536)
a()
"""


@pytest.mark.skipif(not os.path.exists(PYTHON), reason=f"{PYTHON} is not installed")
def test_a_debian_python311_stack_without_frame_pointers(builds: dict[str, Path]) -> None:
    """A real program built by Debian without frame pointers (and stripped: .dynsym
    only): python3.11 calls the fixture's capture through ctypes and libffi."""
    lib = next(iter(builds.values())).parent / "libfxdump.so"
    prefix = lib.parent / "py"
    subprocess.run([PYTHON, "-c", PY_CALLER, str(lib), str(prefix)], check=True,
                   timeout=30)
    dump = load_dump(prefix)
    syms, mods, stop = names(dump, "dwarf")
    assert syms[0] == "fx_capture" and mods[0] == "libfxdump.so"
    assert "_PyEval_EvalFrameDefault" in syms and "Py_BytesMain" in syms
    assert syms.index("_PyEval_EvalFrameDefault") < syms.index("Py_BytesMain")
    assert syms[-1] == "_start" and mods[-1] == "python3.11" and stop == "end"
    assert names(dump, "auto")[0] == syms
    assert not judge(PYTHON).has_frame_pointers
    assert "_PyEval_EvalFrameDefault" not in names(dump, "fp")[0]


def test_a_short_copy_ends_the_walk_cleanly(dumps: dict[str, Dump]) -> None:
    dump = dumps["nofp_pie"]
    w = dump.capture.window
    assert len(w.data) < dump.asked  # near the top of the stack the copy is clipped
    full = len(unwind(dump.capture, dump.modules, "dwarf").addrs)
    got = []
    for size in (0, 8, 24, 64, 200):
        short = replace(dump.capture, window=StackWindow(w.base, w.data[:size]))
        result = unwind(short, dump.modules, "dwarf")
        assert result.stop == "outside-window"
        got.append(len(result.addrs))
    assert got[0] == 1 and got == sorted(got) and got[-1] < full


def test_depth_is_bounded(dumps: dict[str, Dump]) -> None:
    result = unwind(dumps["nofp_pie"].capture, dumps["nofp_pie"].modules, "dwarf",
                    max_frames=3)
    assert len(result.addrs) == 3 and result.stop == "depth"


def test_an_unknown_mode_is_refused(dumps: dict[str, Dump]) -> None:
    with pytest.raises(ValueError, match="unknown unwind mode"):
        unwind(dumps["fp_pie"].capture, dumps["fp_pie"].modules, "lbr")


def test_frame_pointer_judgement(builds: dict[str, Path]) -> None:
    for variant, directory in builds.items():
        for name in ("fx_stack", "libfx.so"):
            verdict = judge(str(directory / name))
            assert verdict.has_frame_pointers == variant.startswith("fp_"), (variant, name,
                                                                             verdict)
    libc = judge("/lib/x86_64-linux-gnu/libc.so.6")
    assert libc.sampled > 20 and not libc.has_frame_pointers  # Debian: -O2, no fp


def test_the_record_layout_round_trips(dumps: dict[str, Dump]) -> None:
    cap = dumps["fp_pie"].capture
    raw = (cap.pid.to_bytes(4, "little") + len(cap.window.data).to_bytes(4, "little")
           + (123456789).to_bytes(8, "little")
           + b"".join(v.to_bytes(8, "little") for v in (cap.regs.pc, cap.regs.sp,
                                                         cap.regs.fp, 0))
           + cap.window.data + b"\0" * 32)  # trailing bytes beyond len are ignored
    # the record's time is the event's; the start time is the reader's to fill
    assert parse_ustack_record(raw) == replace(cap, start_time=0, time=123456789)
