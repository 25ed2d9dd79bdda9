"""Symbol lookup over `.symtab` and `.dynsym` (pyelftools, imported lazily).

`find_symbols(path)` -> every named symbol of both tables (deduplicated);
`lookup_symbol(path, name)` -> the symbols called `name`. A name not found as written is
tried against C++ demangled names (one batched `c++filt` call per file), either exactly
(`ns::f(int)`) or without the parameter list (`ns::f`); a demangled match is accepted only
when it names a single address, otherwise ResolveError lists the candidates.
Used for uprobes on functions and for rip-relative USDT operands (`sym(%rip)`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from planrunner.errors import ResolveError

_TABLES = (".symtab", ".dynsym")


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    value: int  # link-time vaddr
    size: int
    type: str  # 'STT_FUNC', 'STT_OBJECT', ...


_SYMS: dict[tuple[str, int, int, int], tuple[Symbol, ...]] = {}
_DEMANGLED: dict[tuple[str, int, int, int], dict[str, str]] = {}


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
        return exact
    demangled = _demangled_names(path, syms)
    hits = [s for s in syms if demangled.get(s.name) == name]
    if not hits:
        hits = [s for s in syms if _strip_params(demangled.get(s.name, "")) == name]
    if len({s.value for s in hits}) > 1:
        listed = ", ".join(sorted({f"{demangled[s.name]} ({s.name})" for s in hits})[:8])
        raise ResolveError(
            f"'{name}' is ambiguous in {path}: {len(hits)} symbols match",
            hints=(f"use the full signature or the mangled name: {listed}",))
    return hits


def demangle(names: list[str]) -> dict[str, str]:
    """Demangle C++ names with one `c++filt` process. Names it leaves alone are omitted;
    an empty dict when c++filt is not installed."""
    todo = [n for n in names if n.startswith("_Z")]
    tool = shutil.which("c++filt")
    if not todo or tool is None:
        return {}
    out = subprocess.run([tool], input="\n".join(todo) + "\n", capture_output=True,
                         text=True, check=False).stdout.splitlines()
    if len(out) != len(todo):
        return {}
    return {m: d for m, d in zip(todo, out, strict=True) if d != m}


def _demangled_names(path: str, syms: tuple[Symbol, ...]) -> dict[str, str]:
    key = _key(path)
    names = _DEMANGLED.get(key)
    if names is None:
        names = _DEMANGLED[key] = demangle(sorted({s.name for s in syms}))
    return names


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
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    seen: set[tuple[str, int]] = set()
    out: list[Symbol] = []
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            for table in _TABLES:
                sec = elf.get_section_by_name(table)
                if not isinstance(sec, SymbolTableSection):
                    continue
                for sym in sec.iter_symbols():
                    if not sym.name or sym["st_shndx"] == "SHN_UNDEF":
                        continue
                    ident = (sym.name, sym["st_value"])
                    if ident not in seen:
                        seen.add(ident)
                        out.append(Symbol(sym.name, sym["st_value"], sym["st_size"],
                                          str(sym["st_info"]["type"])))
    except (OSError, ELFError) as exc:
        raise ResolveError(f"cannot read the symbols of {path}: {exc}") from None
    return tuple(out)


def _key(path: str) -> tuple[str, int, int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ResolveError(f"cannot read {path}: {exc.strerror}") from None
    return (path, st.st_dev, st.st_ino, st.st_mtime_ns)
