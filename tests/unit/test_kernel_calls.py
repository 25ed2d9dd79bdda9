"""Every bpf() and perf_event_open() call is made in runtime/kernel/ (issue 24 item 2):
no other module of planrunner calls `syscall` (or reaches libc's, or imports the raw
entry points of runtime/kernel/), names `perf_event_open` or calls an `ioctl`, or
defines a ctypes structure for a bpf or perf attr. Read off the source with `ast`;
docstrings and comments may name these, code may not. Each rule fails on a planted
violation."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "planrunner"
KERNEL = PKG / "runtime" / "kernel"

# the calls only runtime/kernel/ makes
RAW_CALLS = frozenset({"syscall", "syscall_status", "perf_event_open", "ioctl"})
# its raw entry points: the rest of planrunner calls its typed functions
RAW_IMPORTS = {"planrunner.runtime.kernel": frozenset({"LIBC", "fail"}),
               "planrunner.runtime.kernel.bpf": frozenset({"bpf", "_bpf_unless"})}
RAW_BPF = frozenset({"bpf", "_bpf_unless"})  # kernel.bpf's untyped calls, by attribute
# members of union bpf_attr and struct perf_event_attr that no other structure has
ATTR_FIELDS = frozenset({
    "map_fd", "prog_fd", "target_fd", "bpf_fd", "btf_fd", "inner_map_fd", "map_type",
    "map_flags", "max_entries", "insn_cnt", "insns", "prog_type", "prog_flags",
    "prog_name", "log_buf", "log_level", "log_size", "kern_version", "pathname",
    "file_flags", "in_batch", "out_batch", "elem_flags", "attach_type",
    "expected_attach_type", "ref_ctr_offsets", "info_len", "btf_key_type_id",
    "btf_value_type_id", "sample_period", "sample_type", "wakeup_events", "bp_type",
    "config1", "clockid"})
STRUCTURE_BASES = frozenset({"Structure", "Union", "LittleEndianStructure",
                             "BigEndianStructure"})


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _field_names(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and any(_name(t) == "_fields_" for t in stmt.targets):
            for node in ast.walk(stmt.value):
                if isinstance(node, ast.Tuple) and node.elts and \
                        isinstance(node.elts[0], ast.Constant) and \
                        isinstance(node.elts[0].value, str):
                    names.add(node.elts[0].value)
    return names


def _attr_structure(cls: ast.ClassDef) -> bool:
    """A ctypes structure for a bpf or perf attr: its name, its docstring or its
    fields say so."""
    if not any(_name(b) in STRUCTURE_BASES for b in cls.bases):
        return False
    doc = (ast.get_docstring(cls) or "").lower()
    return ("attr" in cls.name.lower() or "bpf_attr" in doc or "perf_event_attr" in doc
            or bool(_field_names(cls) & ATTR_FIELDS))


def violations(source: str) -> list[tuple[int, str]]:
    """(line, what) of each kernel call or attr of `source` (a module outside
    runtime/kernel/)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _name(node.func) in RAW_CALLS:
            found.append((node.lineno, f"calls {_name(node.func)}()"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in RAW_BPF:
            found.append((node.lineno, f"calls .{node.func.attr}()"))
        elif isinstance(node, ast.Attribute) and node.attr in RAW_CALLS:
            found.append((node.lineno, f"reaches .{node.attr}"))
        elif isinstance(node, ast.Name) and node.id == "perf_event_open":
            found.append((node.lineno, "names perf_event_open"))
        elif isinstance(node, ast.Constant) and node.value in RAW_CALLS:
            found.append((node.lineno, f"spells {node.value!r}"))  # getattr(libc, "...")
        elif isinstance(node, ast.ImportFrom):
            raw = RAW_IMPORTS.get(node.module or "", frozenset()) | RAW_CALLS
            found += [(node.lineno, f"imports {a.name}") for a in node.names
                      if a.name in raw]
        elif isinstance(node, ast.ClassDef) and _attr_structure(node):
            found.append((node.lineno, f"defines the attr structure {node.name}"))
    return sorted(found)


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        if KERNEL in path.parents:
            continue
        rel = path.relative_to(PKG).with_suffix("")
        out.append((".".join(("planrunner", *rel.parts)), path))
    return out


OUTSIDE_KERNEL = _modules()


@pytest.mark.parametrize(("module", "path"), OUTSIDE_KERNEL, ids=[m for m, _ in OUTSIDE_KERNEL])
def test_kernel_calls_are_made_only_in_runtime_kernel(module: str, path: Path) -> None:
    hits = violations(path.read_text())
    assert not hits, f"{module}: {hits[:3]} (runtime/kernel/ makes these calls)"


def test_the_rule_reads_every_module_and_the_kernel_passes_it_only_by_being_exempt() -> None:
    names = {m for m, _ in OUTSIDE_KERNEL}
    assert {"planrunner.runtime.compile_cache", "planrunner.runtime.tracers",
            "planrunner.runtime.task_events", "planrunner.runtime.bcc_backend"} <= names
    assert not any(m.startswith("planrunner.runtime.kernel") for m in names)
    # the kernel's own modules would fail it: the rule sees what they do
    assert violations((KERNEL / "__init__.py").read_text())
    assert violations((KERNEL / "bpf.py").read_text())
    assert violations((KERNEL / "perf.py").read_text())


PLANTED = [
    "import ctypes as ct\nlibc = ct.CDLL(None)\nlibc.syscall(321, 0, 0, 0)",
    "from ctypes import CDLL\nsys = getattr(CDLL(None), 'syscall')",
    "import ctypes as ct\nf = ct.CDLL(None).syscall",
    "from planrunner.runtime.kernel import syscall\nsyscall('bpf', 0)",
    "from planrunner.runtime.kernel import syscall as s\ns('bpf', 0)",
    "from planrunner.runtime.kernel.bpf import bpf\nbpf(0, None)",
    "from planrunner.runtime.kernel import bpf as k\nk.bpf(0, None)",
    "from planrunner.runtime import kernel\nkernel.syscall_status('bpf', 0)",
    "def perf_event_open(attr): ...\nperf_event_open(b'')",
    "NR = {'perf_event_open': 298}",
    "import fcntl\nfcntl.ioctl(3, 0x2400)",
    "import ctypes as ct\nclass LinkAttr(ct.Structure):\n    _fields_ = []",
    "import ctypes as ct\nclass Load(ct.Structure):\n"
    "    _fields_ = [('prog_type', ct.c_uint32), ('insn_cnt', ct.c_uint32)]",
    "from ctypes import Structure, c_uint32\nclass M(Structure):\n"
    "    \"\"\"union bpf_attr for BPF_MAP_CREATE.\"\"\"\n    _fields_ = [('a', c_uint32)]",
    "import ctypes\nclass E(ctypes.Union):\n    _fields_ = [('sample_period', ctypes.c_uint64)]",
]


@pytest.mark.parametrize("source", PLANTED)
def test_a_planted_violation_fails_the_rule(source: str) -> None:
    assert violations(source), source


ALLOWED = [
    # the typed functions, a message naming the call, a map value's layout, libc's execv
    "from planrunner.runtime.kernel.perf import open_event\nfd = open_event(b'', -1, 0)",
    "msg = f'perf_event_open (dummy, cpu {cpu}): refused'",
    "import ctypes as ct\nclass TracerTable(ct.Structure):\n"
    "    _fields_ = [('tgid', ct.c_uint32 * 8), ('start', ct.c_uint64 * 8)]",
    "import ctypes as ct\nexecv = ct.CDLL(None).execv",
    "CATEGORY = 'syscalls'",
]


@pytest.mark.parametrize("source", ALLOWED)
def test_what_is_not_a_kernel_call_passes(source: str) -> None:
    assert not violations(source), source
