"""The current comm without a helper (templates/runtime_helpers.h pr_current_comm): where
the kernel has BTF it is read from task_struct.comm with plain loads, else through
bpf_get_current_comm. Both give the same bytes, here for threads that renamed themselves
(prctl PR_SET_NAME, a 15-byte name and then a short one: a kernel that left the old
name's bytes after the NUL would show them in the `comm` aggregation key), in a print
record's header, an aggregation by `comm` and the --comm scope. The helper path is what a
kernel without BTF runs (PLANRUNNER_VMLINUX_BTF names a missing file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from planrunner.pipeline import compile_plan
from planrunner.runtime import bcc_backend
from tests.e2e.conftest import json_records, run_planrunner, write_plan

VMLINUX = "/sys/kernel/btf/vmlinux"
# thread number (the fixture's K) -> the name it ends with
NAMES = {0: "m", 1: "t1", 2: "t2"}
CALLS = 3


def _run(tmp_path: Path, fixtures: Path, btf: bool, *extra: str) -> tuple[list[dict], str]:
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: comm-btf
targets: {{r: {{binary: {fixtures / 'renamed'}}}}}
probes:
  named: {{uprobe: r:named, args: [{{name: k, type: int64}}]}}
outputs:
  - {{print: named, fields: [k, tid, comm]}}
  - {{count: named, by: [comm, k]}}
""")
    env = dict(os.environ)
    if not btf:
        env["PLANRUNNER_VMLINUX_BTF"] = str(tmp_path / "no-btf")  # as without BTF
    proc = run_planrunner(["run", plan, "-f", "json", "-c",
                           f"{fixtures / 'renamed'} {CALLS} 300", *extra], env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json_records("\n".join(line for line in proc.stdout.split("\n")
                                  if line.startswith("{"))), proc.stdout


def _tids(stdout: str) -> dict[int, int]:
    """The fixture's own lines: thread number -> its tid."""
    return {int(k): int(t) for k, t in (line.split() for line in stdout.split("\n")
                                         if line and not line.startswith("{"))}


@pytest.mark.skipif(not os.access(VMLINUX, os.R_OK), reason="this kernel has no BTF")
@pytest.mark.parametrize("btf", [True, False], ids=["btf", "helper"])
def test_renamed_threads_comm_in_records_keys_and_scope(fixtures_built, tmp_path, btf,
                                                        monkeypatch):
    records, stdout = _run(tmp_path, fixtures_built, btf)
    # which path the loader chose: the offset defined with BTF, left out without
    if not btf:
        monkeypatch.setenv("PLANRUNNER_VMLINUX_BTF", str(tmp_path / "no-btf"))
    program = compile_plan(str(tmp_path / "plan.yaml"), {})[2]
    defined = [f for f in bcc_backend.btf_cflags(program.btf_constants)
               if "PR_TASK_COMM_OFFSET=" in f]
    assert len(defined) == (1 if btf else 0)
    tids = _tids(stdout)
    prints = [r for r in records if "tid" in r and "count" not in r]
    assert sorted((r["k"], r["tid"], r["comm"]) for r in prints) == sorted(
        (k, tids[k], name) for k, name in NAMES.items() for _ in range(CALLS))
    counts = {(r["comm"], r["k"]): r["count"] for r in records if "count" in r}
    assert counts == {(name, k): CALLS for k, name in NAMES.items()}
    scoped, _ = _run(tmp_path, fixtures_built, btf, "--comm", "t2")
    assert {(r["k"], r["comm"]) for r in scoped if "count" not in r} == {(2, "t2")}
    assert {(r["comm"], r["k"]): r["count"] for r in scoped if "count" in r} == {
        ("t2", 2): CALLS}
