"""C++ and Rust symbol names for people: `demangle(names)` -> {mangled: demangled}.

The demangler is GNU c++filt (binutils, already a planrunner apt dependency and already
what planrunner/elf/symbols.py runs): it is maintained with GCC's libiberty and reads
Itanium C++ (`_Z…`), Rust legacy (`_ZN…17h<hash>E`) and Rust v0 (`_R…`, binutils >= 2.36;
Debian 12 ships 2.40). The PyPI candidates were weighed and not taken: cxxfilt wraps
libstdc++'s __cxa_demangle (C++ only, last release 2021), cpp-demangle is C++ only,
rust-demangler was last released in 2021, and `demangle` is a young pure-Python
reimplementation. One c++filt process per batch; results are cached for the process.
Rust legacy names end in a hash (`::h0123456789abcdef`) and v0 names carry crate
disambiguators (`fxrust[69a6c261fe3333cc]::net`): both are dropped, as rustfilt and
rustc-demangle's alternate form do. Names c++filt leaves as they are are absent from
the result; without c++filt the result is empty (frames keep their mangled names).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable

_CACHE: dict[str, str | None] = {}
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_RUST_V0_DISAMBIGUATOR = re.compile(r"\[[0-9a-f]{1,16}\]")


def is_mangled(name: str) -> bool:
    return name.startswith(("_Z", "_R", "__Z"))


def demangle(names: Iterable[str]) -> dict[str, str]:
    todo = sorted({n for n in names if is_mangled(n) and n not in _CACHE and "\n" not in n})
    if todo:
        _run(todo)
    out: dict[str, str] = {}
    for n in names:
        d = _CACHE.get(n)
        if d is not None:
            out[n] = d
    return out


def demangle_one(name: str) -> str:
    return demangle([name]).get(name, name)


def _run(todo: list[str]) -> None:
    tool = shutil.which("c++filt")
    lines: list[str] = []
    if tool is not None:
        proc = subprocess.run([tool], input="\n".join(todo) + "\n", capture_output=True,
                              text=True, check=False)
        lines = proc.stdout.splitlines()
    if len(lines) != len(todo):
        lines = list(todo)
    for mangled, pretty in zip(todo, lines, strict=True):
        if mangled.startswith("_ZN") and _RUST_HASH.search(pretty):
            pretty = _RUST_HASH.sub("", pretty)
        elif mangled.startswith("_R"):
            pretty = _RUST_V0_DISAMBIGUATOR.sub("", pretty)
        _CACHE[mangled] = pretty if pretty != mangled else None
