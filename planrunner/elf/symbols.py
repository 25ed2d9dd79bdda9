"""Symbol lookup over `.symtab` and `.dynsym` (pyelftools, imported lazily, finds the
tables; their entries are unpacked in bulk).

`find_symbols(path)` -> every named symbol of both tables (deduplicated);
`lookup_symbol(path, name)` -> the symbols called `name`;
`read_function_symbols(path)` -> the code symbols only, as tuples (stacks/symtab.py).
A name not found as written is tried against C++ demangled names (one batched `c++filt`
call per file), either exactly (`ns::f(int)`) or without the parameter list (`ns::f`); a
demangled match is accepted only when it names a single address, otherwise ResolveError
lists the candidates.
Used for uprobes on functions and for rip-relative USDT operands (`sym(%rip)`).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from planrunner import inputs
from planrunner.errors import ResolveError

_TABLES = (".symtab", ".dynsym")


@dataclass(frozen=True, slots=True)
class Symbol:
    """One ELF symbol (.symtab or .dynsym)."""

    name: str
    value: int  # link-time vaddr
    size: int
    type: str  # 'STT_FUNC', 'STT_OBJECT', 'STT_GNU_IFUNC', ...
    # .dynsym only: a non-default version (memcpy@GLIBC_2.2.5 beside memcpy@@GLIBC_2.14),
    # which programs linked today do not call
    hidden: bool = False


_SYMS: dict[tuple[str, int, int, int], tuple[Symbol, ...]] = {}
_DEMANGLED: dict[tuple[tuple[str, int, int, int], str | None], _DemangledIndex] = {}


def find_symbols(path: str) -> tuple[Symbol, ...]:
    """All defined, named symbols of `path` (`.symtab` first, then `.dynsym`), deduplicated."""
    key = _key(path)
    syms = _SYMS.get(key)
    if syms is None:
        syms = _SYMS[key] = _read_symbols(path)
    return syms


def lookup_symbol(path: str, name: str) -> list[Symbol]:
    """Symbols named `name` (mangled or demangled). Empty list when there are none."""
    syms = find_symbols(path)
    exact = [s for s in syms if s.name == name]
    if exact:
        return [s for s in exact if not s.hidden] or exact
    index = _demangled_index(path, syms, _source_name(name))
    hits = index.full.get(name) or index.short.get(name, [])
    if len({s.value for s in hits}) > 1:
        listed = ", ".join(sorted({f"{index.names[s.name]} ({s.name})" for s in hits})[:8])
        raise ResolveError(
            f"'{name}' is ambiguous in {path}: {len(hits)} symbols match",
            hints=(f"use the full signature or the mangled name: {listed}",))
    return list(hits)


def demangle(names: list[str]) -> dict[str, str]:
    """Demangle C++ names with one `c++filt` process. Names it leaves alone are omitted;
    an empty dict when c++filt is not installed."""
    todo = [n for n in names if n.startswith("_Z")]
    tool = inputs.which("c++filt")
    if not todo or tool is None:
        return {}
    out = subprocess.run([tool], input="\n".join(todo) + "\n", capture_output=True,
                         text=True, check=False).stdout.splitlines()
    if len(out) != len(todo):
        return {}
    return {m: d for m, d in zip(todo, out, strict=True) if d != m}


@dataclass(frozen=True, slots=True)
class _DemangledIndex:
    """C++ symbols by demangled name, with and without parameters."""

    names: dict[str, str]  # mangled -> demangled
    full: dict[str, list[Symbol]]  # `ns::f(int)` -> symbols
    short: dict[str, list[Symbol]]  # `ns::f` -> symbols


def _demangled_index(path: str, syms: tuple[Symbol, ...],
                     ident: str | None = None) -> _DemangledIndex:
    """Built once per file and function name: a plan names several functions of one
    C++ binary. With `ident` (the name's last identifier, `_source_name`), only the
    mangled names holding it as the Itanium ABI writes an identifier (`<length><name>`,
    never abbreviated: substitutions stand for prefixes and types, not for a function's
    own name) are demangled: mariadbd's 29k symbols took c++filt and the index ~0.35 s
    of every first run of mysql-slow, for one function."""
    key = (_key(path), ident)
    index = _DEMANGLED.get(key)
    if index is None:
        wanted = {s.name for s in syms}
        if ident is not None:
            encoded = f"{len(ident)}{ident}"
            wanted = {n for n in wanted if encoded in n}
        names = demangle(sorted(wanted))
        full: dict[str, list[Symbol]] = {}
        short: dict[str, list[Symbol]] = {}
        for sym in syms:
            pretty = names.get(sym.name)
            if pretty is not None:
                full.setdefault(pretty, []).append(sym)
                short.setdefault(_strip_params(pretty), []).append(sym)
        index = _DEMANGLED[key] = _DemangledIndex(names, full, short)
    return index


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _source_name(name: str) -> str | None:
    """The function's own identifier in a C++ name (`ns::Cart::total(int) const` ->
    `total`), or None when it is not a plain identifier (an operator, a destructor, a
    template argument list): then every C++ name of the file is demangled."""
    last = _strip_params(name).rpartition("::")[2]
    return last if _IDENT.fullmatch(last) else None


def _strip_params(demangled: str) -> str:
    """`ns::f(int) const` -> `ns::f` (the outermost trailing parameter list removed)."""
    if not demangled.endswith(")") and not demangled.endswith(") const"):
        return demangled
    depth = 0
    for i in range(len(demangled) - 1, -1, -1):
        ch = demangled[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                return demangled[:i]
    return demangled


def _read_symbols(path: str) -> tuple[Symbol, ...]:
    """pyelftools finds the tables and their string tables; the entries are unpacked in
    bulk with struct (pyelftools parses one Symbol at a time through construct: 0.7 s
    for mariadbd's 30k symbols, against ~15 ms here)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    seen: set[tuple[str, int]] = set()
    out: list[Symbol] = []
    try:
        with open(path, "rb") as fh:
            inputs.opened_fd(path, fh.fileno())
            elf = ELFFile(fh)
            for data, strtab, hidden in _symbol_tables(elf):
                for sym in _unpack(data, strtab, elf.elfclass, elf.little_endian, hidden):
                    ident = (sym.name, sym.value)
                    if ident not in seen:
                        seen.add(ident)
                        out.append(sym)
    except (OSError, ELFError, struct.error) as exc:
        raise ResolveError(f"cannot read the symbols of {path}: {exc}") from None
    return tuple(out)


def _symbol_tables(elf: Any) -> Iterator[tuple[bytes, bytes, frozenset[int]]]:
    """Each symbol table of `elf` (_TABLES order): its raw entries, its string table and
    the indexes of .dynsym entries of a non-default version."""
    from elftools.elf.sections import SymbolTableSection

    for table in _TABLES:
        sec = elf.get_section_by_name(table)
        if not isinstance(sec, SymbolTableSection):
            continue
        strtab = elf.get_section(sec["sh_link"]).data()
        versym = elf.get_section_by_name(".gnu.version") if table == ".dynsym" else None
        yield sec.data(), strtab, _hidden_entries(
            versym.data() if versym is not None else b"", elf.little_endian)


# Elf32_Sym / Elf64_Sym field order differs; both are unpacked to
# (st_name, st_value, st_size, st_info, st_shndx).
_SYM_FORMATS = {32: ("IIIBxH", (0, 1, 2, 3, 4)), 64: ("IBxHQQ", (0, 3, 4, 1, 2))}
SHN_UNDEF = 0
_STT = {0: "STT_NOTYPE", 1: "STT_OBJECT", 2: "STT_FUNC", 3: "STT_SECTION", 4: "STT_FILE",
        5: "STT_COMMON", 6: "STT_TLS", 10: "STT_GNU_IFUNC"}


VERSYM_HIDDEN = 0x8000


def _hidden_entries(versym: bytes, little: bool) -> frozenset[int]:
    """Indexes of .dynsym entries whose .gnu.version entry marks a non-default version."""
    usable = len(versym) - len(versym) % 2
    return frozenset(i for i, (v,) in enumerate(
        struct.iter_unpack("<H" if little else ">H", versym[:usable])) if v & VERSYM_HIDDEN)


def _unpack(data: bytes, strtab: bytes, elfclass: int, little: bool,
            hidden: frozenset[int] = frozenset()) -> list[Symbol]:
    """The defined, named symbols of one table's raw entries (`hidden`: entry indexes)."""
    fmt, order = _SYM_FORMATS[elfclass]
    entry = struct.Struct(("<" if little else ">") + fmt)
    usable = len(data) - len(data) % entry.size
    i_name, i_value, i_size, i_info, i_shndx = order
    out: list[Symbol] = []
    for index, rec in enumerate(entry.iter_unpack(memoryview(data)[:usable])):
        name_at = rec[i_name]
        if not name_at or rec[i_shndx] == SHN_UNDEF:
            continue
        end = strtab.find(b"\0", name_at)
        name = strtab[name_at:end if end >= 0 else len(strtab)].decode("utf-8", "replace")
        if name:
            stt = rec[i_info] & 0xF
            out.append(Symbol(name, rec[i_value], rec[i_size], _STT.get(stt, f"STT_{stt}"),
                              index in hidden))
    return out


# st_info types of code: what a stack's symbol table keeps (stacks/symtab.py)
_FUNC_STT = frozenset((2, 10))  # STT_FUNC, STT_GNU_IFUNC; STT_NOTYPE with a size too
FunctionEntry = tuple[str, int, int, bool]  # name, value, size, hidden


def read_function_symbols(path: str) -> tuple[list[FunctionEntry], bool]:
    """The code symbols of `path` (functions, IFUNCs, sized untyped ones; value not 0)
    as plain tuples, `.symtab` first, deduplicated by (name, value) as find_symbols
    does: the symbolizer's reader (stacks/symtab.py), which needs no Symbol objects and
    no names of data. Decoding only the names it keeps halves the time of a large
    library's tables (libLLVM-15: 46k symbols, 37k of them code). With it, whether the
    file has any defined, named symbol (find_symbols would give some). Raises
    ResolveError."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    seen: set[tuple[str, int]] = set()
    out: list[FunctionEntry] = []
    named = False
    try:
        with open(path, "rb") as fh:
            inputs.opened_fd(path, fh.fileno())
            elf = ELFFile(fh)
            fmt, order = _SYM_FORMATS[elf.elfclass]
            entry = struct.Struct(("<" if elf.little_endian else ">") + fmt)
            i_name, i_value, i_size, i_info, i_shndx = order
            for data, strtab, hidden in _symbol_tables(elf):
                usable = len(data) - len(data) % entry.size
                find = strtab.find
                for index, rec in enumerate(entry.iter_unpack(memoryview(data)[:usable])):
                    stt = rec[i_info] & 0xF
                    if stt not in _FUNC_STT and (stt != 0 or not rec[i_size]):
                        if not named and rec[i_name] and rec[i_shndx] != SHN_UNDEF:
                            end = find(b"\0", rec[i_name])
                            named = end != rec[i_name]
                        continue
                    name_at, value = rec[i_name], rec[i_value]
                    if not name_at or not value or rec[i_shndx] == SHN_UNDEF:
                        continue
                    end = find(b"\0", name_at)
                    name = strtab[name_at:end if end >= 0 else len(strtab)].decode(
                        "utf-8", "replace")
                    if not name or (name, value) in seen:
                        continue
                    seen.add((name, value))
                    out.append((name, value, rec[i_size], index in hidden))
    except (OSError, ELFError, struct.error) as exc:
        raise ResolveError(f"cannot read the symbols of {path}: {exc}") from None
    return out, named or bool(out)


def _key(path: str) -> tuple[str, int, int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        inputs.stat(path)
        raise ResolveError(f"cannot read {path}: {exc.strerror}") from None
    inputs.opened(path, st)  # each use, a result kept or not: an input of this compile
    return (path, st.st_dev, st.st_ino, st.st_mtime_ns)
