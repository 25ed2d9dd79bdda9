"""Targets over time: `-c` exit statuses, probes attached by file (a process started
after the tracer is traced), a library dlopen()ed seconds into a --pid run, a binary
seen through another mount namespace (/proc/PID/root), one attach per inode."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan
from tests.e2e.executor_helpers import kill, libc_path, simple_plan, start_tracer, wait_for


def test_c_exit_status_is_the_commands(fixtures_built, tmp_path):
    plan = simple_plan(tmp_path, fixtures_built / "simple_pie")
    proc = run_planrunner(["run", plan, "-c", "/bin/sh -c 'exit 3'"])
    assert proc.returncode == 3, proc.stderr


def test_c_killed_by_a_signal_is_128_plus_n(fixtures_built, tmp_path):
    plan = simple_plan(tmp_path, fixtures_built / "simple_pie")
    proc = run_planrunner(["run", plan, "-c", "/bin/sh -c 'kill -TERM $$'"])
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr


def test_c_sees_probes_from_the_first_instruction(fixtures_built, tmp_path):
    """No sleep before the probes: everything is attached before the command runs."""
    b = fixtures_built / "simple_nopie"
    proc = run_planrunner(["run", simple_plan(tmp_path, b), "-f", "json", "-c", f"{b} 3"])
    assert proc.returncode == 0, proc.stderr
    assert [r["i"] for r in json_records(proc.stdout)] == [1, 2, 3]



def test_c_traces_the_command_not_planrunners_fork_before_exec(fixtures_built, tmp_path):
    """Between its release and the exec the child is a copy of planrunner with the traced
    pid: its libc calls must not show up (they did: malloc, close, strlen). What is left
    there is libffi copying execv's two arguments (memcpy), not checked here."""
    libc = libc_path()
    b = fixtures_built / "strlen_user"
    fns = ("malloc", "free", "close", "read", "strlen")
    probes = "".join(f"  {f}: {{uprobe: c:{f}}}\n" for f in fns)
    outputs = "".join(f"  - {{count: {f}, by: [comm]}}\n" for f in fns)
    plan = write_plan(tmp_path, f"planrunner: 1\nname: pre-exec\ntargets: {{c: {{binary: "
                      f"{libc}}}}}\nprobes:\n{probes}outputs:\n{outputs}")
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{b} 7"])
    assert proc.returncode == 0, proc.stderr
    counts = {(r["output"], r["comm"]): r["count"] for r in json_records(proc.stdout)}
    assert {comm for _, comm in counts} == {"strlen_user"}, counts
    assert counts[("strlen", "strlen_user")] == 7  # the strlen output: the command's own calls


def test_c_with_a_missing_command_fails_before_attaching(fixtures_built, tmp_path):
    plan = simple_plan(tmp_path, fixtures_built / "simple_pie")
    proc = run_planrunner(["run", plan, "-c", "no-such-command-xyz --flag"])
    assert proc.returncode == 127
    assert "cannot run no-such-command-xyz: command not found in PATH" in proc.stderr
    assert "Tracing" not in proc.stderr

def test_processes_started_after_the_tracer_are_traced(fixtures_built, tmp_path):
    b = fixtures_built / "simple_pie"
    tracer = start_tracer(simple_plan(tmp_path, b), "-f", "json")
    try:
        runs = [subprocess.Popen([str(b), str(n)]) for n in (2, 3)]
        pids = [p.pid for p in runs]
        assert [p.wait(timeout=30) for p in runs] == [0, 0]
        time.sleep(0.3)
    finally:
        tracer.send_signal(signal.SIGINT)
        out, err = tracer.communicate(timeout=30)
    recs = json_records(out)
    assert sorted((r["pid"], r["i"]) for r in recs if r["pid"] in pids) == sorted(
        [(pids[0], 1), (pids[0], 2), (pids[1], 1), (pids[1], 2), (pids[1], 3)]), err


def test_library_dlopened_seconds_into_a_pid_run(fixtures_built, tmp_path):
    """dlopen_user loads libprobe.so 4 s after start; the plan names the library by its
    file name only, which resolves beside the process's executable before it is mapped;
    the tracer says when it gets mapped, and every call is traced."""
    user = subprocess.Popen([str(fixtures_built / "dlopen_user"), "5", "4000", "50"])
    try:
        plan = write_plan(tmp_path, """
planrunner: 1
name: late
targets:
  lib: {binary: libprobe.so}
probes:
  work: {usdt: lib:lib:work, args: [{name: x}, {name: y}]}
  state: {usdt: lib:lib:state}
outputs:
  - {print: work, fields: [x, y]}
  - {print: state, fields: [arg1]}
""")
        # held stopped (by its pid) within its 4 s sleep until the tracer is attached:
        # however long the compile takes, the library is loaded after that
        assert wait_for(lambda: "dlopen_user" in _maps(user.pid))
        os.kill(user.pid, signal.SIGSTOP)
        assert "libprobe.so" not in _maps(user.pid)  # not loaded yet when the tracer starts
        tracer = start_tracer(plan, "-f", "json", "-p", str(user.pid))
        assert "libprobe.so" not in _maps(user.pid)
        os.kill(user.pid, signal.SIGCONT)
        out, err = tracer.communicate(timeout=60)  # it ends when the process exits
        assert tracer.returncode == 0, err
        recs = json_records(out)
        assert [(r["x"], r["y"]) for r in recs if r["probe"] == "work"] == \
            [(i, 2 * i) for i in range(1, 6)]
        assert [r["arg1"] for r in recs if r["probe"] == "state"] == [1, 2, 3, 4, 5]
        assert f"libprobe.so mapped by process {user.pid}" in err
        assert f"process {user.pid} exited" in err
    finally:
        kill(user)


def test_probes_follow_the_inode_not_the_path(fixtures_built, tmp_path):
    """The plan names the file by one path, the command runs it through a hard link:
    uprobes are on the inode, so it is traced, with one site attached once."""
    b = fixtures_built / "simple_pie"
    link = tmp_path / "same_simple"
    link.hardlink_to(b)
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: same
targets:
  a: {{binary: {b}}}
  b: {{binary: {link}}}
probes:
  hit: {{usdt: a:simple:hit, args: [{{name: i}}]}}
outputs:
  - {{print: hit, fields: [i]}}
""")
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{link} 2"])
    assert proc.returncode == 0, proc.stderr
    assert "Tracing 1 probe site" in proc.stderr
    assert [r["i"] for r in json_records(proc.stdout)] == [1, 2]


def test_pid_in_another_mount_namespace_resolves_through_proc_root(fixtures_built,
                                                                   tmp_path):
    """A process whose binary lives at /ctr/bin/simple only inside its own mount
    namespace (a container's view): --pid resolves the plan's path through
    /proc/PID/root, and a host-wide tracer of the same file sees it too (one inode)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    ctr = tmp_path / "ctr"
    (ctr / "bin").mkdir(parents=True)
    shutil.copy(fixtures_built / "simple_pie", ctr / "bin" / "simple")
    script = (f"mkdir -p /ctr && mount --bind {ctr} /ctr && "
              "exec /ctr/bin/simple 4 4000")
    inner = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                              "sh", "-c", script])
    try:
        assert wait_for(lambda: "/ctr/bin/simple" in _maps(inner.pid))
        plan = write_plan(tmp_path, """
planrunner: 1
name: ctr
targets:
  s: {binary: /ctr/bin/simple}
probes:
  hit: {usdt: s:simple:hit, args: [{name: i}]}
outputs:
  - {print: hit, fields: [i]}
""")
        (tmp_path / "host").mkdir()
        host = simple_plan(tmp_path / "host", ctr / "bin" / "simple")
        # held stopped (by its pid) within its 4 s sleep until both tracers are
        # attached, however long their compiles take
        os.kill(inner.pid, signal.SIGSTOP)
        wide = start_tracer(host, "-f", "json")
        proc = start_tracer(plan, "-f", "json", "-p", str(inner.pid))
        os.kill(inner.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)  # it ends when the process exits
        wide.send_signal(signal.SIGINT)
        wide_out, _ = wide.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert [r["i"] for r in json_records(out)] == [1, 2, 3, 4]
        assert [r["i"] for r in json_records(wide_out) if r["pid"] == inner.pid] == \
            [1, 2, 3, 4]
    finally:
        kill(inner)


def _maps(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return fh.read()
    except OSError:
        return ""
