"""The run's own programs (templates/runtime_helpers.h: the tracer registry's exit,
fork and exec programs) as the kernel holds them: with its BTF, all raw tracepoints
(their close at the stop waits for no grace period) and no execve syscall program;
without it (PLANRUNNER_VMLINUX_BTF naming no file), fork and the two execve programs are
perf events. Read from the run's own fds (/proc/PID/fdinfo) while it traces. That these
programs still do their work either way (planrunner processes skipped from their exec or
fork, --follow-children's children, the -c command) is test_scope_e2e.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import write_plan
from tests.e2e.executor_helpers import start_tracer, stop_tracer

PLAN = """
planrunner: 1
name: opens
probes:
  op: {tracepoint: "syscalls:sys_enter_openat"}
outputs:
  - {count: op}
"""


def _bpf_fds(pid: int) -> tuple[list[str], int]:
    """(the raw tracepoint links' events, sorted; how many perf events) `pid` holds."""
    raw, perf = [], 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            what = os.readlink(f"/proc/{pid}/fd/{fd}")
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:  # closed meanwhile
            continue
        if what == "anon_inode:[perf_event]":
            perf += 1
        elif what == "anon_inode:bpf_link" and "link_type:\traw_tracepoint" in info:
            raw += [line.split("\t")[1] for line in info.splitlines()
                    if line.startswith("tp_name:")]
    return sorted(raw), perf


def _traced_fds(tmp_path: Path, plan: str, btf: str) -> tuple[list[str], int]:
    """`_bpf_fds` of a --follow-children run of `plan` with the kernel's BTF ("kernel")
    or as on a kernel without it ("none": PLANRUNNER_VMLINUX_BTF names no file)."""
    if btf == "kernel" and not os.access("/sys/kernel/btf/vmlinux", os.R_OK):
        pytest.skip("this kernel has no readable /sys/kernel/btf/vmlinux")
    env = {} if btf == "kernel" else {"PLANRUNNER_VMLINUX_BTF": str(tmp_path / "none")}
    proc = start_tracer(write_plan(tmp_path, plan), "--follow-children", "-c", "sleep 5",
                        env=env)
    try:
        return _bpf_fds(proc.pid)
    finally:
        stop_tracer(proc)


@pytest.mark.parametrize("btf", ["kernel", "none"])
def test_own_programs_are_raw_tracepoints_where_the_kernel_has_btf(tmp_path, btf) -> None:
    raw, perf = _traced_fds(tmp_path, PLAN, btf)
    if btf == "kernel":  # the plan's tracepoint is the one perf event
        assert (raw, perf) == (["sched_process_exec", "sched_process_exit", "task_newtask",
                                "task_newtask"], 1)
    else:  # + fork, --follow-children's fork, execve, execveat
        assert (raw, perf) == (["sched_process_exec", "sched_process_exit"], 5)


SHARED = """
planrunner: 1
name: shares
probes:
  ex: {tracepoint: "sched:sched_process_exec"}
  ax: {tracepoint: "sched:sched_process_exit"}
  nt: {tracepoint: "task:task_newtask"}
outputs:
  - {count: ex}
  - {count: ax}
  - {count: nt}
"""


@pytest.mark.parametrize("btf", ["kernel", "none"])
def test_a_plan_sharing_their_events_gets_the_perf_event_variants(tmp_path, btf) -> None:
    """With a tracepoint of the plan on each own program's event, every own program is
    the perf-event variant (it then runs before the plan's, in attach order), and the
    program was compiled with that variant alone (PR_SHARED_*: the run would fail to
    attach one it had not compiled)."""
    raw, perf = _traced_fds(tmp_path, SHARED, btf)
    # the plan's 3, exit, exec, the registry's fork, --follow-children's fork; without
    # the kernel's offsets + execve and execveat
    assert (raw, perf) == ([], 7 if btf == "kernel" else 9)
