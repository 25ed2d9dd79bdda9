"""AggSnapshots as Prometheus families: bucket conversion (the `le` of a bucket counts
exactly the values <= le) and the exposition text a scrape returns."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from planrunner.prometheus.convert import cumulative_buckets, to_metric
from planrunner.prometheus.naming import Family, family_of
from planrunner.records import (
    AggRow,
    AggSnapshot,
    lhist_bucket_index,
    lhist_buckets,
    log2_bucket_index,
    log2_buckets,
)
from planrunner.render.layout import KeyField, KeyLayout
from planrunner.render.model import AggregateOutput


def test_log2_buckets_become_inclusive_integer_bounds() -> None:
    # 0 once, 1 twice, 5 (in [4, 8)) four times.
    buckets = log2_buckets({0: 1, 1: 2, 3: 4})
    assert cumulative_buckets(buckets) == [
        ("0", 1), ("1", 3), ("3", 3), ("7", 7), ("+Inf", 7)]


def test_lhist_underflow_and_overflow() -> None:
    # min -10, max 10, step 5: underflow, [-10,-5), [-5,0), [0,5), [5,10), overflow.
    buckets = lhist_buckets({0: 2, 1: 1, 3: 3, 4: 1, 5: 4}, -10, 10, 5)
    assert cumulative_buckets(buckets) == [
        ("-11", 2), ("-6", 3), ("-1", 3), ("4", 6), ("9", 7), ("+Inf", 11)]


def test_no_buckets_is_an_empty_histogram() -> None:
    assert cumulative_buckets(()) == [("+Inf", 0)]


def _le_counts_match(values: list[int], buckets) -> None:  # type: ignore[no-untyped-def]
    converted = cumulative_buckets(buckets)
    assert converted[-1] == ("+Inf", len(values))
    for le, count in converted[:-1]:
        assert count == sum(1 for v in values if v <= float(le)), (le, count)


@given(st.lists(st.integers(min_value=0, max_value=2**52), max_size=60))
def test_log2_le_counts_exactly_the_values_at_or_below(values: list[int]) -> None:
    counts = Counter(log2_bucket_index(v) for v in values)
    _le_counts_match(values, log2_buckets(counts))


@given(st.lists(st.integers(min_value=-300, max_value=300), max_size=60),
       st.integers(min_value=-200, max_value=100), st.integers(min_value=1, max_value=300),
       st.integers(min_value=1, max_value=70))
def test_lhist_le_counts_exactly_the_values_at_or_below(values: list[int], lo: int,
                                                         width: int, step: int) -> None:
    hi = lo + width
    counts = Counter(lhist_bucket_index(v, lo, hi, step) for v in values)
    _le_counts_match(values, lhist_buckets(counts, lo, hi, step))


def _agg(name: str, kind: str, keys: tuple[KeyField, ...] = (),
         value: str = "v") -> AggregateOutput:
    return AggregateOutput(name=name, probe="value", kind=kind, map_name="m",
                           key=KeyLayout(keys), value_label=value if kind != "count" else "count",
                           unit=None, every_ns=None, top=None,
                           lhist=(0, 10, 5) if kind == "lhist" else None, map_size=64)


def _snap(agg: AggregateOutput, rows: tuple[AggRow, ...]) -> AggSnapshot:
    return AggSnapshot(agg.name, agg.kind, agg.value_label, None,
                       agg.key.names, None, 0.0, rows)


def _exposition(*pairs: tuple[Family, AggSnapshot]) -> str:
    class Static:
        def collect(self):  # type: ignore[no-untyped-def]
            return [to_metric(fam, snap) for fam, snap in pairs]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Static())
    return generate_latest(registry).decode()


def test_counter_gauge_and_histogram_text() -> None:
    count = _agg("calls", "count", (KeyField("func", "str", size=16), KeyField("ok", "bool")))
    avg = _agg("mean", "avg")
    hist = _agg("lat", "hist", (KeyField("comm", "str", size=16),), value="latency_ns")
    text = _exposition(
        (family_of(count, "py-app", "Calls.\n  By function."),
         _snap(count, (AggRow((("func", 'a"b'), ("ok", True)), count=12),
                       AggRow((("func", None), ("ok", False)), count=1)))),
        (family_of(avg, "py-app", ""), _snap(avg, (AggRow((), count=4, avg=2.5),))),
        (family_of(hist, "py-app", "Latency."),
         _snap(hist, (AggRow((("comm", "pg"),), sum=9, buckets=log2_buckets({1: 1, 4: 1})),))),
    )
    assert text == (
        "# HELP planrunner_py_app_calls_total events at probe value by func, ok "
        "(plan py-app, output calls). Calls. By function.\n"
        "# TYPE planrunner_py_app_calls_total counter\n"
        'planrunner_py_app_calls_total{func="a\\"b",ok="true"} 12.0\n'
        'planrunner_py_app_calls_total{func="(null)",ok="false"} 1.0\n'
        "# HELP planrunner_py_app_mean avg of v at probe value (plan py-app, output mean)\n"
        "# TYPE planrunner_py_app_mean gauge\n"
        "planrunner_py_app_mean 2.5\n"
        "# HELP planrunner_py_app_lat hist of latency_ns at probe value by comm "
        "(plan py-app, output lat). Latency.\n"
        "# TYPE planrunner_py_app_lat histogram\n"
        'planrunner_py_app_lat_bucket{comm="pg",le="0"} 0.0\n'
        'planrunner_py_app_lat_bucket{comm="pg",le="1"} 1.0\n'
        'planrunner_py_app_lat_bucket{comm="pg",le="3"} 1.0\n'
        'planrunner_py_app_lat_bucket{comm="pg",le="7"} 1.0\n'
        'planrunner_py_app_lat_bucket{comm="pg",le="15"} 2.0\n'
        'planrunner_py_app_lat_bucket{comm="pg",le="+Inf"} 2.0\n'
        'planrunner_py_app_lat_count{comm="pg"} 2.0\n'
        'planrunner_py_app_lat_sum{comm="pg"} 9.0\n')


def test_negative_lhist_bounds_keep_sum_and_count() -> None:
    # prometheus_client's own HistogramMetricFamily drops _sum/_count when a bound is
    # negative; ours keeps both, and Prometheus' parser reads them back.
    agg = _agg("temp", "lhist")
    snap = _snap(agg, (AggRow((), sum=-7, buckets=lhist_buckets({0: 1, 2: 1}, 0, 10, 5)),))
    text = _exposition((family_of(agg, "p", ""), snap))
    (family,) = text_string_to_metric_families(text)
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert samples == {
        ("planrunner_p_temp_bucket", "-1"): 1, ("planrunner_p_temp_bucket", "4"): 1,
        ("planrunner_p_temp_bucket", "9"): 2, ("planrunner_p_temp_bucket", "+Inf"): 2,
        ("planrunner_p_temp_count", None): 2, ("planrunner_p_temp_sum", None): -7}


def test_sum_min_max_and_an_output_named_total() -> None:
    outs = [_agg("total", "sum"), _agg("lo", "min", (KeyField("k", "int"),)), _agg("hi", "max")]
    snaps = [(AggRow((), sum=500500),), (AggRow((("k", -3),), min=-9),), (AggRow((), max=7),)]
    text = _exposition(*((family_of(a, "p", ""), _snap(a, r))
                         for a, r in zip(outs, snaps, strict=True)))
    values = {(s.name, tuple(s.labels.items())): s.value
              for f in text_string_to_metric_families(text) for s in f.samples}
    assert values == {("planrunner_p_total", ()): 500500,  # not ..._total_total
                      ("planrunner_p_lo", (("k", "-3"),)): -9, ("planrunner_p_hi", ()): 7}
