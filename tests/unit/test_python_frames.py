"""CPython frames, the user-space half (stacks/python_frames.py, python_versions.py,
render/pyframes.py): the line table decoded against the interpreter's own answer, the
frames put in place of the eval loop, the record section, the version checks, and the C
a plan gets with and without `python`."""

from __future__ import annotations

import dis
import os
import struct
import sys
import types
from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan
from planrunner.stacks.capture import parse_ustack_record
from planrunner.stacks.formats import fold_name, frame_dict, text_line
from planrunner.stacks.frame import Frame
from planrunner.stacks.python_frames import (
    CODE_KEY,
    CODE_NAMES,
    ENTRY,
    FOUND,
    PYFRAME,
    RawPyFrame,
    code_names,
    line_of,
    merge,
    merge_shape,
    python_frame,
)
from planrunner.stacks.python_versions import (
    VERSIONS,
    UnsupportedPython,
    kernel_dev,
    python_binary,
)

PYTHON = "/usr/bin/python3.11"


def _codes(code: types.CodeType) -> list[types.CodeType]:
    out = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += _codes(const)
    return out


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the 3.11 line table format")
def test_line_of_agrees_with_cpython_for_every_instruction_of_a_module() -> None:
    """Every instruction of every function of a real module (the test's own and
    planrunner's pipeline): the line the decoder finds is the one dis reports."""
    checked = 0
    for path in (Path(__file__), Path(dis.__file__)):
        for code in _codes(compile(path.read_text(), str(path), "exec")):
            for offset, line in _instruction_lines(code):
                assert line_of(code.co_linetable, code.co_firstlineno, offset) == line, \
                    (path.name, code.co_qualname, offset)
                checked += 1
    assert checked > 5000


def _instruction_lines(code: types.CodeType) -> list[tuple[int, int | None]]:
    """(byte offset, line) of each code unit, as CPython's own co_lines() gives them."""
    out = []
    for start, end, line in code.co_lines():
        out += [(off, line) for off in range(start, end, 2)]
    return out


def test_line_of_before_the_first_instruction_is_the_first_line() -> None:
    assert line_of(b"", 42, -2) == 42
    assert line_of(b"", 42, 10) is None  # past the table


def _py(name: str, entry: bool = False) -> tuple[Frame, bool]:
    return Frame(id(name), name, 1, "/app/x.py", kind="python", line=1), entry


def _native(name: str) -> Frame:
    return Frame(0x1000 + len(name), name, 0, "/usr/bin/python3.11")


def test_merge_puts_each_activation_in_place_of_its_eval_loop_frame() -> None:
    """inner and middle run in the innermost _PyEval_EvalFrameDefault (middle is its
    entry), outer and <module> in the outer one, with a C call between them."""
    native = [_native("getppid"), _native("_PyEval_EvalFrameDefault"),
              _native("PyObject_Call"), _native("_PyEval_EvalFrameDefault"),
              _native("PyEval_EvalCode"), _native("main")]
    python = [_py("inner"), _py("middle", True), _py("outer"), _py("<module>", True)]
    got = [f.symbol for f in merge(native, python)]
    assert got == ["getppid", "inner", "middle", "PyObject_Call", "outer", "<module>",
                   "PyEval_EvalCode", "main"]


def test_merge_keeps_python_frames_of_a_native_stack_cut_short_outermost() -> None:
    native = [_native("_PyEval_EvalFrameDefault")]
    python = [_py("inner", True), _py("outer", True)]
    assert [f.symbol for f in merge(native, python)] == ["inner", "outer"]
    # and an eval loop frame with no Python frames left stays as it was
    assert [f.symbol for f in merge([_native("_PyEval_EvalFrameDefault")] * 2,
                                    [_py("only", True)])] == \
        ["only", "_PyEval_EvalFrameDefault"]


def test_parse_section_reads_the_frames_bpf_wrote() -> None:
    frames = [PYFRAME.pack(0x7000, 0x7100, 0x7200, 0x8000, 10, 5, ENTRY, 0),
              PYFRAME.pack(0x9000, 0x9100, 0x9200, 0, -2, 1, 0, 0)]
    raw = struct.pack("<IIQ4Q", 42, 3, 7, 0x401000, 0x7ffc0000, 0, 0) + \
        struct.pack("<II", 2, FOUND) + b"".join(frames) + b"\0" * PYFRAME.size + b"abc"
    cap = parse_ustack_record(raw, python=3)
    assert cap.python is not None and cap.python.flags == FOUND
    first, second = cap.python.frames
    assert first == RawPyFrame(0x7000, 0x7100, 0x7200, 0x8000, 10, 5, True)
    assert not second.entry and second.lasti == -2
    assert cap.window.data == b"abc"  # the stack bytes start after the section
    # the key of its names in pr_pycode: the process, then what the frame holds
    assert first.code_key(42) == CODE_KEY.pack(42, 5, 0x7000, 0x7100, 0x7200)


def test_code_names_keep_a_long_files_tail() -> None:
    value = CODE_NAMES.pack(b"Thing.run\0", b"x" * 63 + b"\0")
    assert code_names(value) == ("Thing.run", "..." + "x" * 63)
    assert code_names(CODE_NAMES.pack(b"\0", b"/app/a.py\0")) == ("?", "/app/a.py")


def test_a_python_frame_in_json_text_and_folded() -> None:
    raw = RawPyFrame(0x7000, 1, 2, 0, 4, 2, False)
    f = python_frame(raw, ("Thing.run", "/app/service.py"), 7)
    assert frame_dict(f) == {"address": 0x7000, "symbol": "Thing.run", "offset": 7,
                             "module": "/app/service.py", "line": 7, "kind": "python"}
    assert text_line(f) == "    Thing.run (service.py:7) [python]"
    assert fold_name(f) == "Thing.run (service.py)"
    # one line of one function is one frame whatever the code object's address
    other = RawPyFrame(0x9000, 1, 2, 0, 8, 2, False)
    assert f == python_frame(other, ("Thing.run", "/app/service.py"), 7)


@pytest.mark.skipif(not os.path.exists(PYTHON), reason=f"{PYTHON} is not installed")
def test_debians_python311_is_recognised_and_checked() -> None:
    binary = python_binary(PYTHON)
    assert binary.version[:2] == (3, 11)
    st = os.stat(PYTHON)
    assert (binary.dev, binary.ino) == (kernel_dev(st.st_dev), st.st_ino)
    assert binary.value_bytes()[:16] == struct.pack("<QQ", binary.runtime,
                                                    binary.text_vaddr)
    assert binary.layout is VERSIONS[(3, 11)]


def test_a_binary_without_the_runtime_is_refused_with_the_reason() -> None:
    with pytest.raises(UnsupportedPython, match="no _PyRuntime symbol.*--enable-shared"):
        python_binary("/bin/ls")


def _plan(tmp_path: Path, stack: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(f"""
planrunner: 1
stack: {stack}
probes:
  sample: {{profile: {{hz: 99}}}}
outputs:
  - count: sample
    by: [ustack]
""")
    return str(path)


def test_python_frames_are_read_by_default_and_a_plan_turns_them_off(tmp_path: Path) -> None:
    _, _, program = compile_plan(_plan(tmp_path, "{python_frames: 8}"), {})
    assert "pr_py_frames(&pr_uc0->py_n, &pr_uc0->py_flags, pr_uc0->py, 8);" in \
        program.c_source
    assert program.python_bins_map == "pr_pybins" and program.stack_maps.python == 8
    assert "PR_TASK_MM_OFFSET" in [c.macro for c in program.runtime_constants]
    _, _, off = compile_plan(_plan(tmp_path, "{python: false}"), {})
    assert "pr_py_frames" not in off.c_source and "pr_pyframe" not in off.c_source
    assert off.python_bins_map == "" and off.stack_maps.python == 0


def test_a_python_frame_is_remembered_only_once_its_names_were_read() -> None:
    """runtime/stacks.py keeps each (pid, raw frame)'s Frame: a code object whose names
    were not in the codes map ("?", evicted or not written yet) is asked again, and the
    same raw frame in another process is named from that process's key."""
    from planrunner.runtime.stacks import StackResolver

    names: dict[bytes, bytes] = {}

    class Codes:
        def map_value(self, _map: str, key: bytes) -> bytes | None:
            return names.get(key)

    resolver = StackResolver(Codes())  # type: ignore[arg-type]
    resolver.python_codes = "pr_pycode"
    raw = PYFRAME.pack(0x7000, 0x7100, 0x7200, 0, -2, 5, ENTRY, 0)
    record = struct.pack("<IIQ4Q", 42, 0, 7, 0x401000, 0x7ffc0000, 0, 0) + \
        struct.pack("<II", 1, FOUND) + raw
    cap = parse_ustack_record(record, python=1)
    native = [_native("_PyEval_EvalFrameDefault")]

    def named(capture: object) -> tuple[str | None, str]:
        (frame,) = resolver._with_python(capture, native)  # type: ignore[arg-type]
        return frame.symbol, frame.module

    assert named(cap) == ("?", "?")
    frame = cap.python.frames[0] if cap.python else None
    assert frame is not None
    names[frame.code_key(42)] = CODE_NAMES.pack(b"spin\0", b"/app/spin.py\0")
    assert named(cap) == ("spin", "/app/spin.py")  # "?" was not kept
    assert named(cap) == ("spin", "/app/spin.py")
    other = parse_ustack_record(struct.pack("<IIQ4Q", 43, 0, 7, 0x401000, 0x7ffc0000, 0, 0)
                                + struct.pack("<II", 1, FOUND) + raw, python=1)
    names[frame.code_key(43)] = CODE_NAMES.pack(b"other\0", b"/app/other.py\0")
    assert named(other) == ("other", "/app/other.py")
    assert named(cap) == ("spin", "/app/spin.py")


def test_a_frame_parsed_again_from_the_same_bytes_is_the_same_frame() -> None:
    """parse_section remembers each struct pr_pyframe's bytes: equal bytes give the frame
    parsed first, a byte changed (another instruction) gives its own."""
    def record(lasti: int) -> bytes:
        return struct.pack("<IIQ4Q", 42, 0, 7, 0x401000, 0x7ffc0000, 0, 0) + \
            struct.pack("<II", 1, FOUND) + PYFRAME.pack(0x7000, 0x7100, 0x7200, 0, lasti,
                                                        5, ENTRY, 0)

    first = parse_ustack_record(record(10), python=1).python
    again = parse_ustack_record(memoryview(record(10)), python=1).python
    other = parse_ustack_record(record(12), python=1).python
    assert first is not None and again is not None and other is not None
    assert again.frames[0] is first.frames[0]
    assert other.frames[0] == RawPyFrame(0x7000, 0x7100, 0x7200, 0, 12, 5, True)


def test_a_python_stack_seen_again_is_named_from_its_bytes_at_once() -> None:
    """runtime/stacks.py keeps a section's named frames by (pid, its raw records): the
    same frames in a later copy are the same Frame objects without a lookup per frame;
    a section with a frame not named yet is not kept (test above), nor one of another
    process, nor another instruction."""
    from planrunner.runtime.stacks import StackResolver

    asked: list[bytes] = []

    class Codes:
        def map_value(self, _map: str, key: bytes) -> bytes | None:
            asked.append(key)
            return CODE_NAMES.pack(b"f%d\0" % len(asked), b"/app/x.py\0")

    resolver = StackResolver(Codes())  # type: ignore[arg-type]
    resolver.python_codes = "pr_pycode"

    def capture(pid: int, lasti: int) -> object:
        raws = [PYFRAME.pack(0x7000 + i * 0x100, 0x7100, 0x7200, 0, lasti, 5, ENTRY * (i == 1),
                             0) for i in range(2)]
        return parse_ustack_record(struct.pack("<IIQ4Q", pid, 0, 7, 0x401000, 0x7ffc0000, 0, 0)
                                   + struct.pack("<II", 2, FOUND) + b"".join(raws), python=2)

    native = [_native("_PyEval_EvalFrameDefault")]
    first = resolver._with_python(capture(42, 10), native)  # type: ignore[arg-type]
    assert [f.symbol for f in first] == ["f1", "f2"] and len(asked) == 2
    again = resolver._with_python(capture(42, 10), native)  # type: ignore[arg-type]
    assert again == first and all(a is b for a, b in zip(again, first, strict=True))
    assert len(asked) == 2
    resolver._with_python(capture(43, 10), native)  # type: ignore[arg-type]
    assert len(asked) == 4  # another process: its own names
    moved = resolver._with_python(capture(42, 12), native)  # type: ignore[arg-type]
    assert [f.symbol for f in moved] == ["f1", "f2"] and len(asked) == 4  # names known


def test_natives_of_one_shape_merge_into_the_same_stack_with_any_python_frames() -> None:
    """merge_shape is what a light copy's class stands for (runtime/stack_templates.py):
    two native stacks of one shape give the same merged stack whatever Python frames
    (at least one) go in, over every small native stack and section; and stacks that
    differ in anything else have other shapes."""
    import itertools
    import random

    eval_at = [Frame(0x5000 + o, "_PyEval_EvalFrameDefault", o, "/usr/bin/python3.11")
               for o in (0x10, 0x20)]
    parts = [*eval_at, _native("PyObject_Call"), _native("helper")]
    natives = [list(n) for k in range(1, 4) for n in itertools.product(parts, repeat=k)]
    rng = random.Random(7)
    sections = [[(_py(f"f{i}")[0], rng.random() < 0.4) for i in range(rng.randint(1, 4))]
                for _ in range(12)]
    by_shape: dict[tuple[Frame, ...], list[list[Frame]]] = {}
    for n in natives:
        by_shape.setdefault(merge_shape(n), []).append(n)
    assert any(len(group) > 1 for group in by_shape.values())
    for group in by_shape.values():
        for py in sections:
            assert len({tuple(merge(n, py)) for n in group}) == 1, (group, py)
    for a, b in itertools.combinations(natives, 2):
        if merge_shape(a) == merge_shape(b):  # then they differ only in the first loop
            i = next(i for i, f in enumerate(a) if f.symbol == "_PyEval_EvalFrameDefault")
            assert a[:i] + a[i + 1:] == b[:i] + b[i + 1:]


def test_a_line_read_from_the_table_is_written_for_bpf_and_a_guess_is_not() -> None:
    """The reader tells BPF the line of each Python instruction it named from the code's
    line table (render/pyframes.py hashes a light copy's frames by it), here over this
    process's own code object; a frame whose table cannot be read (its first line is a
    guess) is not written."""
    from planrunner.render.contracts import PYLINE_KEY
    from planrunner.render.model import StackMaps
    from planrunner.runtime.stacks import StackResolver

    writes: dict[str, dict[bytes, bytes]] = {}

    class Source:
        def map_value(self, _map: str, key: bytes) -> bytes | None:
            return CODE_NAMES.pack(b"spin\0", b"/app/spin.py\0")

        def update_map(self, name: str, key: bytes, value: bytes) -> None:
            writes.setdefault(name, {})[key] = value

    code = _instruction_lines.__code__
    offset, line = next((o, n) for o, n in _instruction_lines(code)[4:] if n is not None)
    pid = os.getpid()

    def capture(table: int) -> object:
        raw = PYFRAME.pack(id(code), 0x7100, 0x7200, table, offset, code.co_firstlineno,
                           ENTRY, 0)
        return parse_ustack_record(struct.pack("<IIQ4Q", pid, 0, 7, 0x401000, 0x7ffc0000,
                                               0, 0) + struct.pack("<II", 1, FOUND) + raw,
                                   python=1)

    resolver = StackResolver(Source())  # type: ignore[arg-type]
    resolver.python_codes = "pr_pycode"
    maps = StackMaps(python_lines="pr_pyline", known="pr_uknown")
    native = [_native("_PyEval_EvalFrameDefault")]
    (frame,) = resolver._with_python(capture(id(code.co_linetable)), native)  # type: ignore[arg-type]
    resolver._tell_bpf(maps)
    assert frame.line == line
    key = PYLINE_KEY.pack(pid, offset, id(code), id(code.co_linetable))
    assert writes["pr_pyline"] == {key: struct.pack("<I", line)}
    writes.clear()
    resolver._with_python(capture(0), native)  # type: ignore[arg-type]
    resolver._tell_bpf(maps)
    assert writes == {}
