"""TOML loader: tomllib data, scanner positions, decode errors with positions."""

from __future__ import annotations

import pytest

from planrunner.diagnostics import Span
from planrunner.errors import PlanSyntaxError
from planrunner.plan.load_toml import load_toml

PLAN = '''\
planrunner = 1 # version

[targets]
py = { binary = "${python}" }
jvm.binary = '/usr/lib/libjvm.so'

[probes.entry]
usdt = "py:python:function__entry"
args = [
  { name = "file", type = "string" },  # a comment with ] and "quotes"
  { name = "func" },
]
where = """
arg3 > 10"""

[probes."quoted.name"]
tracepoint = "sched:sched_process_exit"

[[outputs]]
print = "entry"

[[outputs]]
count = "entry"
by = ["file", { fn = "func" }]
'''


def test_data_matches_tomllib() -> None:
    loaded = load_toml("p.toml", PLAN)
    assert loaded.data["targets"]["jvm"] == {"binary": "/usr/lib/libjvm.so"}
    assert loaded.data["outputs"][1]["by"][1] == {"fn": "func"}
    assert loaded.format == "toml"


@pytest.mark.parametrize(("path", "key", "value", "text"), [
    (("planrunner",), (1, 1, 1, 11), (1, 14, 1, 15), None),
    (("targets", "py", "binary"), (4, 8, 4, 14), (4, 17, 4, 28), (4, 18, 4, 27)),
    (("targets", "jvm", "binary"), (5, 5, 5, 11), (5, 14, 5, 34), (5, 15, 5, 33)),
    (("probes", "entry"), (7, 9, 7, 14), (7, 9, 7, 14), None),
    (("probes", "entry", "args", 1, "name"), (11, 5, 11, 9), (11, 12, 11, 18), (11, 13, 11, 17)),
    (("probes", "entry", "where"), (13, 1, 13, 6), (13, 9, 14, 13), (14, 1, 14, 10)),
    (("probes", "quoted.name", "tracepoint"), (17, 1, 17, 11), (17, 14, 17, 40), None),
    (("outputs", 1, "by", 1, "fn"), (24, 17, 24, 19), (24, 22, 24, 28), (24, 23, 24, 27)),
])
def test_spans(path: tuple, key: tuple, value: tuple, text: tuple | None) -> None:
    spans = load_toml("p.toml", PLAN).spans
    assert spans.key(path) == Span("p.toml", *key)
    assert spans.value(path) == Span("p.toml", *value)
    if text is not None:
        assert spans.text(path) == Span("p.toml", *text)


def test_array_of_tables_entries() -> None:
    spans = load_toml("p.toml", PLAN).spans
    assert spans.value(("outputs", 0)) == Span("p.toml", 19, 1, 19, 12)
    assert spans.value(("outputs", 1)) == Span("p.toml", 22, 1, 22, 12)
    assert spans.key(("outputs", 1, "count")).line == 23


def test_unmodelled_text_falls_back_to_ancestors() -> None:
    # The scanner stops at what it does not model; lookups still return a location.
    spans = load_toml("p.toml", 'a = 1\nb = { c = 2, d = [1, 2] }\n').spans
    assert spans.value(("b", "d", 1)) == Span("p.toml", 2, 22, 2, 23)
    assert spans.value(("zzz", 3)) == Span("p.toml", 1, 1)


@pytest.mark.parametrize(("text", "message", "line", "col"), [
    ("a = \n", "TOML syntax error: invalid value", 1, 5),
    ("a = 1\na = 2\n", "TOML syntax error: cannot overwrite a value", 2, 6),
    ("a = [1,\n", "TOML syntax error: invalid value", 1, 8),
    ('a = "x\n', "TOML syntax error: illegal character '\\n'", 1, 7),
])
def test_decode_errors(text: str, message: str, line: int, col: int) -> None:
    with pytest.raises(PlanSyntaxError) as info:
        load_toml("p.toml", text)
    diag = info.value.diagnostics[0]
    assert (diag.message, diag.span.line, diag.span.column) == (message, line, col)
    assert diag.hints
