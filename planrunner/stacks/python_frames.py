"""CPython frames read in BPF (render/pyframes.py, templates/python_helpers.h) -> Frames,
merged into the native stack where the interpreter ran them.

- `parse_section(raw, at, capacity)`: the `py_n, py_flags, struct pr_pyframe py[N]`
  section of a copy -> `PythonSection` (innermost first); each frame names its code
  object, whose names BPF left in the `pr_pycode` map once per process
  (`RawPyFrame.code_key`, `code_names`: runtime/stacks.py reads them).
- `line_of(table, firstlineno, lasti)`: CPython 3.11's location table (`co_linetable`,
  Objects/locations.md) -> the line of the instruction at byte offset `lasti`.
- `LineTables.line(pid, code, frame)`: the table is read from the process's memory
  (/proc/PID/mem) the first time a code object is met, and kept by (pid, code object,
  table address): a process gone before that shows the function's first line.
- `merge(native, python)`: each `_PyEval_EvalFrameDefault` frame of the native stack
  (innermost first) is replaced by the Python frames its activation runs: the frames
  up to and including the next one marked as an eval loop's entry (py-spy --native
  shows stacks so). Python frames left over (a native stack cut short) go outermost.

A Python frame is `Frame(address=code object, symbol=qualified name, offset=line,
module=file name, kind="python", line=line)`: two samples on one line of one function
are one frame in every process.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from planrunner.stacks.frame import Frame

PYFRAME = struct.Struct("<QQQQiiII")  # struct pr_pyframe
CODE_KEY = struct.Struct("<IiQQQ")  # struct pr_pycode_key
CODE_NAMES = struct.Struct("<64s64s")  # struct pr_pycode
SECTION_HEAD = struct.Struct("<II")
ENTRY = 1  # pr_pyframe.flags: PR_PYF_ENTRY
# py_flags (PR_PY_*)
FOUND, NO_THREAD, MORE, FAULT = 1, 2, 4, 8
EVAL_LOOP = "_PyEval_EvalFrameDefault"
NAME_CAP, FILE_CAP = 63, 63  # bytes BPF copies of each string (PR_PY_NAME/FILE - 1)


@dataclass(frozen=True, slots=True)
class RawPyFrame:
    code: int
    qualname: int  # the str objects: with the code, the key of its names (code_key)
    filename: int
    linetable: int
    lasti: int  # bytes from the code's first instruction (-2: not started)
    firstlineno: int
    entry: bool

    def code_key(self, pid: int) -> bytes:
        """struct pr_pycode_key: where BPF left this code's names."""
        return CODE_KEY.pack(pid, self.firstlineno, self.code, self.qualname, self.filename)


def code_names(value: bytes) -> tuple[str, str]:
    """struct pr_pycode -> (qualified name, file name; its tail, after "...", when cut)."""
    name, file = CODE_NAMES.unpack_from(value)
    text = _text(file)
    if len(file.split(b"\0", 1)[0]) >= FILE_CAP:
        text = "..." + text
    return _text(name) or "?", text or "?"


@dataclass(frozen=True, slots=True)
class PythonSection:
    """A copy's Python frames: `raw` holds their records as BPF wrote them (equal bytes,
    equal frames), unpacked one by one on demand (`frame(i)`, `frames`): a profile's
    reader names most of a copy's frames by their bytes alone (runtime/stacks.py)."""

    flags: int
    raw: bytes = b""

    @property
    def count(self) -> int:
        return len(self.raw) // PYFRAME.size

    def record(self, i: int) -> bytes:
        return self.raw[i * PYFRAME.size:(i + 1) * PYFRAME.size]

    def frame(self, i: int) -> RawPyFrame:
        return raw_frame(self.record(i))

    @property
    def frames(self) -> tuple[RawPyFrame, ...]:
        return tuple(self.frame(i) for i in range(self.count))


def section_size(capacity: int) -> int:
    return SECTION_HEAD.size + capacity * PYFRAME.size if capacity else 0


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


# struct pr_pyframe bytes -> its RawPyFrame: a pure function of the bytes, remembered
# because a profile of deep Python code carries the same frames in copy after copy
# (unpacking 42 frames into objects was ~75 us a copy)
_PARSED: dict[bytes, RawPyFrame] = {}
PARSED_KEPT = 1 << 16


def parse_section(raw: bytes | memoryview, at: int, capacity: int) -> PythonSection:
    n, flags = SECTION_HEAD.unpack_from(raw, at)
    first_at = at + SECTION_HEAD.size
    return PythonSection(flags, bytes(raw[first_at:first_at + min(n, capacity) * PYFRAME.size]))


def raw_frame(rec: bytes) -> RawPyFrame:
    """One struct pr_pyframe's fields (remembered by its bytes: see _PARSED)."""
    frame = _PARSED.get(rec)
    if frame is None:
        code, qualname, filename, table, lasti, first, fl, _pad = PYFRAME.unpack(rec)
        frame = RawPyFrame(code, qualname, filename, table, lasti, first, bool(fl & ENTRY))
        if len(_PARSED) >= PARSED_KEPT:
            _PARSED.clear()
        _PARSED[rec] = frame
    return frame


def _varint(table: bytes, i: int) -> tuple[int, int]:
    b = table[i]
    i += 1
    val, shift = b & 63, 0
    while b & 64 and i < len(table):
        b = table[i]
        i += 1
        shift += 6
        val |= (b & 63) << shift
    return val, i


def _svarint(table: bytes, i: int) -> tuple[int, int]:
    val, i = _varint(table, i)
    return (-(val >> 1) if val & 1 else val >> 1), i


def line_of(table: bytes, firstlineno: int, lasti: int) -> int | None:
    """The line of the instruction `lasti` bytes into the code (None: the instruction
    has no line, or the table ends before it)."""
    if lasti < 0:
        return firstlineno
    line, addr, i = firstlineno, 0, 0
    try:
        while i < len(table):
            first = table[i]
            i += 1
            code, length = (first >> 3) & 15, (first & 7) + 1
            delta = 0
            if code == 14:  # long form: line delta, end line, column, end column
                delta, i = _svarint(table, i)
                for _ in range(3):
                    _, i = _varint(table, i)
            elif code == 13:  # no columns
                delta, i = _svarint(table, i)
            elif 10 <= code <= 12:  # one line, delta 0..2, two column bytes
                delta, i = code - 10, i + 2
            elif code < 10:  # short form: one column byte
                i += 1
            line += delta
            end = addr + length * 2
            if addr <= lasti < end:
                return None if code == 15 else line
            addr = end
    except IndexError:
        return None
    return None


class LineTables:
    """Each code object's line table, read from its process once (see the docstring)."""

    MAX_BYTES = 1 << 16

    def __init__(self) -> None:
        self._tables: dict[tuple[int, int, int], bytes | None] = {}
        # (pid, code, table, lasti) -> line: a profile meets the same few instructions
        # of the same functions over and over (decoding a table is ~30 us a frame)
        self._lines: dict[tuple[int, int, int, int], int] = {}
        self.exact: set[tuple[int, int, int, int]] = set()  # of those: from the table

    def line(self, pid: int, code: int, frame: RawPyFrame) -> int:
        at = (pid, code, frame.linetable, frame.lasti)
        known = self._lines.get(at)
        if known is not None:
            return known
        key = (pid, code, frame.linetable)
        if key not in self._tables:
            self._tables[key] = _read_bytes_object(pid, frame.linetable, self.MAX_BYTES)
        table = self._tables[key]
        found = line_of(table, frame.firstlineno, frame.lasti) if table else None
        if len(self._lines) >= 1 << 20:  # bounded: a long run over many programs
            self._lines.clear()
            self.exact.clear()
        line = self._lines[at] = found if found is not None else frame.firstlineno
        if found is not None:
            self.exact.add(at)
        return line


def _read_bytes_object(pid: int, address: int, cap: int) -> bytes | None:
    """A bytes object's contents in process `pid` (ob_size at 16, ob_sval at 32)."""
    if not address or not pid:
        return None
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(address + 16)
            size = int.from_bytes(mem.read(8), "little")
            if not 0 <= size <= cap:
                return None
            mem.seek(address + 32)
            data = mem.read(size)
    except (OSError, ValueError, OverflowError):
        return None
    return data if len(data) == size else None


def python_frame(raw: RawPyFrame, names: tuple[str, str], line: int) -> Frame:
    return Frame(raw.code, names[0], line, names[1], kind="python", line=line)


def merge_shape(native: Sequence[Frame]) -> tuple[Frame, ...]:
    """What of `native` shows in `merge`'s result whatever the Python frames, given at
    least one: the first eval loop frame is replaced by the innermost frames, so its
    place in the loop (the sampled instruction, most often) does not show."""
    out = list(native)
    for i, f in enumerate(out):
        if f.symbol == EVAL_LOOP and f.kind == "native":
            out[i] = Frame(0, EVAL_LOOP, -1, f.module)
            break
    return tuple(out)


def merge(native: Sequence[Frame], python: Sequence[tuple[Frame, bool]]) -> list[Frame]:
    """`native` innermost first, with each eval loop frame replaced by the Python frames
    (innermost first, each with its entry mark) its activation runs."""
    groups: list[list[Frame]] = []
    current: list[Frame] = []
    for frame, entry in python:
        current.append(frame)
        if entry:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    out: list[Frame] = []
    for f in native:
        if f.symbol == EVAL_LOOP and f.kind == "native" and groups:
            out.extend(groups.pop(0))
        else:
            out.append(f)
    for group in groups:
        out.extend(group)
    return out
