"""render/contracts.py is the one copy of what the C and the Python share: the Python's
layouts agree with C's rules (checked against ctypes, which lays structs out as the C
compiler does), the rendered program carries them, a change here changes the C, and no
template holds a second copy. That the C compiler agrees is the e2e tier's: the
_Static_asserts of the block compile in every golden (tests/e2e/test_golden_compile.py)
and refuse a block that disagrees (tests/e2e/test_contracts_e2e.py)."""

from __future__ import annotations

import ctypes as ct
import re
import struct
from pathlib import Path

import pytest

from planrunner.render import contracts
from planrunner.render.contracts import (
    PR_CGROUP,
    PR_COMM,
    PR_HDR,
    STRUCTS,
    TRACER_TABLE,
    U32,
    U64,
    CMember,
    CStruct,
    c_block,
    defines,
)
from planrunner.render.layout import HEADER_FORMAT, HEADER_SIZE
from planrunner.runtime.registry_pin import REGISTRY_MAP
from planrunner.runtime.tracers import TracerTable

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "templates").iterdir())


@pytest.mark.parametrize("cstruct", STRUCTS, ids=[s.name for s in STRUCTS])
def test_layouts_are_the_ones_c_makes(cstruct: CStruct) -> None:
    """ctypes lays a Structure out by the platform C's rules: size and every offset
    agree with the ones contracts.py computes and asserts in the C."""
    native = type(cstruct.name, (ct.Structure,), {"_fields_": cstruct.ctypes_fields()})
    assert ct.sizeof(native) == cstruct.size == struct.calcsize(cstruct.format)
    for m in cstruct.members:
        assert getattr(native, m.name).offset == cstruct.offset(m.name)


def test_padding_follows_alignment() -> None:
    """A __u32 before a __u64 is padded to 8, and the struct's size to its largest
    member's alignment: the format says so with x bytes."""
    s = CStruct("pr_t", (CMember("a", U32), CMember("b", U64), CMember("c", U32)), "t")
    assert (s.offset("b"), s.size, s.format) == (8, 24, "<I4xQI4x")
    assert s.unpack(s.pack(1, 2, 3)) == (1, 2, 3)
    assert "_Static_assert(__builtin_offsetof(struct pr_t, b) == 8" in s.c_asserts


def test_python_side_reads_the_same_definitions() -> None:
    assert (HEADER_FORMAT, HEADER_SIZE) == (PR_HDR.format, PR_HDR.size) == ("<QIII4x16s", 40)
    assert ct.sizeof(TracerTable) == TRACER_TABLE.size == REGISTRY_MAP[2] == 192
    assert PR_COMM.pack(b"nginx") == b"nginx" + bytes(11)
    assert PR_CGROUP.pack(7, 2) == struct.pack("<QQ", 7, 2)
    assert PR_CGROUP.unpack(PR_CGROUP.pack(7, 2)) == (7, 2)
    raw = struct.pack("<QIIII16s", 5, 3, 42, 43, 0, b"comm")
    assert struct.unpack_from(PR_HDR.member_format("pid"), raw, PR_HDR.offset("pid")) == (42,)
    assert PR_HDR.member_format("output") == "<I" and PR_HDR.offset("output") == 8
    assert PR_HDR.unpack(raw) == (5, 3, 42, 43, b"comm" + bytes(12))


def test_the_block_defines_every_constant_and_struct() -> None:
    block = c_block()
    for name, value in defines():
        assert f"#define {name} {value}\n" in block
    assert "#define PR_CFG_COMMAND 7\n" in block and "#define PR_NS_KEY 0x80000000u\n" in block
    assert ("#define PR_WAKE_AT 8\n#define PR_RING_FULL 9\n#define PR_COUNTER_SLOTS 10\n"
            in block)
    for s in STRUCTS:
        assert f"struct {s.name} {{\n" in block
        assert f"_Static_assert(sizeof(struct {s.name}) == {s.size}," in block
    names = [n for n, _ in defines()]
    assert len(names) == len(set(names))


def _render(monkeypatch: pytest.MonkeyPatch) -> str:
    from planrunner.pipeline import compile_plan

    monkeypatch.chdir(ROOT)
    return compile_plan("tests/golden/agg_count/plan.yaml", {})[2].c_source


def test_the_program_carries_the_block_before_the_helpers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = _render(monkeypatch)
    assert c.count(c_block()) == 1
    assert c.index(c_block()) < c.index("BPF_ARRAY(pr_config, __u32, PR_CFG_SLOTS);")


def test_a_constant_changed_in_python_changes_the_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """No second copy: the C follows contracts.py, structs included."""
    monkeypatch.setattr(contracts, "MAX_CGROUPS", 4)
    wider = CStruct("pr_cgroup", (*PR_CGROUP.members, CMember("spare", U64)), "t")
    monkeypatch.setattr(contracts, "STRUCTS", (TRACER_TABLE, PR_COMM, wider, PR_HDR))
    c = _render(monkeypatch)
    assert "#define PR_MAX_CGROUPS 4\n" in c and "#define PR_MAX_CGROUPS 8" not in c
    assert "_Static_assert(sizeof(struct pr_cgroup) == 24," in c


# What moved into render/contracts.py, as a template would spell a second copy.
def _second_copies(text: str) -> list[str]:
    found = [m.group(0) for m in re.finditer(r"#\s*define\s+(PR_\w+)", text)
             if m.group(1) in dict(defines()) or m.group(1) == contracts.TRACERS_PIN_MACRO]
    found += [m.group(0) for m in re.finditer(r"\bstruct\s+(\w+)\s*\{", text)
              if m.group(1) in {s.name for s in STRUCTS}]
    # the array sizes that are counts of contracts.py's enums
    found += re.findall(r"BPF_\w*ARRAY\((?:pr_config|pr_counters),[^,]+,\s*\d+\)", text)
    return found


@pytest.mark.parametrize("template", TEMPLATES, ids=[t.name for t in TEMPLATES])
def test_no_template_holds_a_second_copy(template: Path) -> None:
    assert _second_copies(template.read_text()) == []


@pytest.mark.parametrize("planted", [
    "#define PR_CFG_SELF 1\n",
    "#  define PR_MAX_TRACERS 16\n",
    "struct pr_comm {\n    char c[16];\n};\n",
    "BPF_PERCPU_ARRAY(pr_counters, __u64, 9);\n",
    "#define PR_TRACERS_PIN \"/x\"\n",
])
def test_the_rule_catches_a_planted_copy(planted: str) -> None:
    assert _second_copies(planted)
