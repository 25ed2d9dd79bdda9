"""elf/symbols.py: symbol tables of built fixtures; C++ names found demangled, and a
demangled name that fits several functions refused with the candidates listed."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from sdt_build import build_fixtures, missing_toolchain

from planrunner.elf.reader import read_notes
from planrunner.elf.symbols import _unpack, demangle, find_symbols, lookup_symbol
from planrunner.errors import ResolveError

CXX = """
namespace shop {
struct Cart { int total(int tax) const; };
int Cart::total(int tax) const { return tax + 1; }
int price(int a) { return a; }
int price(double a) { return (int)a; }
}
extern "C" int plain_c(int x) { return x * 2; }
int main() { shop::Cart c; return c.total(1) + shop::price(1) + shop::price(2.0) + plain_c(3); }
"""


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    why = missing_toolchain()
    if why:
        pytest.skip(why)
    return build_fixtures(tmp_path_factory.mktemp("sdt"))


@pytest.fixture(scope="module")
def cxx_binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("g++") is None or shutil.which("c++filt") is None:
        pytest.skip("g++ or c++filt is not installed")
    out = tmp_path_factory.mktemp("cxx")
    (out / "shop.cc").write_text(CXX)
    subprocess.run(["g++", "-O0", "-o", "shop", "shop.cc"], cwd=out, check=True)
    return str(out / "shop")


def test_semaphore_symbol_matches_the_note(fixtures: dict[str, str]) -> None:
    path = fixtures["nopie"]
    gated = next(n for n in read_notes(path) if n.name == "gated")
    [sym] = lookup_symbol(path, "demo_gated_semaphore")
    assert (sym.value, sym.size, sym.type) == (gated.semaphore, 2, "STT_OBJECT")


def test_function_and_global_in_a_shared_library(fixtures: dict[str, str]) -> None:
    [fn] = lookup_symbol(fixtures["lib"], "demo_lib_add")
    [var] = lookup_symbol(fixtures["lib"], "demo_lib_total")
    assert fn.type == "STT_FUNC" and fn.size > 0
    assert var.type == "STT_OBJECT" and var.size == 8


def test_unknown_symbol_is_an_empty_list(fixtures: dict[str, str]) -> None:
    assert lookup_symbol(fixtures["pie"], "no_such_symbol") == []


def test_undefined_symbols_are_not_listed(fixtures: dict[str, str]) -> None:
    names = {s.name for s in find_symbols(fixtures["pie"])}
    assert "main" in names and "demo_gated" in names
    assert "__libc_start_main" not in names  # imported, st_shndx SHN_UNDEF


def test_demangle_batches_and_skips_plain_names() -> None:
    if shutil.which("c++filt") is None:
        pytest.skip("c++filt is not installed")
    got = demangle(["_ZN4shop5priceEi", "main", "_ZNK4shop4Cart5totalEi"])
    assert got == {"_ZN4shop5priceEi": "shop::price(int)",
                   "_ZNK4shop4Cart5totalEi": "shop::Cart::total(int) const"}


def test_cxx_lookup_by_mangled_full_and_short_name(cxx_binary: str) -> None:
    [by_mangled] = lookup_symbol(cxx_binary, "_ZNK4shop4Cart5totalEi")
    [by_signature] = lookup_symbol(cxx_binary, "shop::Cart::total(int) const")
    [by_name] = lookup_symbol(cxx_binary, "shop::Cart::total")
    assert by_mangled == by_signature == by_name
    [one] = lookup_symbol(cxx_binary, "shop::price(double)")
    assert one.name == "_ZN4shop5priceEd"
    assert lookup_symbol(cxx_binary, "plain_c")[0].name == "plain_c"


def test_ambiguous_demangled_name_lists_candidates(cxx_binary: str) -> None:
    with pytest.raises(ResolveError) as info:
        lookup_symbol(cxx_binary, "shop::price")
    diag = info.value.diagnostics[0]
    assert "ambiguous" in diag.message and "2 symbols" in diag.message
    assert "shop::price(int) (_ZN4shop5priceEi)" in diag.hints[0]
    assert "shop::price(double) (_ZN4shop5priceEd)" in diag.hints[0]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ResolveError, match="cannot read"):
        find_symbols(str(tmp_path / "gone"))


def _strtab(*names: str) -> tuple[bytes, dict[str, int]]:
    table, at = b"\0", {}
    for n in names:
        at[n] = len(table)
        table += n.encode() + b"\0"
    return table, at


@pytest.mark.parametrize("elfclass,little", [(64, True), (32, True), (64, False), (32, False)])
def test_entries_unpacked_per_class_and_byte_order(elfclass: int, little: bool) -> None:
    """Elf32_Sym and Elf64_Sym order their fields differently; undefined and unnamed
    entries are dropped; the type comes from the low nibble of st_info."""
    strtab, at = _strtab("f", "obj", "undef", "ifunc")
    order = "<" if little else ">"
    rows = [(0, 0, 0, 0, 0),  # the null entry
            (at["f"], 0x401000, 42, 0x12, 14),  # GLOBAL FUNC
            (at["obj"], 0x602000, 8, 0x11, 25),  # GLOBAL OBJECT
            (at["undef"], 0, 0, 0x12, 0),  # SHN_UNDEF: an import
            (at["ifunc"], 0x403000, 9, 0x1A, 14)]  # GNU_IFUNC
    if elfclass == 64:
        data = b"".join(struct.pack(order + "IBBHQQ", n, info, 0, shndx, value, size)
                        for n, value, size, info, shndx in rows)
    else:
        data = b"".join(struct.pack(order + "IIIBBH", n, value, size, info, 0, shndx)
                        for n, value, size, info, shndx in rows)
    got = [(s.name, s.value, s.size, s.type) for s in _unpack(data, strtab, elfclass, little)]
    assert got == [("f", 0x401000, 42, "STT_FUNC"), ("obj", 0x602000, 8, "STT_OBJECT"),
                   ("ifunc", 0x403000, 9, "STT_GNU_IFUNC")]


def test_a_demangled_lookup_demangles_only_names_holding_the_function(cxx_binary: str
                                                                      ) -> None:
    """`shop::Cart::total` demangles the mangled names that hold `5total` (as the
    Itanium ABI writes the identifier), not every C++ name of the file; an operator or
    a template has no plain identifier and gets the whole file's index."""
    from planrunner.elf import symbols

    [hit] = lookup_symbol(cxx_binary, "shop::Cart::total")
    narrowed = [index for (_, ident), index in symbols._DEMANGLED.items() if ident == "total"]
    assert narrowed and all("5total" in mangled for mangled in narrowed[-1].names)
    assert hit.name in narrowed[-1].names
    assert symbols._source_name("shop::Cart::total(int) const") == "total"
    assert symbols._source_name("plain_c") == "plain_c"
    assert symbols._source_name("shop::Cart::operator==") is None
    assert symbols._source_name("shop::Box<int>::get") == "get"
    assert symbols._source_name("shop::make<int>") is None
