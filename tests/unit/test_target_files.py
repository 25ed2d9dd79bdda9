"""A target that cannot be traced here is refused at resolve, located at the plan's
`binary:` value, with the true reason (issue 23 items 9 and 10).

Before: a copy of an x86-64 fixture with e_machine patched to EM_386 or EM_AARCH64 passed
`validate`, then `run` failed with "ValueError: no operand lowering for EM_386" or a
clang error; non-ELF, truncated-ELF and ET_REL targets had no file:line:col; /dev/null
as a target said "not found" though it exists.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from io import StringIO
from pathlib import Path

import pytest

from planrunner.cli import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/elf/build/simple_pie"
E_MACHINE = 18  # offset of e_machine in the ELF header
FOREIGN = {"x86_64": ("EM_AARCH64", 183)}.get(os.uname().machine, ("EM_X86_64", 62))


def plan_for(tmp_path: Path, binary: str) -> tuple[Path, str]:
    """A plan probing `binary`, and the file:line:col of its `binary:` value."""
    plan = tmp_path / "t.yaml"
    plan.write_text(f"planrunner: 1\nname: t\ntargets:\n  t: {{binary: {binary}}}\n"
                    "probes:\n  w: {uprobe: \"t:main\"}\noutputs:\n  - count: w\n")
    return plan, f"{plan}:4:15"


def refused(tmp_path: Path, binary: str, command: str = "validate") -> str:
    """The first line of stderr of `command` on a plan probing `binary` (exit 1, located
    at its `binary:` value)."""
    plan, where = plan_for(tmp_path, binary)
    err = StringIO()
    assert main([command, str(plan)], StringIO(), err) == 1, err.getvalue()
    first = err.getvalue().splitlines()[0]
    assert first.startswith(f"{where}: error: "), err.getvalue()
    return first.removeprefix(f"{where}: error: ")


def patched(tmp_path: Path, machine: int) -> str:
    data = bytearray(FIXTURE.read_bytes())
    struct.pack_into("<H", data, E_MACHINE, machine)
    out = tmp_path / f"simple_pie.em{machine}"
    out.write_bytes(data)
    out.chmod(0o755)
    return str(out)


@pytest.mark.parametrize("command", ["validate", "render"])
@pytest.mark.parametrize(("name", "number"), [("EM_386", 3), FOREIGN])
def test_foreign_machine_in_an_elf64_header_is_refused(tmp_path: Path, command: str,
                                                        name: str, number: int) -> None:
    binary = patched(tmp_path, number)
    host = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}[os.uname().machine]
    assert refused(tmp_path, binary, command) == (
        f"{binary} is an ELF file for {name}, but this machine ({os.uname().machine}) runs "
        f"{host} programs: its code never runs here, so it cannot be traced")


def test_the_unpatched_fixture_still_validates(tmp_path: Path) -> None:
    plan, _ = plan_for(tmp_path, str(FIXTURE))
    out = StringIO()
    assert main(["validate", str(plan)], out, StringIO()) == 0
    assert out.getvalue().startswith(f"{plan}: ok\n")


@pytest.mark.parametrize(("size", "reason"), [
    (10, "it ends after 10 bytes, in its ELF header"),
    (64, "its headers say 2112 bytes at offset 0x3778, past its end"),
])
def test_truncated_elf_is_refused_located(tmp_path: Path, size: int, reason: str) -> None:
    data = FIXTURE.read_bytes()
    # the reason of the 64-byte copy is the fixture's section header table
    shoff, shentsize, shnum = struct.unpack_from("<Q", data, 40)[0], *struct.unpack_from(
        "<HH", data, 58)
    if size == 64 and (shoff, shentsize * shnum) != (0x3778, 2112):
        pytest.skip(f"the fixture was rebuilt: its section headers are {shentsize * shnum} "
                    f"bytes at {shoff:#x}")
    binary = tmp_path / "cut"
    binary.write_bytes(data[:size])
    assert refused(tmp_path, str(binary)) == (
        f"{binary} is a truncated or corrupt ELF file: {reason}")


def test_object_file_is_refused_located(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: no object file to make")
    (tmp_path / "o.c").write_text("int f(void) { return 1; }\n")
    obj = tmp_path / "o.o"
    subprocess.run(["gcc", "-c", str(tmp_path / "o.c"), "-o", str(obj)], check=True)
    assert refused(tmp_path, str(obj)) == (
        f"{obj} is an object file (ET_REL), not an executable or shared library")


@pytest.mark.parametrize("content", [b"", b"#!/bin/sh\necho hi\n"])
def test_empty_or_script_target_is_refused_located(tmp_path: Path, content: bytes) -> None:
    binary = tmp_path / "script"
    binary.write_bytes(content)
    assert refused(tmp_path, str(binary)) == (
        f"{binary} is {'an empty file' if not content else 'not an ELF file'}")


def test_dev_null_target_is_a_device_not_missing(tmp_path: Path) -> None:
    assert refused(tmp_path, "/dev/null") == "target '/dev/null' is a character device, not a file"


def test_run_refuses_a_foreign_machine_before_compiling(tmp_path: Path) -> None:
    """`run` failed in render ("no operand lowering for EM_386") or in clang; now it
    stops at resolve, as validate does (nothing compiled, nothing attached)."""
    import sys

    if os.geteuid() != 0:
        pytest.skip("run needs root (it registers itself before compiling)")
    binary = patched(tmp_path, 3)
    plan, where = plan_for(tmp_path, binary)
    proc = subprocess.run([sys.executable, "-m", "planrunner", "run", "--no-cache",
                           str(plan)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(f"{where}: error: {binary} is an ELF file for EM_386"), \
        proc.stderr
