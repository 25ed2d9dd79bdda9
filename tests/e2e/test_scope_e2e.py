"""Scope against real processes, as a user runs it (issue 18 item 7; issue 15 items 6-7).

Pools of the same program (tests/fixtures/elf/paced, firing USDT paced:tick and
sleeping in clock_nanosleep 20 times a second): `--pid A --pid B`, `--cgroup` after
moving one process into a cgroup this test makes, `--comm` (the same binary started
through a symlink has another comm): exactly the right processes' events, for a USDT
probe (attached system-wide, filtered in BPF) and a tracepoint. `-c` with
--follow-children; two system-wide runs at once that do not trace each other; and the
pid filters inside a new pid namespace (`unshare --pid --fork --mount-proc`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from planrunner.runtime.features import ATTACH_ENV
from tests.e2e.conftest import PLANRUNNER, ROOT, json_records, run_planrunner, write_plan
from tests.e2e.executor_helpers import libc_path, start_tracer, stop_tracer

PY = "/usr/bin/python3.11"  # what the venv runs: its USDT notes are the python plan's


def _plan(tmp_path: Path, paced: Path) -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
name: scope
targets: {{p: {{binary: {paced}}}}}
probes:
  tick: {{usdt: p:paced:tick, args: [{{name: i}}]}}
  nap: {{tracepoint: syscalls:sys_enter_clock_nanosleep}}
outputs:
  - {{print: tick, fields: [i]}}
  - {{print: nap, fields: [comm]}}
""")


def _pids_by_probe(stdout: str) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {"tick": set(), "nap": set()}
    for r in json_records(stdout):
        if r.get("probe") in found:
            found[r["probe"]].add(r["pid"])
    return found


class Pool:
    """Processes of one program, killed by pid at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str]) -> int:
        proc = subprocess.Popen(argv)
        self.procs.append(proc)
        return proc.pid

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def pool() -> Iterator[Pool]:
    p = Pool()
    try:
        yield p
    finally:
        p.stop()


def _paced(paced: Path) -> list[str]:
    return [str(paced), "1000000", "0", "20"]  # 20 ticks a second until killed


# How the uprobes are attached: through the dispatcher of uprobe_multi links, which then
# checks the scope for every thunk it calls (PR_DISPATCHED), or each thunk by a perf
# event of its own, which checks it itself.
ATTACH = pytest.mark.parametrize("attach", ["links", "perf"])


def _attach_env(attach: str) -> dict[str, str]:
    return {**os.environ, ATTACH_ENV: "perf" if attach == "perf" else ""}


@ATTACH
def test_several_pids_trace_exactly_those(fixtures_built, tmp_path, pool, attach):
    paced = fixtures_built / "paced"
    a, b, c = (pool.start(_paced(paced)) for _ in range(3))
    proc = run_planrunner(["run", _plan(tmp_path, paced), "-f", "json", "-d", "2",
                           "--pid", str(a), "--pid", str(b)], env=_attach_env(attach))
    assert proc.returncode == 0, proc.stderr
    assert f"Tracing 2 probe sites in processes {a}, {b}." in proc.stderr
    assert _pids_by_probe(proc.stdout) == {"tick": {a, b}, "nap": {a, b}}, c
    # the comma list is the same
    proc = run_planrunner(["run", _plan(tmp_path, paced), "-f", "json", "-d", "2",
                           "--pid", f"{b},{c}"], env=_attach_env(attach))
    assert proc.returncode == 0, proc.stderr
    assert _pids_by_probe(proc.stdout) == {"tick": {b, c}, "nap": {b, c}}, a


def _cgroup2_root() -> str | None:
    with open("/proc/self/mounts") as fh:
        for line in fh:
            fields = line.split()
            if fields[2] == "cgroup2":
                return fields[1]
    return None


def test_cgroup_traces_the_processes_moved_into_it(fixtures_built, tmp_path, pool):
    root = _cgroup2_root()
    if root is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    paced = fixtures_built / "paced"
    a, b, c = (pool.start(_paced(paced)) for _ in range(3))
    group = Path(root) / f"planrunner-test-{os.getpid()}"
    group.mkdir()
    origin = Path(root) / _cgroup_of(c).lstrip("/")
    try:
        (group / "cgroup.procs").write_text(str(c))
        relative = group.name  # relative to the v2 mount, as `systemctl` names units
        proc = run_planrunner(["run", _plan(tmp_path, paced), "-f", "json", "-d", "2",
                               "--cgroup", relative])
        assert proc.returncode == 0, proc.stderr
        assert f"in cgroup {group}." in proc.stderr
        assert _pids_by_probe(proc.stdout) == {"tick": {c}, "nap": {c}}, (a, b)
        # AND across kinds: a --pid outside the cgroup leaves nothing
        proc = run_planrunner(["run", _plan(tmp_path, paced), "-f", "json", "-d", "2",
                               "--cgroup", str(group), "--pid", str(a)])
        assert proc.returncode == 0, proc.stderr
        assert _pids_by_probe(proc.stdout) == {"tick": set(), "nap": set()}
    finally:
        pool.stop()  # nothing left in the cgroup: it can go
        if (origin / "cgroup.procs").exists():
            for pid in (group / "cgroup.procs").read_text().split():
                (origin / "cgroup.procs").write_text(pid)
        group.rmdir()


def _cgroup_of(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as fh:
        return next(line.split("::", 1)[1].strip() for line in fh if line.startswith("0::"))


@ATTACH
def test_comm_traces_the_processes_of_that_name(fixtures_built, tmp_path, pool, attach):
    paced = fixtures_built / "paced"
    other = tmp_path / "pacer_b"  # same binary (same inode), another command name
    other.symlink_to(paced)
    a = pool.start(_paced(paced))
    b, c = (pool.start(_paced(other)) for _ in range(2))
    proc = run_planrunner(["run", _plan(tmp_path, paced), "-f", "json", "-d", "2",
                           "--comm", "pacer_b"], env=_attach_env(attach))
    assert proc.returncode == 0, proc.stderr
    assert "in processes named pacer_b." in proc.stderr
    assert _pids_by_probe(proc.stdout) == {"tick": {b, c}, "nap": {b, c}}, a
    comms = {r["comm"] for r in json_records(proc.stdout)}
    assert comms == {"pacer_b"}


@pytest.mark.parametrize("btf", ["kernel", "none"])
def test_follow_children_traces_the_commands_descendants(fixtures_built, tmp_path, btf):
    """With the kernel's BTF the fork program is a raw tracepoint reading the child's
    tgid at its offset; without it (btf none), the tracepoint's perf event."""
    paced = fixtures_built / "paced"
    cmd = f"sh -c '{paced} 10 0 50 & {paced} 10 0 50; wait'"
    proc = run_planrunner(["run", _plan(tmp_path, paced), "-f", "json", "--follow-children",
                           "-c", cmd], env=_btf_env(tmp_path, btf))
    assert proc.returncode == 0, proc.stderr
    assert "and its descendants" in proc.stderr
    recs = [r for r in json_records(proc.stdout) if r.get("probe") == "tick"]
    by_pid: dict[int, list[int]] = {}
    for r in recs:
        by_pid.setdefault(r["pid"], []).append(r["i"])
    assert len(by_pid) == 2 and all(v == list(range(1, 11)) for v in by_pid.values())
    # without it, only the shell itself is traced: it never fires paced:tick
    proc = run_planrunner(["run", _plan(tmp_path, paced), "-f", "json", "-c", cmd])
    assert proc.returncode == 0, proc.stderr
    assert not [r for r in json_records(proc.stdout) if r.get("probe") == "tick"]


def _btf_env(tmp_path: Path, btf: str) -> dict[str, str]:
    """The environment of a run with the kernel's BTF, or standing for a kernel without
    it (then the run's own fork and execve programs are perf events)."""
    if btf == "kernel":
        if not os.access("/sys/kernel/btf/vmlinux", os.R_OK):
            pytest.skip("this kernel has no readable /sys/kernel/btf/vmlinux")
        return dict(os.environ)
    return {**os.environ, "PLANRUNNER_VMLINUX_BTF": str(tmp_path / "no-btf")}


PY_PLAN = f"""
planrunner: 1
name: py-returns
targets: {{py: {{binary: {PY}}}}}
probes:
  ret:
    usdt: py:python:function__return
    args: [{{name: file, type: string}}, {{name: func, type: string}}]
outputs:
  - {{print: ret, fields: [func]}}
"""


def _needs_python_usdt() -> None:
    if not os.path.exists(PY) or os.path.realpath(sys.executable) != os.path.realpath(PY):
        pytest.skip(f"needs planrunner to run on {PY}, whose USDT probes the plan uses")


def test_two_system_wide_runs_do_not_trace_each_other(tmp_path):
    _needs_python_usdt()
    plan = write_plan(tmp_path, PY_PLAN)
    outs = [open(tmp_path / f"{n}.json", "w") for n in "ab"]  # noqa: SIM115
    errs = [open(tmp_path / f"{n}.err", "w") for n in "ab"]  # noqa: SIM115
    runs = [subprocess.Popen([*PLANRUNNER, "run", plan, "-f", "json", "-d", "4"],
                             stdout=outs[i], stderr=errs[i], cwd=ROOT) for i in range(2)]
    deadline = time.monotonic() + 60
    while not all("Tracing" in (tmp_path / f"{n}.err").read_text() for n in "ab"):
        assert time.monotonic() < deadline, "the runs never attached"
        time.sleep(0.1)
    try:
        for r in runs:
            # 4: the trace is incomplete (a busy machine's Python fills the ring)
            assert r.wait(timeout=60) in (0, 4)
    finally:
        for r in runs:
            if r.poll() is None:
                r.kill()
    for f in (*outs, *errs):
        f.close()
    a, b = (json_records((tmp_path / f"{n}.json").read_text()) for n in "ab")
    # (a busy machine's Python programs may fill the ring: `lost` records too)
    pids_a, pids_b = ({r["pid"] for r in recs if "pid" in r} for recs in (a, b))
    mine = {runs[0].pid, runs[1].pid}
    assert not pids_a & mine and not pids_b & mine
    # while the probe fired system-wide: in this test's Python at least (pytest waits)
    assert os.getpid() in pids_a and os.getpid() in pids_b
    # a run's entry goes at its exit (the other run's exit program) or, when no run was
    # attached then, at the next run's start
    assert runs_pids_gone_after_one_more_run(plan, {runs[0].pid, runs[1].pid})


PY_COUNT_PLAN = f"""
planrunner: 1
name: py-returns-by-pid
targets: {{py: {{binary: {PY}}}}}
probes:
  ret: {{usdt: py:python:function__return}}
outputs:
  - {{count: ret, by: [pid]}}
"""


def _children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(p) for p in text.split()}


@pytest.mark.parametrize("btf", ["kernel", "none"])
def test_a_run_attached_first_records_nothing_of_a_starting_run(tmp_path, btf):
    """Run A is attached when run B starts (B compiles: --no-cache, so its compile worker
    runs too): A records none of B's interpreter start, argument parsing and cache lookup
    before B registers, nor of B's worker, and all of a Python workload's calls
    (alpha x500, beta x300, gamma x200: at least 1000 returns of its own). With the
    kernel's BTF, A's exec program reads B's argv in B's new image and its fork program
    is a raw tracepoint; without it (btf none), A notes argv at the execve syscall."""
    _needs_python_usdt()
    plan = write_plan(tmp_path, PY_COUNT_PLAN)
    a = start_tracer(plan, "-f", "json", env=_btf_env(tmp_path, btf))
    try:
        b = subprocess.Popen([*PLANRUNNER, "run", plan, "--no-cache", "-f", "json", "-d",
                              "1"], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        b_children: set[int] = set()
        while b.poll() is None:  # the worker, a child of B, lives a second at most
            b_children |= _children(b.pid)
            time.sleep(0.002)
        assert b.returncode in (0, 4), b.stderr.read() if b.stderr else ""
        work = subprocess.Popen([PY, str(ROOT / "tests/e2e/workloads/py_workload.py"),
                                 "calls"], stdout=subprocess.DEVNULL)
        assert work.wait(timeout=60) == 0
        out, err = stop_tracer(a)
    finally:
        if a.poll() is None:
            a.kill()
    counts = {r["pid"]: r["count"] for r in json_records(out) if "pid" in r}
    assert counts.get(b.pid) is None, (b.pid, counts[b.pid])
    assert not b_children & counts.keys(), {p: counts[p] for p in b_children & counts.keys()}
    assert counts.get(work.pid, 0) >= 1000, counts  # the workload's own, all recorded


def test_a_run_that_attaches_while_another_starts_records_nothing_of_it(tmp_path):
    """Run B has exec'd but not yet registered (stopped by SIGSTOP a moment after its
    exec, in its interpreter's start) when run A attaches: A finds it in /proc
    (`starting_planrunners`) and records nothing of it once it goes on."""
    _needs_python_usdt()
    plan = write_plan(tmp_path, PY_COUNT_PLAN)
    b = subprocess.Popen([*PLANRUNNER, "run", plan, "-f", "json", "-d", "1"], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    os.kill(b.pid, signal.SIGSTOP)  # Popen returns once the exec is done
    try:
        a = start_tracer(plan, "-f", "json")
        try:
            os.kill(b.pid, signal.SIGCONT)
            assert b.wait(timeout=60) in (0, 4), b.stderr.read() if b.stderr else ""
            out, _err = stop_tracer(a)
        finally:
            if a.poll() is None:
                a.kill()
    finally:
        if b.poll() is None:
            os.kill(b.pid, signal.SIGCONT)
            b.kill()
    counts = {r["pid"]: r["count"] for r in json_records(out) if "pid" in r}
    assert counts.get(b.pid) is None, (b.pid, counts[b.pid])


@pytest.mark.parametrize("btf", ["kernel", "none"])
def test_the_command_is_not_traced_before_its_exec(tmp_path, btf):
    """Between its fork and its exec the -c child is a copy of planrunner: its call of
    libc's execv (ctypes) and its execve syscall are not the command's. The command's
    own execve (sh's `exec`), after its exec, is."""
    plan = write_plan(tmp_path, f"""
planrunner: 1
targets: {{libc: {{binary: {libc_path()}}}}}
probes:
  execv: {{uprobe: "libc:execv"}}
  execve: {{tracepoint: "syscalls:sys_enter_execve"}}
outputs:
  - {{count: execv, by: [pid, comm]}}
  - {{count: execve, by: [pid, comm]}}
""")
    env = _btf_env(tmp_path, btf)
    res = run_planrunner(["run", plan, "-f", "json", "-c", "true"], env=env)
    assert res.returncode == 0, res.stderr
    assert json_records(res.stdout) == []  # `true` itself calls neither
    res = run_planrunner(["run", plan, "-f", "json", "-c",
                          "/bin/sh -c 'exec /bin/true'"], env=env)
    assert res.returncode == 0, res.stderr
    rows = json_records(res.stdout)
    assert [(r["output"], r["comm"], r["count"]) for r in rows] == [("execve", "sh", 1)], rows


def runs_pids_gone_after_one_more_run(plan: str, pids: set[int]) -> bool:
    proc = run_planrunner(["run", plan, "-f", "json", "-d", "1"])
    assert proc.returncode in (0, 4), proc.stderr  # 4: records lost (see above)
    return not pids & _registered()


def _registered() -> set[int]:
    """The tgids in the pinned registry of planrunner runs now."""
    from planrunner.render.model import TRACERS_PIN
    from planrunner.runtime.tracers import TracerRegistry

    registry = TracerRegistry(TRACERS_PIN)
    try:
        return {pid for pid in registry.table().tgid if pid}
    finally:
        registry.close()


def _unshare() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    return ["unshare", "--pid", "--fork", "--mount-proc"]


def test_pids_inside_a_pid_namespace(fixtures_built, tmp_path):
    """planrunner and its targets in a new pid namespace: --pid takes the pids seen
    there (2 and 3), and the tracepoint (filtered in BPF) agrees with the USDT probe."""
    paced = fixtures_built / "paced"
    plan = _plan(tmp_path, paced)
    # sh is the namespace's pid 1; its children 2, 3, 4 (all end with it)
    script = (f"{paced} 1000000 0 20 & A=$!; {paced} 1000000 0 20 & B=$!; "
              f"{paced} 1000000 0 20 & C=$!; sleep 0.3; "
              f"{' '.join(PLANRUNNER)} run {plan} -f json -d 2 --pid 2,3; "
              "st=$?; kill $A $B $C; exit $st")
    proc = subprocess.run([*_unshare(), "sh", "-c", script], capture_output=True,
                          text=True, timeout=90, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "Tracing 2 probe sites in processes 2, 3." in proc.stderr
    found = _pids_by_probe(proc.stdout)
    # records carry init-namespace pids: two processes, the same two for both probes
    assert len(found["tick"]) == 2 and found["nap"] == found["tick"], found


def test_self_excluded_inside_a_pid_namespace(tmp_path):
    """planrunner as pid 1 of a new namespace traces Python system-wide: not itself."""
    _needs_python_usdt()
    plan = write_plan(tmp_path, PY_PLAN)
    out = tmp_path / "ns.json"
    with open(out, "w") as fh:
        run = subprocess.Popen([*_unshare(), *PLANRUNNER, "run", plan, "-f", "json",
                                "-d", "5"], stdout=fh, stderr=subprocess.PIPE, text=True,
                               cwd=ROOT)
        inner = None
        deadline = time.monotonic() + 10
        while inner is None and time.monotonic() < deadline:
            try:
                with open(f"/proc/{run.pid}/task/{run.pid}/children") as ch:
                    inner = int(ch.read().split()[0])
            except (OSError, IndexError):
                time.sleep(0.05)
        try:
            _, err = run.communicate(timeout=90)
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGKILL)
    assert run.returncode in (0, 4), err  # 4: records lost on a busy machine
    assert inner is not None
    pids = {r["pid"] for r in json_records(out.read_text()) if "pid" in r}
    assert inner not in pids
