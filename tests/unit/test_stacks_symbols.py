"""stacks: symbol sources (symtab, MiniDebugInfo, build-id debug files), demangling,
kallsyms, and symbolizing a process that has exited from its maps snapshot."""

from __future__ import annotations

import lzma
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from stacks_fixture import CHAIN, SRC, load_dump, missing_toolchain, run_dump, session_build

from planrunner.elf.procmaps import start_time as read_start_time
from planrunner.elf.reader import open_binary, sections
from planrunner.stacks.demangle import demangle
from planrunner.stacks.kallsyms import KERNEL, KernelSymbols
from planrunner.stacks.modules import Mapping, ProcessRegistry
from planrunner.stacks.symbolize import Symbolizer
from planrunner.stacks.symtab import ModuleSymbols, minidebuginfo_symbols
from planrunner.stacks.unwind import unwind
from planrunner.stacks.user import frames_from_addresses, frames_from_capture

needs_fixture = pytest.mark.skipif(missing_toolchain() is not None,
                                   reason=missing_toolchain() or "")
needs_binutils = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("objcopy", "strip")),
    reason="objcopy/strip (binutils) are not installed")


@pytest.fixture(scope="module")
def nofp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if missing_toolchain():
        pytest.skip(missing_toolchain() or "")
    return session_build(tmp_path_factory)["nofp_pie"]


def _funcs(table: ModuleSymbols) -> set[str]:
    return set(table.names)


# --- symbol sources -----------------------------------------------------------------

@needs_binutils
def test_minidebuginfo_gives_the_symbols_a_stripped_binary_lacks(nofp: Path,
                                                                 tmp_path: Path) -> None:
    """Built as Fedora does (gdb manual, "MiniDebugInfo"): the symbol table goes, xz
    compressed, into `.gnu_debugdata` of the stripped binary."""
    binary = nofp / "fx_stack"
    stripped, mini = tmp_path / "fx_stripped", tmp_path / "mini.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(binary), str(mini)], check=True)
    subprocess.run(["strip", "--strip-all", "-o", str(stripped), str(binary)], check=True)
    assert not {"inner", "middle"} & _funcs(ModuleSymbols.load(str(stripped)))
    xz = tmp_path / "mini.xz"
    xz.write_bytes(lzma.compress(mini.read_bytes(), format=lzma.FORMAT_XZ))
    subprocess.run(["objcopy", "--add-section", f".gnu_debugdata={xz}", str(stripped)],
                   check=True)
    table = ModuleSymbols.load(str(stripped))
    assert {"inner", "middle", "outer", "main"} <= _funcs(table)
    assert table.sources == ("symtab", "gnu_debugdata")  # .dynsym, then the xz table
    inner = next(s for s in minidebuginfo_symbols(str(stripped)) if s.name == "inner")
    assert table.lookup(inner.value + 3) == ("inner", inner.value)


def test_minidebuginfo_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    """Real `.gnu_debugdata` where this distribution ships it (Fedora does; Debian 12's
    python3.11 and libc do not: then this skips and says so)."""
    candidates = ["/usr/bin/python3.11", "/lib/x86_64-linux-gnu/libc.so.6"]
    have = [p for p in candidates if os.path.exists(p)
            and any(s.name == ".gnu_debugdata" for s in sections(p))]
    if not have:
        with capsys.disabled():
            print(f"\nskip: no .gnu_debugdata in {', '.join(candidates)} (readelf -S)")
        pytest.skip(f"no .gnu_debugdata in {', '.join(candidates)}")
    for path in have:
        assert minidebuginfo_symbols(path)


@needs_binutils
def test_a_separate_debug_file_is_found_by_build_id(nofp: Path, tmp_path: Path) -> None:
    binary = nofp / "fx_stack"
    build_id = open_binary(str(binary)).build_id
    assert build_id
    root = tmp_path / "debug"
    target = root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    target.parent.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(binary), str(target)], check=True)
    stripped = tmp_path / "fx_stripped"
    subprocess.run(["strip", "--strip-all", "-o", str(stripped), str(binary)], check=True)
    table = ModuleSymbols.load(str(stripped), build_id, str(root))
    assert {"inner", "middle", "outer"} <= _funcs(table)
    assert table.sources[-1] == f"build-id:{target}"


def test_libc_debug_symbols_when_installed() -> None:
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    build_id = open_binary(libc).build_id
    debug = f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug" if build_id \
        else ""
    if not os.path.exists(debug):
        pytest.skip("libc6-dbg is not installed: libc's local functions stay unnamed")
    table = ModuleSymbols.load(libc, build_id)
    assert "__libc_start_call_main" in table.names  # a local: not in .dynsym


def test_aliases_prefer_the_plain_name() -> None:
    table = ModuleSymbols.load("/lib/x86_64-linux-gnu/libc.so.6")
    malloc = [s for s, n in zip(table.starts, table.names, strict=True) if n == "malloc"]
    assert malloc and table.lookup(malloc[0]) == ("malloc", malloc[0])


# --- after the process is gone --------------------------------------------------------

@needs_fixture
def test_a_process_that_exited_symbolizes_from_its_snapshot(nofp: Path) -> None:
    dump = load_dump(run_dump(nofp / "fx_stack", nofp / "gone"))
    cap = dump.capture
    # the fixture has exited: its pid is gone or belongs to another process now
    assert read_start_time(cap.pid) != cap.start_time
    registry = ProcessRegistry()
    assert registry.observe(cap.pid, cap.start_time) is None  # never reads a reused pid
    assert registry.find(cap.pid, cap.start_time, cap.regs.pc) is None
    registry.add(dump.modules)  # the snapshot taken when the pid was first seen
    assert registry.find(cap.pid, cap.start_time, cap.regs.pc) is not None
    frames = frames_from_capture(cap, registry, Symbolizer(), "dwarf")
    assert [f.symbol for f in frames][:5] == CHAIN
    # frame-pointer mode hands over addresses: the same snapshot symbolizes them
    addrs = unwind(cap, dump.modules, "dwarf").addrs
    again = frames_from_addresses(cap.pid, cap.start_time, [*addrs, 0, 0], registry,
                                  Symbolizer())
    assert again == frames


@needs_fixture
def test_a_file_replaced_on_disk_is_not_trusted(nofp: Path, tmp_path: Path) -> None:
    dump = load_dump(run_dump(nofp / "fx_stack", nofp / "replaced"))
    mapping = dump.modules.find(dump.capture.regs.pc)
    assert mapping is not None
    other = Mapping(mapping.start, mapping.end, mapping.file_offset, mapping.perms,
                    mapping.path, mapping.dev, mapping.inode + 1, None, mapping.bias)

    class One:
        def find(self, addr: int) -> Mapping | None:
            return other if other.start <= addr < other.end else None

    frame = Symbolizer(debug_root=str(tmp_path)).symbolize([dump.capture.regs.pc], One())[0]
    assert frame.symbol is None and frame.module == mapping.path
    assert frame.offset == dump.capture.regs.pc - mapping.bias  # module-relative address


@needs_fixture
def test_a_named_frame_is_reused_only_while_its_file_is_trusted(
        nofp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Symbolizer._named: the same address of the same mapping is named once; a file
    replaced on disk (seen at the next trust check) names it no more."""
    import planrunner.stacks.symbolize as symbolize

    dump = load_dump(run_dump(nofp / "fx_stack", nofp / "named"))
    pc = dump.capture.regs.pc
    clock = [100.0]
    monkeypatch.setattr(symbolize.time, "monotonic", lambda: clock[0])
    files_same = [True]
    monkeypatch.setattr(symbolize, "same_file", lambda _m: files_same[0])
    sym = Symbolizer(debug_root=str(tmp_path))
    first = sym.symbolize([pc], dump.modules)[0]
    assert first.symbol == CHAIN[0]
    assert sym.symbolize([pc], dump.modules)[0] is first  # from the cache
    files_same[0] = False  # replaced on disk: not trusted once rechecked
    assert sym.symbolize([pc], dump.modules)[0] is first  # within TRUST_S: as before
    clock[0] += symbolize.TRUST_S + 0.5
    replaced = sym.symbolize([pc], dump.modules)[0]
    assert replaced.symbol is None and replaced.module == first.module
    files_same[0] = True
    clock[0] += symbolize.TRUST_S + 0.5
    assert sym.symbolize([pc], dump.modules)[0] == first


@needs_fixture
def test_a_named_frame_is_not_reused_for_another_mapping(nofp: Path) -> None:
    """The cache key holds the mapping: the same address in a module mapped elsewhere
    (another process, a library unmapped and mapped again at another bias) is named
    over that mapping."""
    dump = load_dump(run_dump(nofp / "fx_stack", nofp / "moved"))
    mapping = dump.modules.find(dump.capture.regs.pc)
    assert mapping is not None and mapping.bias is not None
    shift = 0x10000
    moved = Mapping(mapping.start + shift, mapping.end + shift, mapping.file_offset,
                    mapping.perms, mapping.path, mapping.dev, mapping.inode,
                    mapping.build_id, mapping.bias + shift)

    class Both:
        def find(self, addr: int) -> Mapping | None:
            return moved if moved.start <= addr < moved.end else mapping

    sym = Symbolizer()
    pc = dump.capture.regs.pc
    here = sym.symbolize([pc], dump.modules)[0]
    there = sym.symbolize([pc + shift], Both())[0]
    assert (there.symbol, there.offset, there.mapping) == (here.symbol, here.offset, moved)
    # the old address over the moved mapping's view: another place, named afresh
    assert sym.symbolize([pc], Both())[0] == here


# --- demangling ------------------------------------------------------------------------

needs_cxxfilt = pytest.mark.skipif(shutil.which("c++filt") is None,
                                   reason="c++filt (binutils) is not installed")


@needs_cxxfilt
def test_cpp_names_are_demangled() -> None:
    got = demangle(["_ZN2ns6Parser5parseERKSt6vectorIiSaIiEE", "_ZN2ns3fooEi", "main"])
    assert got["_ZN2ns3fooEi"] == "ns::foo(int)"
    assert got["_ZN2ns6Parser5parseERKSt6vectorIiSaIiEE"] == \
        "ns::Parser::parse(std::vector<int, std::allocator<int> > const&)"
    assert "main" not in got


@needs_cxxfilt
def test_rust_legacy_and_v0_names_are_demangled() -> None:
    legacy = "_ZN3std2io5stdio6_print17h1d7a4d5e0f3b2c1aE"
    v0 = "_RNvNtCs1234_7mycrate5inner3foo"
    got = demangle([legacy, v0])
    assert got[legacy] == "std::io::stdio::_print"  # the hash is dropped, as rustfilt does
    assert got[v0] == "mycrate::inner::foo"  # the crate disambiguator is dropped


# --- kernel -----------------------------------------------------------------------------

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81001000 t do_one_initcall
ffffffff81002000 D some_data
ffffffff81002100 T __x64_sys_read
ffffffff81002300 T vfs_read
ffffffffc0a00000 t ext4_file_read_iter\t[ext4]
ffffffffc0a00400 t ext4_end\t[ext4]
"""


def test_kallsyms_sample() -> None:
    ks = KernelSymbols.parse(KALLSYMS)
    assert ks.usable and not any(b"some_data" in line for line in ks.lines)
    f = ks.frame(0xFFFFFFFF81002010)  # a data symbol names nothing: the text before it
    assert (f.symbol, f.offset) == ("do_one_initcall", 0x1010)
    assert ks.frame(0xFFFFFFFF81000000).symbol == "startup_64"  # aliases: the last one
    f = ks.frame(0xFFFFFFFF81002150)
    assert (f.symbol, f.offset, f.module) == ("__x64_sys_read", 0x50, KERNEL)
    f = ks.frame(0xFFFFFFFFC0A00010)
    assert (f.symbol, f.offset, f.module) == ("ext4_file_read_iter", 0x10, "[ext4]")
    assert ks.frame(0xFFFFFFFF80000000).symbol is None  # below the first symbol
    assert ks.frame(0xFFFFFFFFC0A00500).symbol is None  # past the last one


def test_kallsyms_hidden_by_kptr_restrict() -> None:
    ks = KernelSymbols.parse("0000000000000000 T _stext\n0000000000000000 T vfs_read\n")
    assert not ks.usable and ks.frame(0xFFFFFFFF81000000).symbol is None


def test_kallsyms_of_this_machine() -> None:
    ks = KernelSymbols.load()
    if not ks.usable:
        pytest.skip("/proc/kallsyms shows no addresses (kptr_restrict, not root)")
    line = next(line for line in ks.lines if line.split()[2] == b"vfs_read")
    assert ks.frame(int(line.split()[0], 16) + 1).symbol == "vfs_read"
    assert KernelSymbols.parse(open("/proc/kallsyms").read()) == ks  # text or bytes


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
@needs_cxxfilt
def test_cpp_frames_of_a_real_stack_come_back_demangled(tmp_path: Path) -> None:
    subprocess.run(["make", "-s", "-C", str(SRC), f"OUT={tmp_path}", "cxx"], check=True,
                   capture_output=True)
    dump = load_dump(run_dump(tmp_path / "fx_cxx", tmp_path / "cxx"))
    result = unwind(dump.capture, dump.modules, "dwarf")
    frames = Symbolizer().symbolize(result.addrs, dump.modules)
    assert [f.symbol for f in frames][:3] == ["fx::Box<int>::get(int)", "fx::outer(int)",
                                             "main"]


RUST_SRC = """
pub mod net { pub struct Conn; impl Conn {
    #[inline(never)] pub fn send(&self, n: u32) -> u32 { n.wrapping_mul(3) } } }
#[no_mangle] pub extern "C" fn keep(n: u32) -> u32 { net::Conn.send(n) }
"""


@pytest.mark.skipif(shutil.which("rustc") is None, reason="rustc is not installed")
@needs_cxxfilt
@pytest.mark.parametrize("mangling", ["legacy", "v0"])
def test_rust_names_from_rustc_are_demangled(tmp_path: Path, mangling: str) -> None:
    src = tmp_path / "fxrust.rs"
    src.write_text(RUST_SRC)
    lib = tmp_path / "libfxrust.so"
    # legacy is stable rustc's default (naming it needs -Z unstable-options)
    flags = [] if mangling == "legacy" else ["-C", f"symbol-mangling-version={mangling}"]
    proc = subprocess.run(["rustc", "--crate-type=cdylib", "-O", *flags, "-o", str(lib),
                           str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"rustc cannot build with {mangling} mangling: {proc.stderr[:200]}")
    table = ModuleSymbols.load(str(lib))
    mangled = [n for n in table.names if "send" in n and "Conn" in n]
    assert mangled and mangled[0].startswith("_ZN" if mangling == "legacy" else "_R")
    pretty = demangle(mangled)[mangled[0]]
    assert pretty in ("fxrust::net::Conn::send", "<fxrust::net::Conn>::send")


def test_an_entry_point_inside_a_larger_function_does_not_hide_it() -> None:
    from planrunner.elf.symbols import Symbol
    table = ModuleSymbols.from_symbols([(1, [
        Symbol("__memmove_avx", 0x1000, 0x400, "STT_FUNC"),
        Symbol("__memcpy_avx_entry", 0x1010, 0x10, "STT_FUNC"),  # inside memmove
        Symbol("unsized_asm", 0x2000, 0, "STT_FUNC"),
        Symbol("next", 0x2100, 0x10, "STT_FUNC"),
        Symbol("data", 0x3000, 0x10, "STT_OBJECT"),
    ])])
    assert table.lookup(0x1018) == ("__memcpy_avx_entry", 0x1010)
    assert table.lookup(0x1200) == ("__memmove_avx", 0x1000)
    assert table.lookup(0x20FF) == ("unsized_asm", 0x2000)  # runs to the next symbol
    assert table.lookup(0x1400) is None and table.lookup(0x3004) is None


@pytest.mark.parametrize("path", ["/usr/bin/python3.11", "/lib/x86_64-linux-gnu/libc.so.6",
                                  "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"])
def test_the_code_symbol_reader_gives_the_table_of_every_symbol(path: str) -> None:
    """ModuleSymbols.load reads only code symbols (elf/symbols.read_function_symbols):
    the table is the one every symbol of both tables gives."""
    from planrunner.elf.symbols import find_symbols

    if not os.path.exists(path):
        pytest.skip(f"{path} is not on this machine")
    every = ModuleSymbols.from_symbols([(1, list(find_symbols(path)))], ("symtab",))
    table = ModuleSymbols.load(path, debug_root="/nonexistent")
    assert len(table.starts) > 100 and table == every


def test_a_symbol_span_is_named_alike_throughout() -> None:
    """ModuleSymbols.span (a template's span of pcs where Python frames hide the pc,
    runtime/stacks.py): every address in it is named as the address asked, over a table
    with nested entry points, symbols without a size and gaps; no span where none names."""
    table = ModuleSymbols.from_entries([(1, [
        ("big", 0x1000, 0x400, False), ("entry", 0x1100, 0x20, False),
        ("inner", 0x1200, 0x10, False), ("nosize", 0x1600, 0, False),
        ("after", 0x1700, 0x40, False)])])
    for vaddr in range(0xF00, 0x1800, 3):
        span = table.span(vaddr)
        if table.lookup(vaddr) is None:
            assert span is None, hex(vaddr)
            continue
        assert span is not None and span[0] <= vaddr < span[1], hex(vaddr)
        assert {table.lookup(a) for a in range(span[0], span[1])} == \
            {table.lookup(vaddr)}, hex(vaddr)
    assert table.span(0x1150) == (0x1120, 0x1200)  # in big, past entry's end
