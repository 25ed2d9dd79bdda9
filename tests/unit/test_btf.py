"""The minimal BTF reader (planrunner/elf/btf.py): member offsets in a BTF blob built here
(typedefs, qualifiers, anonymous members, bit-field offsets), and in the running kernel's
own /sys/kernel/btf/vmlinux, where the thread pointer's offset in task_struct is what
thread-local operands read (tests/e2e/test_tls_indexed_e2e.py reads values through it)."""

from __future__ import annotations

import os
import platform
import struct
import time
from pathlib import Path

import pytest

from planrunner import inputs
from planrunner.elf import btf

VMLINUX = Path("/sys/kernel/btf/vmlinux")


class Builder:
    """A BTF blob, one type at a time (ids from 1, in order)."""

    def __init__(self) -> None:
        self.strings = b"\0"
        self.types = b""
        self.count = 0

    def name(self, text: str) -> int:
        if not text:
            return 0
        at = len(self.strings)
        self.strings += text.encode() + b"\0"
        return at

    def add(self, name: str, kind: int, vlen: int, size_or_type: int, extra: bytes = b"",
            kind_flag: int = 0) -> int:
        info = (kind_flag << 31) | (kind << 24) | vlen
        self.types += struct.pack("<III", self.name(name), info, size_or_type) + extra
        self.count += 1
        return self.count

    def struct(self, name: str, size: int, members: list[tuple[str, int, int]],
               kind: int = btf.STRUCT, bitfields: bool = False) -> int:
        extra = b"".join(struct.pack("<III", self.name(m), t, off) for m, t, off in members)
        return self.add(name, kind, len(members), size, extra, int(bitfields))

    def blob(self) -> bytes:
        header = struct.pack("<HBBIIIII", btf.BTF_MAGIC, 1, 0, 24, 0, len(self.types),
                             len(self.types), len(self.strings))
        return header + self.types + self.strings


def _sample() -> bytes:
    b = Builder()
    long_t = b.add("long", btf.INT, 0, 8, struct.pack("<I", (1 << 24) | 64))  # 1
    inner = b.struct("inner", 16, [("a", long_t, 0), ("fsbase", long_t, 64)])  # 2
    inner_t = b.add("inner_t", btf.TYPEDEF, 0, inner)  # 3
    const_inner = b.add("", btf.CONST, 0, inner_t)  # 4
    b.add("", btf.ARRAY, 0, 0, struct.pack("<III", long_t, long_t, 4))  # 5: skipped right
    b.add("", btf.FUNC_PROTO, 2, long_t, struct.pack("<IIII", 0, long_t, 0, long_t))  # 6
    anon = b.struct("", 24, [("pad", long_t, 0), ("thread", const_inner, 64)])  # 7
    # bit-field layout (kind_flag): offsets in the low 24 bits, sizes in the high 8
    b.struct("outer", 40, [("flags", long_t, (3 << 24) | 0), ("", anon, 128)],  # 8
             bitfields=True)
    b.struct("outer", 8, [("decoy", long_t, 0)], kind=btf.UNION)  # 9: a union, not it
    return b.blob()


def test_member_offsets_through_typedefs_qualifiers_and_anonymous_members() -> None:
    parsed = btf.parse(_sample())
    assert len(parsed.types) == 10  # void + 9
    assert btf.find_struct(parsed, "outer") == 8
    assert btf.member_offset(parsed, "outer", "thread") == 16 + 8
    assert btf.member_offset(parsed, "outer", "thread.fsbase") == 16 + 8 + 8
    assert btf.member_offset(parsed, "inner", "fsbase") == 8
    with pytest.raises(btf.BtfError, match="has no member thread.gsbase"):
        btf.member_offset(parsed, "outer", "thread.gsbase")
    with pytest.raises(btf.BtfError, match="no struct task_struct"):
        btf.find_struct(parsed, "task_struct")


def test_bad_blobs_are_refused() -> None:
    with pytest.raises(btf.BtfError, match="not BTF"):
        btf.parse(b"\x7fELF" + bytes(40))
    with pytest.raises(btf.BtfError, match="too short"):
        btf.parse(b"\x9f\xeb")
    with pytest.raises(btf.BtfError, match="truncated"):
        btf.parse(_sample()[:-8])


def test_no_btf_file_says_what_the_kernel_needs(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    missing = str(tmp_path / "vmlinux")
    with pytest.raises(btf.BtfError, match="CONFIG_DEBUG_INFO_BTF"):
        btf.load(missing)
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", missing)
    with pytest.raises(btf.BtfError, match="not readable"):
        btf.kernel_offset(btf.THREAD_POINTER)


def test_runtime_cflags_from_a_given_file(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    b = Builder()
    long_t = b.add("long", btf.INT, 0, 8, struct.pack("<I", (1 << 24) | 64))
    thread = b.struct("thread_struct", 16, [("sp", long_t, 0), ("fsbase", long_t, 64)])
    b.struct("task_struct", 64, [("state", long_t, 0), ("thread", thread, 8 * 40)])
    path = tmp_path / "btf"
    path.write_bytes(b.blob())
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(path))
    pair = ("PR_X", btf.THREAD_POINTER)
    assert btf.runtime_cflags([pair] * 2) == ["-DPR_X=48"]
    with pytest.raises(btf.BtfError, match="has no member thread.gsbase"):
        btf.kernel_offset(btf.KernelMember("task_struct", "thread.gsbase"))


def test_optional_cflags_leave_out_what_the_btf_lacks(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An optional constant the kernel's BTF lacks, or every one when there is no BTF, is
    left undefined (the C takes its fallback: runtime_helpers.h pr_current_comm), never
    an error; what they depend on is named by a stat, without parsing."""
    b = Builder()
    char_t = b.add("char", btf.INT, 0, 1, struct.pack("<I", 8))
    comm_t = b.add("", btf.ARRAY, 0, 0, struct.pack("<III", char_t, char_t, 16))
    b.struct("task_struct", 64, [("pid", char_t, 0), ("comm", comm_t, 8 * 24)])
    path = tmp_path / "btf"
    path.write_bytes(b.blob())
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(path))
    gone = btf.KernelMember("task_struct", "comm_str")
    assert btf.optional_cflags([("PR_C", btf.TASK_COMM), ("PR_G", gone)]) == ["-DPR_C=24"]
    named = btf.identity()
    assert named.startswith(f"{path}:") and named != f"{path}:{inputs.ABSENT}"
    path.write_bytes(b.blob() + b"\0")  # another file: another identity
    assert btf.identity() != named
    missing = tmp_path / "none"
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(missing))
    assert btf.optional_cflags([("PR_C", btf.TASK_COMM)]) == []
    assert btf.identity() == f"{missing}:{inputs.ABSENT}"


# --- the running kernel -----------------------------------------------------------------

needs_vmlinux = pytest.mark.skipif(not os.access(VMLINUX, os.R_OK),
                                   reason="this kernel has no readable /sys/kernel/btf/vmlinux")


@needs_vmlinux
@pytest.mark.skipif(platform.machine() != "x86_64", reason="thread.fsbase is x86-64's")
def test_running_kernel_task_struct_thread_fsbase() -> None:
    t0 = time.perf_counter()
    kernel = btf.load()
    fsbase = btf.member_offset(kernel, "task_struct", "thread.fsbase")
    elapsed = time.perf_counter() - t0
    print(f"task_struct.thread.fsbase at {fsbase} ({elapsed * 1000:.0f} ms)")
    thread = btf.member_offset(kernel, "task_struct", "thread")
    assert fsbase == thread + btf.member_offset(kernel, "thread_struct", "fsbase")
    task = btf.find_struct(kernel, "task_struct")
    size = kernel.header(task)[3]
    assert fsbase % 8 == 0 and thread < fsbase < size
    # members every x86-64 kernel has, and a union member reached through its name
    assert btf.member_offset(kernel, "thread_struct", "gsbase") == \
        btf.member_offset(kernel, "thread_struct", "fsbase") + 8
    assert 0 < btf.member_offset(kernel, "task_struct", "pid") < thread
    assert elapsed < 2.0


@needs_vmlinux
@pytest.mark.skipif(platform.machine() != "x86_64", reason="thread.fsbase is x86-64's")
def test_running_kernel_constant_is_computed_once() -> None:
    first = btf.kernel_offset(btf.THREAD_POINTER)
    t0 = time.perf_counter()
    assert btf.kernel_offset(btf.THREAD_POINTER) == first
    assert time.perf_counter() - t0 < 0.01


def test_runtime_cflags_parse_the_btf_once(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Several constants of one program: one read of the file, whatever their number."""
    b = Builder()
    long_t = b.add("long", btf.INT, 0, 8, struct.pack("<I", (1 << 24) | 64))
    b.struct("mm_struct", 32, [("start_code", long_t, 0), ("exe_file", long_t, 64)])
    b.struct("task_struct", 64, [("state", long_t, 0), ("mm", long_t, 8 * 16)])
    path = tmp_path / "btf-once"
    path.write_bytes(b.blob())
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(path))
    loads: list[str | None] = []
    real_load = btf.load

    def counting_load(where: str | None = None) -> btf.Btf:
        loads.append(where)
        return real_load(where)

    monkeypatch.setattr(btf, "load", counting_load)
    constants = [("PR_MM", btf.KernelMember("task_struct", "mm")),
                 ("PR_START", btf.KernelMember("mm_struct", "start_code")),
                 ("PR_EXE", btf.KernelMember("mm_struct", "exe_file"))]
    assert btf.runtime_cflags(constants) == ["-DPR_EXE=8", "-DPR_MM=16", "-DPR_START=0"]
    assert loads == [str(path)]
    assert btf.runtime_cflags(constants[:1]) == ["-DPR_MM=16"]  # kept: no read at all
    assert loads == [str(path)]


# --- the run's own programs' offsets (render/model.py OWN_BTF_MEMBERS) -------------------

def test_own_program_offsets_from_a_given_file_or_none(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kernel's BTF the raw fork and argv-reading exec programs are compiled
    (their offsets defined); without it, no flag: those programs are left out and the
    run attaches the perf-event variants (runtime/scope.py own_sites)."""
    from planrunner.runtime.bcc_backend import own_btf_cflags

    b = Builder()
    int_t = b.add("int", btf.INT, 0, 4, struct.pack("<I", (1 << 24) | 32))
    long_t = b.add("long", btf.INT, 0, 8, struct.pack("<I", (1 << 24) | 64))
    b.struct("mm_struct", 64, [("start_code", long_t, 0), ("start_stack", long_t, 8 * 40)])
    b.struct("task_struct", 128, [("state", long_t, 0), ("mm", long_t, 8 * 16),
                                  ("pid", int_t, 8 * 96), ("tgid", int_t, 8 * 100)])
    path = tmp_path / "btf-own"
    path.write_bytes(b.blob())
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(path))
    assert own_btf_cflags() == ["-DPR_MM_START_STACK_OFFSET=40", "-DPR_TASK_MM_OFFSET=16",
                                "-DPR_TASK_TGID_OFFSET=100"]
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(tmp_path / "none"))
    assert own_btf_cflags() == []
    path2 = tmp_path / "btf-short"  # a BTF without those structs
    path2.write_bytes(Builder().blob())
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(path2))
    assert own_btf_cflags() == []


def test_the_identity_keys_what_the_offsets_come_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The program cache keys the own programs' offsets by where they come from, not by
    their values (no BTF parse on a cached run): a given file by its identity, so a
    rewritten one is another key; the running kernel's by its path (its release and
    build are in the key already)."""
    monkeypatch.delenv("PLANRUNNER_VMLINUX_BTF", raising=False)
    assert btf.identity() in (f"{btf.VMLINUX}:kernel", f"{btf.VMLINUX}:-")
    path = tmp_path / "btf"
    monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(path))
    absent = btf.identity()
    path.write_bytes(Builder().blob())
    first = btf.identity()
    time.sleep(0.01)
    path.write_bytes(Builder().blob() + b"\0")
    assert len({absent, first, btf.identity()}) == 3


@needs_vmlinux
def test_running_kernel_has_the_own_programs_members() -> None:
    from planrunner.render.model import OWN_BTF_MEMBERS

    kernel = btf.load()
    offsets = {(s, p): btf.member_offset(kernel, s, p) for _m, s, p in OWN_BTF_MEMBERS}
    # pid and tgid side by side, as every kernel lays them out
    assert offsets["task_struct", "tgid"] == btf.member_offset(kernel, "task_struct",
                                                                "pid") + 4
    assert offsets["mm_struct", "start_stack"] % 8 == 0
