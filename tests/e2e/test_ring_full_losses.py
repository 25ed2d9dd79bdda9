"""Every event of a burst into a full ring is printed or counted lost, exactly: a
one-page ring (73 records of this size) under a back-to-back burst of COUNT events is
full for most of them. A probe whose one effect is its record asks the ring for room
before reading its operands and the clock (templates/record_helpers.h pr_ring_full,
render/program.py ring_check_size) and counts the event lost there; a probe with a
`where` checks nothing early (an event its filter drops is not lost) and must still
filter on the operand it reads. The run ends with its -c command, so the whole tail is
printed: printed + lost is the number of events that passed."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan

COUNT = 200_000
LOST = re.compile(r"^(\d+) events lost \(ring buffer full\)$", re.M)


def _plan(tmp_path, binary, where: str) -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
name: ring-full
targets: {{p: {{binary: {binary}}}}}
settings: {{ringbuf_pages: 1}}
probes:
  tick: {{usdt: p:paced:tick, args: [{{name: i}}]{where}}}
outputs:
  - print: tick
    fields: [i]
""")


def _printed_and_lost(plan: str, binary) -> tuple[list[int], int]:
    # a rate no loop reaches: every tick is due at once, fired back to back
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{binary} {COUNT} 0 1000000000"],
                          timeout=120)
    assert proc.returncode in (0, 4), proc.stderr
    assert "not printed" not in proc.stderr, proc.stderr  # the -c end prints the tail
    lost = sum(int(n) for n in LOST.findall(proc.stderr))
    records = json_records(proc.stdout)
    # the view's own loss record says the same count
    assert [r["lost"] for r in records if "lost" in r] == ([lost] if lost else [])
    return [r["i"] for r in records if "lost" not in r], lost


@pytest.mark.parametrize("where", ["", "i % 3 == 0"])
def test_printed_plus_lost_is_every_event_that_passed(fixtures_built, tmp_path, where):
    binary = fixtures_built / "paced"
    plan = _plan(tmp_path, binary, f", where: '{where}'" if where else "")
    rendered = run_planrunner(["render", plan])
    assert rendered.returncode == 0, rendered.stderr
    # the early check only where no filter must see the values first
    assert ("if (pr_ring_full(" in rendered.stdout) == (not where)
    printed, lost = _printed_and_lost(plan, binary)
    passed = COUNT // 3 if where else COUNT
    assert lost > 0, "the ring never filled: nothing was tested"
    assert len(printed) + lost == passed
    assert printed == sorted(set(printed))  # each once, in order
    assert all(1 <= i <= COUNT for i in printed)
    if where:
        assert all(i % 3 == 0 for i in printed)
