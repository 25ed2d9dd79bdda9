"""String literals of every length up to the string buffer, compared and used as values
in real programs, sleepable and not.

A literal used to reach the C as a C string literal: clang keeps one it cannot fold
(a loop it does not unroll, a value it copies) in .rodata, which bcc does not relocate,
so the program read address 0: `where: file == "<75 bytes>"` failed the verifier
("invalid mem access 'scalar'") and a literal print field or key came out empty.
render/expr_c.py now emits a literal's bytes as numbers (expr_c's docstring).

strings.c fires str_pick(k, _, TEXT(k)) for k = 0..5: 127 x 'a', 128 x 'b', 129 x 'c',
NULL, non-UTF-8, "". With string_size 129 (the limit of these buffers), the literal of
length L is 'a' * L up to 127, then 'b' * 128 and 'c' * 129: equal to TEXT(0), TEXT(1)
and TEXT(2) exactly at those lengths, a prefix of TEXT(0) below.
"""

from __future__ import annotations

import os

import pytest

from planrunner.runtime.features import detect
from tests.e2e.conftest import json_records, run_planrunner, write_plan

LIMIT = 129
LENGTHS = [1, 16, 17, 63, 64, 75, 127, 128, LIMIT]

PLAN = """
planrunner: 1
name: literals
targets:
  s: {{binary: {binary}}}
settings: {{string_size: {limit}}}
probes:
  p:
    uprobe: s:str_pick
    args: [{{name: k, type: int32}}, {{name: big, type: int64}}, {{name: file, type: string}}]
  m:
    uprobe: s:str_pick
    args: [{{name: k, type: int32}}, {{name: big, type: int64}}, {{name: file, type: string}}]
    where: file == "{lit}"
outputs:
  - print: p
    fields: [k, {{eq: 'file == "{lit}"'}}, {{ne: 'file != "{lit}"'}},
             {{sw: 'startswith(file, "{lit}")'}}, {{ct: 'contains(file, "{lit}")'}},
             {{lit: '"{lit}"'}}]
  - print: m
    fields: [k]
  - count: p
    by: [{{t: '"{lit}"'}}]
"""


def literal(length: int) -> str:
    return "a" * length if length <= 127 else ("b" if length == 128 else "c") * length


def text_of(length: int) -> int:
    """The k whose TEXT(k) the literal of `length` starts."""
    return {128: 1, LIMIT: 2}.get(length, 0)


def _sleepable() -> bool:
    return os.geteuid() == 0 and detect().sleepable


@pytest.mark.parametrize("sleepable", [True, False], ids=["sleepable", "not-sleepable"])
@pytest.mark.parametrize("length", LENGTHS)
def test_literals_of_every_length(fixtures_built, tmp_path, length: int,
                                  sleepable: bool) -> None:
    if sleepable and not _sleepable():
        pytest.skip("this kernel has no sleepable uprobes")
    binary = fixtures_built / "strings"
    lit = literal(length)
    plan = write_plan(tmp_path, PLAN.format(binary=binary, limit=LIMIT, lit=lit))
    env = {**os.environ, "PLANRUNNER_SLEEPABLE": "1" if sleepable else "0"}
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{binary} 1"], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = json_records(proc.stdout)
    rows = [r for r in recs if r.get("probe") == "p"]
    assert [r["k"] for r in rows] == list(range(6))
    exact = {127: 0, 128: 1, LIMIT: 2}.get(length)
    starts = text_of(length)
    for r in rows:
        k = r["k"]
        assert r["eq"] is (k == exact), r
        assert r["ne"] is (k != exact), r
        assert r["sw"] is (k == starts), r
        assert r["ct"] is (k == starts or (lit == "a" and k == 4)), r  # "caf\xe9 ..."
        assert r["lit"] == lit, r
    assert [r["k"] for r in recs if r.get("probe") == "m"] == ([] if exact is None
                                                               else [exact])
    counts = [r for r in recs if r.get("output") == "p_count"]  # unnamed: probe, kind
    assert [(r["t"], r["count"]) for r in counts] == [(lit, 6)]


def test_a_literal_longer_than_the_buffer_is_a_located_error(fixtures_built, tmp_path) -> None:
    plan = write_plan(tmp_path, PLAN.format(binary=fixtures_built / "strings", limit=LIMIT,
                                            lit="d" * (LIMIT + 1)))
    proc = run_planrunner(["validate", plan])
    assert proc.returncode == 1
    assert f"this {LIMIT + 1}-byte literal can never equal a string of at most {LIMIT} bytes" \
        in proc.stderr
    assert "plan.yaml:14:20: error" in proc.stderr  # the literal in `where`


CONTAINS_PLAN = """
planrunner: 1
name: contains-sizes
targets:
  s: {{binary: {binary}}}
settings: {{string_size: {size}}}
probes:
  p:
    uprobe: s:str_pick
    args: [{{name: k, type: int32}}, {{name: big, type: int64}}, {{name: file, type: string}}]
    where: contains(file, "{lit}")
outputs:
  - print: p
    fields: [k]
"""


@pytest.mark.parametrize("sleepable", [True, False], ids=["sleepable", "not-sleepable"])
@pytest.mark.parametrize(("size", "length"), [(2048, 3), (256, 32)])
def test_contains_up_to_what_the_verifier_follows_loads(fixtures_built, tmp_path, size: int,
                                                         length: int, sleepable: bool) -> None:
    """The largest searches validate accepts (expr/check.py CONTAINS_MAX_STEPS) load and
    find the fixture's 127 x 'a' text (k = 0) and only it."""
    if sleepable and not _sleepable():
        pytest.skip("this kernel has no sleepable uprobes")
    binary = fixtures_built / "strings"
    plan = write_plan(tmp_path, CONTAINS_PLAN.format(binary=binary, size=size,
                                                     lit="a" * length))
    env = {**os.environ, "PLANRUNNER_SLEEPABLE": "1" if sleepable else "0"}
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{binary} 1"], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["k"] for r in json_records(proc.stdout)] == [0]


def test_a_search_the_verifier_cannot_follow_is_a_located_error(fixtures_built,
                                                                tmp_path) -> None:
    plan = write_plan(tmp_path, CONTAINS_PLAN.format(binary=fixtures_built / "strings",
                                                     size=256, lit="a" * 64))
    proc = run_planrunner(["validate", plan])
    assert proc.returncode == 1
    assert "plan.yaml:11:12: error: contains() of a 64-byte literal in a string of up to " \
           "256 bytes makes 12352 comparisons" in proc.stderr, proc.stderr
