"""Where an IFUNC symbol's calls really go.

An STT_GNU_IFUNC symbol (glibc's strlen, memcpy, strcmp...) is not the function: its
address is a resolver that the dynamic linker calls once, at relocation, to pick an
implementation for this CPU (__strlen_avx2, __strlen_evex, ...). A uprobe on the symbol
fires when a process starts and is relocated, never on a call; bcc's trace and bpftrace
attach there (2 hits for a program that called strlen 1000 times).

`resolve_ifunc(path, symbol)` asks the dynamic linker of this very process: when `path`
is already loaded here (libc, libm, the loader: what IFUNCs live in), `dlsym` returns the
implementation its resolver chose, which is the one a target on this machine gets too
(same file, same CPU). dladdr() gives where the file is mapped, and the link-time
address follows. A library that is not loaded here is never dlopen()ed (its
constructors would run inside planrunner): that case is an error naming the way out.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from planrunner import inputs
from planrunner.elf.reader import open_binary
from planrunner.elf.symbols import Symbol, find_symbols
from planrunner.errors import ResolveError


@dataclass(frozen=True, slots=True)
class IfuncTarget:
    vaddr: int  # link-time address of the implementation in the same file
    name: str  # its symbol, or "" when the file does not name it (stripped .symtab)
    size: int  # 0 when unknown


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def resolve_ifunc(path: str, symbol: Symbol) -> IfuncTarget:
    """The implementation `symbol` (an STT_GNU_IFUNC of `path`) resolves to here."""
    inputs.cpu()  # the resolver's choice is this CPU's: another CPU model, another answer
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_LAZY | os.RTLD_NOLOAD)
        address = ctypes.cast(getattr(lib, symbol.name), ctypes.c_void_p).value
    except (OSError, AttributeError):
        raise _unresolved(path, symbol, "planrunner has not loaded that file itself, and "
                          "will not dlopen() it (its constructors would run here)") from None
    info = _DlInfo()
    libdl = ctypes.CDLL(None)
    if not address or not libdl.dladdr(ctypes.c_void_p(address), ctypes.byref(info)):
        raise _unresolved(path, symbol, "the dynamic linker did not say where it points")
    fname = (info.dli_fname or b"").decode(errors="replace")
    try:
        same = os.path.samefile(fname, path)
    except OSError:
        same = False
    if not same:
        raise _unresolved(path, symbol, f"it points into {fname or 'another object'}")
    first_load = min(seg.vaddr for seg in open_binary(path).segments) & ~(os.sysconf(
        "SC_PAGE_SIZE") - 1)
    vaddr = address - (info.dli_fbase or 0) + first_load
    for sym in find_symbols(path):
        if sym.type == "STT_FUNC" and sym.value <= vaddr < sym.value + max(sym.size, 1):
            return IfuncTarget(vaddr, sym.name, sym.size if sym.value == vaddr else 0)
    return IfuncTarget(vaddr, "", 0)


def _unresolved(path: str, symbol: Symbol, why: str) -> ResolveError:
    impls = sorted({s.name for s in find_symbols(path)
                    if s.type == "STT_FUNC" and symbol.name in s.name and s.name != symbol.name})
    hint = (f"probe an implementation by name instead: {', '.join(impls[:8])}" if impls else
            "probe the implementation by name or address (`objdump -d` shows the "
            "resolver's choices)")
    return ResolveError(
        f"'{symbol.name}' in {path} is an IFUNC (a resolver that picks an implementation "
        f"at load time): a uprobe on it would fire only when the resolver runs, and its "
        f"implementation could not be found ({why})", hints=(hint,))
