"""YAML loader: data, key/value/text spans, and what a plan file may not contain."""

from __future__ import annotations

import pytest

from planrunner.diagnostics import Span
from planrunner.errors import PlanSyntaxError
from planrunner.plan.load_yaml import load_yaml

PLAN = """\
planrunner: 1
probes:
  start:
    usdt: pg:postgresql:query__start
    where: "latency >= 5ms"
  body:
    where: |
      arg1 > 2
outputs:
  - print: start
    fields: [time, pid, {q: "str(arg1)"}]
"""


def test_data_and_spans() -> None:
    loaded = load_yaml("p.yaml", PLAN)
    assert loaded.data["probes"]["start"]["usdt"] == "pg:postgresql:query__start"
    assert loaded.data["outputs"][0]["fields"][2] == {"q": "str(arg1)"}
    spans = loaded.spans
    assert spans.key(("probes", "start", "usdt")) == Span("p.yaml", 4, 5, 4, 9)
    assert spans.value(("probes", "start", "usdt")) == Span("p.yaml", 4, 11, 4, 37)
    # A quoted scalar's text starts after the quote; the value includes it.
    assert spans.value(("probes", "start", "where")).column == 12
    assert spans.text(("probes", "start", "where")) == Span("p.yaml", 5, 13, 5, 27)
    # A list item has no key: key() falls back to its value.
    assert spans.key(("outputs", 0, "fields", 1)) == Span("p.yaml", 11, 20, 11, 23)
    assert spans.key(("outputs", 0, "fields", 2, "q")) == Span("p.yaml", 11, 26, 11, 27)
    # A block scalar's text starts on the next line, at its indentation.
    assert spans.text(("probes", "body", "where")) == Span("p.yaml", 8, 7)


def test_missing_path_falls_back_to_nearest_ancestor() -> None:
    spans = load_yaml("p.yaml", PLAN).spans
    assert spans.value(("probes", "start", "args", 3)) == spans.value(("probes", "start"))
    assert spans.value(("nothing",)) == spans.value(())
    assert spans.value(()).line == 1


def test_yaml_11_scalars() -> None:
    data = load_yaml("p.yaml", "a: yes\nb: 0x10\nc: '0x10'\nd: 1.5\ne: ~\n").data
    assert data == {"a": True, "b": 16, "c": "0x10", "d": 1.5, "e": None}


def test_duplicate_keys_are_errors_with_first_position() -> None:
    with pytest.raises(PlanSyntaxError) as info:
        load_yaml("p.yaml", "a: 1\nb:\n  x: 1\n  y: 2\n  x: 3\na: 2\n")
    msgs = [(d.message, d.span.line, d.span.column) for d in info.value.diagnostics]
    assert msgs == [("duplicate key 'x' (first defined at 3:3)", 5, 3),
                    ("duplicate key 'a' (first defined at 1:1)", 6, 1)]


def test_merge_keys_explicit_wins() -> None:
    text = "x-base: &b {binary: /a, build_id: ab}\nt:\n  <<: *b\n  binary: /c\n"
    assert load_yaml("p.yaml", text).data["t"] == {"binary": "/c", "build_id": "ab"}


@pytest.mark.parametrize(("text", "message", "line", "col"), [
    ("a: !env X\n", "YAML tag '!env' is not allowed in a plan", 1, 4),
    ("a: !!python/name:os.system x\n", "YAML tag '!!python/name:os.system' is "
     "not allowed in a plan", 1, 4),
    ("a: 1\n---\nb: 2\n", "a plan file holds one YAML document; found a second one", 2, 1),
    ("- 1\n", "a plan file must be a mapping of sections (planrunner:, probes:, outputs:, ...)",
     1, 1),
    ("", "a plan file must be a mapping of sections (planrunner:, probes:, outputs:, ...)", 1, 1),
    ("a: [1, 2\n", "YAML syntax error: expected ',' or ']', but got '<stream end>'", 2, 1),
    ("? [a]\n: 1\n", "a mapping key must be a plain name", 1, 3),
    ("a: &x [*x]\n", "recursive YAML alias", 1, 4),
])
def test_rejected(text: str, message: str, line: int, col: int) -> None:
    with pytest.raises(PlanSyntaxError) as info:
        load_yaml("p.yaml", text)
    diag = info.value.diagnostics[0]
    assert (diag.message, diag.span.line, diag.span.column) == (message, line, col)
