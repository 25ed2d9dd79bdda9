"""`-f pprof` without root: the profile.proto writer (planrunner/output/pprof_proto.py)
and the view (output/pprof.py) read back by a protobuf wire-format parser written here
from the protobuf encoding spec (independent of the writer), and by a real consumer,
`go tool pprof -raw` (Debian golang-go; skipped with the reason when absent); the
checks that refuse what pprof cannot hold."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from planrunner.cli import main
from planrunner.commands.pprof_check import check_pprof
from planrunner.errors import PlanError, UsageError
from planrunner.output.pprof import PprofFilesView, PprofOutput, pprof_paths
from planrunner.output.pprof_proto import ProfileBuilder, varint
from planrunner.pipeline import compile_plan
from planrunner.records import AggRow, AggSnapshot, Stack
from planrunner.stacks.frame import Frame
from planrunner.stacks.kallsyms import build_id_from_notes, kernel_build_id
from planrunner.stacks.lines import LineTable
from planrunner.stacks.modules import Mapping

ROOT = Path(__file__).resolve().parents[2]
AGG = "tests/fixtures/elf/bin/agg"


# --- a protobuf wire-format reader (https://protobuf.dev/programming-guides/encoding/) --

def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of one message."""
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield field, wire, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            yield field, wire, data[pos:pos + size]
            pos += size
        else:
            raise AssertionError(f"unexpected wire type {wire} for field {field}")


def _msg(data: bytes) -> dict[int, list[int | bytes]]:
    out: dict[int, list[int | bytes]] = {}
    for field, _wire, value in _fields(data):
        out.setdefault(field, []).append(value)
    return out


def _one(msg: dict[int, list[int | bytes]], field: int) -> int:
    (value,) = msg.get(field, [0])
    assert isinstance(value, int)
    return value


def _packed(msg: dict[int, list[int | bytes]], field: int) -> list[int]:
    out: list[int] = []
    for chunk in msg.get(field, []):
        assert isinstance(chunk, bytes)
        pos = 0
        while pos < len(chunk):
            value, pos = _varint(chunk, pos)
            out.append(value)
    return out


def _sub(msg: dict[int, list[int | bytes]], field: int) -> list[dict[int, list[int | bytes]]]:
    return [_msg(v) for v in msg.get(field, []) if isinstance(v, bytes)]


def read_profile(data: bytes) -> dict[str, object]:
    """profile.proto's Profile as plain values (field numbers from profile.proto)."""
    top = _msg(data)
    strings = [s.decode() for s in top.get(6, []) if isinstance(s, bytes)]
    functions = {_one(f, 1): strings[_one(f, 2)] for f in _sub(top, 5)}
    function_files = {strings[_one(f, 2)]: (strings[_one(f, 4)], _one(f, 5))
                      for f in _sub(top, 5)}
    mappings = {_one(m, 1): (_one(m, 2), _one(m, 3), _one(m, 4), strings[_one(m, 5)],
                             strings[_one(m, 6)], bool(_one(m, 7))) for m in _sub(top, 3)}
    lined = {strings[_one(m, 5)] for m in _sub(top, 3) if _one(m, 8) and _one(m, 9)}
    line_numbers = {}
    locations = {}
    for loc in _sub(top, 4):
        lines = [functions[_one(line, 1)] for line in _sub(loc, 4)]
        locations[_one(loc, 1)] = (_one(loc, 2), _one(loc, 3), lines)
        line_numbers[_one(loc, 3)] = [_one(line, 2) for line in _sub(loc, 4)]
    samples = []
    for smp in _sub(top, 2):
        labels = {strings[_one(lb, 1)]: (strings[_one(lb, 2)] if _one(lb, 2) else _one(lb, 3))
                  for lb in _sub(smp, 3)}
        samples.append((_packed(smp, 1), _packed(smp, 2), labels))
    return {"strings": strings, "functions": functions, "mappings": mappings,
            "function_files": function_files, "lined": lined, "line_numbers": line_numbers,
            "locations": locations, "samples": samples,
            "sample_type": [(strings[_one(v, 1)], strings[_one(v, 2)]) for v in _sub(top, 1)],
            "period_type": [(strings[_one(v, 1)], strings[_one(v, 2)]) for v in _sub(top, 11)],
            "period": _one(top, 12), "time_nanos": _one(top, 9),
            "duration_nanos": _one(top, 10),
            "comments": [strings[i] for i in _packed(top, 13)],
            "default_sample_type": strings[_one(top, 14)]}


# --- the writer ---------------------------------------------------------------------

def test_varint_matches_the_encoding_spec() -> None:
    assert varint(0) == b"\x00"
    assert varint(1) == b"\x01"
    assert varint(150) == b"\x96\x01"  # the spec's example
    assert varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"  # int64 -1: ten bytes
    assert _varint(varint((1 << 64) - 1), 0) == ((1 << 64) - 1, 10)


def test_builder_interns_and_reads_back() -> None:
    prof = ProfileBuilder([("samples", "count")])
    m = prof.mapping(0x1000, 0x2000, 0x0, "/bin/x", "abcd")
    assert prof.mapping(0x1000, 0x2000, 0x0, "/bin/x", "abcd") == m == 1
    f = prof.function("main")
    assert prof.function("main") == f == 1
    loc = prof.location(m, 0x1234, f)
    assert prof.location(m, 0x1234, f) == loc == 1
    unknown = prof.location(m, 0x1300, 0)
    prof.sample([unknown, loc], [7])
    with pytest.raises(ValueError):
        prof.sample([loc], [1, 2])
    got = read_profile(prof.encode())
    assert got["strings"][0] == ""
    assert got["sample_type"] == [("samples", "count")]
    assert got["mappings"] == {1: (0x1000, 0x2000, 0, "/bin/x", "abcd", True)}
    assert got["locations"] == {1: (1, 0x1234, ["main"]), 2: (1, 0x1300, [])}
    assert got["samples"] == [([2, 1], [7], {})]


# --- the view -----------------------------------------------------------------------

EXE = Mapping(0x55550000_1000, 0x55550000_3000, 0x1000, "r-xp", "/opt/app/spin", 0, 0,
              "00112233445566778899aabbccddeeff00112233", 0x55550000_0000)
LIBC = Mapping(0x7F00_0002_8000, 0x7F00_001B_D000, 0x28000, "r-xp", "/lib/libc.so.6",
               0, 0, None, 0x7F00_0000_0000)


def _user(*frames: tuple[int, str | None, Mapping]) -> Stack:
    return Stack("user", tuple(Frame(a, s, 0x10, m.path, m) for a, s, m in frames))


USER_A = _user((0x55550000_1150, "spin_a", EXE), (0x55550000_1260, "main", EXE),
               (0x7F00_0002_A24A, "__libc_start_call_main", LIBC),
               (0x55550000_1091, "_start", EXE))
USER_B = _user((0x55550000_11F0, "spin_b", EXE), (0x55550000_1260, "main", EXE),
               (0x7F00_0002_A24A, "__libc_start_call_main", LIBC),
               (0x55550000_1091, "_start", EXE))
USER_UNKNOWN = _user((0x7F00_0003_0000, None, LIBC), (0x55550000_1091, "_start", EXE))
KERNEL = Stack("kernel", (Frame(0xFFFFFFFF_8224F5F9, "_raw_spin_unlock", 0x19,
                                "[kernel.kallsyms]"),
                          Frame(0xFFFFFFFF_81000130, "entry_SYSCALL_64", 0x30,
                                "[kernel.kallsyms]")))
NO_KERNEL = Stack("kernel", ())
USER_LOST = Stack("user", USER_A.frames[:1], lost=True)  # not unwound past spin_a


def _snap(rows: list[AggRow], start: float = 1000.0, end: float = 1002.5,
          dropped: int = 0) -> AggSnapshot:
    return AggSnapshot("sample", "count", "count", None, ("comm", "kstack", "ustack"),
                       start, end, tuple(rows), dropped)


def _row(comm: str, kstack: Stack, ustack: Stack, count: int) -> AggRow:
    return AggRow((("comm", comm), ("kstack", kstack), ("ustack", ustack)), count=count)


def _write(tmp_path: Path, period_ns: int | None, snaps: list[AggSnapshot]) -> bytes:
    path = tmp_path / "cpu.pb.gz"
    view = PprofFilesView([PprofOutput("sample", str(path), period_ns)], "cpu-profile")
    for snap in snaps:
        view.aggregate(snap)
    view.close()
    view.close()  # twice: written once
    return gzip.decompress(path.read_bytes())


def test_cpu_profile_has_counts_nanoseconds_locations_and_mappings(tmp_path: Path) -> None:
    data = _write(tmp_path, 10_101_010, [
        _snap([_row("spin", NO_KERNEL, USER_A, 30), _row("spin", NO_KERNEL, USER_B, 10)],
              1000.0, 1001.0),
        # a second interval (an `every:` output): summed, and the kernel frames on top
        _snap([_row("spin", NO_KERNEL, USER_A, 3), _row("spin", KERNEL, USER_A, 2),
               _row("spin", NO_KERNEL, USER_UNKNOWN, 1), _row("spin", NO_KERNEL, USER_LOST, 5)],
              1001.0, 1002.5, dropped=4)])
    got = read_profile(data)
    assert got["strings"][0] == ""
    assert got["sample_type"] == [("samples", "count"), ("cpu", "nanoseconds")]
    assert got["period_type"] == [("cpu", "nanoseconds")]
    assert got["period"] == 10_101_010
    assert got["default_sample_type"] == "cpu"
    assert got["time_nanos"] == 1000 * 10**9
    assert got["duration_nanos"] == 2_500_000_000
    assert got["comments"] == ["planrunner plan cpu-profile, output sample",
                               "4 updates lost: map full"]
    locations, mappings = got["locations"], got["mappings"]
    assert isinstance(locations, dict) and isinstance(mappings, dict)

    def stack(ids: list[int]) -> list[tuple[str, int, str]]:
        out = []
        for i in ids:
            mid, address, names = locations[i]
            out.append((names[0] if names else "?", address, mappings[mid][3] if mid else ""))
        return out

    by_stack = {tuple(stack(ids)): (values, labels)
                for ids, values, labels in got["samples"]}  # type: ignore[attr-defined]
    a = [("spin_a", 0x55550000_1150, "/opt/app/spin"), ("main", 0x55550000_1260, "/opt/app/spin"),
         ("__libc_start_call_main", 0x7F00_0002_A24A, "/lib/libc.so.6"),
         ("_start", 0x55550000_1091, "/opt/app/spin")]
    b = [("spin_b", 0x55550000_11F0, "/opt/app/spin"), *a[1:]]
    k = [("_raw_spin_unlock", 0xFFFFFFFF_8224F5F9, "[kernel.kallsyms]"),
         ("entry_SYSCALL_64", 0xFFFFFFFF_81000130, "[kernel.kallsyms]")]
    u = [("?", 0x7F00_0003_0000, "/lib/libc.so.6"), a[-1]]
    assert by_stack == {tuple(a): ([33, 33 * 10_101_010], {"comm": "spin"}),
                        tuple(b): ([10, 10 * 10_101_010], {"comm": "spin"}),
                        tuple(k + a): ([2, 2 * 10_101_010], {"comm": "spin"}),
                        tuple(u): ([1, 10_101_010], {"comm": "spin"}),
                        (a[0], ("[stack lost]", 0, "")): ([5, 5 * 10_101_010],
                                                          {"comm": "spin"})}
    # the main binary first (profile.proto: mapping[0] is the main binary); libc has an
    # unnamed location, so it does not claim has_functions; the kernel's range is made
    # up from the addresses seen
    assert mappings[1] == (EXE.start, EXE.end, 0x1000, "/opt/app/spin",
                           "00112233445566778899aabbccddeeff00112233", True)
    by_path = {m[3]: m for m in mappings.values()}
    assert by_path["/lib/libc.so.6"] == (LIBC.start, LIBC.end, 0x28000, "/lib/libc.so.6",
                                         "", False)
    assert by_path["[kernel.kallsyms]"] == (0xFFFFFFFF_81000130, 0xFFFFFFFF_8224F5FA, 0,
                                            "[kernel.kallsyms]", kernel_build_id(), True)
    assert set(got["functions"].values()) == {  # type: ignore[union-attr]
        "spin_a", "spin_b", "main", "__libc_start_call_main", "_start", "_raw_spin_unlock",
        "entry_SYSCALL_64", "[stack lost]"}


def test_count_of_an_uprobe_has_no_cpu_time(tmp_path: Path) -> None:
    snap = AggSnapshot("calls", "count", "count", None, ("pid", "ustack"), 5.0, 6.0,
                       (AggRow((("pid", 42), ("ustack", USER_A)), count=5),
                        AggRow((("pid", 43), ("ustack", USER_A)), count=0)))
    path = tmp_path / "calls.pb.gz"
    view = PprofFilesView([PprofOutput("calls", str(path), None)], "p")
    view.aggregate(snap)
    view.close()
    got = read_profile(gzip.decompress(path.read_bytes()))
    assert got["sample_type"] == [("samples", "count")]
    assert got["period_type"] == [] and got["period"] == 0
    (sample,) = got["samples"]  # type: ignore[misc]
    assert sample[1:] == ([5], {"pid": 42})  # a number label; the empty row left out


def test_an_output_that_saw_nothing_still_gets_a_profile(tmp_path: Path) -> None:
    got = read_profile(_write(tmp_path, None, []))
    assert got["samples"] == [] and got["strings"][0] == ""
    assert got["sample_type"] == [("samples", "count")]


def test_a_profile_that_cannot_be_written_is_an_error_not_a_traceback(
        tmp_path: Path) -> None:
    full = Path("/dev/full")
    if not full.exists():
        pytest.skip("no /dev/full to stand for a full disk")
    view = PprofFilesView([PprofOutput("sample", str(full), None)], "p")
    view.aggregate(_snap([_row("spin", NO_KERNEL, USER_A, 3)]))
    with pytest.raises(PlanError, match="cannot write the profile /dev/full: No space"):
        view.close()


def test_go_tool_pprof_reads_the_profile(tmp_path: Path) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("no `go` (Debian: apt-get install golang-go; scripts/setup.sh)")
    _write(tmp_path, 10_000_000, [_snap([_row("spin", NO_KERNEL, USER_A, 30),
                                         _row("spin", KERNEL, USER_B, 10)])])
    res = subprocess.run([go, "tool", "pprof", "-raw", str(tmp_path / "cpu.pb.gz")],
                         capture_output=True, text=True, timeout=120,
                         env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
                              "PPROF_BINARY_PATH": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert "PeriodType: cpu nanoseconds" in res.stdout
    assert "Period: 10000000" in res.stdout
    assert "samples/count cpu/nanoseconds[dflt]" in res.stdout
    assert "30  300000000: 1 2 3 4" in res.stdout, res.stdout
    assert "comm:[spin]" in res.stdout
    assert (f"{EXE.start:#x}/{EXE.end:#x}/0x1000 /opt/app/spin "
            "00112233445566778899aabbccddeeff00112233 [FN]") in res.stdout, res.stdout
    assert "M=1 spin_a" in res.stdout and "_raw_spin_unlock" in res.stdout


def test_lines_from_the_dwarf_line_table(tmp_path: Path) -> None:
    """A -g build of fx_spin (non-PIE: link-time address = runtime address): spin_a's
    entry is at its definition's line, its loop at the loop's line; the profile names
    the file and the lines, and the mapping says it has them."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (Debian: apt-get install gcc)")
    source = ROOT / "tests/fixtures/stacks/fx_spin.c"
    binary = tmp_path / "fx_spin"
    subprocess.run([cc, "-O1", "-g", "-no-pie", "-o", str(binary), str(source)], check=True)
    text = source.read_text().splitlines()
    define = next(i for i, t in enumerate(text, 1) if "long long spin_a(" in t)
    loop = next(i for i, t in enumerate(text, 1) if "sink +=" in t and i > define)
    from elftools.elf.elffile import ELFFile

    with open(binary, "rb") as fh:
        symtab = ELFFile(fh).get_section_by_name(".symtab")
        (sym,) = symtab.get_symbol_by_name("spin_a")
        start, size = sym["st_value"], sym["st_size"]
    table = LineTable.load(str(binary))
    file, line = table.lookup(start) or ("", 0)
    assert file.endswith("fx_spin.c") and define <= line <= define + 1, (file, line)
    seen = {table.lookup(a) for a in range(start, start + size)}
    assert (file, loop) in seen, seen
    assert table.lookup(0) is None
    objcopy = shutil.which("objcopy")
    if objcopy:  # without .debug_aranges: every unit is decoded, the same lines
        bare = tmp_path / "fx_spin_no_aranges"
        subprocess.run([objcopy, "--remove-section=.debug_aranges", str(binary), str(bare)],
                       check=True)
        whole = LineTable.load(str(bare))
        assert [whole.lookup(a) for a in range(start, start + size)] == \
            [table.lookup(a) for a in range(start, start + size)]
    assert LineTable.load(str(ROOT / "tests/fixtures/elf/bin/agg")).empty  # -g0

    st = os.stat(binary)
    exe = Mapping(start & ~0xFFF, (start + size + 0xFFF) & ~0xFFF, 0x1000,
                  "r-xp", str(binary), st.st_dev, st.st_ino, None, 0)
    loop_pc = next(a for a in range(start, start + size) if table.lookup(a) == (file, loop))
    stack = Stack("user", (Frame(loop_pc, "spin_a", loop_pc - start, str(binary), exe),))
    path = tmp_path / "p.pb.gz"
    view = PprofFilesView([PprofOutput("s", str(path), None)], "p")
    view.aggregate(AggSnapshot("s", "count", "count", None, ("ustack",), 0.0, 1.0,
                               (AggRow((("ustack", stack),), count=3),)))
    view.close()
    got = read_profile(gzip.decompress(path.read_bytes()))
    assert got["function_files"] == {"spin_a": (file, line)}
    assert got["line_numbers"] == {loop_pc: [loop]}
    assert got["lined"] == {str(binary)}


def test_kernel_build_id_from_its_notes() -> None:
    note = (b"\x04\x00\x00\x00\x14\x00\x00\x00\x03\x00\x00\x00GNU\x00"
            + bytes(range(20)))
    xen = b"\x04\x00\x00\x00\x04\x00\x00\x00\x01\x01\x00\x00Xen\x00abcd"
    assert build_id_from_notes(xen + note) == bytes(range(20)).hex()
    assert build_id_from_notes(xen) == ""
    assert build_id_from_notes(note[:-1]) == ""  # cut short: nothing, not a wrong id
    got = kernel_build_id()
    if not got:
        pytest.skip("/sys/kernel/notes not readable here")
    assert len(got) == 40 and int(got, 16) >= 0
    assert kernel_build_id("[no_such_module_here]") == ""
    assert kernel_build_id("[../../etc]") == ""


# --- files and refusals -------------------------------------------------------------

def test_paths_as_csv_does(tmp_path: Path) -> None:
    assert pprof_paths("cpu.pb.gz", ["sample"]) == {"sample": "cpu.pb.gz"}
    assert pprof_paths("out/prof.pb.gz", ["a", "b c"]) == {
        "a": "out/prof.a.pb.gz", "b c": "out/prof.b_c.pb.gz"}
    assert pprof_paths("prof", ["a", "b"]) == {"a": "prof.a.pb.gz", "b": "prof.b.pb.gz"}
    assert pprof_paths(f"{tmp_path}/", ["a"]) == {"a": f"{tmp_path}/a.pb.gz"}
    assert pprof_paths(str(tmp_path), ["a"]) == {"a": f"{tmp_path}/a.pb.gz"}


def _program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outputs: str):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(ROOT)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"planrunner: 1\nname: t\ntargets:\n  a: {{binary: {AGG}}}\nprobes:\n"
                    "  value: {usdt: a:agg:value}\n  cpu: {profile: {hz: 99}}\n"
                    "  tick: {interval: 10ms}\n"
                    f"outputs:\n{outputs}")
    return compile_plan(str(plan), {})[2]


def test_check_gives_files_and_the_sampling_period(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    program = _program(tmp_path, monkeypatch,
                       "  - count: cpu\n    by: [comm, ustack]\n"
                       "  - count: value\n    by: [kstack]\n"
                       "  - count: tick\n    by: [kstack]\n")
    got = check_pprof(program, str(tmp_path / "p.pb.gz"), ["cpu", "value", "tick"], "t")
    # a timer on one CPU (interval) is no CPU time: counts only
    assert got == [PprofOutput("cpu", str(tmp_path / "p.cpu.pb.gz"), 10_101_010),
                   PprofOutput("value", str(tmp_path / "p.value.pb.gz"), None),
                   PprofOutput("tick", str(tmp_path / "p.tick.pb.gz"), None)]


@pytest.mark.parametrize("outputs,words", [
    ("  - count: value\n    by: [pid]\n", ["output 'value'", "not keyed by a stack"]),
    ("  - sum: value\n    value: arg1\n    by: [ustack]\n", ["output 'value'", "`sum`"]),
    ("  - print: value\n    fields: [pid]\n", ["print outputs (value)"]),
])
def test_check_refuses_what_is_not_a_stack_count(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 outputs: str, words: list[str]) -> None:
    program = _program(tmp_path, monkeypatch, outputs)
    names = [a.name for a in program.aggregates]
    with pytest.raises(UsageError) as err:
        check_pprof(program, str(tmp_path / "p.pb.gz"), names, "t")
    for word in [*words, "plan 't'"]:
        assert word in str(err.value)
    assert "-f folded" in " ".join(err.value.diagnostics[0].hints)
    assert not list(tmp_path.glob("*.pb.gz"))


@pytest.mark.parametrize("output", [[], ["-o", "-"]])
def test_run_refuses_pprof_to_stdout(output: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", "cpu-profile", "-f", "pprof", "-d", "1", *output], out, err)
    assert code == 2
    assert "-f pprof writes a binary file" in err.getvalue()
    assert "-o FILE.pb.gz" in err.getvalue()
    assert "Traceback" not in err.getvalue() and out.getvalue() == ""
