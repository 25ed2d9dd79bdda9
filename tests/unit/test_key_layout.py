"""Aggregation keys (render/layout.py KeyLayout): the C struct render/aggregates.py
declares and the bytes runtime/aggregates.py unpacks come from one layout, and a key
round-trips through it. (Against real maps: tests/e2e/test_aggregations.py.)"""

from __future__ import annotations

import ctypes as ct
import re
import struct
from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan
from planrunner.render.layout import KeyField, KeyLayout
from planrunner.runtime.aggregates import decode_key
from planrunner.runtime.stacks import StackResolver

ROOT = Path(__file__).resolve().parents[2]

EVERY_KIND = KeyLayout((
    KeyField("n", "int"), KeyField("u", "uint"), KeyField("ok", "bool"),
    KeyField("name", "str", size=13), KeyField("k", "kstack", limit=8),
    KeyField("us", "ustack", limit=16), KeyField("uc", "ucopy", limit=32, unwind="dwarf"),
    KeyField("at", "usym"),
), slot=True)

_CTYPES = {"__s64": ct.c_int64, "__u64": ct.c_uint64, "char": ct.c_char}


def _ctypes_of(members: tuple[str, ...]) -> type[ct.Structure]:
    """The C declarations as a ctypes Structure (what the compiler lays out)."""
    fields: list[tuple[str, object]] = []
    for decl in members:
        m = re.fullmatch(r"(__s64|__u64|char) (\w+)(?:\[(\d+)\])?;", decl)
        assert m, decl
        base = _CTYPES[m.group(1)]
        fields.append((m.group(2), base * int(m.group(3)) if m.group(3) else base))
    return type("Key", (ct.Structure,), {"_fields_": fields})


def test_members_follow_the_fields_with_their_companions() -> None:
    assert EVERY_KIND.c_members == (
        "__s64 k0;", "__u64 k1;", "__u64 k2;", "char k3[16];", "__s64 k4;",
        "__s64 k5;", "__u64 k5_pid;", "__s64 k6;", "__u64 k6_pid;",
        "__u64 k7;", "__u64 k7_pid;", "__u64 slot;")
    assert KeyLayout().c_members == ("__u64 pr_none;",)
    assert KeyLayout(slot=True).c_members == ("__u64 slot;",)
    assert EVERY_KIND.names == ("n", "u", "ok", "name", "k", "us", "uc", "at")


@pytest.mark.parametrize("layout", [EVERY_KIND, KeyLayout(), KeyLayout(slot=True),
                                    KeyLayout((KeyField("s", "str", size=64),))])
def test_the_format_is_the_c_struct(layout: KeyLayout) -> None:
    native = _ctypes_of(layout.c_members)
    assert ct.sizeof(native) == layout.size == struct.calcsize(layout.struct_format)


def test_a_key_round_trips() -> None:
    native = _ctypes_of(EVERY_KIND.c_members)
    key = native(k0=-3, k1=2**64 - 1, k2=1, k3=b"worker", k4=-14, k5=7, k5_pid=100,
                 k6=-99, k6_pid=200, k7=0x401000, k7_pid=300, slot=5)
    values, slot = EVERY_KIND.unpacker()(bytes(key))
    assert slot == 5
    assert values == ((-3, 0), (2**64 - 1, 0), (1, 0), (b"worker" + bytes(10), 0),
                      (-14, 0), (7, 100), (-99, 200), (0x401000, 300))


def test_the_reader_names_the_values_with_the_layout() -> None:
    class Stacks(StackResolver):
        def __init__(self) -> None:
            super().__init__(None)
            self.asked: list[tuple[object, ...]] = []

        def user_hash(self, key: int, limit: int, mode: str) -> object:  # type: ignore[override]
            self.asked.append(("hash", key, limit, mode))
            return "copied"

        def user_symbol(self, pid: int, address: int,  # type: ignore[override]
                        time_ns: int = 0) -> object:
            self.asked.append(("sym", pid, address))
            return "sym"

    layout = KeyLayout((KeyField("name", "str", size=8), KeyField("ok", "bool"),
                        KeyField("uc", "ucopy", limit=32, unwind="dwarf"),
                        KeyField("at", "usym")))
    raw = struct.pack(layout.struct_format, b"ab\0\xff", 2, -5, 41, 0x1000, 42)
    stacks = Stacks()
    assert decode_key(raw, layout, stacks) == (
        ("name", "ab"), ("ok", True), ("uc", "copied"), ("at", "sym"))
    assert stacks.asked == [("hash", -5, 32, "dwarf"), ("sym", 42, 0x1000)]


def test_render_declares_the_key_struct_of_its_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    program = compile_plan("tests/golden/agg_mixed/plan.yaml", {})[2]
    assert program.aggregates
    for agg in program.aggregates:
        decl = re.search(r"struct " + agg.map_name + r"_key \{\n(.*?)\} __attribute__",
                         program.c_source, re.S)
        assert decl, agg.map_name
        assert tuple(line.strip() for line in decl.group(1).splitlines()) == \
            agg.key.c_members


MINI_LANGUAGE = re.compile(r"^(str|kstack|ustack|ucopy):")


def test_no_module_spells_a_key_kind_as_a_string_to_split() -> None:
    """The "str:N" / "ucopy:N:MODE" kinds are gone: no string constant of the package
    starts with one (a KeyField carries size, limit and unwind as fields)."""
    from tests.unit.test_c_only_in_render import _modules, code_strings

    hits = [(module, line, text) for module, path in _modules()
            for line, text in code_strings(path.read_text()) if MINI_LANGUAGE.match(text)]
    assert hits == []
    assert MINI_LANGUAGE.match("ucopy:64:auto") and not MINI_LANGUAGE.match("usym")
