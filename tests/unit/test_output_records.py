"""records.py: bucket bounds agree with the BPF indexing, top-N, timestamps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planrunner.records import (
    AggRow,
    Bucket,
    iso_utc,
    iso_utc_ns,
    lhist_bucket_bounds,
    lhist_bucket_count,
    lhist_bucket_index,
    lhist_buckets,
    log2_bucket_bounds,
    log2_bucket_index,
    log2_buckets,
    top_rows,
)


def test_log2_bounds_table():
    assert [log2_bucket_bounds(i) for i in range(5)] == [(0, 1), (1, 2), (2, 4), (4, 8), (8, 16)]
    assert log2_bucket_bounds(64) == (2**63, 2**64)
    with pytest.raises(ValueError):
        log2_bucket_bounds(65)


def test_log2_index_is_the_bpf_formula():
    # The BPF C: v == 0 -> 0, else 1 + floor(log2(v)).
    for v in (1, 2, 3, 4, 7, 8, 1000, 2**40 + 5):
        assert log2_bucket_index(v) == 1 + math.floor(math.log2(v))
    assert log2_bucket_index(0) == 0
    assert log2_bucket_index(-1) == 64  # negative values are u64: the top bucket


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_log2_value_lies_in_its_bucket(v):
    low, high = log2_bucket_bounds(log2_bucket_index(v))
    assert low <= v < high


@given(st.integers(-1000, 1000), st.integers(1, 500), st.integers(1, 60), st.integers(-2000, 2000))
def test_lhist_value_lies_in_its_bucket(lo, width, step, v):
    hi = lo + width
    low, high = lhist_bucket_bounds(lhist_bucket_index(v, lo, hi, step), lo, hi, step)
    assert (low is None or low <= v) and (high is None or v < high)


def test_lhist_bounds_with_a_short_last_bucket():
    # n = ceil((25 - 0) / 10) = 3; the last bucket stops at max.
    assert lhist_bucket_count(0, 25, 10) == 3
    assert [lhist_bucket_bounds(i, 0, 25, 10) for i in range(5)] == [
        (None, 0), (0, 10), (10, 20), (20, 25), (25, None)]
    assert lhist_bucket_index(24, 0, 25, 10) == 3
    assert lhist_bucket_index(25, 0, 25, 10) == 4
    with pytest.raises(ValueError):
        lhist_bucket_bounds(5, 0, 25, 10)
    with pytest.raises(ValueError):
        lhist_bucket_count(10, 10, 1)


def test_dense_bucket_builders():
    assert log2_buckets({3: 2, 1: 1}) == (
        Bucket(0, 1, 0), Bucket(1, 2, 1), Bucket(2, 4, 0), Bucket(4, 8, 2))
    assert log2_buckets({2: 0}) == ()
    assert lhist_buckets([1, 0, 2, 0], 0, 20, 10) == (
        Bucket(None, 0, 1), Bucket(0, 10, 0), Bucket(10, 20, 2), Bucket(20, None, 0))
    with pytest.raises(ValueError, match="index 4 outside 0..3"):
        lhist_buckets({4: 1}, 0, 20, 10)
    with pytest.raises(ValueError):
        log2_buckets({65: 1})
    with pytest.raises(ValueError):
        log2_buckets({-1: 1})


def _row(name, **stats):
    return AggRow((("func", name),), **stats)


def test_top_rows_sorts_descending_and_cuts():
    rows = [_row("a", count=3), _row("b", count=10), _row("c", count=3), _row("d", count=7)]
    assert [r.key[0][1] for r in top_rows(rows, "count", 3)] == ["b", "d", "a"]
    assert [r.key[0][1] for r in top_rows(rows, "count", None)] == ["b", "d", "a", "c"]
    assert top_rows(rows, "count", 0) == ()


def test_top_rows_by_kind_and_histogram_total():
    rows = [_row("a", min=5, max=9), _row("b", min=1, max=90)]
    assert [r.key[0][1] for r in top_rows(rows, "max", 1)] == ["b"]
    assert [r.key[0][1] for r in top_rows(rows, "min", 1)] == ["a"]
    hists = [_row("x", buckets=(Bucket(0, 1, 2),)),
             _row("y", buckets=(Bucket(0, 1, 1), Bucket(1, 2, 5)))]
    assert [r.key[0][1] for r in top_rows(hists, "hist", None)] == ["y", "x"]
    with pytest.raises(ValueError):
        top_rows(rows, "median", 1)


def test_top_rows_tolerates_mixed_key_types():
    rows = [AggRow((("k", None),), count=1), AggRow((("k", 5),), count=1),
            AggRow((("k", "s"),), count=1)]
    assert [r.key[0][1] for r in top_rows(rows, "count", None)] == [5, None, "s"]


def test_iso_utc():
    assert iso_utc_ns(1_796_265_667_123_456_789) == "2026-12-03T02:41:07.123456Z"
    assert iso_utc(1_796_265_667.5) == "2026-12-03T02:41:07.500000Z"
    assert iso_utc(0) == "1970-01-01T00:00:00.000000Z"
