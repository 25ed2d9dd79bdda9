"""The thread-local and absolute-indexed fixtures (tests/fixtures/elf/tls.c, libtls.c,
indexed.c) really carry the operand forms they are for (`readelf -n`), and the TLS
offsets planrunner computes from the symbol table and PT_TLS (elf/tls.py) are the ones
the running program prints (`&var - __builtin_thread_pointer()`), PIE and not, -O0/-O2."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

from planrunner.elf.symbols import lookup_symbol
from planrunner.elf.tls import TlsSegment, tls_segment, x86_64_tpoff
from planrunner.usdt.model import SymMem, TlsMem
from planrunner.usdt.operands import parse_args
from tests.unit.test_fixtures_rebuild import _missing_toolchain, notes

ELF = Path(__file__).parents[1] / "fixtures" / "elf"
TARGETS = ["indexed_O0", "indexed_O2", "indexed_pie", "libtls.so", "tls_O0", "tls_O2",
           "tls_pie"]

# (binary, probe) -> the note's argument string, as gcc 12 writes it for x86-64
FORMS = {
    ("indexed_O2", "idx:table"): "-8@%rdi -4@table(,%rdi,4)",
    ("indexed_O2", "idx:field"): "-8@stab+16(,%rax,8)",
    ("indexed_O2", "idx:bytes"): "-1@ctab(%rdi) -2@htab(%rdi,%rdi) -1@ctab+3(%rdi) "
                                 "-8@big-8(,%rdi,8)",
    ("indexed_O2", "idx:literal"): "-4@268435456(,%rdi,4)",
    ("indexed_O2", "idx:asm"): "-4@0x10000000(,%rcx,4) -4@table+4(,%rcx,4)",
    ("indexed_pie", "idx:literal"): "-4@268435456(,%rdi,4)",
    ("indexed_pie", "idx:asm"): "-4@0x10000000(,%rcx,4) -4@table+4(,%rcx,4)",
    ("tls_O2", "tls:exe"): "-4@%fs:tv@tpoff -8@%fs:tl@tpoff+16 -8@%fs:tl@tpoff(,%rdi,8) "
                           "-1@%fs:tc@tpoff(%rdi)",
    ("tls_pie", "tls:exe"): "-4@%fs:tv@tpoff -8@%fs:16+tl@tpoff -8@%fs:tl@tpoff(,%rdi,8) "
                            "-1@%fs:tc@tpoff(%rdi)",
    ("tls_O2", "tls:asm"): "-4@%fs:0xfffffffffffffffc 8@%fs:0",
    ("libtls.so", "tls:lib"): "-4@0(%rbp) -4@%fs:(%rcx) -8@%fs:(%rdx,%rbx,8) "
                              "-8@sarr@dtpoff(%rax,%rbx,8)",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = _missing_toolchain()
    if reason:
        pytest.skip(reason)
    if platform.machine() != "x86_64":
        pytest.skip("the fixtures' operand forms are x86-64's")
    out = tmp_path_factory.mktemp("tlsfix")
    subprocess.run(["make", "-s", "-C", str(ELF), f"OUT={out}",
                    *[f"{out}/{t}" for t in TARGETS]], check=True, capture_output=True)
    return out


@pytest.mark.parametrize(("binary", "probe"), sorted(FORMS))
def test_notes_carry_the_forms(built: Path, binary: str, probe: str) -> None:
    args = {f"{p}:{n}": a for p, n, _, a in notes(built / binary)}
    assert args[probe] == FORMS[binary, probe]
    decoded = parse_args(args[probe], "EM_X86_64")
    assert all(a.readable for a in decoded), decoded


def test_every_new_kind_is_among_the_forms() -> None:
    kinds = {type(a.operand) for text in FORMS.values() for a in parse_args(text, "EM_X86_64")}
    assert {SymMem, TlsMem} <= kinds


@pytest.mark.parametrize("binary", ["tls_O0", "tls_O2", "tls_pie"])
def test_tpoff_is_what_the_program_prints(built: Path, binary: str, tmp_path: Path) -> None:
    truth = tmp_path / "truth"
    subprocess.run([str(built / binary), "1", "0", str(truth)], check=True, timeout=30)
    printed = {line.split()[1]: int(line.split()[2])
               for line in truth.read_text().splitlines() if line.startswith("tpoff ")}
    assert set(printed) == {"tv", "tl", "tc"}
    segment = tls_segment(str(built / binary))
    assert segment is not None
    for name, want in printed.items():
        (sym,) = [s for s in lookup_symbol(str(built / binary), name) if s.type == "STT_TLS"]
        assert x86_64_tpoff(sym.value, segment) == want, (binary, name)


def test_tpoff_rounds_the_block_to_its_alignment() -> None:
    # -O0 build: p_memsz 56, p_align 16: the block is 64 bytes below the thread pointer
    assert x86_64_tpoff(0, TlsSegment(0x3da0, 56, 16)) == -64
    assert x86_64_tpoff(0x30, TlsSegment(0x3da0, 56, 16)) == -16
    assert x86_64_tpoff(4, TlsSegment(0, 8, 0)) == -4


def test_no_tls_segment(built: Path) -> None:
    assert tls_segment(str(built / "indexed_O2")) is None
