"""The json view: one object per line, records as they are, aggregation rows, losses."""

from __future__ import annotations

import io
import json

from hypothesis import given
from hypothesis import strategies as st

from planrunner.output import make_view
from planrunner.records import AggRow, AggSnapshot, Bucket, PrintSchema, lhist_buckets

T_END = 1_796_265_667.5
SCHEMA = PrintSchema("0", "query", ("latency_ns", "query"))


def rec(**over):
    base = {"time": "2026-12-03T02:41:07.123456Z", "ts_ns": 9, "pid": 4242, "tid": 4243,
            "comm": "postgres", "probe": "query", "output": "0", "latency_ns": 201234567,
            "query": "SELECT 1"}
    base.update(over)
    return base


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        return super().write(s)


def lines_of(stream: io.StringIO) -> list[dict]:
    # Split on "\n" only: JSON keeps U+0085/U+2028 raw, and str.splitlines() splits there.
    return [json.loads(line) for line in stream.getvalue().split("\n")[:-1]]


def test_records_round_trip_in_one_write_per_batch():
    records = [
        rec(),
        rec(query=None),
        rec(query="SELECT lo", truncated=["query"]),
        rec(query=b"caf\xc3\xa9 \xff".decode("utf-8", "backslashreplace"), ok=True),
    ]
    out = CountingStream()
    view = make_view("json", out, [SCHEMA])
    view.records(records)
    assert out.writes == 1
    view.close()
    assert lines_of(out) == records
    text = out.getvalue()
    assert '"query":"café \\\\xff"' in text  # UTF-8 kept, the escaped byte stays text
    assert '"query":null' in text and '"truncated":["query"]' in text
    assert text.splitlines()[0] == (
        '{"time":"2026-12-03T02:41:07.123456Z","ts_ns":9,"pid":4242,"tid":4243,'
        '"comm":"postgres","probe":"query","output":"0","latency_ns":201234567,'
        '"query":"SELECT 1"}')


def test_key_order_is_kept():
    out = io.StringIO()
    make_view("json", out, [SCHEMA]).record(rec())
    assert list(json.loads(out.getvalue())) == [
        "time", "ts_ns", "pid", "tid", "comm", "probe", "output", "latency_ns", "query"]


def test_count_rows():
    snap = AggSnapshot("calls", "count", "count", None, ("file", "func"), T_END - 1, T_END,
                       (AggRow((("file", "a.py"), ("func", "f")), count=12),
                        AggRow((("file", "b.py"), ("func", None)), count=3)))
    out = io.StringIO()
    make_view("json", out, []).aggregate(snap)
    assert out.getvalue().splitlines() == [
        '{"output":"calls","interval_start":"2026-12-03T02:41:06.500000Z",'
        '"interval_end":"2026-12-03T02:41:07.500000Z","file":"a.py","func":"f","count":12}',
        '{"output":"calls","interval_start":"2026-12-03T02:41:06.500000Z",'
        '"interval_end":"2026-12-03T02:41:07.500000Z","file":"b.py","func":null,"count":3}',
    ]


def test_stats_carry_what_the_row_has():
    snap = AggSnapshot("lat", "avg", "latency_ns", "ns", ("pid",), None, T_END,
                       (AggRow((("pid", 1),), count=4, avg=2.5),
                        AggRow((("pid", 2),), sum=10, min=1, max=9)))
    out = io.StringIO()
    make_view("json", out, []).aggregate(snap)
    rows = lines_of(out)
    assert rows[0] == {"output": "lat", "interval_start": None,
                       "interval_end": "2026-12-03T02:41:07.500000Z",
                       "pid": 1, "count": 4, "avg": 2.5}
    assert list(rows[1])[3:] == ["pid", "sum", "min", "max"]


def test_histogram_buckets_trimmed_and_unbounded_sides_null():
    log2 = (Bucket(0, 1, 0), Bucket(1, 2, 2), Bucket(2, 4, 0), Bucket(4, 8, 1), Bucket(8, 16, 0))
    lin = lhist_buckets({0: 1, 4: 2}, 0, 30, 10)
    snaps = [AggSnapshot("h", "hist", "latency_ns", "ns", (), None, T_END,
                         (AggRow((), buckets=log2),)),
             AggSnapshot("l", "lhist", "arg2", None, (), None, T_END,
                         (AggRow((), buckets=lin),))]
    out = io.StringIO()
    view = make_view("json", out, [])
    for snap in snaps:
        view.aggregate(snap)
    hist, lhist = lines_of(out)
    assert hist["buckets"] == [{"low": 1, "high": 2, "count": 2}, {"low": 2, "high": 4, "count": 0},
                               {"low": 4, "high": 8, "count": 1}]
    assert lhist["buckets"][0] == {"low": None, "high": 0, "count": 1}
    assert lhist["buckets"][-1] == {"low": 30, "high": None, "count": 2}
    assert len(lhist["buckets"]) == 5


def test_losses_and_dropped_keys():
    out = io.StringIO()
    view = make_view("json", out, [])
    view.aggregate(AggSnapshot("calls", "count", "count", None, (), None, T_END, (), dropped=5))
    view.lost(7, "ringbuf full")
    assert out.getvalue() == ('{"lost":5,"reason":"map full","output":"calls"}\n'
                              '{"lost":7,"reason":"ringbuf full"}\n')


_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(st.lists(st.one_of(_TEXT, st.none()), min_size=1, max_size=5),
       st.integers(-(2**63), 2**64 - 1))
def test_any_string_and_int_round_trips(queries, n):
    records = [rec(query=q, latency_ns=n) for q in queries]
    out = io.StringIO()
    make_view("json", out, [SCHEMA]).records(records)
    assert lines_of(out) == records


def test_the_template_writes_the_schemas_output_and_probe_as_the_encoder_does():
    # the template holds the schema's output and probe already escaped; a record of
    # another probe (or output) goes to the encoder: every line as json.dumps writes it
    schema = PrintSchema('o%"1', 'p%s"\\', ("latency_ns", "query"), nullable=("query",),
                         bools=())
    recs = [rec(output='o%"1', probe='p%s"\\'), rec(output='o%"1', probe="query"),
            rec(output='o%"1', probe='p%s"\\', query=None), rec(probe='p%s"\\')]
    out = io.StringIO()
    view = make_view("json", out, [schema])
    view.records(recs)
    view.close()
    assert out.getvalue() == "".join(
        json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n" for r in recs)
