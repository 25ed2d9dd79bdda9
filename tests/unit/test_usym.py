"""`usym(addr)`: typing and its located errors, the field key, the C of the record field
and the key member, naming an address over a live process's maps (the symbolizer of
stacks), and how the views show a `UserSymbol`."""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import json
import os
from pathlib import Path

import pytest

from planrunner.errors import ExpressionError, PlanError
from planrunner.expr import typed as T
from planrunner.expr.check import check, check_condition, check_value
from planrunner.expr.parser import parse_expression
from planrunner.expr.types import SymType
from planrunner.output import make_view
from planrunner.plan import load_plan
from planrunner.records import AggRow, AggSnapshot, PrintSchema, UserSymbol
from planrunner.render.aggregates import key_layout
from planrunner.render.bodies import Body, layout_for
from planrunner.render.expr_c import lower
from planrunner.render.layout import KeyField, KeyLayout
from planrunner.resolve.model import ArgSlot, CheckedField
from planrunner.runtime.stacks import StackResolver
from tests.unit.test_expr_check import BASE, SCOPE

ROOT = Path(__file__).resolve().parents[2]


def typed(text: str) -> T.TExpr:
    return check(parse_expression(text, BASE), SCOPE, string_size=128)


def errors(text: str, fn=check) -> list[tuple[str, int, tuple[str, ...]]]:  # type: ignore[no-untyped-def]
    with pytest.raises(ExpressionError) as info:
        fn(parse_expression(text, BASE), SCOPE, string_size=128)
    out = []
    for d in info.value.diagnostics:
        assert d.span is not None and d.span.line == 3
        out.append((d.message, d.span.column - BASE.column, d.hints))
    return out


def test_usym_of_an_address_is_a_symbol_over_that_address() -> None:
    t = typed("usym(arg1)")
    assert isinstance(t, T.TUsym) and t.type == SymType()
    assert t.addr == T.TRef("arg1", T.ArgRef(1), typed("arg1").type, BASE)
    assert T.refs(t) == [T.ArgRef(1)] and T.names_symbols(t)
    assert isinstance(typed("usym(arg1 + 16)"), T.TUsym)  # 64-bit arithmetic: the user's call
    assert not T.names_symbols(typed("arg1 + 16"))


@pytest.mark.parametrize("text, message, column, hint", [
    ("usym(comm)", "usym() needs an address (an integer), got string (up to 15 bytes)", 5,
     "names a code address"),
    ("usym(flag)", "usym() needs an address (an integer), got bool", 5, None),
    ("usym(arg2)", "usym() needs an address, but 'arg2' is a 4-byte int32: it cannot be a "
     "pointer", 5, "planrunner list"),
    ("usym(usym(arg1))", "usym() needs an address (an integer), got user symbol", 5, None),
    ("usym()", "usym() takes 1 arguments, got 0", 0, "usym(ADDRESS)"),
    ("usym(arg1, 2)", "usym() takes 1 arguments, got 2", 0, "usym(ADDRESS)"),
    ("usym(arg1) + 1", "operator '+' needs integers, got user symbol and int64", 0, None),
    ("usym(arg1) == usym(arg1)", "cannot compare user symbol with user symbol", 0, None),
    ("!usym(arg1)", "operator '!' needs a bool or an integer, got user symbol", 1, None),
    ("usym(arg1) && flag", "operator '&&' needs bools or integers, but its left operand "
     "is a user symbol", 0, None),
    ("str(usym(arg1))", "str() needs an address (an integer), got user symbol", 4, None),
])
def test_misuse_is_located(text: str, message: str, column: int, hint: str | None) -> None:
    (err,) = errors(text)
    assert err[0] == message and err[1] == column
    if hint:
        assert any(hint in h for h in err[2]), err[2]


def test_no_condition_and_no_value() -> None:
    (err,) = errors("usym(arg1)", check_condition)
    assert err[0] == "a condition must be a bool or an integer, got user symbol"
    assert err[2] == ("a user symbol can be printed or be a `by` key",)
    (err,) = errors("usym(arg1)", check_value)
    assert err[0] == "an aggregation value must be an integer, got user symbol"


def _plan(tmp_path: Path, outputs: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "p.yaml"
    path.write_text("planrunner: 1\nname: t\ntargets:\n  a: {binary: /bin/true}\n"
                    "probes:\n  c: {uprobe: 'a:main'}\n  r: {uretprobe: 'a:main'}\n"
                    "  s: {span: {begin: c, end: r}}\n" + outputs)
    return load_plan(path, {})


def test_a_usym_field_is_keyed_like_its_name(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "outputs:\n  - print: s\n    fields: [usym(begin.arg1), "
                           "'usym( arg2 )']\n  - count: c\n    by: [usym(arg3)]\n")
    assert [f.key for f in plan.outputs[0].fields] == ["arg1", "arg2"]
    assert [f.key for f in plan.outputs[1].by] == ["arg3"]
    with pytest.raises(PlanError) as info:
        _plan(tmp_path, "outputs:\n  - print: c\n    fields: ['usym(arg1 + 1)']\n")
    assert "field 'usym(arg1 + 1)' is not a name" in str(info.value)


@pytest.mark.parametrize("where, field, at, message", [
    ("usym(n)", "n", "9:12", "a condition must be a bool or an integer, got user symbol"),
    ("n > 0", "{s: usym(comm)}", "12:23", "usym() needs an address (an integer), got string"),
])
def test_validate_locates_misuse_in_a_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           where: str, field: str, at: str,
                                           message: str) -> None:
    """Errors found when the plan is resolved carry the line and column in the file."""
    from planrunner.pipeline import compile_plan

    monkeypatch.chdir(ROOT)
    path = tmp_path / "p.yaml"
    path.write_text("planrunner: 1\nname: t\ntargets:\n  a: {binary: tests/fixtures/elf/bin/agg}\n"
                    "probes:\n  v:\n    usdt: a:agg:value\n    args: [{name: n, type: uint64}]\n"
                    f"    where: {where}\n"
                    f"outputs:\n  - print: v\n    fields: [{field}]\n")
    with pytest.raises(PlanError) as info:
        compile_plan(str(path), {})
    assert f"{path}:{at}: error: {message}" in str(info.value)


def test_the_record_field_and_key_hold_the_address() -> None:
    t = typed("usym(arg1)")
    body = Body("s", {1: ArgSlot(1, "arg1", "int", 64, False, 0)})
    assert lower(t, body).c == "((__u64)(a->v1))"
    layout = layout_for(0, [("start", t)])
    assert [(f.key, f.kind, f.c_members) for f in layout.fields] == [
        ("start", "usym", ("__u64 f0;",))]
    assert key_layout((CheckedField("start", t, BASE),)) == KeyLayout((KeyField("start", "usym"),))


def _address_of_getpid() -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    addr = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    assert addr
    return addr


def test_an_address_is_named_over_the_live_process_maps() -> None:
    addr = _address_of_getpid()
    got = StackResolver(None).user_symbol(os.getpid(), addr)
    assert got.address == addr and got.offset == 0
    assert got.symbol is not None and got.symbol.endswith("getpid")
    assert os.path.basename(got.module).startswith("libc.so")
    assert str(got) == f"{got.symbol}+0x0"
    # one place named in two processes is one key: the address is not compared
    assert got == UserSymbol(addr + 0x1000, got.symbol, 0, got.module)


def test_a_process_gone_before_its_maps_were_read_shows_the_address() -> None:
    got = StackResolver(None).user_symbol(2 ** 22 + 1, 0x401000)  # above pid_max
    assert (got.symbol, str(got), got.json()["address"]) == (None, "0x401000", 0x401000)


SYM = UserSymbol(0x55D0C0DE1390, "reader_main", 0, "/opt/fx/threads")
REC = {"time": "2026-12-03T02:41:07.123456Z", "ts_ns": 9, "pid": 1, "tid": 1, "comm": "c",
       "probe": "p", "output": "0", "start": SYM}


def test_views_show_symbol_plus_offset_and_json_a_frame() -> None:
    out = io.StringIO()
    make_view("text", out, [PrintSchema("0", "p", ("start",))], tz=None).records([REC])
    assert out.getvalue().splitlines()[-1].split()[-1] == "reader_main+0x0"
    out = io.StringIO()
    fmt = "{start} at {start:#x} [{start:>16}]"
    make_view("text", out, [PrintSchema("0", "p", ("start",), fmt)], tz=None).records([REC])
    assert out.getvalue().splitlines()[-1] == "reader_main+0x0 at 0x55d0c0de1390 [ reader_main+0x0]"
    out = io.StringIO()
    make_view("json", out, [PrintSchema("0", "p", ("start",))]).records([REC])
    assert json.loads(out.getvalue())["start"] == {
        "address": 0x55D0C0DE1390, "symbol": "reader_main", "offset": 0,
        "module": "/opt/fx/threads"}
    out = io.StringIO()
    make_view("csv", out, [PrintSchema("0", "p", ("start",))]).records([REC])
    assert out.getvalue().splitlines()[-1].split(",")[7] == "reader_main+0x0"


def test_an_aggregation_row_keyed_by_a_symbol() -> None:
    snap = AggSnapshot("o", "count", "count", None, ("start",), None, 0.0,
                       (AggRow((("start", SYM),), count=4),))
    out = io.StringIO()
    make_view("text", out, [], tz=None).aggregate(snap)
    assert out.getvalue().splitlines()[2].split() == ["reader_main+0x0", "4"]
    out = io.StringIO()
    make_view("json", out, []).aggregate(snap)
    assert json.loads(out.getvalue())["start"]["symbol"] == "reader_main"
