"""`usym()` against a real program: threads created by start routine, counted in the
kernel by the routine's address and named by planrunner (an aggregation key holds the
address and the tgid). The fixture's own lines are the ground truth."""

from __future__ import annotations

from collections import Counter

from tests.e2e.conftest import json_records, run_planrunner, write_plan
from tests.e2e.test_plans_runtimes import LINGER_MS, created_threads

PLAN = """\
planrunner: 1
name: threads-by-start
targets:
  libc: {binary: /lib/x86_64-linux-gnu/libc.so.6}
probes:
  create:
    uprobe: libc:pthread_create
    args: [{name: thread, type: pointer}, {name: attr, type: pointer},
           {name: start, type: pointer}, {name: arg, type: pointer}]
outputs:
  - count: create
    name: by_start
    by: [usym(start)]
"""


def test_count_by_start_routine(fixtures_built, tmp_path):
    plan = write_plan(tmp_path, PLAN)
    proc = run_planrunner(["run", plan, "-f", "json", "-c",
                           f"{fixtures_built / 'threads'} 3 50 {LINGER_MS}"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    truth = Counter(name for name, _addr, _arg in created_threads(proc.stdout))
    assert truth == {"reader_main": 3, "writer_main": 6, "pthread_exit": 3}
    rows = {row["start"]["symbol"]: row for row in json_records("\n".join(
        line for line in proc.stdout.splitlines() if line.startswith("{")))}
    assert {row["output"] for row in rows.values()} == {"by_start"}
    assert {name: row["count"] for name, row in rows.items()} == truth, proc.stdout
    assert all(row["start"]["offset"] == 0 for row in rows.values())
    assert rows["reader_main"]["start"]["module"] == str(fixtures_built / "threads")


def test_text_rows_name_the_routine(fixtures_built, tmp_path):
    plan = write_plan(tmp_path, PLAN)
    proc = run_planrunner(["run", plan, "-c", f"{fixtures_built / 'threads'} 2 50 {LINGER_MS}"],
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.split()[:1] and line.split()[0].endswith("+0x0")]
    assert sorted(rows) == [["pthread_exit+0x0", "2"], ["reader_main+0x0", "2"],
                            ["writer_main+0x0", "4"]], proc.stdout
