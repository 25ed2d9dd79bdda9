"""uprobes at SYMBOL+OFFSET, attached for real (issue 15 item 1).

The offsets fixture prints a sum that depends on every instruction of `work`. A probe
at an instruction start fires once per call and leaves the sum as it is without a
tracer; an offset inside an instruction is refused before anything is attached or
the command started (before the fix it was attached, and changed the sum or crashed
the program).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan
from tests.e2e.executor_helpers import uprobe_events

REPEAT = 500

pytest.importorskip("capstone")
if shutil.which("objdump") is None:
    pytest.skip("needs objdump to find instruction starts", allow_module_level=True)


def work_starts(binary: str) -> list[int]:
    out = subprocess.run(["objdump", "-d", "--wide", "--disassemble=work", binary],
                         capture_output=True, text=True, check=True).stdout
    addrs = [int(m.group(1), 16) for m in re.finditer(r"^\s*([0-9a-f]+):\t", out, re.M)]
    return [a - addrs[0] for a in addrs]


def plan(tmp_path, binary: str, offset: int) -> str:  # type: ignore[no-untyped-def]
    return write_plan(tmp_path, f"""
planrunner: 1
name: offsets
targets:
  o: {{binary: {binary}}}
probes:
  w: {{uprobe: "o:work+{offset}", args: [{{name: i}}]}}
outputs:
  - print: w
    fields: [pid]
""")


def test_valid_offset_fires_and_leaves_the_output_unchanged(fixtures_built, tmp_path):
    binary = str(fixtures_built / "offsets")
    untraced = subprocess.run([binary, str(REPEAT)], capture_output=True, text=True,
                              check=True).stdout
    starts = work_starts(binary)
    for offset in (starts[2], starts[-2]):  # past the prologue, and the last but one
        records = tmp_path / f"records-{offset}.json"
        proc = run_planrunner(["run", plan(tmp_path, binary, offset), "-f", "json",
                               "-o", str(records), "-c", f"{binary} {REPEAT}"])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == untraced  # the target's own output (records go to -o)
        recs = json_records(records.read_text())
        assert len(recs) == REPEAT, (offset, len(recs))


def test_mid_instruction_offset_is_refused_before_attaching(fixtures_built, tmp_path):
    binary = str(fixtures_built / "offsets")
    starts = work_starts(binary)
    bad = next(o for o in range(1, starts[-1]) if o not in starts and o + 1 not in starts)
    before = uprobe_events()
    marker = tmp_path / "started"
    proc = run_planrunner(["run", plan(tmp_path, binary, bad), "-c", f"touch {marker}"])
    assert proc.returncode == 1, proc.stderr
    near = [s for s in starts if s < bad][-1], [s for s in starts if s > bad][0]
    assert (f"error: offset {bad} of 'work' is inside an instruction; nearest "
            f"instruction starts: +{near[0]}, +{near[1]}") in proc.stderr
    assert not marker.exists()  # the command never ran
    assert uprobe_events() == before
