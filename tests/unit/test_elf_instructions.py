"""A uprobe at SYMBOL+OFFSET must sit on an instruction start (issue 15 item 1).

capstone's answer is checked against an independent decoder, binutils' objdump, on
libc's malloc and on the offsets fixture: every offset objdump shows as an instruction
start validates, every other offset is refused, located, naming the nearest starts.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from planrunner.elf.instructions import check_offset, instructions, nearest
from planrunner.elf.symbols import lookup_symbol
from planrunner.errors import PlanError, ResolveError
from planrunner.pipeline import resolve
from planrunner.plan import load_plan

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "elf"
LIBC_CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6")

pytest.importorskip("capstone")
if shutil.which("objdump") is None:
    pytest.skip("needs binutils' objdump as the reference decoder", allow_module_level=True)


def _libc() -> str:
    for path in LIBC_CANDIDATES:
        if Path(path).exists():
            return path
    pytest.skip("no x86-64 glibc here")


@pytest.fixture(scope="module")
def offsets_bin() -> str:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the offsets fixture")
    subprocess.run(["make", "-s", "-C", str(FIXTURES), "build/offsets"], check=True)
    return str(FIXTURES / "build" / "offsets")


def objdump_starts(path: str, name: str) -> tuple[int, int, list[int]]:
    """(vaddr, size, instruction start offsets) of function `name`, by objdump."""
    sym = next(s for s in lookup_symbol(path, name) if s.type == "STT_FUNC")
    out = subprocess.run(["objdump", "-d", "--wide", f"--start-address={sym.value:#x}",
                          f"--stop-address={sym.value + sym.size:#x}", path],
                         capture_output=True, text=True, check=True).stdout
    starts = [int(m.group(1), 16) - sym.value
              for m in re.finditer(r"^\s*([0-9a-f]+):\t", out, re.M)]
    return sym.value, sym.size, starts


def plan_text(binary: str, spec: str) -> str:
    return (f"planrunner: 1\nname: offsets\ntargets:\n  t: {{binary: {binary}}}\n"
            f"probes:\n  p: {{uprobe: \"{spec}\"}}\noutputs:\n  - count: p\n")


def _check_against_objdump(path: str, name: str, upto: int) -> None:
    vaddr, size, starts = objdump_starts(path, name)
    assert len(starts) > 3
    for off in range(1, min(size, upto)):
        if off in starts:
            check_offset(path, name, vaddr, size, off, "EM_X86_64")
            continue
        before = max(s for s in starts if s < off)
        after = min(s for s in starts if s > off)
        with pytest.raises(ResolveError) as info:
            check_offset(path, name, vaddr, size, off, "EM_X86_64")
        assert info.value.diagnostics[0].message == (
            f"offset {off} of '{name}' is inside an instruction; nearest instruction "
            f"starts: +{before}, +{after}")


def test_every_offset_of_libc_malloc_agrees_with_objdump() -> None:
    _check_against_objdump(_libc(), "malloc", 96)


def test_every_offset_of_the_fixture_agrees_with_objdump(offsets_bin: str) -> None:
    _check_against_objdump(offsets_bin, "work", 1 << 16)


def test_malloc_mid_instruction_is_refused_at_the_spec(tmp_path: Path) -> None:
    libc = _libc()
    _vaddr, _size, starts = objdump_starts(libc, "malloc")
    bad = next(o for o in range(1, 40) if o not in starts)
    plan = tmp_path / "p.yaml"
    plan.write_text(plan_text(libc, f"t:malloc+{bad}"))
    with pytest.raises(PlanError) as info:
        resolve(load_plan(str(plan), {}), None)
    diag = info.value.diagnostics[0]
    assert f"offset {bad} of 'malloc' is inside an instruction" in diag.message
    assert diag.span is not None and (diag.span.line, diag.span.column) == (6, 16)
    good = next(o for o in starts if o > 0)
    plan.write_text(plan_text(libc, f"t:malloc+{good:#x}"))
    resolve(load_plan(str(plan), {}), None)  # a real instruction start is accepted


def test_aarch64_offsets_are_multiples_of_four() -> None:
    # No bytes are read for aarch64: every instruction is 4 bytes long.
    check_offset("/nonexistent", "f", 0x1000, 64, 8, "EM_AARCH64")
    with pytest.raises(ResolveError, match=r"offset 6 of 'f' is inside an instruction; "
                                           r"nearest instruction starts: \+4, \+8$"):
        check_offset("/nonexistent", "f", 0x1000, 64, 6, "EM_AARCH64")
    with pytest.raises(ResolveError, match=r"nearest instruction starts: \+60$"):
        check_offset("/nonexistent", "f", 0x1000, 64, 62, "EM_AARCH64")


def test_offset_zero_needs_no_disassembler() -> None:
    check_offset("/nonexistent", "f", 0x1000, 0, 0, "EM_X86_64")


def test_decoding_reports_lengths_and_stops_at_bytes_that_are_not_code() -> None:
    mov_jmp = b"\x48\x89\xc7" + b"\xe9\x00\x00\x00\x00"  # mov %rax,%rdi; jmp rel32
    assert instructions(mov_jmp, "EM_X86_64", 64) == ((0, 3), (3, 5))
    assert nearest([0, 3], 4, 8) == (3, None)  # inside the last one: nothing after
    assert instructions(b"\x06\x06", "EM_X86_64", 64) == ()  # `push %es`: not x86-64
    assert instructions(b"", "EM_AARCH64", 9) == ((0, 4), (4, 4), (8, 4))
