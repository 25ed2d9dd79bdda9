"""A 32-bit (ELFCLASS32, EM_386) target is refused at resolve, located at the target's
`binary:` value (issue 15 item 17); before, `validate` said "ok" and `run`/`render`
went on with 64-bit registers and operands.

The target is a real i386 program assembled with binutils (`as --32`, `ld -m elf_i386`,
no multilib C library needed); without them, a minimal ELF32 header written here.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ASM = """
.globl _start, work
.text
work:
    movl $42, %eax
    ret
_start:
    call work
    movl $1, %eax
    xorl %ebx, %ebx
    int $0x80
"""


def elf32(tmp_path: Path) -> Path:
    out = tmp_path / "prog32"
    if shutil.which("as") and shutil.which("ld"):
        (tmp_path / "prog32.s").write_text(ASM)
        obj = tmp_path / "prog32.o"
        built = subprocess.run(["as", "--32", str(tmp_path / "prog32.s"), "-o", str(obj)],
                               capture_output=True).returncode == 0 and subprocess.run(
            ["ld", "-m", "elf_i386", str(obj), "-o", str(out)],
            capture_output=True).returncode == 0
        if built:
            return out
    # e_ident (ELFCLASS32, little endian), ET_EXEC, EM_386, no program or section headers
    ident = b"\x7fELF" + bytes([1, 1, 1]) + bytes(9)
    out.write_bytes(ident + struct.pack("<HHIIIIIHHHHHH", 2, 3, 1, 0x8049000, 0, 0, 0, 52,
                                        32, 0, 40, 0, 0))
    return out


@pytest.mark.parametrize("command", ["validate", "render"])
def test_32_bit_target_is_refused_at_its_binary_value(tmp_path: Path, command: str) -> None:
    binary = elf32(tmp_path)
    plan = tmp_path / "p32.yaml"
    plan.write_text(f"planrunner: 1\nname: p32\ntargets:\n  t: {{binary: {binary}}}\n"
                    "probes:\n  w: {uprobe: \"t:work\"}\noutputs:\n  - count: w\n")
    proc = subprocess.run([sys.executable, "-m", "planrunner", command, str(plan)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith(
        f"{plan}:4:15: error: {binary} is a 32-bit ELF file (EM_386): planrunner traces "
        "64-bit programs only (x86-64, aarch64)\n"), proc.stderr
    assert "Traceback" not in proc.stderr
