"""`planrunner list` and `planrunner doctor` called as functions (cli.main), on the
compiled USDT fixtures of tests/unit/data/sdt_listing/."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sdt_build import build_fixtures, missing_toolchain

from planrunner.cli import main
from planrunner.commands import doctor
from planrunner.commands.list_cmd import split_filter


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    why = missing_toolchain()
    if why:
        pytest.skip(why)
    return build_fixtures(tmp_path_factory.mktemp("sdt"))


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_default_lists_one_line_per_probe(fx: dict[str, str]) -> None:
    code, out, err = cli("list", fx["nopie"])
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"{fx['nopie']} demo:{n}" for n in ("multi", "noargs", "gated")]


def test_several_targets_and_a_filter(fx: dict[str, str]) -> None:
    code, out, _ = cli("list", fx["pie"], fx["lib"], "demo*:[ga][ad]*")
    assert code == 0
    assert out.splitlines() == [f"{fx['pie']} demo:gated", f"{fx['lib']} demolib:add"]


def test_a_plain_trailing_name_filters(fx: dict[str, str]) -> None:
    code, out, _ = cli("list", fx["pie"], "gated")
    assert (code, out) == (0, f"{fx['pie']} demo:gated\n")


def test_verbose_counts_and_semaphore(fx: dict[str, str]) -> None:
    from elftools.elf.elffile import ELFFile

    from planrunner.elf.symbols import lookup_symbol

    [sema] = lookup_symbol(fx["nopie"], "demo_gated_semaphore")
    with open(fx["nopie"], "rb") as fh:  # pyelftools as the oracle for the file offset
        probes = ELFFile(fh).get_section_by_name(".probes")
        sema_offset = sema.value - probes["sh_addr"] + probes["sh_offset"]
    code, out, _ = cli("list", "-v", fx["nopie"])
    assert code == 0
    assert out.splitlines() == [
        f"{fx['nopie']} demo:multi  3 locations, 2 args, no semaphore",
        f"{fx['nopie']} demo:noargs  1 location, 0 args, no semaphore",
        f"{fx['nopie']} demo:gated  1 location, 1 arg, semaphore {sema.value:#x} "
        f"(file offset {sema_offset:#x})",
    ]


def test_very_verbose_shows_locations_and_arguments(fx: dict[str, str]) -> None:
    code, out, _ = cli("list", "-vv", fx["lib"])
    lines = out.splitlines()
    assert code == 0 and lines[0].endswith("demolib:add  1 location, 3 args, no semaphore")
    assert lines[1].startswith("  location 1: pc 0x") and ", file offset 0x" in lines[1]
    assert lines[2:] == ["    arg 1: 8 signed bytes @ %rdi", "    arg 2: 4 signed bytes @ %esi",
                         "    arg 3: 8 signed bytes @ %rax"]


def test_json_document(fx: dict[str, str]) -> None:
    code, out, _ = cli("list", "--format", "json", fx["nopie"], "demo:multi")
    doc = json.loads(out)
    assert code == 0 and len(doc["probes"]) == 1
    probe = doc["probes"][0]
    assert (probe["path"], probe["provider"], probe["name"]) == (fx["nopie"], "demo", "multi")
    assert len(probe["locations"]) == 3 and probe["arg_count"] == 2
    data = Path(fx["nopie"]).read_bytes()
    for loc in probe["locations"]:
        assert loc["file_offset"] == loc["pc"] - 0x400000  # non-PIE: first PT_LOAD at 4 MiB
        assert data[loc["file_offset"]] == 0x90
        assert loc["semaphore"] == loc["semaphore_offset"] == 0
    first = probe["locations"][0]["args"]
    assert first[0]["text"] == "-4@%edi" and first[0]["signed"] and first[0]["size"] == 4
    assert first[1]["text"] == "-8@demo_counter(%rip)"


def test_unknown_target_exits_1_with_hint() -> None:
    code, out, err = cli("list", "no-such-program-xyz")
    assert (code, out) == (1, "")
    assert err.startswith("error: target 'no-such-program-xyz' not found")
    assert "hint: give an absolute path" in err


def test_no_target_is_a_usage_error() -> None:
    code, _, err = cli("list")
    assert code == 2 and "give at least one TARGET, or --pid PID" in err


def test_nothing_matching_says_so(fx: dict[str, str]) -> None:
    code, out, err = cli("list", fx["lib"], "nomatch*")
    assert (code, out) == (0, "")
    assert err == f"planrunner: no USDT probes matching 'nomatch*' in {fx['lib']}\n"


def test_pid_lists_every_mapped_object(fx: dict[str, str]) -> None:
    """A process with the fixture library loaded: --pid alone finds the library's probe."""
    code_src = (f"import ctypes, sys; ctypes.CDLL({fx['lib']!r}); "
                "print('ready', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code_src], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        code, out, _ = cli("list", "--pid", str(proc.pid), "demolib:*")
        assert (code, out) == (0, f"{fx['lib']} demolib:add\n")
        code, out, _ = cli("list", "--pid", str(proc.pid), "sdtdemo")
        assert (code, out) == (0, f"{fx['lib']} demolib:add\n")
    finally:
        proc.communicate("")


@pytest.mark.parametrize(("positionals", "pid", "expected"), [
    (["a"], False, (["a"], None)),
    (["a", "p:*"], False, (["a"], "p:*")),
    (["p:*"], True, ([], "p:*")),
    (["p:*"], False, (["p:*"], None)),
])
def test_split_filter(positionals: list[str], pid: bool,
                      expected: tuple[list[str], str | None]) -> None:
    assert split_filter(positionals, pid) == expected


def test_doctor_lines_and_exit_code() -> None:
    results = [c() for c in doctor.CHECKS]
    code, out, _ = cli("doctor")
    lines = out.splitlines()
    assert len(lines) == len(doctor.CHECKS) == 7
    assert [ln.split()[0] for ln in lines] == ["OK" if r.ok else "MISSING" for r in results]
    assert code == (0 if all(r.ok for r in results) else 3)
    assert lines[0].split()[1] == "root" and (os.geteuid() == 0) == results[0].ok


def test_doctor_checks_report_what_to_do(tmp_path: Path) -> None:
    assert not doctor.check_btf(str(tmp_path / "vmlinux")).ok
    assert "CONFIG_DEBUG_INFO_BTF" in doctor.check_btf(str(tmp_path / "vmlinux")).detail
    assert not doctor.check_ref_ctr(str(tmp_path / "ref_ctr_offset")).ok
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n")
    missing = doctor.check_tracefs(str(mounts))
    assert not missing.ok and "mount -t tracefs" in missing.detail
    mounts.write_text("nodev /sys/kernel/tracing tracefs rw 0 0\n")
    assert doctor.check_tracefs(str(mounts)).detail == "mounted at /sys/kernel/tracing"
    bad_python = doctor.check_bcc(str(tmp_path / "no-python"))
    assert not bad_python.ok


def _tree(path: Path) -> Path:
    (path / "include/linux").mkdir(parents=True)
    (path / "include/linux/kconfig.h").write_text("")
    return path


def test_doctor_names_the_ring_reader_and_needs_libbpf_only_where_it_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANRUNNER_RING", raising=False)
    missing = str(tmp_path / "libnothing.so.0")
    own = doctor.check_ring_reader("x86_64", missing)  # never loads the library there
    assert own.ok and "own" in own.detail
    weak = doctor.check_ring_reader("aarch64", missing)
    assert not weak.ok and "libnothing.so.0" in weak.detail and "libbpfcc" in weak.detail
    monkeypatch.setenv("PLANRUNNER_RING", "libbpf")
    assert not doctor.check_ring_reader("x86_64", missing).ok
    if doctor.check_ring_reader("aarch64").ok:  # the real library, where it is installed
        assert "libbcc_bpf.so.0" in doctor.check_ring_reader("aarch64").detail


def test_doctor_kernel_headers_where_bcc_looks(tmp_path: Path) -> None:
    """The layouts bcc 0.26 compiles against (runtime/headers.py), and only those."""
    moddir = tmp_path / "lib/modules/9.9.9"
    assert not doctor.check_kernel_headers("9.9.9", str(tmp_path)).ok
    moddir.mkdir(parents=True)
    (moddir / "source").symlink_to(_tree(tmp_path / "common"))
    alone = doctor.check_kernel_headers("9.9.9", str(tmp_path))  # bcc ignores it then
    assert not alone.ok and f"no include/linux/kconfig.h in {moddir}/build" in alone.detail
    (moddir / "build").symlink_to(_tree(tmp_path / "amd64"))
    both = doctor.check_kernel_headers("9.9.9", str(tmp_path))  # Debian's split
    assert both.ok and both.detail == str(tmp_path / "common")


def test_doctor_kernel_headers_a_leftover_build_dir_or_kheaders(tmp_path: Path) -> None:
    build = tmp_path / "lib/modules/9.9.9/build"
    build.mkdir(parents=True)  # no headers in it
    assert not doctor.check_kernel_headers("9.9.9", str(tmp_path)).ok
    (tmp_path / "sys/kernel").mkdir(parents=True)
    (tmp_path / "sys/kernel/kheaders.tar.xz").write_bytes(b"")
    found = doctor.check_kernel_headers("9.9.9", str(tmp_path))
    assert found.ok and found.detail.endswith("kheaders.tar.xz (CONFIG_IKHEADERS)")


@pytest.mark.parametrize("layout", ["none", "source-only", "build", "split", "kheaders"])
def test_doctor_and_run_give_one_answer(layout: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, doctor said OK to `source/` alone and to kheaders, and run refused both."""
    from planrunner.errors import BackendUnavailable
    from planrunner.runtime import bcc_backend, headers

    release = os.uname().release
    moddir = tmp_path / "lib/modules" / release
    moddir.mkdir(parents=True)
    if layout in ("source-only", "split"):
        (moddir / "source").symlink_to(_tree(tmp_path / "common"))
    if layout in ("build", "split"):
        (moddir / "build").symlink_to(_tree(tmp_path / "amd64"))
    if layout == "kheaders":
        (tmp_path / "sys/kernel").mkdir(parents=True)
        (tmp_path / "sys/kernel/kheaders.tar.xz").write_bytes(b"")
    real = headers.find_headers
    monkeypatch.setattr(bcc_backend, "find_headers", lambda: real(release, str(tmp_path)))
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    monkeypatch.delenv("BCC_KERNEL_MODULES_SUFFIX", raising=False)
    monkeypatch.setattr(bcc_backend.os, "geteuid", lambda: 0)
    doctor_ok = doctor.check_kernel_headers(release, str(tmp_path)).ok
    try:
        bcc_backend.check_machine()
        run_ok = True
    except BackendUnavailable:
        run_ok = False
    assert doctor_ok == run_ok == (layout in ("build", "split", "kheaders"))


def test_list_does_not_import_heavy_modules() -> None:
    code = ("import sys, io; from planrunner.cli import main; "
            "main(['list', sys.executable], stdout=io.StringIO(), stderr=io.StringIO()); "
            "print(sorted(m for m in ('jinja2', 'jsonschema', 'bcc', 'elftools', 'yaml') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_control_characters_from_a_binary_are_escaped() -> None:
    from planrunner.usdt.listing import name_lines

    assert list(name_lines([("/p", "pr\x1b[2J", "n\x07")])) == ["/p pr\\x1b[2J:n\\x07"]
