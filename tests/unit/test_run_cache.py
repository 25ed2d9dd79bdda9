"""planrunner/run_cache.py without a kernel: the key changes with each input of a run
and only then, an entry is served only while every input its compile declared is
unchanged (files, /proc contents, directory listings), a compile that used what cannot
be named or saw a file change under it is not stored, damaged entries are reported and
removed, and entries share the program cache's private directory checks."""

from __future__ import annotations

import io
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from planrunner import inputs
from planrunner import run_cache as rc
from planrunner.render.model import RenderedProgram
from planrunner.runtime.compile_cache import ProgramCache

BASE: dict[str, Any] = dict(plan="/p/plan.yaml", plan_bytes=b"planrunner: 1\n",
                            sets=["n=1"], pid_given=True, command=None, stderr_tty=False,
                            environ={"PATH": "/usr/bin", "JAVA_TOOL_OPTIONS": ""},
                            cwd="/home/u")


def test_the_key_changes_with_every_input_of_a_run() -> None:
    key = rc.run_key(**BASE)
    assert key == rc.run_key(**BASE)
    others = [("plan", "/p/other.yaml"), ("plan_bytes", b"planrunner: 1\n#\n"),
              ("sets", ["n=2"]), ("sets", []), ("pid_given", False),
              ("command", "ls"), ("stderr_tty", True), ("cwd", "/tmp"),
              ("environ", {"PATH": "/bin", "JAVA_TOOL_OPTIONS": ""}),
              ("environ", {"PATH": "/usr/bin", "JAVA_TOOL_OPTIONS": "-XX:+ExtendedDTraceProbes"})]
    for field, value in others:
        assert rc.run_key(**{**BASE, field: value}) != key, field


def test_an_edited_source_file_is_another_code_identity(tmp_path: Path) -> None:
    """A working tree edited without a new version must not be served programs pickled
    by the code before the edit."""
    pkg = tmp_path / "planrunner"
    (pkg / "render").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    mod = pkg / "render" / "bodies.py"
    mod.write_text("A = 1\n")
    (pkg / "render" / "__pycache__").mkdir()
    before = rc.source_identity(str(pkg))
    assert rc.source_identity(str(pkg)) == before
    (pkg / "render" / "__pycache__" / "bodies.cpython-311.pyc").write_bytes(b"x")
    assert rc.source_identity(str(pkg)) == before  # byte-code is not source
    mod.write_text("A = 2\n")
    os.utime(mod, ns=(1, 1))
    assert rc.source_identity(str(pkg)) != before
    assert rc.source_identity() == rc.source_identity()  # the installed package


def test_the_caches_own_variables_are_not_inputs() -> None:
    env = {**BASE["environ"], "PLANRUNNER_CACHE_LOG": "1", "PLANRUNNER_CACHE_DIR": "/x",
           "_": "/usr/bin/sudo", "SUDO_COMMAND": "/usr/bin/planrunner run p -d 5s",
           "OLDPWD": "/"}
    assert rc.run_key(**{**BASE, "environ": env}) == rc.run_key(**BASE)


def _run() -> rc.CompiledRun:
    return rc.CompiledRun(RenderedProgram("int x;", (), (), (), "p"), "warning: w\n",
                          ("a", "b"), False, "p", "")


def _record(paths: list[str], listed: Sequence[str] = ()) -> inputs.InputLog:
    """The log of a compile that read `paths` and listed `listed`, as the readers
    declare them."""
    with inputs.recording() as log:
        for p in paths:
            inputs.read_bytes(p)
        for d in listed:
            inputs.listdir(d)
    return log


@pytest.fixture
def cache(tmp_path: Path) -> tuple[ProgramCache, io.StringIO]:
    err = io.StringIO()
    return ProgramCache(tmp_path / "cache", err), err


def test_an_entry_is_served_while_its_inputs_are_unchanged(tmp_path: Path, cache: Any) -> None:
    c, _err = cache
    target = tmp_path / "bin"
    target.write_bytes(b"\x7fELF one")
    log = _record([str(target), f"/proc/{os.getpid()}/cmdline"])
    paths = {p for _k, p, _f in rc.declared_inputs(log)}
    assert str(target) in paths
    assert f"/proc/{os.getpid()}/stat" in paths  # the process's identity beside it
    key = rc.run_key(**BASE)
    rc.store(c, key, log, _run())
    entry = tmp_path / "cache" / f"{key}.run"
    assert (entry.stat().st_mode & 0o777) == 0o600
    # /proc/self is the test process: recorded by content, and it is unchanged
    got = rc.lookup(c, key)
    assert got == _run() and got is not None and got.warnings == "warning: w\n"


def test_a_rebuilt_target_binary_is_never_served(tmp_path: Path, cache: Any) -> None:
    c, _err = cache
    target = tmp_path / "bin"
    target.write_bytes(b"\x7fELF one")
    key = rc.run_key(**BASE)
    rc.store(c, key, _record([str(target)]), _run())
    target.write_bytes(b"\x7fELF two")  # same size, new contents (a rebuild)
    assert rc.lookup(c, key) is None
    assert not (tmp_path / "cache" / f"{key}.run").exists()  # the stale entry is gone


def test_a_replaced_binary_with_the_same_size_and_mtime_is_another_file(tmp_path: Path,
                                                                      cache: Any) -> None:
    c, _err = cache
    target = tmp_path / "bin"
    target.write_bytes(b"one")
    key = rc.run_key(**BASE)
    rc.store(c, key, _record([str(target)]), _run())
    st = target.stat()
    new = tmp_path / "bin.new"
    new.write_bytes(b"two")
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(new, target)  # another inode, as an install does
    assert rc.lookup(c, key) is None


def test_a_file_added_beside_an_input_or_a_listing_change_is_a_miss(tmp_path: Path,
                                                                   cache: Any) -> None:
    c, _err = cache
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libx.so.1").write_bytes(b"x")
    key = rc.run_key(**BASE)
    rc.store(c, key, _record([str(lib / "libx.so.1")], [str(lib)]), _run())
    assert rc.lookup(c, key) is not None
    (lib / "libx.so.2").write_bytes(b"y")
    assert rc.lookup(c, key) is None


def test_proc_contents_are_compared_and_pid_stat_by_start_time(tmp_path: Path) -> None:
    me = f"/proc/{os.getpid()}/stat"
    with inputs.recording() as log:
        inputs.read_bytes(me)
    (kind, _path, found), = log.inputs()
    assert kind == "content" and found.startswith("start:")
    assert inputs.changed(log.inputs()) is None
    proc = subprocess.Popen(["sleep", "5"])
    try:
        # the child's cmdline is empty until its exec is done: wait for it, or the
        # recorded content is the pre-exec one and the re-check sees a change
        deadline = time.monotonic() + 5
        while not Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"sleep"):
            assert time.monotonic() < deadline, "sleep never exec'd"
            time.sleep(0.01)
        with inputs.recording() as other:
            inputs.read_bytes(f"/proc/{proc.pid}/cmdline")
        assert {p for _k, p, _f in other.inputs()} == {f"/proc/{proc.pid}/cmdline",
                                                        f"/proc/{proc.pid}/stat"}
        assert inputs.changed(other.inputs()) is None
    finally:
        proc.kill()
        proc.wait()
    assert inputs.changed(other.inputs()) is not None  # that process is gone


def test_a_compile_that_used_what_cannot_be_named_or_saw_a_file_move_is_not_stored(
        tmp_path: Path, cache: Any) -> None:
    c, err = cache
    with inputs.recording() as log:
        inputs.unkeyable("a process's memory")
    with pytest.raises(rc.Uncacheable, match="memory"):
        rc.declared_inputs(log)
    target = tmp_path / "bin"
    target.write_bytes(b"one")
    with inputs.recording() as moved:
        inputs.read_bytes(str(target))
        target.write_bytes(b"two!")  # rewritten while the compile reads it
        inputs.read_bytes(str(target))
    with pytest.raises(rc.Uncacheable, match="changed while the compile read it"):
        rc.declared_inputs(moved)
    rc.store(c, "k" * 64, log, _run())
    rc.store(c, "k" * 64, moved, _run())
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "key"])
def test_damaged_entries_are_reported_and_removed(tmp_path: Path, cache: Any,
                                                  damage: str) -> None:
    c, err = cache
    target = tmp_path / "bin"
    target.write_bytes(b"b")
    key = rc.run_key(**BASE)
    rc.store(c, key, _record([str(target)]), _run())
    entry = tmp_path / "cache" / f"{key}.run"
    data = bytearray(entry.read_bytes())
    if damage == "truncate":
        data = data[:20]
    elif damage == "flip":
        data[len(data) // 2] ^= 1
    elif damage == "magic":
        data[0:8] = b"NOTMINE\0"
    else:  # a valid entry of another key, copied under this name
        other = rc.run_key(**{**BASE, "sets": []})
        rc.store(c, other, _record([str(target)]), _run())
        data = bytearray((tmp_path / "cache" / f"{other}.run").read_bytes())
    entry.write_bytes(bytes(data))
    assert rc.lookup(c, key) is None
    assert "corrupt" in err.getvalue()
    assert not entry.exists()


def test_an_entry_open_to_others_is_not_trusted(tmp_path: Path, cache: Any) -> None:
    c, err = cache
    target = tmp_path / "bin"
    target.write_bytes(b"b")
    key = rc.run_key(**BASE)
    rc.store(c, key, _record([str(target)]), _run())
    (tmp_path / "cache" / f"{key}.run").chmod(0o644)
    assert rc.lookup(c, key) is None
    assert "not a private file" in err.getvalue()


def test_the_kernel_is_in_the_key() -> None:
    assert rc.run_key(**BASE, kernel="6.1|#1|x86_64") != rc.run_key(**BASE, kernel="6.2|#1|x86_64")
    assert rc.run_key(**BASE, kernel="6.1|#1|x86_64") == rc.run_key(**BASE, kernel="6.1|#1|x86_64")


@pytest.mark.parametrize("how", ["group-writable directory", "another owner"])
def test_an_entry_another_user_could_have_written_is_never_loaded(tmp_path: Path, cache: Any,
                                                                  how: str) -> None:
    c, err = cache
    target = tmp_path / "bin"
    target.write_bytes(b"b")
    key = rc.run_key(**BASE)
    rc.store(c, key, _record([str(target)]), _run())
    entry = tmp_path / "cache" / f"{key}.run"
    if how == "group-writable directory":
        (tmp_path / "cache").chmod(0o770)
    else:
        if os.geteuid() != 0:
            pytest.skip("changing an entry's owner needs root")
        os.chown(entry, 65534, 65534)
    assert rc.lookup(c, key) is None
    assert "not using the program cache" in err.getvalue() or \
        "not a private file" in err.getvalue()


def test_run_reads_the_plan_once_bounded_for_its_key(tmp_path: Path) -> None:
    """A 256 MiB plan file (sparse): `run` reads at most the loader's bound of it for
    the cache key (it used to read the whole file for the key, then let the loader
    refuse it), and hands what it read to the compile, which reads nothing again."""
    import argparse
    import tracemalloc

    from planrunner.commands import run as run_cmd
    from planrunner.plan_file import MAX_PLAN_BYTES

    c = ProgramCache(tmp_path / "cache", io.StringIO())
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as fh:
        fh.truncate(256 << 20)
    args = argparse.Namespace(overrides=[], command=None)
    tracemalloc.start()
    try:
        got = run_cmd._cached_run(args, [str(huge)], io.StringIO(), c, None, True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == (None, None, None)  # the compile reports it, located
    assert peak < 4 * MAX_PLAN_BYTES
    plan = tmp_path / "p.yaml"
    plan.write_text("planrunner: 1\n")
    key, hit, sources = run_cmd._cached_run(args, [str(plan)], io.StringIO(), c, None, True)
    assert key is not None and hit is None and sources == [b"planrunner: 1\n"]


def test_the_loader_parses_the_bytes_run_read_without_reading_again(tmp_path: Path) -> None:
    from planrunner.errors import PlanSyntaxError
    from planrunner.plan import load_source
    from planrunner.plan_file import MAX_PLAN_BYTES

    never_written = tmp_path / "p.yaml"
    loaded = load_source(str(never_written), b"planrunner: 1\nname: given\n")
    assert loaded.data["name"] == "given"
    with pytest.raises(PlanSyntaxError, match="refused unread"):
        load_source(str(never_written), b"#" * (MAX_PLAN_BYTES + 1))


def test_an_entry_for_another_pid_is_checked_against_the_new_process() -> None:
    """rebased: /proc/OLD/... becomes /proc/NEW/...; OLD's start time is dropped (it
    only told a reused pid); other processes' and other files' inputs stay."""
    got = rc.rebased((("content", "/proc/7/stat", "start:1"),
                      ("content", "/proc/7/cmdline", "abc"),
                      ("link", "/proc/7/root/usr", "-"),
                      ("content", "/proc/70/stat", "start:2"),
                      ("stat", "/usr/bin/x", "s")), 7, 9)
    assert got == (("content", "/proc/9/cmdline", "abc"), ("link", "/proc/9/root/usr", "-"),
                   ("content", "/proc/70/stat", "start:2"), ("stat", "/usr/bin/x", "s"))
