"""elf/reader.py: headers, segments, build ids and notes against pyelftools and readelf;
vaddr_to_offset; the .stapsdt.base correction on a patched copy; bounded I/O."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from sdt_build import build_fixtures, missing_toolchain

from planrunner.elf import reader
from planrunner.elf.reader import BinaryInfo, Segment, open_binary, read_notes, vaddr_to_offset
from planrunner.errors import ResolveError

PYTHON = "/usr/bin/python3.11"
POSTGRES = "/usr/lib/postgresql/15/bin/postgres"
JVM = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    why = missing_toolchain()
    if why:
        pytest.skip(why)
    return build_fixtures(tmp_path_factory.mktemp("sdt"))


def real(path: str) -> str:
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")
    return path


def pyelftools_view(path: str) -> tuple[str, str, list[tuple[int, int, int, int]]]:
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        segs = [(s["p_vaddr"], s["p_memsz"], s["p_offset"], s["p_flags"])
                for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        return elf["e_machine"], elf["e_type"], segs


def readelf_build_id(path: str) -> str | None:
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "Build ID:" in line:
            return line.split("Build ID:")[1].strip()
    return None


@pytest.mark.parametrize("name", ["pie", "nopie", "lib"])
def test_headers_match_pyelftools_on_fixtures(fixtures: dict[str, str], name: str) -> None:
    check_headers(fixtures[name])


@pytest.mark.parametrize("path", [PYTHON, POSTGRES, JVM])
def test_headers_match_pyelftools_on_real_binaries(path: str) -> None:
    check_headers(real(path))


def check_headers(path: str) -> None:
    info = open_binary(path)
    machine, etype, segs = pyelftools_view(path)
    assert (info.machine, info.elf_type) == (machine, etype)
    assert [(s.vaddr, s.memsz, s.offset, s.flags) for s in info.segments] == segs
    assert info.build_id == readelf_build_id(path)
    assert (info.elfclass, info.little_endian) == (2, True)
    st = os.stat(path)
    assert (info.st_dev, info.st_ino) == (st.st_dev, st.st_ino)


def test_elf_types(fixtures: dict[str, str]) -> None:
    assert open_binary(fixtures["nopie"]).elf_type == "ET_EXEC"
    assert open_binary(fixtures["pie"]).elf_type == "ET_DYN"
    assert open_binary(fixtures["lib"]).elf_type == "ET_DYN"


def test_notes_match_readelf(fixtures: dict[str, str]) -> None:
    out = subprocess.run(["readelf", "-n", fixtures["nopie"]], capture_output=True,
                         text=True, check=True).stdout
    locations = [int(line.split("Location:")[1].split(",")[0], 16)
                 for line in out.splitlines() if "Location:" in line]
    notes = read_notes(fixtures["nopie"])
    assert [n.pc for n in notes] == locations
    assert [(n.provider, n.name) for n in notes] == [
        ("demo", "multi")] * 3 + [("demo", "noargs"), ("demo", "gated")]
    assert notes[3].args == ""
    assert notes[4].semaphore != 0


SEGS = (Segment(0x400000, 0x2000, 0x0, 0x2000, 5), Segment(0x403e10, 0x300, 0x2e10, 0x200, 6))


@pytest.mark.parametrize(("vaddr", "offset"), [
    (0x400000, 0x0), (0x401126, 0x1126), (0x403e10, 0x2e10), (0x404010, 0x3010),
])
def test_vaddr_to_offset_uses_the_holding_segment(vaddr: int, offset: int) -> None:
    info = BinaryInfo("/x", "EM_X86_64", 2, True, "ET_EXEC", None, 0, 0, SEGS)
    assert vaddr_to_offset(info, vaddr) == offset


@pytest.mark.parametrize("vaddr", [0x3FFFFF, 0x402000, 0x404110])
def test_vaddr_outside_every_segment_is_an_error(vaddr: int) -> None:
    info = BinaryInfo("/x", "EM_X86_64", 2, True, "ET_EXEC", None, 0, 0, SEGS)
    with pytest.raises(ResolveError, match="no loadable segment"):
        vaddr_to_offset(info, vaddr)


def test_vaddr_to_offset_on_a_non_pie_file_differs_from_vaddr(fixtures: dict[str, str]) -> None:
    path = fixtures["nopie"]
    for n in read_notes(path):
        off = vaddr_to_offset(path, n.pc)
        assert off != n.pc
        assert Path(path).read_bytes()[off] == 0x90  # the probe's NOP


def test_stapsdt_base_delta_moves_pc_and_semaphore(fixtures: dict[str, str],
                                                   tmp_path: Path) -> None:
    """Pretend the file was prelinked: lower every note's recorded base by 0x1000 in a
    copy; the reader must move pc and semaphore up by the same 0x1000."""
    original = read_notes(fixtures["nopie"])
    data = bytearray(Path(fixtures["nopie"]).read_bytes())
    for n in original:
        needle = struct.pack("<QQQ", n.pc, n.base, n.semaphore)
        at = data.find(needle)
        assert at > 0
        data[at:at + 24] = struct.pack("<QQQ", n.pc, n.base - 0x1000, n.semaphore)
    copy = tmp_path / "prelinked"
    copy.write_bytes(bytes(data))
    moved = read_notes(str(copy))
    assert [m.pc for m in moved] == [n.pc + 0x1000 for n in original]
    assert [m.semaphore for m in moved] == [n.semaphore + 0x1000 if n.semaphore else 0
                                            for n in original]


def test_no_stapsdt_base_section_keeps_addresses(tmp_path: Path,
                                                 fixtures: dict[str, str]) -> None:
    if shutil.which("objcopy") is None:
        pytest.skip("objcopy is not installed")
    copy = tmp_path / "nobase"
    subprocess.run(["objcopy", "--remove-section=.stapsdt.base", fixtures["nopie"],
                    str(copy)], check=True)
    assert [n.pc for n in read_notes(str(copy))] == [n.pc for n in read_notes(fixtures["nopie"])]


def test_a_big_library_is_read_in_small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    path = real(JVM)
    reader.clear_cache()
    read: list[int] = []
    real_pread = os.pread

    def counting(fd: int, n: int, off: int) -> bytes:
        read.append(n)
        return real_pread(fd, n, off)

    monkeypatch.setattr(reader.os, "pread", counting)
    assert len(read_notes(path)) > 500
    assert sum(read) < 256 * 1024 < os.path.getsize(path)


def test_results_are_cached_until_the_file_changes(tmp_path: Path,
                                                   fixtures: dict[str, str]) -> None:
    copy = tmp_path / "prog"
    shutil.copy(fixtures["pie"], copy)
    first = read_notes(str(copy))
    assert read_notes(str(copy)) is first
    os.utime(copy, ns=(1, 1))
    again = read_notes(str(copy))
    assert again == first and again is not first


@pytest.mark.parametrize(("content", "message"), [
    (b"#!/bin/sh\necho hi\n", "is not an ELF file"),
    (b"\x7fELF\x02\x01\x01" + b"\0" * 9 + b"\x02\x00", "truncated or corrupt ELF"),
])
def test_non_elf_files_are_resolve_errors(tmp_path: Path, content: bytes,
                                          message: str) -> None:
    f = tmp_path / "f"
    f.write_bytes(content)
    with pytest.raises(ResolveError, match=message):
        open_binary(str(f))


def test_object_files_are_refused(tmp_path: Path, fixtures: dict[str, str]) -> None:
    obj = Path(fixtures["nopie"]).parent / "gated-nopie.o"
    with pytest.raises(ResolveError, match="not an executable or shared library"):
        open_binary(str(obj))


def test_missing_file_is_a_resolve_error(tmp_path: Path) -> None:
    with pytest.raises(ResolveError, match="No such file"):
        open_binary(str(tmp_path / "absent"))
