"""The csv view: parse back what it writes with the csv module."""

from __future__ import annotations

import csv
import io

from hypothesis import given
from hypothesis import strategies as st

from planrunner.output import make_view
from planrunner.records import AggRow, AggSnapshot, PrintSchema, lhist_buckets, log2_buckets

T_END = 1_796_265_667.5


def rec(**over):
    base = {"time": "2026-12-03T02:41:07.123456Z", "ts_ns": 9, "pid": 4242, "tid": 4243,
            "comm": "postgres", "probe": "query", "output": "0", "latency_ns": 201234567,
            "query": "SELECT 1"}
    base.update(over)
    return base


def parse(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def test_one_schema_round_trip():
    out = io.StringIO(newline="")
    view = make_view("csv", out, [PrintSchema("0", "query", ("latency_ns", "query"))])
    view.records([
        rec(query='SELECT "a", b\nFROM t'),
        rec(query=None),
        rec(query="SELECT lo", truncated=["query"]),
        rec(query=b"\xff".decode("utf-8", "backslashreplace")),
    ])
    view.close()
    rows = parse(out.getvalue())
    assert rows[0] == ["output", "time", "ts_ns", "pid", "tid", "comm", "probe",
                       "latency_ns", "query", "truncated"]
    assert rows[1] == ["0", "2026-12-03T02:41:07.123456Z", "9", "4242", "4243", "postgres",
                       "query", "201234567", 'SELECT "a", b\nFROM t', ""]
    assert [r[8:] for r in rows[2:]] == [["", ""], ["SELECT lo", "query"], ["\\xff", ""]]


def test_several_outputs_share_a_union_header():
    schemas = [PrintSchema("slow", "query", ("latency_ns", "query")),
               PrintSchema("flags", "start", ("ok", "query"))]
    out = io.StringIO(newline="")
    view = make_view("csv", out, schemas)
    view.records([rec(output="slow"),
                  rec(output="flags", probe="start", latency_ns=None, ok=True),
                  rec(output="flags", probe="start", ok=False, query="x",
                      truncated=["query"])])
    rows = parse(out.getvalue())
    assert rows[0][7:] == ["latency_ns", "query", "ok", "truncated"]
    assert rows[1][7:] == ["201234567", "SELECT 1", "", ""]
    assert rows[2][7:] == ["", "SELECT 1", "true", ""]
    assert rows[3][7:] == ["", "x", "false", "query"]


def test_bool_fields_and_small_ints_on_the_fast_path():
    out = io.StringIO(newline="")
    view = make_view("csv", out, [PrintSchema("0", "p", ("ok", "n"))])
    view.records([rec(ok=True, n=1), rec(ok=False, n=0)])
    rows = parse(out.getvalue())
    assert rows[0][-3:] == ["ok", "n", "truncated"]
    assert [r[-3:-1] for r in rows[1:]] == [["true", "1"], ["false", "0"]]


def test_aggregation_tables_and_losses():
    out = io.StringIO(newline="")
    view = make_view("csv", out, [])
    count = AggSnapshot("calls", "count", "count", None, ("func",), T_END - 1, T_END,
                        (AggRow((("func", "main"),), count=3), AggRow((("func", None),), count=1)))
    view.aggregate(count)
    view.aggregate(count)  # a second interval: no second header
    view.aggregate(AggSnapshot("lat", "avg", "latency_ns", "ns", (), None, T_END,
                               (AggRow((), count=2, avg=1.5),)))
    view.aggregate(AggSnapshot("h", "hist", "latency_ns", "ns", ("pid",), None, T_END,
                               (AggRow((("pid", 7),), buckets=log2_buckets({1: 1, 3: 4})),)))
    view.aggregate(AggSnapshot("l", "lhist", "arg2", None, (), None, T_END,
                               (AggRow((), buckets=lhist_buckets({0: 1, 3: 2}, 0, 20, 10)),),
                               dropped=4))
    view.lost(9, "ringbuf full")
    start, end = "2026-12-03T02:41:06.500000Z", "2026-12-03T02:41:07.500000Z"
    assert parse(out.getvalue()) == [
        ["output", "interval_start", "interval_end", "func", "count"],
        ["calls", start, end, "main", "3"],
        ["calls", start, end, "", "1"],
        ["calls", start, end, "main", "3"],
        ["calls", start, end, "", "1"],
        ["output", "interval_start", "interval_end", "avg", "count"],
        ["lat", "", end, "1.5", "2"],
        ["output", "interval_start", "interval_end", "pid", "low", "high", "count"],
        ["h", "", end, "7", "1", "2", "1"],
        ["h", "", end, "7", "2", "4", "0"],
        ["h", "", end, "7", "4", "8", "4"],
        ["output", "interval_start", "interval_end", "low", "high", "count"],
        ["l", "", end, "", "0", "1"],
        ["l", "", end, "0", "10", "0"],
        ["l", "", end, "10", "20", "0"],
        ["l", "", end, "20", "", "2"],
        ["lost", "reason", "output"],
        ["4", "map full", "l"],
        ["9", "ringbuf full", ""],
    ]


def test_output_without_schema_fills_common_columns():
    out = io.StringIO(newline="")
    view = make_view("csv", out, [PrintSchema("0", "query", ("query",))])
    view.records([rec(output="other", query="hidden")])
    rows = parse(out.getvalue())
    assert rows[1] == ["other", "2026-12-03T02:41:07.123456Z", "9", "4242", "4243",
                       "postgres", "query", "", ""]


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40),
                min_size=1, max_size=5))
def test_any_string_parses_back(queries):
    out = io.StringIO(newline="")
    make_view("csv", out, [PrintSchema("0", "query", ("query",))]).records(
        [rec(query=q) for q in queries])
    assert [row[7] for row in parse(out.getvalue())[1:]] == queries
