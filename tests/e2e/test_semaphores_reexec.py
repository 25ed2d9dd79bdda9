"""Poke-mode semaphores and a target that exec()s itself (issue 23 item 12).

reexec_sem (non-PIE) waits until run 1 raises its semaphore, then exec()s itself: the
new image has the semaphore at the same address, in the same file at the same offset,
and the same pid and start time, so only the exec generation tells the two images
apart. Run 2 raises the new image's semaphore and records its ticks; run 1 then ends,
and its restore must leave the new image alone (before the fix it lowered run 2's
raise to 0: the target stopped firing and run 2 stopped recording without a word).
"""

from __future__ import annotations

import select
import subprocess
import time
from pathlib import Path

from tests.e2e.conftest import json_records, write_plan
from tests.e2e.executor_helpers import kill, semaphore_value, start_tracer, stop_tracer

POKE = {"PLANRUNNER_SEMAPHORE_MODE": "poke"}
TICK = "reexec:tick"
MORE = 5  # ticks the target must fire after run 1 has ended


def _plan(tmp_path: Path, binary: Path) -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
name: reexec
targets:
  r: {{binary: {binary}}}
probes:
  tick: {{usdt: r:reexec:tick, args: [{{name: gen}}, {{name: i}}]}}
outputs:
  - print: tick
    fields: [gen, i]
""")


def _fired(target: subprocess.Popen, deadline: float) -> int:
    """The next `fired I` the target prints (0: none before the deadline)."""
    assert target.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([target.stdout], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = target.stdout.readline()
        if line.startswith("fired "):
            return int(line.split()[1])
        if not line:
            break
    return 0


def test_a_restore_from_before_a_reexec_leaves_the_next_runs_raise(fixtures_built,
                                                                    tmp_path):
    binary = fixtures_built / "reexec_sem"
    plan = _plan(tmp_path, binary)
    target = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, bufsize=1)
    run1 = run2 = None
    try:
        run1 = start_tracer(plan, "-f", "json", "-p", str(target.pid), env=POKE)
        assert target.stdout is not None
        assert target.stdout.readline() == "ready\n"  # re-exec'd: a new image, semaphore 0
        run2 = start_tracer(plan, "-f", "json", "-p", str(target.pid), env=POKE)
        deadline = time.monotonic() + 30
        assert _fired(target, deadline) >= 1, "run 2's raise did not make the target fire"
        _out1, err1 = stop_tracer(run1)
        assert run1.returncode == 0, err1
        # run 1 is gone: the new image's semaphore is still run 2's
        assert semaphore_value(target.pid, binary, TICK) == 1
        last = 0
        seen_after = 0
        while seen_after < MORE:
            got = _fired(target, time.monotonic() + 10)
            assert got, f"the target stopped firing after run 1 ended ({seen_after} more)"
            last, seen_after = got, seen_after + 1
        out2, err2 = stop_tracer(run2)
        assert run2.returncode == 0, err2
        ticks = [(r["gen"], r["i"]) for r in json_records(out2) if r.get("probe") == "tick"]
        assert (1, last) in ticks, ticks[-10:]  # recorded after run 1 had ended
        assert all(gen == 1 for gen, _ in ticks)
        run2 = None
    finally:
        for run in (run1, run2):
            if run is not None and run.poll() is None:
                run.kill()
                run.communicate()
        kill(target)
