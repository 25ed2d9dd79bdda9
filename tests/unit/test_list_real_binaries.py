"""Listing real programs (no root needed): every note readelf shows, the same probes and
location counts through `planrunner list`, and a NOP at every computed file offset.
Each binary is skipped, with the reason printed, where it is not installed."""

from __future__ import annotations

import glob
import io
import json
import os
import subprocess

import pytest

from planrunner.cli import main
from planrunner.elf.reader import open_binary, read_notes
from planrunner.usdt.probes import read_probes


def _jvm() -> str:
    found = sorted(glob.glob("/usr/lib/jvm/*17*/lib/server/libjvm.so")) or \
        sorted(glob.glob("/usr/lib/jvm/*/lib/server/libjvm.so"))
    return os.path.realpath(found[0]) if found else "/usr/lib/jvm/(none)/lib/server/libjvm.so"


BINARIES = {
    "postgres": "/usr/lib/postgresql/15/bin/postgres",
    "python3.11": "/usr/bin/python3.11",
    "libjvm": _jvm(),
}


@pytest.fixture(params=sorted(BINARIES))
def binary(request: pytest.FixtureRequest) -> str:
    path = BINARIES[request.param]
    if not os.path.exists(path):
        pytest.skip(f"{request.param}: {path} is not installed")
    return path


def readelf_notes(path: str) -> list[tuple[str, str, int, int, str]]:
    """(provider, name, location, semaphore, arguments) for each stapsdt note, in order."""
    out = subprocess.run(["readelf", "-n", "--wide", path], capture_output=True, text=True,
                         check=True).stdout
    notes, cur = [], {}
    for line in out.splitlines():
        key, _, value = line.strip().partition(": ")
        if "Provider: " in line:  # with --wide, on the same line as the note header
            cur = {"provider": line.split("Provider: ", 1)[1].strip()}
        elif key == "Name" and cur:
            cur["name"] = value
        elif key.startswith("Location") and cur:
            fields = dict(f.strip().split(": ") for f in line.strip().split(","))
            cur["pc"] = int(fields["Location"], 16)
            cur["sema"] = int(fields["Semaphore"], 16)
        elif line.strip().startswith("Arguments:") and cur:
            args = line.strip()[len("Arguments:"):].strip()
            notes.append((cur["provider"], cur["name"], cur["pc"], cur["sema"], args))
            cur = {}
    return notes


def test_notes_equal_readelf(binary: str) -> None:
    ours = [(n.provider, n.name, n.pc, n.semaphore, n.args) for n in read_notes(binary)]
    theirs = readelf_notes(binary)
    assert len(theirs) > 0
    assert ours == theirs


def test_probe_and_location_counts(binary: str) -> None:
    theirs = readelf_notes(binary)
    probes = read_probes(binary)
    assert [p.qualified for p in probes] == list(dict.fromkeys(f"{p}:{n}" for p, n, *_ in theirs))
    assert sum(len(p.sites) for p in probes) == len(theirs)


def test_every_site_is_a_nop_at_its_file_offset(binary: str) -> None:
    info = open_binary(binary)
    with open(binary, "rb") as fh:
        for probe in read_probes(binary):
            for site in probe.sites:
                fh.seek(site.file_offset)
                assert fh.read(1) == b"\x90", f"{probe.qualified} at {site.pc:#x}"
                if info.elf_type == "ET_EXEC":
                    assert site.file_offset != site.pc


def test_semaphores_are_in_the_probes_section(binary: str) -> None:
    from elftools.elf.elffile import ELFFile

    with open(binary, "rb") as fh:
        sec = ELFFile(fh).get_section_by_name(".probes")
        bounds = (sec["sh_addr"], sec["sh_offset"], sec["sh_size"]) if sec else None
    for probe in read_probes(binary):
        for site in probe.sites:
            if site.semaphore == 0:
                assert site.semaphore_offset == 0
                continue
            assert bounds is not None
            addr, offset, size = bounds
            assert addr <= site.semaphore < addr + size
            assert site.semaphore_offset == site.semaphore - addr + offset


def test_cli_listing_matches_readelf(binary: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["list", binary], stdout=out, stderr=err) == 0
    names = list(dict.fromkeys(f"{p}:{n}" for p, n, *_ in readelf_notes(binary)))
    assert out.getvalue().splitlines() == [f"{binary} {q}" for q in names]
    out = io.StringIO()
    assert main(["list", "--format", "json", binary], stdout=out, stderr=err) == 0
    doc = json.loads(out.getvalue())
    assert sum(len(p["locations"]) for p in doc["probes"]) == len(readelf_notes(binary))


def test_python_is_a_non_pie_executable() -> None:
    path = BINARIES["python3.11"]
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")
    if open_binary(path).elf_type != "ET_EXEC":
        pytest.skip(f"{path} is built as PIE here")
    site = read_probes(path)[0].sites[0]
    assert site.file_offset == site.pc - 0x400000
