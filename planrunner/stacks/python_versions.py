"""Which CPython a binary is, and where its frames are: the structure offsets BPF walks.

Debian's python3.11 has no debug symbols, so the layouts come from a table per CPython
minor version (`VERSIONS`), taken from the interpreter's own headers (offsetof over
`Include/internal`, `python3.11-dev`), and checked against the binary where it can be:
`Py_Version` (PY_VERSION_HEX, exported since 3.11) names the version, and the size of
the `_PyRuntime` symbol must be the size of `_PyRuntimeState` the table was made from (a
build whose runtime state differs in size lays it out differently: refused, not guessed).

The walk (templates/python_helpers.h): `_PyRuntime` -> the thread holding the GIL
(`gilstate.tstate_current`), else the interpreter's list of thread states, searched for
the event's thread (`native_thread_id`) -> `cframe->current_frame` -> `previous` ...;
each `_PyInterpreterFrame` names its code object (`co_qualname`, `co_filename`,
`co_firstlineno`, `co_linetable`) and the instruction it runs (`prev_instr`);
`is_entry` marks the first frame of each `_PyEval_EvalFrameDefault` activation.

`python_binary(path)` -> `PythonBinary` (the BPF map's value for that file) or raises
`UnsupportedPython` with what to do. Only interpreters linked into their executable are
found this way (the running process is recognised in BPF by its executable's device and
inode); a `--enable-shared` build keeps `_PyRuntime` in libpython: not supported yet.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

# Field order of struct pr_pyversion (templates/python_helpers.h): two u64, then u16s.
OFFSET_FIELDS = (
    "interp_head",     # _PyRuntimeState.interpreters.head
    "tstate_current",  # _PyRuntimeState.gilstate.tstate_current (0: look it up by tid)
    "threads_head",    # PyInterpreterState.threads.head
    "ts_next",         # PyThreadState.next
    "ts_native_tid",   # PyThreadState.native_thread_id
    "ts_cframe",       # PyThreadState.cframe
    "cf_frame",        # _PyCFrame.current_frame
    "f_code",          # _PyInterpreterFrame.f_code
    "f_previous",      # _PyInterpreterFrame.previous
    "f_prev_instr",    # _PyInterpreterFrame.prev_instr
    "f_is_entry",      # _PyInterpreterFrame.is_entry
    "f_owner",         # _PyInterpreterFrame.owner
    "co_firstlineno",  # PyCodeObject.co_firstlineno: one read from here ...
    "co_filename",     # ... covers these three (at most 80 bytes further)
    "co_qualname",
    "co_linetable",
    "co_code",         # PyCodeObject.co_code_adaptive: the first instruction
    "str_length",      # PyASCIIObject.length
    "str_state",       # PyASCIIObject.state
    "str_ascii",       # sizeof(PyASCIIObject): an ASCII string's characters
    "str_utf8",        # PyCompactUnicodeObject.utf8 (utf8_length 8 bytes before)
)
_VALUE = struct.Struct(f"<QQ{len(OFFSET_FIELDS)}H")
VALUE_SIZE = (_VALUE.size + 7) // 8 * 8
# co_linetable's bytes object: ob_size and ob_sval (user space reads the table)
BYTES_SIZE, BYTES_DATA = 16, 32


@dataclass(frozen=True, slots=True)
class Layout:
    """One CPython minor version's offsets (x86-64 and aarch64 alike: LP64)."""

    runtime_size: int  # sizeof(_PyRuntimeState): the _PyRuntime symbol's st_size
    offsets: dict[str, int]


# offsetof() over CPython 3.11.2's headers (python3.11-dev), checked against Debian's
# /usr/bin/python3.11 3.11.2 and a 3.11.7 build (same _PyRuntime size).
VERSIONS: dict[tuple[int, int], Layout] = {
    (3, 11): Layout(166688, {
        "interp_head": 40, "tstate_current": 576, "threads_head": 16, "ts_next": 8,
        "ts_native_tid": 160, "ts_cframe": 56, "cf_frame": 8, "f_code": 32,
        "f_previous": 48, "f_prev_instr": 56, "f_is_entry": 68, "f_owner": 69,
        "co_firstlineno": 72, "co_filename": 112, "co_qualname": 128,
        "co_linetable": 136, "co_code": 184, "str_length": 16, "str_state": 32,
        "str_ascii": 48, "str_utf8": 56}),
}


class UnsupportedPython(Exception):
    """A CPython whose frames planrunner cannot read: the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class PythonBinary:
    """A CPython executable BPF can read frames of: its file identity (the map key),
    where `_PyRuntime` is, and the version's offsets."""

    path: str
    version: tuple[int, int, int]
    dev: int  # the kernel's dev_t of the file's filesystem (sb->s_dev encoding)
    ino: int
    runtime: int  # link-time address of _PyRuntime
    text_vaddr: int  # link-time address of the lowest executable segment
    layout: Layout

    def key_bytes(self) -> bytes:
        """struct pr_pybin: the executable's (dev, inode)."""
        return struct.pack("<QQ", self.dev, self.ino)

    def value_bytes(self) -> bytes:
        """struct pr_pyversion."""
        packed = _VALUE.pack(self.runtime, self.text_vaddr,
                             *(self.layout.offsets[f] for f in OFFSET_FIELDS))
        return packed.ljust(VALUE_SIZE, b"\0")


def kernel_dev(st_dev: int) -> int:
    """stat's st_dev -> the kernel's internal dev_t (MAJOR << 20 | MINOR), as sb->s_dev
    holds it."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


def looks_like_python(path: str) -> bool:
    """A name worth a look: python3.11, python3, python3.11d (not python3-config)."""
    name = os.path.basename(path)
    return name.startswith("python") and "-" not in name and not name.endswith(".py")


def python_binary(path: str) -> PythonBinary:
    """The frames of `path`'s interpreter, or UnsupportedPython saying why not."""
    from planrunner.elf.reader import open_binary, vaddr_to_offset
    from planrunner.elf.symbols import find_symbols

    real = os.path.realpath(path)
    try:
        info = open_binary(real)
        syms = {s.name: s for s in find_symbols(real)}
    except (OSError, ValueError) as exc:
        raise UnsupportedPython(f"{path}: cannot be read as ELF ({exc})") from None
    version_sym, runtime_sym = syms.get("Py_Version"), syms.get("_PyRuntime")
    if runtime_sym is None:
        raise UnsupportedPython(
            f"{path} has no _PyRuntime symbol: not a CPython interpreter, or one built "
            "with --enable-shared (its runtime is in libpython), which planrunner does "
            "not read frames of yet")
    if version_sym is None:
        raise UnsupportedPython(
            f"{path} has no Py_Version symbol: a CPython older than 3.11, whose frames "
            "planrunner does not read (3.11 is supported)")
    with open(real, "rb") as f:
        f.seek(vaddr_to_offset(info, version_sym.value))
        hexversion = int.from_bytes(f.read(4), "little" if info.little_endian else "big")
    version = (hexversion >> 24, (hexversion >> 16) & 0xFF, (hexversion >> 8) & 0xFF)
    layout = VERSIONS.get(version[:2])
    shown = ".".join(map(str, version))
    if layout is None:
        known = ", ".join(f"{a}.{b}" for a, b in sorted(VERSIONS))
        raise UnsupportedPython(
            f"{path} is CPython {shown}, whose frame layout planrunner does not know "
            f"(it knows {known}): its stacks show the interpreter's native frames only")
    if runtime_sym.size != layout.runtime_size:
        raise UnsupportedPython(
            f"{path} is CPython {shown} but its _PyRuntime is {runtime_sym.size} bytes, "
            f"not the {layout.runtime_size} of the layout planrunner knows: a build with "
            "other options; its stacks show the interpreter's native frames only")
    text = min((s.vaddr for s in info.segments if s.executable), default=None)
    if text is None:
        raise UnsupportedPython(f"{path} has no executable segment")
    st = os.stat(real)
    return PythonBinary(real, version, kernel_dev(st.st_dev), st.st_ino,
                        runtime_sym.value, text, layout)
