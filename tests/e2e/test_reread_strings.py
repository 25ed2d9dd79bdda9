"""A string the kernel could not read when the probe fired (its page not yet faulted
in) is read again from /proc/PID/mem when the record is decoded, later: it may show a
value written since. The record says so (issue 15 item 9: JSON `reread: [keys]`).

The target maps a file and, without touching the mapping, calls libc's strlen on it
(the uprobe's read fails: no page table entry yet), then writes a new value to the file
and stays alive while the record is decoded."""

from __future__ import annotations

import os
import sys

from tests.e2e.conftest import json_records, run_planrunner, write_plan
from tests.e2e.executor_helpers import libc_path

TARGET = """
import ctypes, mmap, os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)  # never read or written through: no PTE yet
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))  # takes the address only
libc = ctypes.CDLL(None)
libc.strlen.argtypes = [ctypes.c_void_p]
libc.strlen(addr)  # the probe fires here, before strlen touches the page
os.pwrite(fd, b"zq7" + b"-NEW", 0)  # what the late reader sees (no source line holds it)
time.sleep(1.5)
"""


def _run(tmp_path, env: dict[str, str]) -> list[dict]:
    data = tmp_path / "data"
    data.write_bytes(b"zq7-OLD" + b"\0" * (4096 - 7))
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: reread
targets: {{c: {{binary: {libc_path()}}}}}
probes:
  len: {{uprobe: c:strlen, args: [{{name: s, type: string}}]}}
outputs:
  - {{print: len, fields: [s]}}
""")
    proc = run_planrunner(["run", plan, "-f", "json", "-c",
                           f"{sys.executable} {script} {data}"],
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    ours = [r for r in json_records(proc.stdout)
            if r.get("s") in ("zq7-OLD", "zq7-NEW")]
    assert len(ours) == 1, [(r["s"], r.get("reread")) for r in ours]
    return ours


def test_a_string_read_again_later_is_marked(tmp_path):
    """Without sleepable programs (the fallback of kernels that lack them) the kernel
    cannot read the page: it is read late, shows the new value, and says so."""
    ours = _run(tmp_path, {"PLANRUNNER_SLEEPABLE": "0"})
    assert ours[0]["s"] == "zq7-NEW" and ours[0]["reread"] == ["s"], ours


def test_a_sleepable_probe_reads_the_value_of_the_moment(tmp_path):
    """With sleepable programs (this kernel) the kernel faults the page in and reads
    the value as it was when the probe fired: nothing to mark."""
    ours = _run(tmp_path, {})
    assert ours[0]["s"] == "zq7-OLD" and "reread" not in ours[0], ours
