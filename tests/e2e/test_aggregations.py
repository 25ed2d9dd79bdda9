"""In-kernel aggregations end to end: plans run through the CLI (`planrunner run -f json
-c FIXTURE`) against tests/fixtures/elf/agg.c and demo.c, whose fired values are known
(their header comments and expected.json). Counts, sums, extremes and bucket counts are
exact; only wall-clock quantities (span latencies, interval boundaries) get a stated
tolerance."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from planrunner.records import lhist_bucket_index, log2_bucket_bounds, log2_bucket_index
from tests.e2e.conftest import ROOT, json_records, run_planrunner, write_plan

VALUES = range(1, 1001)  # agg:value fires v = 1..1000 once each
# agg:tick fires 10, 20, 30 times in seconds 0, 1, 2
TICKS_PER_SECOND = (10, 20, 30)


def _plan(fixtures: Path, probes: str, outputs: str, settings: str = "") -> str:
    return (f"planrunner: 1\nname: agg-e2e\ntargets:\n"
            f"  a: {{binary: {fixtures / 'agg'}}}\n  d: {{binary: {fixtures / 'demo'}}}\n"
            f"probes:\n{probes}outputs:\n{outputs}{settings}")


VALUE = "  value: {usdt: a:agg:value}\n"
WORK = ("  start: {usdt: a:agg:work__start}\n  done: {usdt: a:agg:work__done}\n"
        "  work: {span: {begin: start, end: done}}\n")


def _run(tmp_path: Path, fixtures: Path, probes: str, outputs: str, command: str,
         settings: str = "") -> tuple[dict[str, list[dict]], list[dict], str]:
    plan = write_plan(tmp_path, _plan(fixtures, probes, outputs, settings))
    proc = run_planrunner(["run", plan, "-f", "json", "-c", command], timeout=90)
    assert proc.returncode == 0, proc.stderr
    by_output: dict[str, list[dict]] = defaultdict(list)
    lost = []
    for rec in json_records(proc.stdout):
        if "lost" in rec:
            lost.append(rec)
        else:
            by_output[rec["output"]].append(rec)
    return by_output, lost, proc.stderr


def _counts(buckets: list[dict]) -> dict[tuple, int]:
    return {(b["low"], b["high"]): b["count"] for b in buckets}


def test_count_sum_min_max_avg_are_exact(tmp_path, fixtures_built) -> None:
    outs = ("  - {count: value, name: count}\n"
            "  - {sum: value, name: sum, value: arg1}\n"
            "  - {min: value, name: min, value: arg1}\n"
            "  - {max: value, name: max, value: arg1}\n"
            "  - {avg: value, name: avg, value: arg1}\n"
            "  - {sum: value, name: neg, value: '0 - arg1', where: 'arg1 % 2 == 0'}\n"
            "  - {min: value, name: negmin, value: '500 - arg1'}\n")
    got, lost, _ = _run(tmp_path, fixtures_built, VALUE, outs, f"{fixtures_built}/agg 1 0 values")
    assert lost == []
    one = {name: rows[0] for name, rows in got.items()}
    assert all(len(rows) == 1 for rows in got.values()), got
    assert one["count"]["count"] == 1000
    assert one["sum"]["sum"] == sum(VALUES) == 500500
    assert (one["min"]["min"], one["max"]["max"]) == (1, 1000)
    assert (one["avg"]["count"], one["avg"]["avg"]) == (1000, 500.5)
    assert one["neg"]["sum"] == -sum(v for v in VALUES if v % 2 == 0)
    assert one["negmin"]["min"] == 500 - 1000  # negative: the first value set it, not 0
    # once at exit, cumulative: the interval is the run, from its start to its end
    assert one["count"]["interval_start"] is not None
    assert one["count"]["interval_start"] < one["count"]["interval_end"]


def test_log2_and_linear_histograms_count_every_bucket_exactly(tmp_path, fixtures_built) -> None:
    outs = ("  - {hist: value, name: h, value: arg1}\n"
            "  - hist: value\n    name: hz\n    value: 'arg1 - 1'\n"
            "  - lhist: value\n    name: l\n    value: arg1\n"
            "    range: {min: 100, max: 950, step: 200}\n")
    got, _, _ = _run(tmp_path, fixtures_built, VALUE, outs, f"{fixtures_built}/agg 1 0 values")
    (h,), (hz,), (lin,) = got["h"], got["hz"], got["l"]

    def log2_expected(values) -> dict[tuple, int]:  # type: ignore[no-untyped-def]
        want: dict[tuple, int] = defaultdict(int)
        for v in values:
            want[log2_bucket_bounds(log2_bucket_index(v))] += 1
        return want

    assert _counts(h["buckets"]) == log2_expected(VALUES)  # json trims empty ends
    assert _counts(h["buckets"])[(512, 1024)] == 489
    assert _counts(hz["buckets"]) == log2_expected(v - 1 for v in VALUES)  # 0 in [0, 1)
    assert h["sum"] == 500500  # buckets keep the exact sum of their values
    want: dict[int, int] = defaultdict(int)
    for v in VALUES:
        want[lhist_bucket_index(v, 100, 950, 200)] += 1
    assert [b["count"] for b in lin["buckets"]] == [want[i] for i in range(len(lin["buckets"]))]
    assert lin["buckets"][0] == {"low": None, "high": 100, "count": 99}  # underflow
    assert lin["buckets"][-1] == {"low": 950, "high": None, "count": 51}  # overflow
    assert lin["buckets"][-2] == {"low": 900, "high": 950, "count": 50}  # cut at max


def test_span_latency_histogram_by_kind_within_tolerance(tmp_path, fixtures_built) -> None:
    """agg.c sleeps 1, 10 and 100 ms between work__start and work__done, 3 rounds;
    agg_times prints its clock read around each probe ("work KIND INNER OUTER"), so
    each span lies in [INNER, OUTER]: its log2 bucket reaches into that range, the
    sums and the max lie between the workload's, however loaded the machine."""
    outs = ("  - hist: work\n    name: lat\n    value: latency\n    by: [{kind: begin.arg1}]\n"
            "  - {count: work, name: n, by: [{kind: end.arg1}]}\n"
            "  - {max: work, name: slowest, value: latency}\n")
    binary = fixtures_built / "agg_times"
    plan = write_plan(tmp_path, _plan(fixtures_built, WORK, outs).replace(
        f"{{binary: {fixtures_built / 'agg'}}}", f"{{binary: {binary}}}"))
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{binary} 3 0 work"],
                          timeout=90)
    assert proc.returncode == 0, proc.stderr
    got: dict[str, list[dict]] = defaultdict(list)
    for rec in json_records("\n".join(line for line in proc.stdout.splitlines()
                                       if line.startswith("{"))):
        got[rec["output"]].append(rec)
    calls: dict[int, list[tuple[int, int]]] = defaultdict(list)  # kind -> (inner, outer)
    for line in proc.stdout.splitlines():
        if line.startswith("work "):
            kind, inner, outer = (int(x) for x in line.split()[1:])
            calls[kind].append((inner, outer))
    assert sorted((r["kind"], r["count"]) for r in got["n"]) == [(1, 3), (10, 3), (100, 3)]
    rows = {r["kind"]: r for r in got["lat"]}
    assert sorted(rows) == sorted(calls) == [1, 10, 100]
    for kind, row in rows.items():
        lo = kind * 1_000_000  # a sleep of k ms lasts at least k ms
        assert all(lo <= inner for inner, _ in calls[kind]), calls[kind]
        filled = [b for b in row["buckets"] if b["count"]]
        assert sum(b["count"] for b in filled) == 3
        # every filled bucket holds a latency inside some call's [inner, outer]
        assert all(any(b["low"] <= outer and inner < b["high"] for inner, outer in calls[kind])
                   for b in filled), (kind, filled, calls[kind])
        assert sum(i for i, _ in calls[kind]) <= row["sum"] <= sum(o for _, o in calls[kind])
    inner_max = max(i for i, _ in calls[100])
    outer_max = max(o for c in calls.values() for _, o in c)
    assert 100_000_000 <= inner_max <= got["slowest"][0]["max"] <= outer_max


def test_every_interval_prints_and_resets(tmp_path, fixtures_built) -> None:
    """Ticks: 10, 20, 30 in seconds 0, 1, 2 after start. `every: 1s` starts counting
    at attach, a few ms before the child runs: the sum over intervals is exact, each of
    the first three is within 3 of its second's count, and at most one partial interval
    follows."""
    outs = "  - {count: tick, name: ticks, every: 1s}\n"
    got, _, _ = _run(tmp_path, fixtures_built, "  tick: {usdt: a:agg:tick}\n", outs,
                     f"{fixtures_built}/agg 1 0 ticks")
    rows = got["ticks"]
    counts = [r["count"] for r in rows]
    assert sum(counts) == sum(TICKS_PER_SECOND), counts
    assert 3 <= len(rows) <= 4, counts
    for c, want in zip(counts, TICKS_PER_SECOND, strict=False):
        assert abs(c - want) <= 3, counts
    for prev, cur in zip(rows, rows[1:], strict=False):
        assert prev["interval_end"] == cur["interval_start"]
    assert all(r["interval_start"] < r["interval_end"] for r in rows)


def test_top_keeps_the_largest(tmp_path, fixtures_built) -> None:
    outs = ("  - sum: value\n    name: top\n    value: arg1\n    by: [{r: 'arg1 % 4'}]\n"
            "    top: 2\n")
    got, _, _ = _run(tmp_path, fixtures_built, VALUE, outs, f"{fixtures_built}/agg 1 0 values")
    sums = {r: sum(v for v in VALUES if v % 4 == r) for r in range(4)}
    assert [(row["r"], row["sum"]) for row in got["top"]] == [(0, sums[0]), (3, sums[3])]


def test_string_keys_comm_and_an_argument(tmp_path, fixtures_built) -> None:
    """demo fires request__start(id, path) with four paths in turn; 8 requests."""
    probes = ("  req: {usdt: d:demo:request__start,\n"
              "        args: [{name: id}, {name: path, type: string}]}\n"
              "  raw: {usdt: d:demo:request__start}\n")
    outs = ("  - {count: req, name: paths, by: [path]}\n"
            "  - {count: req, name: comms, by: [comm, {big: 'id > 4'}]}\n"
            "  - {count: raw, name: prefix, by: [{p: 'str(arg2, 4)'}]}\n")
    got, _, _ = _run(tmp_path, fixtures_built, probes, outs, f"{fixtures_built}/demo 8")
    assert sorted((r["path"], r["count"]) for r in got["paths"]) == [
        ("/api/orders/42", 2), ("/api/users", 2), ("/index.html", 2), ("/static/app.js", 2)]
    assert sorted((r["comm"], r["big"], r["count"]) for r in got["comms"]) == [
        ("demo", False, 4), ("demo", True, 4)]
    # a key cut at 4 bytes: "/api" twice as often; stale bytes never split keys
    assert sorted((r["p"], r["count"]) for r in got["prefix"]) == [
        ("/api", 4), ("/ind", 2), ("/sta", 2)]


def test_a_full_map_is_reported(tmp_path, fixtures_built) -> None:
    outs = "  - {count: value, name: full, by: [arg1]}\n"
    got, lost, stderr = _run(tmp_path, fixtures_built, VALUE, outs,
                             f"{fixtures_built}/agg 1 0 values", "settings: {map_size: 16}\n")
    rows = got["full"]
    assert 0 < len(rows) <= 16
    (rec,) = lost
    assert rec == {"lost": 1000 - sum(r["count"] for r in rows), "reason": "map full",
                   "output": "full"}
    assert rec["lost"] >= 1000 - 16
    assert f"{rec['lost']} aggregation updates dropped (map full" in stderr


def test_mixed_outputs_on_one_probe_each_with_its_where(tmp_path, fixtures_built) -> None:
    outs = ("  - {print: value, name: p, fields: [arg1], where: arg1 > 997}\n"
            "  - {count: value, name: c, where: 'arg1 <= 10'}\n"
            "  - {hist: value, name: h, value: arg1, where: 'arg1 >= 512'}\n")
    got, _, _ = _run(tmp_path, fixtures_built, VALUE, outs, f"{fixtures_built}/agg 1 0 values")
    assert [r["arg1"] for r in got["p"]] == [998, 999, 1000]
    assert got["c"][0]["count"] == 10
    assert [b for b in got["h"][0]["buckets"] if b["count"]] == [
        {"low": 512, "high": 1024, "count": 489}]


def test_text_view_prints_histograms_and_tables(tmp_path, fixtures_built) -> None:
    plan = write_plan(tmp_path, _plan(fixtures_built, VALUE,
                                      "  - {hist: value, name: h, value: arg1}\n"
                                      "  - {count: value, name: c, by: [comm]}\n"))
    proc = run_planrunner(["run", plan, "-c", f"{fixtures_built}/agg 1 0 values"])
    assert proc.returncode == 0, proc.stderr
    assert "512 -> 1023" in proc.stdout and ": 489" in proc.stdout
    assert any(line.split() == ["agg", "1000"] for line in proc.stdout.splitlines())


GOLDEN = sorted((ROOT / "tests" / "golden").glob("agg_*/plan.yaml"))


@pytest.mark.parametrize("plan", GOLDEN, ids=[p.parent.name for p in GOLDEN])
def test_golden_plans_load_and_verify(plan: Path, fixtures_built) -> None:
    """The golden C of every aggregation kind compiles and passes the verifier (the
    plans name the committed binary; the fixture runs from it)."""
    proc = run_planrunner(["run", str(plan.relative_to(ROOT)), "-f", "json", "-c",
                           "tests/fixtures/elf/bin/agg 1 0 values"])
    assert proc.returncode == 0, proc.stderr
    assert "Tracing" in proc.stderr


def test_big_string_keys_verify(tmp_path, fixtures_built) -> None:
    probes = "  req: {usdt: d:demo:request__start}\n"
    outs = "  - {count: req, name: big, by: [{s: 'str(arg2, 600)'}, {t: 'str(arg2)'}]}\n"
    got, _, _ = _run(tmp_path, fixtures_built, probes, outs, f"{fixtures_built}/demo 4",
                     "settings: {string_size: 700}\n")
    assert sorted((r["s"], r["t"]) for r in got["big"]) == sorted(
        (p, p) for p in ("/index.html", "/api/users", "/static/app.js", "/api/orders/42"))


def test_uprobe_and_tracepoint_probes_aggregate_too(tmp_path, fixtures_built) -> None:
    """Beyond USDT: a uprobe on agg.c's value(long v) and the kernel's exit tracepoint
    (filtered to the -c child)."""
    probes = ("  fn: {uprobe: 'a:value', args: [{name: v, type: int64}]}\n"
              "  bye: {tracepoint: 'sched:sched_process_exit'}\n")
    outs = ("  - {sum: fn, name: s, value: v, by: [comm]}\n"
            "  - {hist: fn, name: h, value: v, where: 'v <= 3'}\n"
            "  - {count: bye, name: exits, by: [comm]}\n")
    got, _, _ = _run(tmp_path, fixtures_built, probes, outs, f"{fixtures_built}/agg 1 0 values")
    assert [(r["comm"], r["sum"]) for r in got["s"]] == [("agg", 500500)]
    assert [b["count"] for b in got["h"][0]["buckets"]] == [1, 2]  # 1 | 2, 3
    assert [(r["comm"], r["count"]) for r in got["exits"]] == [("agg", 1)]
