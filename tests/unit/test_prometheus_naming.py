"""Metric and label names, label values and `le` spelling for the Prometheus exporter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planrunner.prometheus.naming import (
    LABEL_NAME,
    METRIC_NAME,
    Family,
    NameClash,
    check_unique,
    counter_sample,
    go_float,
    label_name,
    label_value,
    metric_base,
    metric_type,
    sample_names,
)


@pytest.mark.parametrize(("plan", "output", "expected"), [
    ("python-calls", "0", "planrunner_python_calls_0"),
    ("postgres.slow", "query latency", "planrunner_postgres_slow_query_latency"),
    ("agg", "by_mod", "planrunner_agg_by_mod"),
    ("Ünïcode", "x:y", "planrunner__n_code_x_y"),  # no colons: they are for recording rules
    ("", "", "planrunner____"),
])
def test_metric_base(plan: str, output: str, expected: str) -> None:
    assert metric_base(plan, output) == expected


@given(st.text(), st.text())
def test_every_plan_and_output_name_gives_a_valid_metric_name(plan: str, output: str) -> None:
    base = metric_base(plan, output)
    for mtype in ("counter", "gauge", "histogram"):
        for name in sample_names(base, mtype):
            assert METRIC_NAME.match(name) and ":" not in name, name


@given(st.text())
def test_every_by_key_gives_a_valid_unreserved_label(key: str) -> None:
    name = label_name(key)
    assert LABEL_NAME.match(name)
    assert not name.startswith("__") and name not in ("le", "quantile")


@pytest.mark.parametrize(("key", "expected"), [
    ("query", "query"), ("latency_ns", "latency_ns"), ("a-b", "a_b"),
    ("1st", "key_1st"), ("__name__", "key___name__"), ("le", "key_le"),
    ("quantile", "key_quantile"), ("lee", "lee"), ("", "_"),
])
def test_label_name(key: str, expected: str) -> None:
    assert label_name(key) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("postgres", "postgres"), ("", ""), (None, "(null)"), (True, "true"), (False, "false"),
    (0, "0"), (-42, "-42"), (2**64 - 1, "18446744073709551615"), ('a"b\n', 'a"b\n'),
])
def test_label_value(value: object, expected: str) -> None:
    assert label_value(value) == expected


# What Go's strconv.FormatFloat(v, 'g', -1, 64) prints (client_golang's `le`).
@pytest.mark.parametrize(("value", "expected"), [
    (0, "0"), (1, "1"), (3, "3"), (1023, "1023"), (65535, "65535"), (999999, "999999"),
    (1000000, "1e+06"), (1048575, "1.048575e+06"), (2**64 - 1, "1.8446744073709552e+19"),
    (0.5, "0.5"), (0.0001, "0.0001"), (0.00001, "1e-05"), (-1, "-1"), (-251, "-251"),
    (-1048576, "-1.048576e+06"), (float("inf"), "+Inf"), (float("-inf"), "-Inf"),
])
def test_go_float(value: float, expected: str) -> None:
    assert go_float(value) == expected


@given(st.floats(allow_nan=False))
def test_go_float_round_trips(value: float) -> None:
    assert float(go_float(value)) == value


def test_types_and_counter_suffix() -> None:
    assert [metric_type(k) for k in ("count", "sum", "min", "max", "avg", "hist", "lhist")] \
        == ["counter"] * 2 + ["gauge"] * 3 + ["histogram"] * 2
    with pytest.raises(ValueError):
        metric_type("print")
    assert counter_sample("planrunner_p_calls") == "planrunner_p_calls_total"
    assert counter_sample("planrunner_p_total") == "planrunner_p_total"  # never _total_total


def _fam(output: str, name: str, mtype: str, labels: tuple[str, ...] = ()) -> Family:
    return Family(output, "count", name, mtype, labels, "help")


def test_clashes_name_both_sides() -> None:
    check_unique([_fam("a", "planrunner_p_a", "counter"),
                  _fam("b", "planrunner_p_b", "histogram")])
    with pytest.raises(NameClash, match="output 'a-b' and output 'a_b' would both be exposed "
                                        "as planrunner_p_a_b_total"):
        check_unique([_fam("a-b", "planrunner_p_a_b", "counter"),
                      _fam("a_b", "planrunner_p_a_b", "counter")])
    with pytest.raises(NameClash, match="planrunner_p_x_count"):  # a histogram's _count
        check_unique([_fam("x", "planrunner_p_x", "histogram"),
                      _fam("x_count", "planrunner_p_x_count", "gauge")])
    with pytest.raises(NameClash, match="planrunner's own metrics and output 'lost'"):
        check_unique([_fam("lost", "planrunner_events_lost", "counter")],
                     reserved=["planrunner_events_lost_total"])
    with pytest.raises(NameClash, match="two `by` keys exposed as label 'a_b'"):
        check_unique([_fam("x", "planrunner_p_x", "counter", ("a_b", "a_b"))])


def test_a_stack_label_is_the_same_for_one_stack_in_every_process() -> None:
    # one stack in two processes (ASLR: other addresses) is one aggregation row, served
    # as one series whichever process's addresses the row carries: frames without a
    # symbol are named by module and link-time offset, not by address
    from planrunner.records import Stack
    from planrunner.stacks.frame import Frame

    def stack(base: int) -> Stack:
        return Stack("user", (Frame(base + 0x1786, None, 0x1786, "/usr/bin/ls"),
                              Frame(base + 0x2000, "main", 0x10, "/usr/bin/ls"),
                              Frame(0x7000, None, 0x7000, "")))

    one, other = stack(0x55d6_f520_0000), stack(0x5612_0000_0000)
    assert one == other
    assert label_value(one) == label_value(other) == \
        "[ls]+0x1786;main+0x10 [ls];0x7000 [unknown]"
