"""Strings in pages the process has not touched yet (issue 16 item 3), read for real.

dlopen_strs loads libstrs.so and fires its probes at once with pointers into the
library's own .rodata, pages nothing has read (the fixture reports so from
/proc/self/pagemap, and each test checks it), then exits: a short-lived `-c` run.
With sleepable uprobes every value is exact and read in the kernel (no `reread`
marker). Forced non-sleepable (PLANRUNNER_SLEEPABLE=0), the kernel cannot read them:
values come from the /proc/PID/mem re-read while the process lingers, marked `reread`.
One probe per run: the first read of a string faults its page in for the rest.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from planrunner.runtime.features import detect
from tests.e2e.conftest import json_records, run_planrunner, write_plan

LIMIT = 128
EXPECTED = ["alpha: the first string of a cold page", "x" * 64 + "|", "y" * LIMIT, None,
            "omega"]
CUT = [False, False, True, False, False]  # k = 2 is 200 bytes

# (probe, its output's string field, what that field shows for string k)
CASES = {
    "usdt_arg": ("usdt: lib:strs:take\n    args: [{name: k}, {name: s, type: string}]",
                 "s", EXPECTED),
    "uprobe_str": ("uprobe: lib:strs_take", "d", EXPECTED),
    # a run-time length: exactly that many bytes (25 cross the page boundary of k = 1)
    "uprobe_str_n": ("uprobe: lib:strs_take", "n",
                     [EXPECTED[0][:5], "x" * 25, "y" * 45, None, "omega"]),
    "uretprobe": ("uretprobe: lib:strs_text\n    retval: {type: string}", "retval",
                  EXPECTED),
}
FIELDS = {"s": "[k, s]", "d": '[{d: "str(arg2)"}]', "n": '[{n: "str(arg2, arg1 * 20 + 5)"}]',
          "retval": "[retval]"}

PLAN = """
planrunner: 1
name: cold-strings
targets:
  lib: {{binary: {lib}}}
settings: {{string_size: {limit}}}
probes:
  p:
    {probe}
outputs:
  - print: p
    fields: {fields}
"""


def _sleepable() -> bool:
    return os.geteuid() == 0 and detect().sleepable


def _run(build: Path, tmp_path: Path, case: str, linger_ms: int,
         env: dict[str, str] | None = None) -> tuple[list[dict], list[str]]:
    probe, key, _ = CASES[case]
    plan = write_plan(tmp_path, PLAN.format(lib=build / "libstrs.so", limit=LIMIT,
                                            probe=probe, fields=FIELDS[key]))
    report = tmp_path / "pages"
    proc = run_planrunner(["run", plan, "-f", "json", "-c",
                           f"{build / 'dlopen_strs'} {linger_ms} {report}"],
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    # the precondition: no string page was in the process's page tables before firing
    assert report.read_text().split("\n")[:5] == [f"{k} 0" for k in range(5)]
    recs = json_records(proc.stdout)
    assert len(recs) == 5, proc.stdout
    return recs, [str(r[key]) if r[key] is not None else "" for r in recs]


@pytest.mark.parametrize("case", sorted(CASES))
def test_cold_strings_read_in_the_kernel(fixtures_built: Path, tmp_path: Path,
                                         case: str) -> None:
    if not _sleepable():
        pytest.skip("this kernel has no sleepable uprobes")
    recs, _ = _run(fixtures_built, tmp_path, case, 0)
    _, key, want = CASES[case]
    assert [r[key] for r in recs] == want
    for k, rec in enumerate(recs):
        assert "reread" not in rec, rec  # the kernel read every one
        assert (key in rec.get("truncated", [])) == (CUT[k] and key != "n"), rec


def test_fallback_rereads_and_marks(fixtures_built: Path, tmp_path: Path) -> None:
    """Non-sleepable: the kernel read fails on every cold page; the process lingers, so
    the consumer's re-read answers, and says so."""
    recs, _ = _run(fixtures_built, tmp_path, "usdt_arg", 1500, {"PLANRUNNER_SLEEPABLE": "0"})
    for k, rec in enumerate(recs):
        if EXPECTED[k] is None:
            assert rec["s"] is None and "reread" not in rec
            continue
        assert rec["reread"] == ["s"], rec
        assert rec["s"] == (EXPECTED[k] if not CUT[k] else "y" * LIMIT)


def test_fallback_loses_what_an_exited_process_held(fixtures_built: Path,
                                                    tmp_path: Path) -> None:
    """Non-sleepable and the process gone at once: what the re-read could not get is
    null (counted on stderr), and whatever it got is marked."""
    recs, _ = _run(fixtures_built, tmp_path, "usdt_arg", 0, {"PLANRUNNER_SLEEPABLE": "0"})
    for k, rec in enumerate(recs):
        if rec["s"] is not None:
            assert rec.get("reread") == ["s"] and EXPECTED[k] is not None
        else:
            assert "reread" not in rec


def test_cold_strings_through_perf_event_uprobes(fixtures_built: Path, tmp_path: Path) -> None:
    """The other attach strategy: a sleepable program on a perf-event uprobe."""
    if not _sleepable():
        pytest.skip("this kernel has no sleepable uprobes")
    recs, _ = _run(fixtures_built, tmp_path, "usdt_arg", 0, {"PLANRUNNER_UPROBE_ATTACH": "perf"})
    assert [r["s"] for r in recs] == EXPECTED
    assert not any("reread" in r for r in recs)


def test_a_where_filter_reads_a_cold_string(fixtures_built: Path, tmp_path: Path) -> None:
    """`str()` in `where` (an expression read, render/expr_c.py) is the first read of each
    page here: the filter sees the real text."""
    if not _sleepable():
        pytest.skip("this kernel has no sleepable uprobes")
    plan = write_plan(tmp_path, PLAN.format(
        lib=fixtures_built / "libstrs.so", limit=LIMIT,
        probe='uprobe: lib:strs_take\n    where: contains(str(arg2), "ega") || '
              'startswith(str(arg2), "xxx")', fields="[arg1]"))
    proc = run_planrunner(["run", plan, "-f", "json", "-c",
                           f"{fixtures_built / 'dlopen_strs'} 0"])
    assert proc.returncode == 0, proc.stderr
    assert [r["arg1"] for r in json_records(proc.stdout)] == [1, 4]
