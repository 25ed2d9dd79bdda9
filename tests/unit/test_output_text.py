"""The text view: exact lines for records, aggregations, histograms and losses."""

from __future__ import annotations

import io
import json
import time
from datetime import UTC

import pytest

from planrunner.output import make_view
from planrunner.records import (
    AggRow,
    AggSnapshot,
    Bucket,
    PrintSchema,
    lhist_buckets,
    log2_buckets,
)

T_END = 1_796_265_667.5  # 2026-12-03T02:41:07.5Z
SCHEMA = PrintSchema("0", "query", ("latency_ns", "query"))


def rec(**over):
    base = {"time": "2026-12-03T02:41:07.123456Z", "ts_ns": 9, "pid": 4242, "tid": 4243,
            "comm": "postgres", "probe": "query", "output": "0", "latency_ns": 201234567,
            "query": "SELECT 1"}
    base.update(over)
    return base


def render(schemas, *, records=(), snaps=(), lost=()):
    out = io.StringIO()
    view = make_view("text", out, schemas, tz=UTC)
    if records:
        view.records(list(records))
    for snap in snaps:
        view.aggregate(snap)
    for count, reason in lost:
        view.lost(count, reason)
    view.close()
    return out.getvalue()


def test_columns_with_null_truncated_and_non_utf8():
    text = render([SCHEMA], records=[
        rec(),
        rec(query=None),
        rec(query="SELECT lo", truncated=["query"]),
        rec(query=b"caf\xe9 \xff".decode("utf-8", "backslashreplace")),
    ])
    assert text == (
        "TIME            PID     TID     COMM             PROBE latency_ns query\n"
        "02:41:07.123456 4242    4243    postgres         query 201234567  SELECT 1\n"
        "02:41:07.123456 4242    4243    postgres         query 201234567  (null)\n"
        "02:41:07.123456 4242    4243    postgres         query 201234567  SELECT lo…\n"
        "02:41:07.123456 4242    4243    postgres         query 201234567  caf\\xe9 \\xff\n"
    )


def test_bools_and_small_ints():
    schema = PrintSchema("0", "p", ("ok", "n"))
    text = render([schema], records=[rec(probe="p", ok=True, n=1, latency_ns=None),
                                     rec(probe="p", ok=False, n=0)])
    lines = text.splitlines()
    assert lines[1].endswith("p     true     1")
    assert lines[2].endswith("p     false    0")


def test_header_once_across_batches_and_single_record():
    out = io.StringIO()
    view = make_view("text", out, [SCHEMA], tz=UTC)
    view.records([rec()])
    view.record(rec(pid=7))
    view.records([])
    view.flush()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("TIME") and lines[2][16:20] == "7   "


def test_different_fields_print_key_value_pairs():
    a = PrintSchema("slow", "query", ("latency_ns", "query"))
    b = PrintSchema("starts", "start", ("query",))
    text = render([a, b], records=[rec(output="slow"),
                                   rec(output="starts", probe="start", latency_ns=None)])
    assert text == (
        "TIME            PID     TID     COMM             PROBE\n"
        "02:41:07.123456 4242    4243    postgres         query latency_ns=201234567 "
        "query=SELECT 1\n"
        "02:41:07.123456 4242    4243    postgres         start query=SELECT 1\n"
    )


def test_same_fields_share_the_column_header():
    a = PrintSchema("a", "query", ("latency_ns", "query"))
    b = PrintSchema("b", "other", ("latency_ns", "query"))
    text = render([a, b], records=[rec(output="a"), rec(output="b", probe="other")])
    assert text.splitlines() == [
        "TIME            PID     TID     COMM             PROBE latency_ns query",
        "02:41:07.123456 4242    4243    postgres         query 201234567  SELECT 1",
        "02:41:07.123456 4242    4243    postgres         other 201234567  SELECT 1",
    ]


def test_format_template_replaces_the_line_and_the_header():
    schema = PrintSchema("0", "query", ("latency_ns", "query"),
                         "{pid} {latency_ms:.3f} ms {query}")
    text = render([schema], records=[rec(), rec(query="x", truncated=["query"])])
    assert text == "4242 201.235 ms SELECT 1\n4242 201.235 ms x…\n"


def test_rejected_template_raises():
    schema = PrintSchema("0", "query", ("query",), "{query.__class__}")
    with pytest.raises(ValueError, match="attribute and index access"):
        make_view("text", io.StringIO(), [schema])


def test_record_without_schema_prints_pairs():
    text = render([], records=[rec(output="x", probe="q")])
    assert text.splitlines()[1] == (
        "02:41:07.123456 4242    4243    postgres         q     latency_ns=201234567 "
        "query=SELECT 1")


def test_local_time_by_default(monkeypatch):
    monkeypatch.setenv("TZ", "XST-5:30")  # POSIX rule: UTC+05:30, no tzdata needed
    time.tzset()
    try:
        out = io.StringIO()
        view = make_view("text", out, [SCHEMA])
        view.record(rec())
        view.aggregate(AggSnapshot("c", "count", "count", None, (), None, T_END,
                                   (AggRow((), count=1),)))
        lines = out.getvalue().splitlines()
        assert lines[1].startswith("08:11:07.123456 ")
        assert lines[2].startswith("[08:11:07] c: count")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_count_by_key():
    snap = AggSnapshot("calls", "count", "count", None, ("file", "func"), T_END - 1, T_END,
                       (AggRow((("file", "app.py"), ("func", "main")), count=12345),
                        AggRow((("file", "lib/x.py"), ("func", None)), count=7)))
    assert render([], snaps=[snap]) == (
        "[02:41:07] calls: count by file, func\n"
        "file     func   count\n"
        "app.py   main   12345\n"
        "lib/x.py (null)     7\n"
        "\n"
    )


@pytest.mark.parametrize(("kind", "row", "head", "value"), [
    ("sum", AggRow((("pid", 42),), sum=4096), "sum(arg2)", "4096"),
    ("min", AggRow((("pid", 42),), min=3), "min(arg2)", "3"),
    ("max", AggRow((("pid", 42),), max=70000), "max(arg2)", "70000"),
])
def test_sum_min_max(kind, row, head, value):
    snap = AggSnapshot("w", kind, "arg2", None, ("pid",), None, T_END, (row,))
    w = max(len(head), len(value))
    assert render([], snaps=[snap]) == (
        f"[02:41:07] w: {kind} of arg2 by pid\n"
        f"pid {head:>{w}}\n"
        f"42  {value:>{w}}\n\n"
    )


def test_avg_with_count_and_no_key():
    snap = AggSnapshot("lat", "avg", "latency_ns", "ns", (), None, T_END,
                       (AggRow((), count=3, avg=1234.5678),))
    assert render([], snaps=[snap]) == (
        "[02:41:07] lat: avg of latency_ns\n"
        "count avg(latency_ns)\n"
        "    3         1234.57\n\n"
    )


def test_log2_histogram_with_bars():
    buckets = log2_buckets({1: 1, 3: 10, 4: 40, 6: 5})
    snap = AggSnapshot("lat", "hist", "latency_ns", "ns", ("comm",), None, T_END,
                       (AggRow((("comm", "postgres"),), buckets=buckets),
                        AggRow((("comm", "psql"),), buckets=log2_buckets({0: 2}))))
    assert render([], snaps=[snap]) == (
        "[02:41:07] lat: hist of latency_ns by comm\n"
        "comm = postgres\n"
        "     nsecs               : count    distribution\n"
        "         1 -> 1          : 1        |*                                       |\n"
        "         2 -> 3          : 0        |                                        |\n"
        "         4 -> 7          : 10       |**********                              |\n"
        "         8 -> 15         : 40       |****************************************|\n"
        "        16 -> 31         : 0        |                                        |\n"
        "        32 -> 63         : 5        |*****                                   |\n"
        "\n"
        "comm = psql\n"
        "     nsecs               : count    distribution\n"
        "         0 -> 0          : 2        |****************************************|\n"
        "\n"
    )


def test_log2_histogram_top_bucket_widens_the_columns():
    snap = AggSnapshot("v", "hist", "arg1", None, (), None, T_END,
                       (AggRow((), buckets=log2_buckets({64: 1})),))
    lines = render([], snaps=[snap]).splitlines()
    assert lines[1] == f"{'arg1':>20}{'':24} : count    distribution"
    assert lines[2] == (" 9223372036854775808 -> 18446744073709551615 : 1        |"
                        + "*" * 40 + "|")
    assert len(lines) == 4  # title, head, one bucket, blank


def test_lhist_with_underflow_and_overflow():
    buckets = lhist_buckets({0: 4, 2: 8, 3: 2, 5: 1}, 0, 40, 10)
    snap = AggSnapshot("sz", "lhist", "arg2", None, ("pid",), None, T_END,
                       (AggRow((("pid", 42),), buckets=buckets),))
    assert render([], snaps=[snap]) == (
        "[02:41:07] sz: lhist of arg2 by pid\n"
        "pid = 42\n"
        "      arg2 : count    distribution\n"
        "       < 0 : 4        |********************                    |\n"
        "   [0, 10) : 0        |                                        |\n"
        "  [10, 20) : 8        |****************************************|\n"
        "  [20, 30) : 2        |**********                              |\n"
        "  [30, 40) : 0        |                                        |\n"
        "     >= 40 : 1        |*****                                   |\n"
        "\n"
    )


def test_lhist_skips_empty_ends():
    buckets = lhist_buckets({2: 3}, 0, 40, 10)
    snap = AggSnapshot("sz", "lhist", "arg2", None, (), None, T_END,
                       (AggRow((), buckets=buckets), AggRow((), buckets=(Bucket(0, 1, 0),))))
    assert render([], snaps=[snap]).splitlines()[1:] == [
        "      arg2 : count    distribution",
        "  [10, 20) : 3        |****************************************|",
        "",
        "(no values)",
        "",
    ]


def test_empty_snapshot_dropped_keys_and_losses():
    snap = AggSnapshot("calls", "count", "count", None, ("func",), None, T_END, (), dropped=12)
    assert render([], snaps=[snap], lost=[(3, "ringbuf full")]) == (
        "[02:41:07] calls: count by func\n"
        "(no events)\n"
        "12 keys dropped (map full; raise settings.map_size)\n"
        "\n"
        "3 events lost (ringbuf full)\n"
    )


def test_line_breaks_inside_values_keep_one_line_per_record():
    text = render([SCHEMA], records=[rec(query="SELECT 1\nFROM t\r\n"), rec()])
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[1].endswith("201234567  SELECT 1\\nFROM t\\r\\n")
    templated = PrintSchema("0", "query", ("query",), "{query}")
    assert render([templated], records=[rec(query="a\nb")]) == "a\\nb\n"


def test_columns_widen_to_the_values_seen():
    schema = PrintSchema("0", "request", ("id", "path", "status", "latency_ns"))

    def r(i, path, status, lat):
        return rec(probe="request", id=i, path=path, status=status, latency_ns=lat)

    out = io.StringIO()
    view = make_view("text", out, [schema], tz=UTC)
    view.records([r(1, "/index.html", 200, 10127163), r(2, "/api/users", 200, 16098464)])
    view.records([r(3, "/static/app.js", 404, 20150891)])
    view.records([r(4, "/" + "x" * 60, 500, 5127837)])
    lines = out.getvalue().splitlines()
    assert lines[:3] == [
        "TIME            PID     TID     COMM             PROBE   id       path        "
        "status   latency_ns",
        "02:41:07.123456 4242    4243    postgres         request 1        /index.html "
        "200      10127163",
        "02:41:07.123456 4242    4243    postgres         request 2        /api/users  "
        "200      16098464",
    ]
    # a later, longer value widens its column for the lines after it
    assert lines[3].endswith("request 3        /static/app.js 404      20150891")
    # beyond MAX_WIDTH (40) a value pushes the line instead of widening the column
    assert lines[4].endswith("request 4        /" + "x" * 60 + " 500      5127837")


def test_header_aligned_with_every_column():
    schema = PrintSchema("0", "request", ("id", "path", "status"))
    text = render([schema], records=[rec(probe="request", id=123456789012, path="/p",
                                         status=200)])
    head, line = text.splitlines()
    for name in ("PID", "TID", "COMM", "PROBE", "id", "path", "status"):
        col = head.index(name)
        assert line[col - 1] == " " and line[col] != " ", name


def test_control_characters_of_user_strings_are_escaped():
    text = render([SCHEMA], records=[rec(query="a\x1b[2Jb\x07\tc\nd")])
    assert text.splitlines()[1].endswith("201234567  a\\x1b[2Jb\\x07\\x09c\\nd")
    snap = AggSnapshot("c", "count", "count", None, ("comm",), None, T_END,
                       (AggRow((("comm", "ev\x1bil"),), count=3),))
    assert "ev\\x1bil" in render([], snaps=[snap])
    templated = PrintSchema("0", "query", ("query",), "{query}")
    assert render([templated], records=[rec(query="\x1b]0;x\x07")]) == "\\x1b]0;x\\x07\n"


def json_lines_encoder():
    from planrunner.output.json_lines import _flat_encoder

    return _flat_encoder(json.JSONEncoder(separators=(",", ":"), ensure_ascii=False))


def _batches():
    """Batches of two outputs' records: NULL, truncated, bools among 0/1 ints, control
    characters, a record of an output without a schema, one-output batches."""
    def q(**over):
        return rec(**over)

    def f(**over):
        base = {"probe": "flag", "output": "1", "ok": True, "n": 1, "name": "x"}
        base.update(over)
        return rec(**base)

    return [
        [q(), q(query=None), q(query="SELECT lo", truncated=["query"]), q(latency_ns=1)],
        [f(), f(ok=False, n=0), f(name=None), f(name="a\x1bb\nc", truncated=["name"])],
        [q(query="tab\there"), f(ok=False), q()],
        [q(), q(query="caf\\xe9"), q(output="9", probe="other", extra=5)],
        [q(latency_ns=123456789012345), q(query="x" * 70)],
        [q(query='say "hi" \\ \u00fcn\u00ef\u2028\x01 100%'), q(comm='a"b%s'), q(latency_ns=-5)],
    ]


@pytest.mark.parametrize("fmt", ["text", "json", "csv"])
def test_schemas_that_name_their_nullable_and_bool_fields_print_the_same_bytes(fmt):
    """PrintSchema.nullable and .bools (what `run` knows of each field) let the text
    view look at those fields alone; every byte is what the view prints without them."""
    def schemas(known):
        extra = ({"nullable": ("query",), "bools": ()}, {"nullable": ("name",),
                                                          "bools": ("ok",)})
        return [PrintSchema("0", "query", ("latency_ns", "query"), **(extra[0] if known else {})),
                PrintSchema("1", "flag", ("ok", "n", "name"), **(extra[1] if known else {}))]

    def printed(known):
        out = io.StringIO()
        view = make_view(fmt, out, schemas(known), tz=UTC) if fmt == "text" else \
            make_view(fmt, out, schemas(known))
        for batch in _batches():
            view.records([dict(r) for r in batch])
        view.close()
        return out.getvalue()

    assert printed(True) == printed(False)
    if fmt == "json":  # output "0" is written by its template, "1" (a bool) is not
        from planrunner.output.json_lines import _template_line
        flat = json_lines_encoder()
        assert _template_line(schemas(True)[0], flat) is not flat
        assert _template_line(schemas(True)[1], flat) is flat
        assert _template_line(schemas(False)[0], flat) is flat
        assert '"query":"say \\"hi\\" \\\\ \u00fcn\u00ef\u2028\\u0001 100%"' in printed(True)
    if fmt == "text":
        text = printed(True)
        assert "(null)" in text and "SELECT lo…" in text and "true" in text
        assert "a\\x1bb\\nc…" in text and "tab\\x09here" in text


def test_int_columns_widen_as_without_the_schemas_knowledge():
    """Columns of int fields widen by the batch's largest and smallest value, string
    columns by every value; the lines are those the view prints without knowing."""
    fields = ("latency_ns", "n", "query", "last")

    def printed(known):
        extra = {"nullable": ("query", "last"), "bools": ()} if known else {}
        out = io.StringIO()
        view = make_view("text", out, [PrintSchema("0", "query", fields, **extra)], tz=UTC)
        for batch in ([rec(n=1, last="a"), rec(n=-12345678901, last="b", query=None)],
                      [rec(latency_ns=-1, n=7, last="c", query="q" * 50, truncated=["query"])],
                      [rec(latency_ns=10**30, n=0, last="d")],
                      [rec(latency_ns=5, n=3, last="e", query="tab\t")]):
            view.records(batch)
        view.close()
        return out.getvalue()

    assert printed(True) == printed(False)
    assert "-12345678901" in printed(True) and str(10**30) in printed(True)
