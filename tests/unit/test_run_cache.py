"""planrunner/run_cache.py without a kernel: the key changes with each input of a run
and only then, an entry is served only while every input it recorded is unchanged
(files, /proc contents, directory listings, $PATH directories), a compile that started
a process is not stored, damaged entries are reported and removed, and entries share
the program cache's private directory checks."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from planrunner import run_cache as rc
from planrunner.render.model import RenderedProgram
from planrunner.runtime.compile_cache import ProgramCache

BASE: dict[str, Any] = dict(plan="/p/plan.yaml", plan_bytes=b"planrunner: 1\n",
                            sets=["n=1"], pid=[42], command=None, stderr_tty=False,
                            environ={"PATH": "/usr/bin", "JAVA_TOOL_OPTIONS": ""},
                            cwd="/home/u")


def test_the_key_changes_with_every_input_of_a_run() -> None:
    key = rc.run_key(**BASE)
    assert key == rc.run_key(**BASE)
    others = [("plan", "/p/other.yaml"), ("plan_bytes", b"planrunner: 1\n#\n"),
              ("sets", ["n=2"]), ("sets", []), ("pid", [43]), ("pid", []),
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


def _record(paths: list[str], listed: list[str] = ()) -> rc.InputRecorder:  # type: ignore[assignment]
    rec = rc.InputRecorder.get()
    with rec.recording():
        for p in paths:
            with open(p, "rb"):
                pass
        for d in listed:
            os.listdir(d)
    return rec


@pytest.fixture
def cache(tmp_path: Path) -> tuple[ProgramCache, io.StringIO]:
    err = io.StringIO()
    return ProgramCache(tmp_path / "cache", err), err


def test_an_entry_is_served_while_its_inputs_are_unchanged(tmp_path: Path, cache: Any) -> None:
    c, _err = cache
    (tmp_path / "t").mkdir()  # not beside the cache directory, which store() creates
    target = tmp_path / "t" / "bin"
    target.write_bytes(b"\x7fELF one")
    rec = _record([str(target), f"/proc/{os.getpid()}/cmdline"])
    paths = {p for _k, p, _f in rec.inputs()}
    assert str(target) in paths and str(tmp_path / "t") in paths
    assert f"/proc/{os.getpid()}/stat" in paths  # the process's identity beside it
    key = rc.run_key(**BASE)
    rc.store(c, key, rec, _run())
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
    fake = tmp_path / "f"
    fake.write_text("a")
    assert rc.fingerprint("content", str(fake)) != rc.fingerprint("content", "/proc/self/cmdline")
    stat = rc.fingerprint("content", f"/proc/{os.getpid()}/stat")
    assert stat.startswith("start:") and stat == rc.fingerprint("content",
                                                                 f"/proc/{os.getpid()}/stat")
    proc = subprocess.Popen(["sleep", "5"])
    try:
        other = rc.fingerprint("content", f"/proc/{proc.pid}/stat")
    finally:
        proc.kill()
        proc.wait()
    assert rc.fingerprint("content", f"/proc/{proc.pid}/stat") == "missing" != other


def test_a_compile_that_starts_a_process_or_reads_memory_is_not_stored(tmp_path: Path,
                                                                       cache: Any) -> None:
    c, _err = cache
    rec = rc.InputRecorder.get()
    with rec.recording():
        with open(tmp_path / "x", "wb"):
            pass
        subprocess.run(["true"], check=True)
    with pytest.raises(rc.Uncacheable, match="subprocess"):
        rec.inputs()
    with rec.recording():
        with open(f"/proc/{os.getpid()}/pagemap", "rb"):
            pass
    with pytest.raises(rc.Uncacheable, match="process memory"):
        rec.inputs()
    with rec.recording():
        pass
    with pytest.raises(rc.Uncacheable, match="no file"):
        rec.inputs()
    rc.store(c, "k" * 64, rec, _run())
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


def test_outside_recording_nothing_is_recorded(tmp_path: Path) -> None:
    rec = rc.InputRecorder.get()
    with rec.recording():
        pass
    (tmp_path / "y").write_text("y")
    assert rec.opened == []


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


def test_the_plan_itself_is_keyed_by_its_bytes_not_recorded(tmp_path: Path) -> None:
    """The plan's path and bytes are in the key (every run reads them again): a change
    in its directory (another file created there) must not make every run miss."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("planrunner: 1\n")
    other = tmp_path / "t"
    other.mkdir()
    (other / "bin").write_bytes(b"b")
    rec = _record([str(plan), str(other / "bin")])
    paths = {p for _k, p, _f in rec.inputs(keyed=[str(plan)])}
    assert str(plan) not in paths and str(tmp_path) not in paths
    assert str(other / "bin") in paths
