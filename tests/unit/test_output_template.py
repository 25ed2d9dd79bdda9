"""format: templates: what check_format accepts and rejects, and what they render."""

from __future__ import annotations

import pytest

from planrunner.output.template import check_format, compile_template
from planrunner.records import RECORD_HEAD

NAMES = (*RECORD_HEAD, "latency_ns", "query")
REC = {"time": "2026-12-03T02:41:07.123456Z", "ts_ns": 1, "pid": 4242, "tid": 4243,
       "comm": "postgres", "probe": "query", "output": "0", "latency_ns": 201_234_567,
       "query": "SELECT 1"}


@pytest.mark.parametrize("template", [
    "{pid} {latency_ms:.3f} {query}",
    "{comm:>16}|{latency_us:,.1f}us|{query!r}",
    "literal {{braces}} {pid:08d}",
    "{time} {ts_ns} {probe}",
])
def test_accepted(template):
    assert check_format(template, NAMES) is None


@pytest.mark.parametrize(("template", "message"), [
    ("{pid.__class__}", "attribute and index access are not allowed"),
    ("{query[0]}", "attribute and index access are not allowed"),
    ("{query.__class__.__mro__}", "attribute and index access are not allowed"),
    ("{}", "need a name"),
    ("{0}", "need a name"),
    ("{pdi}", "unknown name 'pdi'"),
    ("{pid:{width}}", "nested fields in a spec are not allowed"),
    ("{pid:zz}", "bad format spec 'zz'"),
    ("{latency_ms:d}", "bad format spec 'd'"),  # a float
    ("{pid", "bad format template"),
    ("pid}", "bad format template"),
])
def test_rejected(template, message):
    error = check_format(template, NAMES)
    assert error is not None and message in error


def test_derived_latency_needs_latency_ns():
    assert "unknown name 'latency_ms'" in check_format("{latency_ms}", ("pid",))


def test_typed_names_check_specs_exactly():
    assert check_format("{query:d}", {"query": "str"}) is not None
    assert check_format("{query:>10}", {"query": "str"}) is None
    assert check_format("{n:x}", {"n": "int"}) is None


def test_render_with_derived_values():
    render = compile_template("{pid} {latency_ms:.3f} {latency_us:.0f} {query}", NAMES)
    assert render(REC) == "4242 201.235 201235 SELECT 1"


def test_render_null_bool_and_truncated():
    render = compile_template("{pid} {query} {ok} {one}", (*NAMES, "ok", "one"))
    rec = dict(REC, query=None, ok=True, one=1)
    assert render(rec) == "4242 (null) true 1"
    rec = dict(REC, query="SELECT lo", ok=False, one=0, truncated=["query"])
    assert render(rec) == "4242 SELECT lo… false 0"
    assert rec["query"] == "SELECT lo"  # the record itself is left alone


def test_compile_refuses_what_check_rejects():
    with pytest.raises(ValueError, match="attribute and index access"):
        compile_template("{pid.real}", NAMES)


def test_indent_is_derived_from_depth():
    names = (*NAMES, "depth", "func")
    assert check_format("{indent}-> {func}", names) is None
    assert check_format("{indent:>8}|", names) is None
    assert check_format("{indent:d}", names) is not None  # a string
    assert "unknown name 'indent'" in check_format("{indent}{query}", NAMES)
    render = compile_template("{indent}-> {func} [{depth}]", names)
    assert [render(dict(REC, depth=d, func="f")) for d in (0, 1, 3)] == [
        "-> f [0]", "  -> f [1]", "      -> f [3]"]
    assert render(dict(REC, depth=None, func="f")) == "-> f [(null)]"


def test_a_field_named_indent_wins_over_the_derived_one():
    render = compile_template("{indent}|", (*NAMES, "depth", "indent"))
    assert render(dict(REC, depth=2, indent="x")) == "x|"
