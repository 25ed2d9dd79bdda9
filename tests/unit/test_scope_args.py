"""Scope options (issue 18 item 7): --pid PID[,PID...] repeatable, --comm, --cgroup,
--follow-children; what each value is checked for, and the Scope they make (its
attach-time pid, its BPF flags, its start-up line)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planrunner.commands import scope_args
from planrunner.commands.pids import pid_list_arg
from planrunner.commands.scope_args import cgroup_arg, comm_arg, scope_from_args
from planrunner.errors import UsageError
from planrunner.render.model import ScopeFlag
from planrunner.runtime.scope import Scope, is_planrunner, own_pid_namespace, starting_planrunners

ROOT = Path(__file__).resolve().parents[2]
DEMO = ["sdt-demo", "--set", "demo=tests/fixtures/elf/bin/demo"]


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planrunner", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_pid_takes_a_comma_list_of_live_pids() -> None:
    me, parent = os.getpid(), os.getppid()
    assert pid_list_arg(f"{me},{parent}") == [me, parent]
    assert pid_list_arg(f" {me} ") == [me]
    for bad in (f"{me},", f",{me}", f"{me},,{parent}"):
        with pytest.raises(argparse.ArgumentTypeError, match="comma list"):
            pid_list_arg(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="positive pid"):
        pid_list_arg(f"{me},0")


def test_pid_repeated_and_listed_accumulate_once_each() -> None:
    from planrunner.cli import build_parser

    me, parent = os.getpid(), os.getppid()
    args = build_parser().parse_args(
        ["run", "p.yaml", "--pid", str(me), "-p", f"{parent},{me}", "--comm", "a",
         "--comm", "b", "--follow-children"])
    scope = scope_from_args(args)
    assert scope == Scope((me, parent), ("a", "b"), (), True)
    assert scope_args.first_pid(args) == me


def test_comm_longer_than_the_kernel_keeps_is_refused_with_the_short_form() -> None:
    assert comm_arg("postgres") == "postgres"
    assert comm_arg("x" * 15) == "x" * 15
    with pytest.raises(argparse.ArgumentTypeError, match="use --comm 'php-fpm: pool w'"):
        comm_arg("php-fpm: pool www")
    with pytest.raises(argparse.ArgumentTypeError, match="empty"):
        comm_arg("")


@pytest.fixture
def cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake machine: a cgroup v2 hierarchy at v2/ and a v1 one at v1/."""
    (tmp_path / "v2" / "system.slice" / "nginx.service").mkdir(parents=True)
    (tmp_path / "v1" / "cpu").mkdir(parents=True)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {tmp_path}/v2 cgroup2 rw 0 0\n"
                      f"cgroup {tmp_path}/v1/cpu cgroup rw,cpu 0 0\n")
    monkeypatch.setattr(scope_args, "MOUNTS", str(mounts))
    return tmp_path


def test_cgroup_absolute_or_relative_to_the_v2_mount(cgroups: Path) -> None:
    want = str(cgroups / "v2" / "system.slice" / "nginx.service")
    assert cgroup_arg(want) == want
    assert cgroup_arg("system.slice/nginx.service") == want
    assert cgroup_arg("/system.slice/nginx.service") == want  # as /proc/PID/cgroup says
    assert cgroup_arg(str(cgroups / "v2")) == str(cgroups / "v2")
    assert cgroup_arg("/") == str(cgroups / "v2")  # the root of the v2 hierarchy


def test_cgroup_missing_v1_or_not_a_cgroup_says_what_to_do(cgroups: Path) -> None:
    with pytest.raises(argparse.ArgumentTypeError,
                       match=r"no cgroup directory 'nope\.service'.*systemctl show"):
        cgroup_arg("nope.service")
    with pytest.raises(argparse.ArgumentTypeError,
                       match=r"cgroup v1 hierarchy.*v2 hierarchy here is mounted at"):
        cgroup_arg(str(cgroups / "v1" / "cpu"))
    with pytest.raises(argparse.ArgumentTypeError, match="is not a cgroup directory"):
        cgroup_arg(str(cgroups))


def test_cgroup_on_a_v1_only_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n")
    monkeypatch.setattr(scope_args, "MOUNTS", str(mounts))
    with pytest.raises(argparse.ArgumentTypeError, match=r"cgroup v1 only"):
        cgroup_arg("system.slice")


def test_follow_children_needs_someone_to_follow() -> None:
    args = argparse.Namespace(pid=None, comm=None, cgroup=None, follow_children=True,
                              command=None)
    with pytest.raises(UsageError, match="needs -c or --pid"):
        scope_from_args(args)
    args.command = "sh -c true"
    assert scope_from_args(args).follow_children


def test_at_most_eight_cgroups() -> None:
    args = argparse.Namespace(pid=None, comm=None, follow_children=False,
                              cgroup=[f"/sys/fs/cgroup/{i}" for i in range(9)])
    with pytest.raises(UsageError, match="at most 8"):
        scope_from_args(args)


def test_scope_attach_pid_flags_and_description() -> None:
    assert Scope().attach_pid is None and not Scope().flags()
    assert Scope().describe() == "all processes"
    one = Scope(pids=(7,))
    assert one.attach_pid == 7 and one.flags() == ScopeFlag.PIDS
    assert one.describe() == "process 7"
    assert Scope(pids=(7, 8)).attach_pid is None  # filtered in BPF
    assert Scope(pids=(7,), follow_children=True).attach_pid is None  # children: any pid
    assert Scope(pids=(7,), follow_children=True).describe() == \
        "process 7 and its descendants"
    both = Scope(comms=("nginx", "php-fpm"), cgroups=("/sys/fs/cgroup/a",))
    assert both.flags() == ScopeFlag.COMM | ScopeFlag.CGROUP
    assert both.describe() == "processes named nginx or php-fpm, in cgroup /sys/fs/cgroup/a"
    assert Scope(pids=(1,)).with_command(9) == Scope(pids=(9,), command=9)


def test_pid_namespace_of_the_init_one_is_none() -> None:
    assert own_pid_namespace("/no/such/file") is None
    st = os.stat("/proc/self/ns/pid")
    ns = own_pid_namespace()
    if st.st_ino == 0xEFFFFFFC:
        assert ns is None
    else:  # the tests themselves run in a container
        assert ns is not None and ns.ino == st.st_ino


def test_validate_and_render_take_the_scope_options() -> None:
    me = str(os.getpid())
    proc = cli("validate", *DEMO, "--pid", f"{me},{os.getppid()}", "--comm", "demo")
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout
    proc = cli("render", *DEMO, "--comm", "php-fpm: pool www")
    assert proc.returncode == 2
    assert "argument --comm: 'php-fpm: pool www' is longer than 15 bytes" in proc.stderr
    proc = cli("render", *DEMO, "--cgroup", "no-such.service")
    assert proc.returncode == 2
    assert "argument --cgroup: no cgroup directory 'no-such.service'" in proc.stderr
    proc = cli("run", *DEMO, "--follow-children")
    assert proc.returncode == 2
    assert "--follow-children needs -c or --pid" in proc.stderr


@pytest.mark.parametrize("comm,argv,expected", [
    (b"planrunner", [b"/venv/bin/python3", b"/venv/bin/planrunner", b"run"], True),
    (b"python3.11", [b"python3.11", b"-m", b"planrunner", b"run", b"x.yaml"], True),
    (b"python3", [b"python3", b"-I", b"-m", b"planrunner", b"run"], True),
    (b"python", [b"/venv/bin/python", b"-Xplanrunner", b"-P", b"-c", b"..."], True),
    (b"python3", [b"python3", b"-mplanrunner.runtime.compile_worker"], True),
    (b"python3", [b"python3", b"fib.py", b"-m", b"planrunner"], True),  # as the kernel
    (b"python3", [b"python3", b"planrunner.py"], False),
    (b"python3", [b"python3", b"-m", b"planrunnerx"], False),
    (b"git", [b"git", b"commit", b"-m", b"planrunner"], False),
    (b"ls", [b"ls", b"planrunner"], False),
])
def test_what_says_a_process_is_planrunner(comm: bytes, argv: list[bytes],
                                           expected: bool) -> None:
    """The signs runtime_helpers.h pr_on_exec / pr_note_exec test in the kernel: the
    comm `planrunner` (the console script), or a python given -m / -X planrunner."""
    assert is_planrunner(comm, argv) is expected


def test_starting_planrunners_are_found_in_proc_but_not_this_process(tmp_path: Path) -> None:
    for pid, comm, argv in [(10, b"python3.11", b"python3.11\0-m\0planrunner\0run\0"),
                            (11, b"planrunner", b"/usr/bin/python3\0/usr/bin/planrunner\0"),
                            (12, b"python3.11", b"python3.11\0fib.py\0"),
                            (13, b"bash", b"bash\0")]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_bytes(comm + b"\n")
        (tmp_path / str(pid) / "cmdline").write_bytes(argv)
    (tmp_path / "self").mkdir()
    assert sorted(starting_planrunners(11, str(tmp_path))) == [10]
    assert sorted(starting_planrunners(99, str(tmp_path))) == [10, 11]
