"""JIT frames (issue 26 item 2): perf maps read incrementally and bounded, the walk
through JIT code by frame pointers (CPython trampolines by their fixed step) and back
into CFI, and JIT frames in every format (text, JSON, folded, flame graph, pprof)."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest

from planrunner.output.pprof import encode_profile
from planrunner.stacks import perfmap, unwind, unwind_dwarf
from planrunner.stacks.capture import X86_64, StackWindow, UserRegs, UserStackCapture
from planrunner.stacks.cfi import CfaRow
from planrunner.stacks.flamegraph import _colour
from planrunner.stacks.formats import fold_name, frame_dict, text_line
from planrunner.stacks.frame import Frame
from planrunner.stacks.modules import Mapping, ProcessModules
from planrunner.stacks.perfmap import JitSymbol, PerfMap, PerfMaps, parse_line
from planrunner.stacks.symbolize import Symbolizer
from tests.unit.test_output_pprof import read_profile

# --- the perf map --------------------------------------------------------------------


def test_a_line_is_start_size_and_the_rest_as_its_name() -> None:
    assert parse_line(b"7f316ff86e00 380 JS:*work /app/x.js:6:14\n") == \
        JitSymbol(0x7F316FF86E00, 0x380, "JS:*work /app/x.js:6:14")
    assert parse_line(b"0x1000 0x20 LambdaForm$MH.invoke(Object)\n") == \
        JitSymbol(0x1000, 0x20, "LambdaForm$MH.invoke(Object)")
    for bad in (b"", b"1000 20\n", b"xyz 20 f\n", b"1000 0 empty\n", b"1000 zz f\n"):
        assert parse_line(bad) is None, bad


def _map(tmp_path: Path, text: str, min_reread: float = 0.0) -> tuple[Path, PerfMap]:
    path = tmp_path / "perf-1.map"
    path.write_text(text)
    pmap = PerfMap.open(str(path), min_reread)
    assert pmap is not None
    return path, pmap


def test_lookup_finds_the_symbol_covering_an_address(tmp_path: Path) -> None:
    _, pmap = _map(tmp_path, "3000 100 c\n1000 100 a\n2000 80 b\n")
    assert pmap.find(0x1000) == JitSymbol(0x1000, 0x100, "a")
    assert pmap.find(0x10FF) == JitSymbol(0x1000, 0x100, "a")
    assert pmap.find(0x2050) == JitSymbol(0x2000, 0x80, "b")
    assert pmap.find(0x3000) is not None and pmap.find(0x3000).name == "c"  # type: ignore[union-attr]
    for miss in (0xFFF, 0x1100, 0x2080, 0x3100):
        assert pmap.find(miss) is None, hex(miss)


def test_a_region_compiled_again_is_named_by_its_newest_line(tmp_path: Path) -> None:
    _, pmap = _map(tmp_path, "1000 200 old\n1000 100 new\n1080 40 newer\n")
    assert pmap.find(0x1010) == JitSymbol(0x1000, 0x100, "new")
    assert pmap.find(0x1090) == JitSymbol(0x1080, 0x40, "newer")
    assert pmap.find(0x1150) == JitSymbol(0x1000, 0x200, "old")  # only the old covers it


def test_code_placed_over_freed_code_names_the_events_after_its_line(
        tmp_path: Path) -> None:
    # a JIT frees code and places other code at its address: two lines cover it, the
    # newest written before the event names it, though the freed code's line, read
    # before, still covers it (no miss to make the file be read again)
    path, pmap = _map(tmp_path, "1000 100 freed\n", min_reread=3600)
    assert pmap.find(0x1010, time.monotonic_ns()) == JitSymbol(0x1000, 0x100, "freed")
    with path.open("a") as fh:
        fh.write("1000 80 placed-since\n")
    event = time.monotonic_ns()
    assert pmap.find(0x1010) == JitSymbol(0x1000, 0x100, "freed")  # no time: as last read
    assert pmap.find(0x1010, event) == JitSymbol(0x1000, 0x80, "placed-since")
    assert pmap.find(0x1090, event) == JitSymbol(0x1000, 0x100, "freed")  # past its end
    with path.open("a") as fh:  # after the event and after the read it made
        fh.write("1000 40 placed-later\n")
    assert pmap.find(0x1010, event) == JitSymbol(0x1000, 0x80, "placed-since")
    assert pmap.lines == 2  # one read for the event's lookups, not one per lookup
    assert pmap.find(0x1010, time.monotonic_ns()) == JitSymbol(0x1000, 0x40, "placed-later")


def test_an_address_not_found_rereads_what_the_jit_appended(tmp_path: Path) -> None:
    path, pmap = _map(tmp_path, "1000 100 a\n2000 10")  # the JIT is writing line 2
    assert len(pmap) == 1 and pmap.find(0x2000) is None  # a partial line is not read
    with path.open("a") as fh:
        fh.write("0 b\n5000 10 c\n")
    assert pmap.find(0x5008) == JitSymbol(0x5000, 0x10, "c")
    assert pmap.find(0x2000) == JitSymbol(0x2000, 0x100, "b")
    assert pmap.offset == path.stat().st_size and pmap.lines == 3


def test_a_large_map_takes_appended_lines_without_losing_the_newest(
        tmp_path: Path) -> None:
    # 3000 lines are sorted once; lines appended later are kept apart until they are
    # many, and a region compiled again among them still wins over its older line
    path, pmap = _map(tmp_path, "".join(f"{0x1000 + 0x100 * i:x} 100 f{i}\n"
                                        for i in range(3000)))
    assert pmap.find(0x1000 + 0x100 * 2999 + 5) == JitSymbol(0x1000 + 0x100 * 2999, 0x100,
                                                            "f2999")
    with path.open("a") as fh:
        fh.write("1200 80 f2-again\n")
        fh.write("".join(f"{0x900000 + 0x10 * i:x} 10 g{i}\n" for i in range(500)))
    assert pmap.find(0x900000 + 0x10 * 499) == JitSymbol(0x900000 + 0x10 * 499, 0x10, "g499")
    assert pmap.find(0x1210) == JitSymbol(0x1200, 0x80, "f2-again")
    assert pmap.find(0x1290) == JitSymbol(0x1200, 0x100, "f2")  # past the new one's end
    assert pmap.find(0x1310) == JitSymbol(0x1300, 0x100, "f3")
    with path.open("a") as fh:  # enough to merge: the answers stay the same
        fh.write("".join(f"{0xA00000 + 0x10 * i:x} 10 h{i}\n" for i in range(2000)))
    assert pmap.find(0xA00000) == JitSymbol(0xA00000, 0x10, "h0")
    assert pmap.find(0x1210) == JitSymbol(0x1200, 0x80, "f2-again")
    assert len(pmap) == 5501


def test_a_map_written_again_from_the_start_is_read_anew(tmp_path: Path) -> None:
    # jcmd PID Compiler.perfmap writes the whole map each time: freed code goes away
    path, pmap = _map(tmp_path, "1000 100 a\n2000 100 freed\n")
    assert pmap.find(0x2010) == JitSymbol(0x2000, 0x100, "freed")
    path.write_text("1000 100 a\n3000 100 compiled-since\n4000 100 and-more\n")
    assert pmap.find(0x4010) == JitSymbol(0x4000, 0x100, "and-more")
    assert pmap.find(0x2010) is None and pmap.find(0x1010) == JitSymbol(0x1000, 0x100, "a")
    assert pmap.lines == 3
    path.write_text("5000 10 shorter\n")
    assert pmap.find(0x5000) == JitSymbol(0x5000, 0x10, "shorter") and len(pmap) == 1


def test_rereads_are_rate_limited(tmp_path: Path) -> None:
    path, pmap = _map(tmp_path, "1000 100 a\n", min_reread=3600)
    with path.open("a") as fh:
        fh.write("2000 10 b\n")
    assert pmap.find(0x2000) is None  # read less than min_reread ago
    assert pmap.reread() and pmap.find(0x2000) == JitSymbol(0x2000, 0x10, "b")


def test_a_map_is_bounded_in_lines_bytes_and_line_length(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perfmap, "MAX_LINES", 3)
    _, pmap = _map(tmp_path, "".join(f"{0x1000 * i:x} 10 f{i}\n" for i in range(1, 10)))
    assert len(pmap) == 3 and pmap.truncated and pmap.find(0x4000) is None
    assert pmap.find(0x3000) == JitSymbol(0x3000, 0x10, "f3")

    monkeypatch.setattr(perfmap, "MAX_LINES", 1_000_000)
    monkeypatch.setattr(perfmap, "MAX_BYTES", 30)
    _, pmap = _map(tmp_path, "1000 10 a\n2000 10 b\n3000 10 c\n4000 10 d\n")
    assert len(pmap) == 3 and pmap.offset == 30 and pmap.truncated

    monkeypatch.setattr(perfmap, "MAX_BYTES", 64 << 20)
    monkeypatch.setattr(perfmap, "MAX_LINE", 40)
    _, pmap = _map(tmp_path, "1000 10 a\n2000 10 " + "x" * 100 + "\n3000 10 c\n")
    assert [pmap.find(a) for a in (0x1000, 0x2000, 0x3000)] == \
        [JitSymbol(0x1000, 0x10, "a"), None, JitSymbol(0x3000, 0x10, "c")]
    monkeypatch.setattr(perfmap, "MAX_NAME", 4)
    _, pmap = _map(tmp_path, "1000 10 abcdefgh\n")
    assert pmap.find(0x1000) == JitSymbol(0x1000, 0x10, "abcd")


def test_a_process_map_is_found_by_its_namespace_pid_and_kept_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid = os.getpid()
    assert perfmap.namespace_pid(pid) == pid  # tests run in one pid namespace
    assert perfmap.perf_map_path(pid) == f"/proc/{pid}/root/tmp/perf-{pid}.map"
    path = tmp_path / "perf.map"
    path.write_text("1000 100 a\n")
    monkeypatch.setattr(perfmap, "perf_map_path", lambda p: str(path) if p == pid else None)
    maps = PerfMaps(min_reread=0)
    assert maps.bind(pid).find(0x1010) == JitSymbol(0x1000, 0x100, "a")
    path.unlink()  # still read through the open file (a process gone, its /tmp too)
    assert maps.find(pid, 0x1010) == JitSymbol(0x1000, 0x100, "a")
    maps.close()


def test_the_bound_map_of_an_event_is_read_up_to_its_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid = os.getpid()
    path = tmp_path / "perf.map"
    path.write_text("1000 100 freed\n")
    monkeypatch.setattr(perfmap, "perf_map_path", lambda p: str(path) if p == pid else None)
    maps = PerfMaps(min_reread=3600)
    assert maps.bind(pid).find(0x1010) == JitSymbol(0x1000, 0x100, "freed")
    with path.open("a") as fh:
        fh.write("1000 100 placed-since\n")
    assert maps.bind(pid).find(0x1010) == JitSymbol(0x1000, 0x100, "freed")
    assert maps.bind(pid, time.monotonic_ns()).find(0x1010) == \
        JitSymbol(0x1000, 0x100, "placed-since")
    maps.close()


def test_a_stale_map_and_a_reused_pid_are_not_trusted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid = os.getpid()
    path = tmp_path / "perf.map"
    path.write_text("1000 100 earlier\n")
    os.utime(path, (0, 0))  # written long before this process started
    monkeypatch.setattr(perfmap, "perf_map_path", lambda p: str(path))
    maps = PerfMaps(min_reread=0)
    assert maps.find(pid, 0x1010) is None
    path.write_text("1000 100 mine\n")  # now the process writes its own
    assert maps.find(pid, 0x1010) == JitSymbol(0x1000, 0x100, "mine")
    # the pid names another process now (another start time): its map is read anew
    real = perfmap.process_start_time(pid)
    assert real is not None
    monkeypatch.setattr(perfmap, "process_start_time", lambda p: real + 1)
    path.write_text("1000 100 other\n")
    assert maps.find(pid, 0x1010) == JitSymbol(0x1000, 0x100, "other")
    maps.close()


# --- unwinding through JIT code -------------------------------------------------------

SP = 0x7FFF0000
NATIVE = Mapping(0x400000, 0x500000, 0, "r-xp", "/fake/bin", 0, 1, "ab" * 20, 0)
ANON = Mapping(0x7F0000000000, 0x7F0000100000, 0, "rwxp", "", 0, 0, None, None)
JIT_A, JIT_B = 0x7F0000001234, 0x7F0000002345
LEAF, CALLER, START = 0x401000, 0x402000, 0x403000

# native CFI by function: the leaf has no frame (CFA = rsp + 8), the caller saved rbp
# (CFA = rsp + 16), _start's return address is undefined (the outermost frame)
ROWS = {LEAF: CfaRow(7, 8, {16: ("OFFSET", -8)}, 16),
        CALLER - 1: CfaRow(7, 16, {16: ("OFFSET", -8), 6: ("OFFSET", -16)}, 16),
        START - 1: CfaRow(7, 8, {16: ("UNDEFINED", None)}, 16)}


class _Rows:
    def row_at(self, vaddr: int) -> CfaRow | None:
        return ROWS.get(vaddr)


class _Jit:
    def __init__(self, *symbols: JitSymbol) -> None:
        self.symbols = symbols
        self.asked: list[int] = []

    def find(self, addr: int) -> JitSymbol | None:
        self.asked.append(addr)
        return next((s for s in self.symbols if s.start <= addr < s.end), None)


@pytest.fixture(autouse=True)
def fake_cfi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unwind_dwarf, "module_cfi", lambda path, build_id: _Rows())
    monkeypatch.setattr(unwind, "has_frame_pointers", lambda path, build_id: False)


def _capture(words: dict[int, int], fp: int, pc: int = LEAF) -> UserStackCapture:
    data = bytearray(8 * 16)
    for at, value in words.items():
        data[at - SP:at - SP + 8] = value.to_bytes(8, "little")
    return UserStackCapture(1, 0, X86_64, UserRegs(pc, SP, fp), StackWindow(SP, bytes(data)))


# native leaf -> JIT A -> JIT B (frame records at SP+16 and SP+40) -> native caller
# (rbp saved at SP+56) -> _start
FP_CHAIN = {SP: JIT_A, SP + 16: SP + 40, SP + 24: JIT_B, SP + 40: SP + 96,
            SP + 48: CALLER, SP + 56: 0x5555, SP + 64: START}
WHOLE = (LEAF, JIT_A, JIT_B, CALLER, START)


@pytest.mark.parametrize("mode", ["dwarf", "auto"])
def test_a_walk_goes_through_jit_frames_by_frame_pointers_then_on_by_cfi(mode: str) -> None:
    modules = ProcessModules((NATIVE, ANON))
    got = unwind.unwind(_capture(FP_CHAIN, fp=SP + 16), modules, mode)
    assert (got.addrs, got.stop) == (WHOLE, "end")


def test_jit_code_in_no_known_mapping_is_walked_when_the_perf_map_names_it() -> None:
    modules = ProcessModules((NATIVE,))  # a JIT's mprotect makes no mmap record
    capture = _capture(FP_CHAIN, fp=SP + 16)
    without = unwind.unwind(capture, modules, "dwarf")
    assert (without.addrs, without.stop) == ((LEAF, JIT_A), "no-module")
    jit = _Jit(JitSymbol(JIT_A - 0x34, 0x100, "JS:*a"), JitSymbol(JIT_B - 5, 0x10, "JS:^b"))
    got = unwind.unwind(capture, modules, "dwarf", jit=jit)
    assert (got.addrs, got.stop) == (WHOLE, "end")
    assert JIT_A - 1 in jit.asked  # a return address is looked up at its call


def test_jit_code_inside_a_file_without_cfi_is_walked_when_the_perf_map_names_it() -> None:
    builtin = 0x404321  # V8's builtins sit in node's text, without CFI
    chain = {**FP_CHAIN, SP: builtin}
    modules = ProcessModules((NATIVE, ANON))
    stopped = unwind.unwind(_capture(chain, fp=SP + 16), modules, "dwarf")
    assert (stopped.addrs, stopped.stop) == ((LEAF, builtin), "no-cfi")
    got = unwind.unwind(_capture(chain, fp=SP + 16), modules, "dwarf",
                        jit=_Jit(JitSymbol(0x404300, 0x100, "Builtin:JSEntry")))
    assert (got.addrs, got.stop) == ((LEAF, builtin, JIT_B, CALLER, START), "end")


def test_a_broken_frame_pointer_in_jit_code_ends_the_walk_there() -> None:
    got = unwind.unwind(_capture(FP_CHAIN, fp=SP - 64), ProcessModules((NATIVE, ANON)),
                        "dwarf")
    assert (got.addrs, got.stop) == ((LEAF, JIT_A), "bad-fp")


def test_a_jit_frame_record_leading_nowhere_ends_the_walk_without_a_made_up_frame() -> None:
    # code without frame pointers left a stack address in rbp: the "return address" it
    # points at is in no mapping and no JIT region
    chain = {**FP_CHAIN, SP + 24: 0x1234_5678}
    got = unwind.unwind(_capture(chain, fp=SP + 16), ProcessModules((NATIVE, ANON)),
                        "dwarf", jit=_Jit())
    assert (got.addrs, got.stop) == ((LEAF, JIT_A), "bad-fp")


def test_fp_mode_is_unchanged_by_a_perf_map() -> None:
    jit = _Jit(JitSymbol(JIT_A - 0x34, 0x100, "JS:*a"))
    got = unwind.unwind(_capture(FP_CHAIN, fp=SP + 16), ProcessModules((NATIVE, ANON)),
                        "fp", jit=jit)
    assert got.addrs[:2] == (LEAF, JIT_B) and not jit.asked  # the leaf has no record


TRAMP = 0x7F0000003000  # CPython 3.12's `sub $8,%rsp; call *%rcx; add $8,%rsp; ret`


def test_a_cpython_perf_trampoline_is_a_fixed_two_word_step() -> None:
    # _PyEval_EvalFrameDefault (the leaf here) returns into the trampoline's `add`,
    # whose caller's return address is one word above the padding word
    words = {SP: TRAMP + 6, SP + 8: 0xDEAD, SP + 16: CALLER, SP + 24: 0x5555,
             SP + 32: START}
    jit = _Jit(JitSymbol(TRAMP, 11, "py::hot:/app/x.py"))
    got = unwind.unwind(_capture(words, fp=0x1234), ProcessModules((NATIVE, ANON)),
                        "dwarf", jit=jit)
    assert (got.addrs, got.stop) == ((LEAF, TRAMP + 6, CALLER, START), "end")
    # a frame-pointer step there would take the padding for a frame record
    plain = unwind.unwind(_capture(words, fp=0x1234), ProcessModules((NATIVE, ANON)),
                          "dwarf")
    assert plain.stop == "bad-fp"


def test_a_trampoline_that_pushed_rbp_gives_the_saved_one_back() -> None:
    # 3.13's stub: push %rbp; mov %rsp,%rbp; call *%rcx: at its return address rbp == sp
    words = {SP: TRAMP + 5, SP + 8: SP + 72, SP + 16: CALLER, SP + 24: 0x5555,
             SP + 32: START}
    jit = _Jit(JitSymbol(TRAMP, 11, "py::hot:/app/x.py"))
    got = unwind.unwind(_capture(words, fp=SP + 8), ProcessModules((NATIVE, ANON)),
                        "dwarf", jit=jit)
    assert (got.addrs, got.stop) == ((LEAF, TRAMP + 5, CALLER, START), "end")


# --- naming and formats ---------------------------------------------------------------


def test_jit_frames_are_named_from_the_perf_map_and_never_demangled() -> None:
    jit = _Jit(JitSymbol(JIT_A - 0x34, 0x100, "_Z3fooi"),
               JitSymbol(JIT_B - 5, 0x10, "JS:^b /app/x.js:3:1"))
    frames = Symbolizer().symbolize([JIT_A, JIT_B, 0x9000], ProcessModules((ANON,)), jit=jit)
    assert frames[0] == Frame(JIT_A, "_Z3fooi", 0x34, "[jit]", kind="jit")
    assert frames[1] == Frame(JIT_B, "JS:^b /app/x.js:3:1", 5, "[jit]", kind="jit")
    assert frames[2] == Frame(0x9000, None, 0x9000, "")  # in no map, nor the perf map
    assert [f.kind for f in frames] == ["jit", "jit", "native"]


def test_jit_frames_in_text_json_folded_and_flame_graph() -> None:
    f = Frame(JIT_A, "JS:*work /app/x.js:6:14", 0x34, "[jit]", kind="jit")
    assert text_line(f) == "    JS:*work /app/x.js:6:14+0x34 [jit]"
    assert frame_dict(f) == {"address": JIT_A, "symbol": "JS:*work /app/x.js:6:14",
                             "offset": 0x34, "module": "[jit]", "line": None,
                             "kind": "jit"}
    assert fold_name(f) == "JS:*work /app/x.js:6:14_[j]"
    r, g, b = _colour("JS:*work_[j]")
    assert g > r and g > b  # green, as flamegraph.pl draws JIT frames


def test_pprof_puts_jit_frames_in_a_jit_mapping() -> None:
    frames = (Frame(JIT_A, "JS:*work", 0x34, "[jit]", kind="jit"),
              Frame(JIT_B, "JS:^hot", 5, "[jit]", kind="jit"))
    prof = read_profile(encode_profile(Counter({((), frames): 3}), None, None, 0.0))
    mappings = prof["mappings"]
    assert isinstance(mappings, dict)
    (mid, (lo, hi, _, path, build_id, _)), = mappings.items()
    assert (path, build_id, lo, hi) == ("[jit]", "", JIT_A, JIT_B + 1)
    locations = prof["locations"]
    assert isinstance(locations, dict)
    assert sorted(locations.values()) == [(mid, JIT_A, ["JS:*work"]),
                                          (mid, JIT_B, ["JS:^hot"])]


def test_a_process_without_a_map_is_looked_at_again_less_often(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every frame without a symbol asks for the perf map: a process that has none is
    looked at again after absent_reread, one with a map after min_reread."""
    pid = os.getpid()
    path = tmp_path / "perf.map"
    monkeypatch.setattr(perfmap, "perf_map_path", lambda p: str(path))
    clock = [100.0]
    monkeypatch.setattr(perfmap.time, "monotonic", lambda: clock[0])
    maps = PerfMaps(min_reread=0.05)
    assert maps.absent_reread == pytest.approx(0.25)
    assert maps.find(pid, 0x1010) is None  # no file yet
    path.write_text("1000 100 late\n")
    clock[0] += 0.1
    assert maps.find(pid, 0x1010) is None  # within absent_reread: not looked at again
    clock[0] += 0.2
    assert maps.find(pid, 0x1010) == JitSymbol(0x1000, 0x100, "late")
    maps.close()
