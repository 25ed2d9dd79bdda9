"""CPython frames in a copied user stack: the C that reads them at the event and where
they sit in `struct pr_ustack`. The walk itself is templates/python_helpers.h; the
reader is planrunner/stacks/python_frames.py.

A copy whose probe keeps Python frames (`stack: {python: true}`, the default, with
`unwind: dwarf | auto`) carries, between its registers and its stack bytes:

    __u32 py_n;                   // frames read
    __u32 py_flags;               // PR_PY_* (python_helpers.h)
    struct pr_pyframe py[N];      // innermost first; N = python_frames

The shared copies map (`pr_ucopies`) has one value type: its section holds the most
frames any probe keeps (`program_capacity`), and a probe that keeps none writes 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from planrunner.render.contracts import PYLINE_KEY

if TYPE_CHECKING:  # a warm run imports this module but not the plan's (no yaml, no pathlib)
    from planrunner.plan.model import StackSpec

PYFRAME_SIZE = 48  # sizeof(struct pr_pyframe)
PYTHON_BINS_MAP = "pr_pybins"  # filled by runtime/python_bins.py
PYTHON_CODES_MAP = "pr_pycode"  # code object -> its names, read by runtime/stacks.py
PYTHON_LINES_MAP = "pr_pyline"  # an instruction -> its line, written by runtime/stacks.py
PYTHON_LINES_ENTRIES = 16384
LINE_TAG = 1 << 63  # a frame hashed by its line, not its instruction
# the kernel offsets pr_py_frames reads the executable's identity through (elf/btf.py)
KERNEL_MEMBERS = (  # (macro, struct, member path): render/program.py makes RuntimeConstants
    ("PR_TASK_MM_OFFSET", "task_struct", "mm"),
    ("PR_MM_EXE_FILE_OFFSET", "mm_struct", "exe_file"),
    ("PR_MM_START_CODE_OFFSET", "mm_struct", "start_code"),
    ("PR_FILE_INODE_OFFSET", "file", "f_inode"),
    ("PR_INODE_INO_OFFSET", "inode", "i_ino"),
    ("PR_INODE_SB_OFFSET", "inode", "i_sb"),
    ("PR_SB_DEV_OFFSET", "super_block", "s_dev"))


def frames_kept(spec: StackSpec) -> int:
    """Python frames a copy of this probe holds (0: none, no section)."""
    return spec.python_frames if spec.python and spec.unwind != "fp" else 0


def section_size(capacity: int) -> int:
    return 8 + capacity * PYFRAME_SIZE if capacity else 0


def program_capacity(specs: Iterable[StackSpec]) -> int:
    """The frames the copies map's value holds: the most any probe keeps."""
    return max((frames_kept(s) for s in specs), default=0)


def members(prefix: str, capacity: int) -> list[str]:
    """The section's members (after regs[4]), named with `prefix` ("" or "f3_")."""
    if not capacity:
        return []
    return [f"__u32 {prefix}py_n;", f"__u32 {prefix}py_flags;",
            f"struct pr_pyframe {prefix}py[{capacity}];"]


def capture_lines(dst: str, capacity: int, keep: int) -> list[str]:
    """Fill the section of `dst` (a member prefix: "ev->f3_", "pr_uc0->"): walk at most
    `keep` frames, or write none when the probe keeps none."""
    if not capacity:
        return []
    if not keep:
        return [f"{dst}py_n = 0;", f"{dst}py_flags = 0;"]
    return [f"pr_py_frames(&{dst}py_n, &{dst}py_flags, {dst}py, {min(keep, capacity)});"]


def line_map_decl(capacity: int) -> str:
    """The lines map (a program whose copies keep Python frames), for hash_lines."""
    if not capacity:
        return ""
    return (f"{PYLINE_KEY.c_definition}{PYLINE_KEY.c_asserts}"
            f'BPF_TABLE("lru_hash", struct {PYLINE_KEY.name}, __u32, {PYTHON_LINES_MAP}, '
            f"{PYTHON_LINES_ENTRIES});\n")


def hash_lines(src: str, capacity: int, out: str, by_line: bool = False) -> list[str]:
    """Mix the frames (code object and instruction) into the copy's hash: two samples
    of one native stack in other Python functions are other stacks. `by_line` (a light
    copy's hash): each frame by its line where the reader wrote it into the lines map
    (tagged LINE_TAG), else its instruction: samples on one line of a function are one
    stack to every output."""
    if not capacity:
        return []
    at = f"(__u64)(__u32){src}py[pr_j].lasti"
    lookup = []
    if by_line:
        lookup = [f"    struct {PYLINE_KEY.name} pr_lk = {{{src}pid, {src}py[pr_j].lasti, "
                  f"{src}py[pr_j].code, {src}py[pr_j].linetable}};",
                  f"    __u32 *pr_ln = {PYTHON_LINES_MAP}.lookup(&pr_lk);"]
        at = f"(pr_ln ? {LINE_TAG:#x}ULL | *pr_ln : {at})"
    return [f"{out} = ({out} ^ {src}py_n) * 0x100000001b3ULL;",
            f"for (__u32 pr_j = 0; pr_j < {capacity}; pr_j++) {{",
            f"    if (pr_j >= {src}py_n)",
            "        break;",
            *lookup,
            f"    {out} = ({out} ^ {src}py[pr_j].code) * 0x100000001b3ULL;",
            f"    {out} = ({out} ^ ({at} | ((__u64){src}py[pr_j].flags << 32)))"
            " * 0x100000001b3ULL;",
            "}"]
