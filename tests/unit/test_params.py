"""Params: durations, conversions, --set parsing and checking, ${name} substitution."""

from __future__ import annotations

import pytest

from planrunner.diagnostics import Span
from planrunner.errors import PlanSemanticError, UsageError
from planrunner.param_values import ParamValueError, convert, parse_duration
from planrunner.plan.params import check_overrides, parse_overrides, substitute


@pytest.mark.parametrize(("text", "ns"), [
    ("10ms", 10_000_000), ("2s", 2_000_000_000), ("500us", 500_000), ("500µs", 500_000),
    ("100ns", 100), ("1.5s", 1_500_000_000), ("1m", 60_000_000_000), ("2h", 7_200_000_000_000),
    ("0", 0), (0, 0), (".5ms", 500_000), (" 3 ms ", 3_000_000), ("1.5us", 1500),
])
def test_durations(text: object, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize(("text", "message"), [
    ("5", "a duration needs a unit: '5' what? (e.g. 5ms)"),
    (5, "a duration needs a unit: 5 what? (e.g. 5ms)"),
    ("-1s", "a duration cannot be negative: '-1s'"),
    ("1.5ns", "'1.5ns' is not a whole number of nanoseconds"),
    ("10 sec", "'10 sec' is not a duration"),
    ("fast", "'fast' is not a duration"),
    (True, "expected a duration, got a boolean"),
])
def test_bad_durations(text: object, message: str) -> None:
    with pytest.raises(ParamValueError) as info:
        parse_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize(("ptype", "value", "result"), [
    ("int", "42", 42), ("int", "0x2a", 42), ("int", 7, 7), ("int", "1_000", 1000),
    ("number", "1.5", 1.5), ("number", 2, 2.0),
    ("string", "abc", "abc"),
    ("bool", "yes", True), ("bool", "No", False), ("bool", "1", True), ("bool", "0", False),
    ("bool", "true", True), ("bool", False, False),
    ("duration", "1s", 1_000_000_000),
])
def test_convert(ptype: str, value: object, result: object) -> None:
    converted = convert(ptype, value)
    assert converted == result and type(converted) is type(result)


@pytest.mark.parametrize(("ptype", "value"), [
    ("int", "4.2"), ("int", True), ("number", "x"), ("bool", "maybe"), ("string", 5),
])
def test_convert_refuses(ptype: str, value: object) -> None:
    with pytest.raises(ParamValueError):
        convert(ptype, value)


def test_parse_overrides() -> None:
    assert parse_overrides(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(UsageError) as info:
        parse_overrides(["threshold", "=3"])
    assert [d.message for d in info.value.diagnostics] == [
        "--set 'threshold': expected NAME=VALUE", "--set '=3': expected NAME=VALUE"]
    assert info.value.exit_code == 2


def test_check_overrides() -> None:
    types = {"threshold": "duration", "limit": "int"}
    assert check_overrides({"threshold": "1ms", "limit": "3"}, types) == {
        "threshold": 1_000_000, "limit": 3}
    with pytest.raises(UsageError) as info:
        check_overrides({"treshold": "1ms", "limit": "many"}, types)
    first, second = info.value.diagnostics
    assert first.message == "--set treshold=1ms: the plan has no param 'treshold'"
    assert first.hints == ("did you mean 'threshold'?", "the plan's params: limit, threshold")
    assert second.message == "--set limit=many: param 'limit' is an int: 'many' is not an int"


def test_substitute() -> None:
    span = Span("p.yaml", 3, 10)
    values = {"app": "/bin/app", "t": 5_000_000, "on": True}
    types = {"app": "string", "t": "duration", "on": "bool"}
    assert substitute("${app}:x ${t} ${on}", values, types, span) == "/bin/app:x 5000000ns true"
    assert substitute("$${app} $$ $", values, types, span) == "${app} $$ $"
    with pytest.raises(PlanSemanticError) as info:
        substitute("/opt/${ap}/x ${nope} ${app", values, types, span)
    got = [(d.message, d.span.column, d.span.end_column, d.hints)
           for d in info.value.diagnostics]
    assert got == [
        ("unknown param '${ap}'", 15, 20, ("did you mean '${app}'?",)),
        ("unknown param '${nope}'", 23, 30,
         ("declare it under params:, or write '$${' for a literal '${'",)),
        ("unterminated '${' in a string", 31, 36,
         ("close it with '}', or write '$${' for a literal '${'",)),
    ]


def test_declared_but_unset_param_is_left_alone() -> None:
    # A required param without a value is reported by the binder, not here.
    assert substitute("${bin}", {}, {"bin": "string"}, Span("p", 1, 1)) == "${bin}"
